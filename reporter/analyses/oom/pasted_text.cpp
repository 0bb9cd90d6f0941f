// Undoing what pasting does to a message (pasted_text.h). Four passes, each linear and each
// deleting bytes only: escape sequences, line prefixes, words split by a wrap, then numbers split
// by a wrap (words first, so that a unit split in two is whole when a number looks for it).
#include "analyses/oom/pasted_text.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string_view>
#include <unordered_set>

namespace vramtrace {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_word(char c) { return is_alpha(c) || c == '_'; }
bool is_hspace(char c) { return c == ' ' || c == '\t'; }
bool is_numeric(char c) { return is_digit(c) || c == '.' || c == ','; }
bool in_range(char c, int lo, int hi) {
  const int u = static_cast<unsigned char>(c);
  return u >= lo && u <= hi;
}

// --- 1. escape sequences ---------------------------------------------------------------------

/// Length of the ANSI escape sequence at `i` (in[i] == ESC): CSI ("ESC [ params final"), OSC
/// ("ESC ] ... BEL" or "ESC ] ... ESC \"), a character-set selection ("ESC ( B") or a two-byte
/// escape. A sequence cut short by the end of the text runs to the end.
std::size_t escape_length(std::string_view in, std::size_t i) {
  const std::size_t n = in.size();
  std::size_t j = i + 1;
  if (j >= n) return 1;
  if (in[j] == '[') {
    ++j;
    while (j < n && in_range(in[j], 0x30, 0x3f)) ++j;
    while (j < n && in_range(in[j], 0x20, 0x2f)) ++j;
    if (j < n && in_range(in[j], 0x40, 0x7e)) ++j;
    return j - i;
  }
  if (in[j] == ']') {
    for (++j; j < n && j - i < 512; ++j) {
      if (in[j] == '\a') return j + 1 - i;
      if (in[j] == '\x1b' && j + 1 < n && in[j + 1] == '\\') return j + 2 - i;
    }
    return j - i;
  }
  if ((in[j] == '(' || in[j] == ')') && j + 1 < n) return 3;
  return in_range(in[j], 0x40, 0x5f) ? 2 : 1;
}

/// Length of a colour code whose escape byte was dropped ("[31m", "[1;32m") at `i` (in[i] ==
/// '['); 0 when there is none. At least one digit: "[m" alone is too short to be sure of.
std::size_t orphan_sgr_length(std::string_view in, std::size_t i) {
  std::size_t j = i + 1;
  while (j < in.size() && j - i <= 16 && (is_digit(in[j]) || in[j] == ';')) ++j;
  if (j == i + 1 || j >= in.size() || in[j] != 'm' || !std::any_of(in.begin() + i, in.begin() + j, is_digit)) return 0;
  return j + 1 - i;
}

std::string strip_escapes(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size();) {
    if (in[i] == '\x1b') {
      i += escape_length(in, i);
    } else if (std::size_t k = in[i] == '[' ? orphan_sgr_length(in, i) : 0; k > 0) {
      i += k;
    } else {
      out.push_back(in[i++]);
    }
  }
  return out;
}

// --- 2. line prefixes ------------------------------------------------------------------------

/// Length of one launcher prefix at `p` (0 when none): "[rank0]: ", "[default0]:",
/// "[1,0]<stderr>:", "(pid=123) ", "(RayWorker pid=123, ip=10.0.0.1) ". A bracket word must end
/// in ':' so that a line of TensorFlow's "[[Node: ...]]" or a PyTorch warning "[W Foo.cpp:12]"
/// (with a space inside) is not taken for one.
std::size_t prefix_length(std::string_view in, std::size_t p) {
  const std::size_t n = in.size();
  if (p >= n) return 0;
  std::size_t j = p + 1;
  if (in[p] == '[') {
    while (j < n && j - p <= 40 &&
           (std::isalnum(static_cast<unsigned char>(in[j])) || in[j] == '_' || in[j] == '-' || in[j] == ',' ||
            in[j] == '.'))
      ++j;
    if (j == p + 1 || j >= n || in[j] != ']') return 0;
    ++j;
    if (in.substr(j, 8) == "<stdout>" || in.substr(j, 8) == "<stderr>") j += 8;
    if (j >= n || in[j] != ':') return 0;
    ++j;
    if (j < n && in[j] == ' ') ++j;
    return j - p;
  }
  if (in[p] == '(') {
    while (j < n && j - p <= 120 && in[j] != ')' && in[j] != '(' && in[j] != '\n') ++j;
    if (j >= n || in[j] != ')' || j + 1 >= n || in[j + 1] != ' ') return 0;
    const std::string_view inside = in.substr(p + 1, j - p - 1);
    const std::size_t pid = inside.find("pid=");
    if (pid == std::string_view::npos || pid + 4 >= inside.size() || !is_digit(inside[pid + 4])) return 0;
    return j + 2 - p;
  }
  return 0;
}

std::string strip_prefixes(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  bool line_start = true;
  for (std::size_t i = 0; i < in.size();) {
    if (line_start) {
      while (i < in.size() && is_hspace(in[i])) out.push_back(in[i++]);
      for (std::size_t k = prefix_length(in, i); k > 0; k = prefix_length(in, i)) i += k;
      line_start = false;
      continue;
    }
    out.push_back(in[i]);
    line_start = in[i] == '\n' || in[i] == '\r';
    ++i;
  }
  return out;
}

// --- 3 and 4. soft line breaks ---------------------------------------------------------------

/// The words of the phrases that the readers (oom_message.cpp) look for, and the size units: a
/// wrap inside one of them is soft. Case-sensitive, as the phrases are.
const std::unordered_set<std::string_view>& phrase_words() {
  static const std::unordered_set<std::string_view> words = {
      // PyTorch (CUDA, ROCm, MPS, cudaMallocAsync), with the small words of its phrases
      "CUDA", "HIP", "GPU", "MPS", "Tried", "to", "allocate", "more", "than", "has", "a", "total", "capacity",
      "capacty", "of", "which", "is", "free", "Process", "process", "this", "memory", "in", "use", "Including", "non",
      "PyTorch", "allowed", "Of", "the", "allocated", "by", "with", "private", "pools", "Graphs", "and", "reserved",
      "but", "unallocated", "already", "cached", "Allocation", "on", "device", "would", "exceed", "Currently",
      "Requested", "Device", "limit", "Free", "according", "set", "user", "supplied", "fraction", "backend", "other",
      "allocations", "max", "out", "OutOfMemoryError", "runtime", "error", "expandable_segments", "max_split_size_mb",
      "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "hipErrorOutOfMemory",
      "cudaErrorMemoryAllocation", "CUDA_ERROR_OUT_OF_MEMORY",
      // TensorFlow, XLA, JAX
      "Allocator", "ran", "Ran", "trying", "rounded", "Limit", "InUse", "MaxInUse", "total_region_allocated_bytes_",
      "Out", "while", "Attempting", "There", "are", "Failed", "request", "for", "ordinal", "OOM", "when", "allocating",
      "tensor", "shape", "type", "allocator", "root", "found", "RESOURCE_EXHAUSTED", "ResourceExhaustedError",
      "Resource", "exhausted", "space", "Used", "hbm", "Exceeded", "XlaRuntimeError", "JaxRuntimeError", "failed",
      "from", "float", "double", "half", "bfloat", "bool", "int", "uint", "complex",
      // CuPy
      "so", "far", "cupy",
      // libraries
      "CUBLAS_STATUS_ALLOC_FAILED", "CUBLAS_STATUS_NOT_INITIALIZED", "CUDNN_STATUS_NOT_INITIALIZED",
      "CUDNN_STATUS_ALLOC_FAILED", "CUDNN_STATUS_INTERNAL_ERROR", "CUFFT_ALLOC_FAILED", "CUSOLVER_STATUS_ALLOC_FAILED",
      "CUSPARSE_STATUS_ALLOC_FAILED", "CURAND_STATUS_ALLOCATION_FAILED", "cublasCreate", "cudnnCreate", "handle",
      "cuDNN", "cudnn", "calling", "Could", "create", "Cuda", "failure", "NCCL",
      // compounds cut after their hyphen, and the "EB" of "1EB"
      "non-PyTorch", "user-supplied", "EB", "not", "size", "at", "next", "Stats",
      // units
      "bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "KB", "MB", "GB", "TB"};
  return words;
}

/// Every proper beginning of the words of phrase_words() ("CUBLAS_STATUS_ALLOC_FA").
const std::unordered_set<std::string>& word_beginnings() {
  static const std::unordered_set<std::string> beginnings = [] {
    std::unordered_set<std::string> out;
    for (std::string_view w : phrase_words())
      for (std::size_t n = 1; n < w.size(); ++n) out.emplace(w.substr(0, n));
    return out;
  }();
  return beginnings;
}

/// A size unit as the readers accept it (unit_multiplier in oom_message.cpp), case-insensitive.
bool is_unit_word(std::string_view w) {
  static constexpr std::array<std::string_view, 21> kUnits = {"b",   "byte", "bytes", "k",   "kb",  "kib", "m",
                                                              "mb",  "mib",  "g",     "gb",  "gib", "t",   "tb",
                                                              "tib", "p",    "pb",    "pib", "e",   "eb",  "eib"};
  if (w.empty() || w.size() > 5) return false;
  std::string lower;
  for (char c : w) lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  return std::find(kUnits.begin(), kUnits.end(), lower) != kUnits.end();
}

/// The run of characters satisfying `pred` that ends at `s.size()` (at most `cap` long).
template <class Pred>
std::string_view tail_run(std::string_view s, Pred pred, std::size_t cap = 64) {
  std::size_t b = s.size();
  while (b > 0 && s.size() - b < cap && pred(s[b - 1])) --b;
  return s.substr(b);
}

/// The run of characters satisfying `pred` that starts at `k` (at most `cap` long).
template <class Pred>
std::string_view head_run(std::string_view s, std::size_t k, Pred pred, std::size_t cap = 64) {
  std::size_t e = k;
  while (e < s.size() && e - k < cap && pred(s[e])) ++e;
  return s.substr(k, e - k);
}

/// Whether the break between `left` (the text before it, without the break) and `right` (the
/// text from the next line's first non-blank character) is soft: word_split (pass 3) or
/// number_split (pass 4, numbers, shape lists and punctuation).
using SoftRule = bool (*)(std::string_view left, std::string_view right);

/// Whether the text from `k` runs to the end of its line.
bool at_line_end(std::string_view s, std::size_t k) { return k >= s.size() || s[k] == '\n' || s[k] == '\r'; }

/// TensorFlow's allocator names ("GPU_0_bfc", which give the device): `s` is one, or (`whole`
/// false) begins one.
bool allocator_name(std::string_view s, bool whole) {
  constexpr std::string_view kHead = "GPU_", kTail = "_bfc";
  if (s.size() <= kHead.size()) return !whole && kHead.substr(0, s.size()) == s;
  if (s.substr(0, kHead.size()) != kHead) return false;
  std::size_t i = kHead.size();
  while (i < s.size() && is_digit(s[i])) ++i;
  if (i == kHead.size()) return false;
  const std::string_view rest = s.substr(i);
  if (whole) return rest == kTail;
  return rest.size() <= kTail.size() && kTail.substr(0, rest.size()) == rest;
}

bool word_split(std::string_view left, std::string_view right) {
  const auto is_ident = [](char c) { return is_word(c) || is_digit(c); };
  const std::string_view i1 = tail_run(left, is_ident), i2 = head_run(right, 0, is_ident);
  if (!i1.empty() && !i2.empty()) {
    const std::string id = std::string(i1) + std::string(i2);
    if (allocator_name(id, true) || (at_line_end(right, i2.size()) && allocator_name(id, false))) return true;
  }
  const auto& words = phrase_words();
  const std::string_view w1 = tail_run(left, is_word);
  if (right.size() > 1 && right[0] == '-' && is_alpha(right[1]) && !w1.empty()) {
    // A compound cut before its hyphen: "user" over "-supplied".
    return words.count(std::string(w1) + "-" + std::string(head_run(right, 1, is_word))) > 0;
  }
  const std::string_view w2 = head_run(right, 0, is_word);
  if (w2.empty()) return false;
  std::string joined;
  if (w1.empty() && left.size() >= 2 && left.back() == '-' && is_alpha(left[left.size() - 2])) {
    // A compound cut after its hyphen: "user-" over "supplied", "non-" over "PyTorch".
    joined = std::string(tail_run(left.substr(0, left.size() - 1), is_word)) + "-";
  } else if (w1.empty() || (words.count(w1) > 0 && words.count(w2) > 0)) {
    return false;
  } else {
    joined = std::string(w1);
  }
  joined += w2;
  if (words.count(joined) > 0) return true;
  // A word cut twice ("CUBLAS" over "_STATUS_ALLOC_FA" over "ILED"): its middle runs to the end of
  // its line, and what is joined so far begins one of the words.
  if (!at_line_end(right, w2.size())) return false;
  return word_beginnings().count(joined) > 0;
}

/// Where the number that starts `right` ends: its run of digits, '.' and ',', continued on the
/// next lines while its run reaches the end of a line (a number cut more than once).
std::size_t number_end(std::string_view right) {
  std::size_t e = head_run(right, 0, is_numeric).size();
  for (int lines = 0; lines < 3 && e < right.size(); ++lines) {
    std::size_t k = e;
    if (k < right.size() && right[k] == '\r') ++k;
    if (k >= right.size() || right[k] != '\n') break;
    ++k;
    while (k < right.size() && is_hspace(right[k])) ++k;
    const std::size_t more = head_run(right, k, is_numeric).size();
    if (more == 0) break;
    e = k + more;
  }
  return e;
}

/// A unit word after `right[e]`, across blanks and line breaks.
bool unit_follows(std::string_view right, std::size_t e) {
  std::size_t k = e;
  while (k < right.size() && k - e < 16 && (is_hspace(right[k]) || right[k] == '\n' || right[k] == '\r')) ++k;
  const std::string_view w = head_run(right, k, is_alpha, 8);
  const std::size_t after = k + w.size();
  return is_unit_word(w) && (after >= right.size() || !is_digit(right[after]));
}

/// "shape[32,512," over "512,64]": the line before the break is inside a shape's brackets.
bool inside_shape_list(std::string_view left, char next) {
  const std::string_view list = tail_run(
      left, [](char c) { return is_digit(c) || c == ',' || c == ' '; }, 96);
  std::string_view before = left.substr(0, left.size() - list.size());
  if (before.empty() || before.back() != '[') return false;
  before.remove_suffix(1);
  while (!before.empty() && before.back() == ' ') before.remove_suffix(1);
  const bool shape = before.size() >= 5 && before.substr(before.size() - 5) == "shape";
  return shape && (is_digit(next) || next == ',' || next == ']');
}

/// The integers the messages print without a unit, by the text before them and the text after
/// them ("" after: the end of the line): a device, a process id, a BFC chunk's size, a rounded
/// request, a TPU allocation's size, TensorFlow's allocator stats.
struct IntegerContext {
  std::string_view before;
  std::string_view after;
};
constexpr IntegerContext kIntegerContexts[] = {
    {"GPU ", "has "},
    {"GPU ", ";"},
    {"GPU ", ")"},
    {"device ", "would "},
    {"device ", "has "},
    {"Process ", "has "},
    {"ordinal ", ""},
    {"of size ", "next "},
    {"of size ", ""},
    {"rounded to ", ")"},
    {"(size=", ")"},
    {"Limit:", ""},
    {"InUse:", ""},
    {"MaxInUse:", ""},
    {"NumAllocs:", ""},
    {"MaxAllocSize:", ""},
    {"total_region_allocated_bytes_:", ""},
};

/// "GPU 1" over "0 has a total capacity", "Limit: 5032706" over "04": an integer that a known
/// phrase frames on both sides.
bool inside_named_integer(std::string_view left, std::string_view right, std::string_view digits_left, std::size_t e) {
  if (digits_left.find_first_of(".,") != std::string_view::npos) return false;
  if (right.substr(0, e).find_first_of(".,") != std::string_view::npos) return false;
  const std::string_view before = left.substr(0, left.size() - digits_left.size());
  // Quick refusal: every name ends in one of these ("GPU", "device", "ordinal", "to", "(size=",
  // "Limit:"); most breaks after a number have none of them before it.
  std::size_t last = before.size();
  while (last > 0 && last + 48 > before.size() &&
         (is_hspace(before[last - 1]) || before[last - 1] == '\n' || before[last - 1] == '\r'))
    --last;
  if (last == 0 || std::string_view("Uelo=:").find(before[last - 1]) == std::string_view::npos) return false;
  std::size_t k = e;
  while (k < right.size() && right[k] == ' ') ++k;
  const std::string_view rest = right.substr(k);
  // The phrase and the number may be padded apart ("Limit:" and its value) or wrapped apart, and
  // the phrase itself wrapped at its blank ("rounded" over "to"): blanks and breaks count as one.
  std::string b;
  for (char c : before.substr(before.size() - std::min<std::size_t>(before.size(), 48))) {
    const bool blank = is_hspace(c) || c == '\n' || c == '\r';
    if (!blank) {
      b.push_back(c);
    } else if (!b.empty() && b.back() != ' ') {
      b.push_back(' ');
    }
  }
  const bool blank_before_number = !b.empty() && b.back() == ' ';
  if (blank_before_number) b.pop_back();
  for (const IntegerContext& c : kIntegerContexts) {
    std::string_view name = c.before;
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    if (b.size() < name.size() || std::string_view(b).substr(b.size() - name.size()) != name) continue;
    if (name.back() != ':' && name.back() != '=' && !blank_before_number) continue;  // "GPU1": no blank
    if (c.after.empty() ? at_line_end(rest, 0) : rest.substr(0, c.after.size()) == c.after) return true;
  }
  return false;
}

bool number_split(std::string_view left, std::string_view right) {
  const char a = left.back();
  const char b = right.front();
  if (a == '(' || b == ';' || b == ')' || b == ':') return true;
  if ((is_numeric(a) || a == '[') && inside_shape_list(left, b)) return true;
  const bool digit_then_number =
      is_digit(a) && (is_digit(b) || ((b == '.' || b == ',') && right.size() > 1 && is_digit(right[1])));
  const bool mark_then_digit =
      (a == '.' || a == ',') && left.size() > 1 && is_digit(left[left.size() - 2]) && is_digit(b);
  if (!digit_then_number && !mark_then_digit) return false;
  const std::string_view l = tail_run(left, is_numeric);
  const std::size_t e = number_end(right);
  const std::string_view r = right.substr(0, e);
  const auto dots = std::count(l.begin(), l.end(), '.') + std::count(r.begin(), r.end(), '.');
  if (dots <= 1 && is_digit(l.front()) && unit_follows(right, e)) return true;
  return inside_named_integer(left, right, l, head_run(right, 0, is_numeric).size());
}

/// One pass over `in`: each '\n' (with a '\r' before it) whose sides `rule` calls soft is removed
/// with the next line's indentation.
std::string join_soft_breaks(std::string_view in, SoftRule rule) {
  std::string out;
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '\n') {
      out.push_back(in[i]);
      continue;
    }
    std::size_t k = i + 1;
    while (k < in.size() && is_hspace(in[k])) ++k;
    std::string_view left = out;
    if (!left.empty() && left.back() == '\r') left.remove_suffix(1);
    if (left.empty() || k >= in.size() || is_hspace(left.back()) || left.back() == '\n' || left.back() == '\r' ||
        in[k] == '\n' || in[k] == '\r' || !rule(left, in.substr(k))) {
      out.push_back('\n');
      continue;
    }
    if (!out.empty() && out.back() == '\r') out.pop_back();
    i = k - 1;
  }
  return out;
}

}  // namespace

std::string unwrap_pasted_text(std::string_view raw) {
  std::string s = strip_escapes(raw);
  s = strip_prefixes(s);
  s = join_soft_breaks(s, word_split);
  return join_soft_breaks(s, number_split);
}

}  // namespace vramtrace
