// Text from a trace, made safe to print on a terminal.
#pragma once

#include <string>
#include <string_view>

#include <fmt/format.h>

namespace vramtrace {

/// `text` with its control characters escaped, for the text reports: a trace from elsewhere
/// names files, functions and its workload as it likes, and an ESC, CR or LF in them printed as
/// is would recolour the terminal, retitle it or forge whole lines of the report. C0 characters
/// become `\n`, `\r`, `\t` or `\xHH`, DEL `\x7f`, and the C1 characters written in UTF-8
/// (U+0080..U+009F, which terminals also obey) `\u0080`..`\u009f`; everything else, other UTF-8
/// included, is kept. The site labels of frame_label (sites.cpp) are built with it, so they carry
/// this escaping into JSON (`site`, `via`) and the HTML report too; the raw names in JSON and the
/// page's other text rely on those formats' own escaping.
inline std::string printable(std::string_view text) {
  auto plain = [](unsigned char c) { return c >= 0x20 && c != 0x7f; };
  std::string out;
  out.reserve(text.size() + 8);
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == 0xc2 && i + 1 < text.size()) {
      const auto next = static_cast<unsigned char>(text[i + 1]);
      if (next >= 0x80 && next < 0xa0) {
        out += fmt::format("\\u{:04x}", next);
        ++i;
        continue;
      }
    }
    if (plain(c)) {
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out;
}

}  // namespace vramtrace
