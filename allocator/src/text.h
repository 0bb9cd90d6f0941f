// Small text helpers of the settings and size grammars (settings.cpp, units.cpp). Internal.
#pragma once

#include <cctype>
#include <string>
#include <string_view>

namespace vramtrace::detail {

/// `s` without any whitespace: both grammars ignore it wherever it stands.
inline std::string strip_spaces(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s)
    if (!std::isspace(static_cast<unsigned char>(c))) out.push_back(c);
  return out;
}

}  // namespace vramtrace::detail
