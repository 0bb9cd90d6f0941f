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
/// (U+0080..U+009F, which terminals also obey) `\u0080`..`\u009f`, and a byte of 0x80..0xFF that
/// starts no valid UTF-8 sequence `\xHH`; everything else, other UTF-8 included, is kept. The site labels of
/// frame_label (sites.cpp) are built with it, so they carry this escaping into JSON (`site`, `via`) and the HTML report
/// too; the raw names in JSON and the page's other text rely on those formats' own escaping.
inline std::string printable(std::string_view text) {
  // The length of the valid UTF-8 sequence that starts at i (1 to 4), or 0 when the byte there
  // starts none: a stray byte of 0x80..0xff is escaped, since a terminal that is not in UTF-8 mode
  // obeys 0x9b as a control sequence introducer.
  auto sequence = [&](std::size_t i) -> std::size_t {
    const auto c = static_cast<unsigned char>(text[i]);
    const std::size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (n == 0 || i + n > text.size()) return 0;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(text[i + k]) & 0xc0) != 0x80) return 0;
    return n;
  };
  std::string out;
  out.reserve(text.size() + 8);
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const std::size_t n = sequence(i);
      if (n == 2 && c == 0xc2 && static_cast<unsigned char>(text[i + 1]) < 0xa0) {
        out += fmt::format("\\u{:04x}", static_cast<unsigned char>(text[i + 1]));  // a C1 control
      } else if (n > 0) {
        out.append(text.substr(i, n));
      } else {
        out += fmt::format("\\x{:02x}", c);
        continue;
      }
      i += n - 1;
    } else if (c >= 0x20 && c != 0x7f) {
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
