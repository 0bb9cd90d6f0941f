// What pasting does to an out-of-memory message, undone before it is read: terminal colour codes,
// the log prefix that launchers put before every line, and the line breaks that a terminal or a
// log viewer inserts when it wraps a long line at a fixed width (often inside a number or a word,
// with no space).
#pragma once

#include <string>
#include <string_view>

namespace vramtrace {

/// Note [soft line breaks]
/// A break is soft (inserted by wrapping, so removed together with the next line's indentation)
/// only where a line can never end in a printed message:
///  - inside a word of the messages' phrases: the letters before and after join into a word that
///    the readers look for ("capa" + "city", "al" + "located", "Gi" + "B"), and the two parts are
///    not both such words themselves;
///  - inside a number that a unit follows: digits (with '.' or ',') on both sides, and after the
///    joined number, across spaces and line breaks, a size unit ("1" + ".23 GiB", "1" + "50.47
///    MiB", "1,073," + "741,824 bytes");
///  - inside a shape's list ("shape[32,512," + "512,64]") and inside the integer after "GPU",
///    "device", "Process" or "ordinal" when the phrase goes on after it ("GPU 1" + "0 has");
///  - before ';', ':' or ')' and after '(': no printed line of these messages starts or ends there.
/// Every other break is hard and stays: a traceback line that ends in a line number before the
/// message's first line, a log line after a number, the lines of the cudaMallocAsync message and
/// of TensorFlow's allocator dump. A hard break between two lines that each look like the halves
/// of one figure ("step 1" over "2.00 GiB used") cannot be told from a wrapped one; such pairs do
/// not occur inside the messages read here.

/// `raw` with what pasting added removed: ANSI escape sequences (also the "[31m" left when a log
/// viewer drops the escape byte), line prefixes ("[rank0]: ", "[default0]:", stacked
/// "[default0]:[rank0]: ", MPI's "[1,0]<stderr>:", Ray's "(pid=123) " and "(Worker pid=123,
/// ip=...) "), and the soft line breaks of Note [soft line breaks] with the indentation after
/// them. Only deletes bytes, so the result is a subsequence of `raw` and every figure read from it
/// is text of the input. Hard breaks ("\n", "\r\n", "\r") are kept. Linear in the input's length;
/// never throws on content (binary input included). Thread-safe.
std::string unwrap_pasted_text(std::string_view raw);

}  // namespace vramtrace
