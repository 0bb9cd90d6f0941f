// Reader of out-of-memory messages. Hand-written phrase search rather than regular expressions:
// messages can be whole logs (TensorFlow dumps thousands of chunk lines), and std::regex recurses
// per character on long inputs.
#include "analyses/oom/oom_message.h"
#include "analyses/oom/pasted_text.h"

#include <fmt/format.h>
#include <algorithm>
#include <cctype>
#include <cmath>

namespace vramtrace {

namespace {

constexpr std::size_t kMaxMessageBytes = 16u << 20;  // longer input is cut, with a finding

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/// Collapses every run of whitespace into one space; other control bytes become spaces too so
/// that odd bytes never split a phrase unexpectedly.
std::string normalise(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  bool space = false;
  for (char c : in) {
    unsigned char u = static_cast<unsigned char>(c);
    if (is_space(c) || u < 0x20 || u == 0x7f) {
      space = true;
      continue;
    }
    if (space && !out.empty()) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  return out;
}

std::optional<double> unit_multiplier(std::string_view unit) {
  std::string u;
  for (char c : unit) u.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (u.empty() || u == "b" || u == "byte" || u == "bytes") return 1.0;
  if (u == "k" || u == "kb" || u == "kib") return 1024.0;
  if (u == "m" || u == "mb" || u == "mib") return 1024.0 * 1024;
  if (u == "g" || u == "gb" || u == "gib") return 1024.0 * 1024 * 1024;
  if (u == "t" || u == "tb" || u == "tib") return 1024.0 * 1024 * 1024 * 1024;
  if (u == "p" || u == "pb" || u == "pib") return 1024.0 * 1024 * 1024 * 1024 * 1024;
  if (u == "e" || u == "eb" || u == "eib") return 1024.0 * 1024 * 1024 * 1024 * 1024 * 1024;
  return std::nullopt;
}

/// `number` (digits, at most one '.', thousands separators) times the unit. The whole number must
/// read: "1.2.3" is no number, not 1.2.
std::optional<std::uint64_t> to_bytes(std::string_view number, std::string_view unit) {
  auto mult = unit_multiplier(unit);
  if (!mult || number.empty()) return std::nullopt;
  std::string digits;
  for (char c : number)
    if (c != ',') digits.push_back(c);
  double v = 0;
  try {
    std::size_t used = 0;
    v = std::stod(digits, &used);
    if (used != digits.size()) return std::nullopt;
  } catch (...) {
    return std::nullopt;
  }
  double bytes = std::round(v * *mult);
  if (!(bytes >= 0) || bytes >= 18446744073709551616.0) return std::nullopt;
  return static_cast<std::uint64_t>(bytes);
}

/// Whether a size must carry its unit. PyTorch (format_size), CuPy ("bytes") and XLA's
/// HumanReadableNumBytes always print one, so a number without it there is a figure cut by a wrap
/// or an edit ("of which 1" for "1.23 GiB"), never a count of bytes. TensorFlow's allocator dump
/// prints plain byte counts ("Limit: 503270604").
enum class Unit : std::uint8_t { optional, required };

/// A ',' that separates thousands: a digit before it and three digits after it, then no digit.
bool thousands_separator(std::string_view s, std::size_t i) {
  if (i == 0 || i + 3 >= s.size() || !is_digit(s[i - 1])) return false;
  return is_digit(s[i + 1]) && is_digit(s[i + 2]) && is_digit(s[i + 3]) && (i + 4 >= s.size() || !is_digit(s[i + 4]));
}

/// A size token starting at `pos`: number, optional spaces, unit (optional under Unit::optional).
/// Sets `end`.
std::optional<PrintedSize> size_at(std::string_view s, std::size_t pos, std::size_t* end = nullptr,
                                   Unit rule = Unit::optional) {
  std::size_t i = pos;
  while (i < s.size() && s[i] == ' ') ++i;
  std::size_t num_begin = i;
  bool dot = false;  // separators only before the decimal point ("1.5,000" is no number)
  while (i < s.size() &&
         (is_digit(s[i]) || (s[i] == '.' && i > num_begin) || (s[i] == ',' && !dot && thousands_separator(s, i)))) {
    if (s[i] == '.') dot = true;
    ++i;
  }
  if (i == num_begin) return std::nullopt;
  std::size_t num_end = i;
  while (num_end > num_begin && s[num_end - 1] == '.') --num_end;  // "1.54G." ends a sentence
  std::size_t j = i;
  while (j < s.size() && s[j] == ' ') ++j;
  std::size_t unit_begin = j;
  while (j < s.size() && is_alpha(s[j])) ++j;
  std::string_view unit = s.substr(unit_begin, j - unit_begin);
  std::size_t token_end = j;
  if (unit.empty() || !unit_multiplier(unit)) {  // a following word that is not a unit: plain number of bytes
    if (rule == Unit::required) return std::nullopt;
    unit = {};
    token_end = num_end;
  }
  auto bytes = to_bytes(s.substr(num_begin, num_end - num_begin), unit);
  if (!bytes) return std::nullopt;
  if (end) *end = token_end;
  PrintedSize out;
  out.bytes = *bytes;
  out.text = std::string(s.substr(num_begin, token_end - num_begin));
  return out;
}

/// The size that ends just before `pos` ("1024.00 MiB" before " total capacity").
std::optional<PrintedSize> size_before(std::string_view s, std::size_t pos, Unit rule = Unit::optional) {
  std::size_t i = pos;
  while (i > 0 && s[i - 1] == ' ') --i;
  std::size_t unit_end = i;
  while (i > 0 && is_alpha(s[i - 1])) --i;
  std::size_t unit_begin = i;
  while (i > 0 && s[i - 1] == ' ') --i;
  std::size_t num_end = i;
  while (i > 0 && (is_digit(s[i - 1]) || s[i - 1] == '.')) --i;
  // A number starts with a digit, as in size_at: ".08 GiB" is not a printed size (fuzz finding,
  // tests/fuzz/regressions/oom_message/leading-dot-figure).
  if (i == num_end || s[i] == '.') return std::nullopt;
  std::string_view unit = s.substr(unit_begin, unit_end - unit_begin);
  if (rule == Unit::required && unit.empty()) return std::nullopt;
  auto bytes = to_bytes(s.substr(i, num_end - i), unit);
  if (!bytes) return std::nullopt;
  PrintedSize out;
  out.bytes = *bytes;
  out.text = std::string(s.substr(i, unit_end - i));
  return out;
}

/// The figure printed at `pos` as it stands, a number (signed, with exponent) and its unit, when
/// size_at could not read it: for saying which figure was unreadable. Empty when no number is there.
std::string printed_figure(std::string_view s, std::size_t pos) {
  while (pos < s.size() && s[pos] == ' ') ++pos;
  std::size_t i = pos;
  while (i < s.size() && i - pos < 40 &&
         (is_digit(s[i]) || std::string_view("+-.eE,").find(s[i]) != std::string_view::npos))
    ++i;
  if (i == pos || !std::any_of(s.begin() + pos, s.begin() + i, [](char c) { return is_digit(c); })) return {};
  std::size_t j = i;
  while (j < s.size() && s[j] == ' ') ++j;
  std::size_t k = j;
  while (k < s.size() && k - j < 8 && is_alpha(s[k])) ++k;
  while (i > pos && s[i - 1] == '.') --i;
  const bool unit = k > j && unit_multiplier(s.substr(j, k - j));
  return std::string(unit ? s.substr(pos, k - pos) : s.substr(pos, i - pos));
}

/// The text of the figure that ends just before `pos` (a phrase after it), when size_before could
/// not read it: back to the clause's start (';', '(' or ','), at most 32 characters, trimmed.
std::string printed_before(std::string_view s, std::size_t pos) {
  std::size_t b = pos;
  while (b > 0 && pos - b < 32 && s[b - 1] != ';' && s[b - 1] != '(' && s[b - 1] != ',') --b;
  std::string_view t = s.substr(b, pos - b);
  while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
  while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
  if (!std::any_of(t.begin(), t.end(), [](char c) { return is_digit(c); })) return {};
  return std::string(t);
}

/// Finds `phrase` at or after `from`; npos if absent.
std::size_t find(std::string_view s, std::string_view phrase, std::size_t from = 0) {
  return from >= s.size() ? std::string_view::npos : s.find(phrase, from);
}

std::optional<PrintedSize> size_after_phrase(std::string_view s, std::string_view phrase, std::size_t from = 0) {
  std::size_t p = find(s, phrase, from);
  if (p == std::string_view::npos) return std::nullopt;
  std::size_t q = p + phrase.size();
  while (q < s.size() && (s[q] == ' ' || s[q] == ':')) ++q;
  return size_at(s, q);
}

std::optional<long long> int_at(std::string_view s, std::size_t pos) {
  while (pos < s.size() && s[pos] == ' ') ++pos;
  std::size_t b = pos;
  while (pos < s.size() && is_digit(s[pos]) && pos - b < 18) ++pos;
  if (pos == b) return std::nullopt;
  return std::stoll(std::string(s.substr(b, pos - b)));
}

std::optional<long long> int_after_phrase(std::string_view s, std::string_view phrase, std::size_t from = 0) {
  std::size_t p = find(s, phrase, from);
  if (p == std::string_view::npos) return std::nullopt;
  return int_at(s, p + phrase.size());
}

/// Records a figure that the text prints but that could not be read (empty `printed`: nothing to
/// quote, the figure is simply missing).
void unreadable(OomMessage& m, const char* key, std::string printed) {
  if (printed.empty()) return;
  for (const auto& u : m.unreadable)
    if (u.key == key) return;
  m.unreadable.push_back({key, std::move(printed)});
}

/// The size after `phrase` (past blanks and ':'), with its unit; a number there that does not read
/// as such a size is recorded under `key` as unreadable.
std::optional<PrintedSize> figure_after(OomMessage& m, const char* key, std::string_view s, std::string_view phrase,
                                        std::size_t from = 0) {
  std::size_t p = find(s, phrase, from);
  if (p == std::string_view::npos) return std::nullopt;
  std::size_t q = p + phrase.size();
  while (q < s.size() && (s[q] == ' ' || s[q] == ':')) ++q;
  auto v = size_at(s, q, nullptr, Unit::required);
  if (!v) unreadable(m, key, printed_figure(s, q));
  return v;
}

/// The size just before `phrase`, with its unit; recorded under `key` as unreadable otherwise.
std::optional<PrintedSize> figure_before(OomMessage& m, const char* key, std::string_view s, std::string_view phrase,
                                         std::size_t from = 0) {
  std::size_t p = find(s, phrase, from);
  if (p == std::string_view::npos) return std::nullopt;
  auto v = size_before(s, p, Unit::required);
  if (!v) unreadable(m, key, printed_before(s, p));
  return v;
}

void found(OomMessage& m, const char* what, const std::optional<PrintedSize>& v) {
  if (v) m.findings.push_back(fmt::format("{}: \"{}\"", what, v->text));
}

std::string last_words(std::string_view s, std::size_t n_chars = 40) {
  if (s.size() <= n_chars) return std::string(s);
  std::size_t b = s.size() - n_chars;
  while (b < s.size() && s[b] != ' ') ++b;
  return "..." + std::string(s.substr(b));
}

// --- PyTorch ---------------------------------------------------------------------------------

void read_pytorch_old(std::string_view s, std::size_t start, OomMessage& m) {
  // "(GPU 0; 10.92 GiB total capacity; 8.57 MiB already allocated; 9.28 GiB free; [N allowed; ]4.68 MiB cached)"
  if (auto d = int_after_phrase(s, "(GPU ", start)) m.device = static_cast<int>(*d);
  m.device_total = figure_before(m, "device_total_bytes", s, " total capacity;", start);
  m.allocated = figure_before(m, "allocated_bytes", s, " already allocated;", start);
  m.device_free = figure_before(m, "device_free_bytes", s, " free;", start);
  m.allowed = figure_before(m, "allowed_bytes", s, " allowed;", start);
  if (find(s, " reserved in total by PyTorch", start) != std::string_view::npos) {
    m.format = OomMessageFormat::pytorch_reserved;
    m.reserved = figure_before(m, "reserved_bytes", s, " reserved in total by PyTorch", start);
  } else if (find(s, " cached", start) != std::string_view::npos) {
    m.format = OomMessageFormat::pytorch_cached;
    m.reserved_unallocated = figure_before(m, "reserved_unallocated_bytes", s, " cached", start);
  } else {
    m.format = OomMessageFormat::pytorch_reserved;  // best guess for the layout; figures say what is there
  }
}

// Other processes: "Process 1234 has 3.00 GiB memory in use." (NVML, PyTorch 2.1+).
void read_other_processes(std::string_view s, std::size_t start, OomMessage& m) {
  for (std::size_t q = find(s, "Process ", start); q != std::string_view::npos; q = find(s, "Process ", q + 8)) {
    auto pid = int_at(s, q + 8);
    if (!pid) continue;
    std::size_t r = q + 8;
    while (r < s.size() && (is_digit(s[r]) || s[r] == ' ')) ++r;
    if (s.substr(r, 4) != "has ") continue;
    auto use = size_at(s, r + 4, nullptr, Unit::required);
    if (use) m.other_processes.push_back({*pid, *use});
  }
}

void read_pytorch_sentence(std::string_view s, std::size_t start, OomMessage& m) {
  // "GPU 0 has a total capacity of 139.81 GiB of which 124.00 GiB is free. [Process P has N memory
  // in use. ]... Including non-PyTorch memory, this process has N memory in use. [N allowed; ]Of
  // the allocated memory N is allocated by PyTorch, [with N allocated in private pools (e.g., CUDA
  // Graphs), ]and N is reserved by PyTorch but unallocated."
  m.format = OomMessageFormat::pytorch_sentence;
  std::size_t p = find(s, "GPU ", start);
  if (p != std::string_view::npos) {
    if (auto d = int_at(s, p + 4)) m.device = static_cast<int>(*d);
  }
  if (find(s, "total capacty of", start) != std::string_view::npos) m.capacity_typo = true;
  m.device_total =
      figure_after(m, "device_total_bytes", s, m.capacity_typo ? "total capacty of" : "total capacity of", start);
  m.device_free = figure_after(m, "device_free_bytes", s, "of which", start);
  m.process_in_use = figure_after(m, "process_in_use_bytes", s, "this process has", start);
  read_other_processes(s, start, m);
  m.allowed = figure_before(m, "allowed_bytes", s, " allowed;", start);
  m.allocated = figure_after(m, "allocated_bytes", s, "Of the allocated memory", start);
  // "with N allocated in private pools": the size follows "with ".
  const std::size_t pools = find(s, " allocated in private pools", start);
  const std::size_t with = find(s, "with ", start);
  if (pools != std::string_view::npos && with != std::string_view::npos && with < pools)
    m.private_pools = figure_after(m, "private_pools_bytes", s, "with ", with);
  m.reserved_unallocated =
      figure_before(m, "reserved_unallocated_bytes", s, " is reserved by PyTorch but unallocated", start);
}

// The cudaMallocAsync backend (c10/cuda/CUDAMallocAsyncAllocator.cpp, mallocAsync): "Allocation on
// device D would exceed allowed memory. (out of memory)" and one line per figure. Its "PyTorch
// limit" is UINT64_MAX, printed "17179869184.00 GiB", unless a memory fraction was set.
void read_pytorch_async(std::string_view s, std::size_t start, OomMessage& m) {
  m.format = OomMessageFormat::pytorch_async;
  if (auto d = int_after_phrase(s, "Allocation on device ", start)) m.device = static_cast<int>(*d);
  m.allocated = figure_after(m, "allocated_bytes", s, "Currently allocated", start);
  m.requested = figure_after(m, "requested_bytes", s, "Requested", start);
  m.device_total = figure_after(m, "device_total_bytes", s, "Device limit", start);
  m.device_free = figure_after(m, "device_free_bytes", s, "Free (according to CUDA)", start);
  constexpr std::string_view kLimit = "PyTorch limit (set by user-supplied memory fraction)";
  m.allowed = figure_after(m, "allowed_bytes", s, kLimit, start);
  if (!m.allowed && !m.unreadable.empty() && m.unreadable.back().key == "allowed_bytes") {
    // 2^64 bytes is 17179869184 GiB: the figure of "no limit", beyond any size in bytes.
    const std::string& text = m.unreadable.back().printed;
    if (text.rfind("17179869184.00 GiB", 0) == 0) {
      m.no_memory_fraction = true;
      m.unreadable.pop_back();
    }
  }
}

// --- TensorFlow BFC and XLA ------------------------------------------------------------------

void read_bfc_dump(std::string_view s, OomMessage& m) {
  std::size_t a = find(s, "Allocator (");
  if (a != std::string_view::npos) {
    std::size_t e = s.find(')', a);
    if (e != std::string_view::npos && e - a < 80) m.allocator_name = std::string(s.substr(a + 11, e - a - 11));
  }
  std::size_t gpu = m.allocator_name.find("GPU_");
  if (!m.device && gpu != std::string::npos) {
    if (auto d = int_at(m.allocator_name, gpu + 4)) m.device = static_cast<int>(*d);
  }
  m.bfc_limit = size_after_phrase(s, "Limit:");
  m.bfc_in_use = size_after_phrase(s, "InUse:");
  m.bfc_max_in_use = size_after_phrase(s, "MaxInUse:");
  m.bfc_region_bytes = size_after_phrase(s, "total_region_allocated_bytes_:");
  std::uint64_t largest = 0, total = 0, n = 0;
  for (std::size_t q = find(s, "Free at "); q != std::string_view::npos; q = find(s, "Free at ", q + 8)) {
    std::size_t of = find(s, " of size ", q);
    if (of == std::string_view::npos || of - q > 64) continue;
    auto sz = size_at(s, of + 9);
    if (!sz) continue;
    ++n;
    total += sz->bytes;
    if (sz->bytes > largest) largest = sz->bytes;
  }
  if (n > 0) {
    m.bfc_free_chunks = n;
    m.bfc_largest_free_chunk = PrintedSize{largest, std::to_string(largest)};
    m.bfc_free_chunks_bytes = PrintedSize{total, std::to_string(total)};
  }
}

// PyTorch on Apple MPS (aten/src/ATen/mps/MPSAllocator.mm): "MPS backend out of memory (MPS
// allocated: 18.04 GB, other allocations: 2.55 MB, max allowed: 18.13 GB). Tried to allocate 96.00 MB
// on private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 ...". Its "GB" and "MB" are binary
// multiples (the allocator's format_size divides by 1024). `at` is the start of the phrase.
void read_mps(std::string_view s, std::size_t at, OomMessage& m) {
  m.format = OomMessageFormat::mps;
  m.platform = GpuPlatform::mps;
  m.allocated = figure_after(m, "allocated_bytes", s, "MPS allocated", at);
  m.mps_other = figure_after(m, "mps_other_bytes", s, "other allocations", at);
  m.allowed = figure_after(m, "allowed_bytes", s, "max allowed", at);
  m.requested = figure_after(m, "requested_bytes", s, "Tried to allocate", at);
}

// PyTorch's caching allocator: the form is told by what follows "Tried to allocate" (at `tried`).
void read_pytorch(std::string_view s, std::size_t tried, OomMessage& m) {
  std::size_t after = tried + 17;
  if (find(s, "more than 1EB", after) == after + 1 || find(s, "more than 1 EB", after) == after + 1) {
    m.format = OomMessageFormat::pytorch_exabyte;
    m.exceeds_1eb = true;
    m.findings.push_back("the request is more than 1 EiB (PyTorch's size check), so no figures follow");
  } else {
    std::size_t end = 0;
    m.requested = size_at(s, after, &end, Unit::required);
    if (!m.requested) {
      m.unreadable_requested = printed_figure(s, after);
      unreadable(m, "requested_bytes", m.unreadable_requested);
    }
    std::size_t rest = m.requested ? end : after;
    if (find(s, "total capacity;", rest) != std::string_view::npos ||
        find(s, "already allocated", rest) != std::string_view::npos ||
        find(s, " cached", rest) != std::string_view::npos ||
        find(s, "reserved in total by PyTorch", rest) != std::string_view::npos) {
      read_pytorch_old(s, rest, m);
    } else if (find(s, "has a total capac", rest) != std::string_view::npos ||
               find(s, "is allocated by PyTorch", rest) != std::string_view::npos ||
               find(s, "reserved by PyTorch but unallocated", rest) != std::string_view::npos) {
      read_pytorch_sentence(s, rest, m);
    } else {
      // Only the request survived: a cut message (pytorch/pytorch#126766: cut after "GPU").
      m.format = find(s, "(GPU", rest) != std::string_view::npos ? OomMessageFormat::pytorch_reserved
                                                                 : OomMessageFormat::pytorch_sentence;
      if (auto d = int_after_phrase(s, "GPU ", rest)) m.device = static_cast<int>(*d);
      m.truncated = true;
    }
  }
}

// TensorFlow's op kernels (tensorflow/core/framework/op_kernel.cc and the device copy paths):
// "OOM when allocating tensor with shape[32,512,512,64] and type float on
// /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc"; older "... tensor of shape
// [32256512,512] and type float". `at` is the start of "OOM when allocating tensor". The shape's
// dimensions and the type name are recorded as printed; their product is diagnosis's arithmetic.
void read_tf_tensor(std::string_view s, std::size_t at, OomMessage& m) {
  std::size_t p = at + std::string_view("OOM when allocating tensor").size();
  while (p < s.size() && s[p] == ' ') ++p;
  if (s.substr(p, 10) == "with shape") {
    p += 10;
  } else if (s.substr(p, 8) == "of shape") {
    p += 8;
  } else {
    return;
  }
  while (p < s.size() && s[p] == ' ') ++p;
  if (p >= s.size() || s[p] != '[') return;
  const std::size_t close = s.find(']', p);
  if (close == std::string_view::npos || close - p > 400) {
    unreadable(m, "tensor_shape", std::string(s.substr(p, std::min<std::size_t>(s.size() - p, 40))));
    return;
  }
  m.tensor_shape_text = std::string(s.substr(p, close + 1 - p));
  std::vector<std::uint64_t> dims;
  bool ok = true;
  for (std::size_t q = p + 1; q < close && ok;) {
    while (q < close && s[q] == ' ') ++q;
    std::size_t b = q;
    while (q < close && is_digit(s[q]) && q - b < 19) ++q;
    ok = q > b;
    if (ok) dims.push_back(std::stoull(std::string(s.substr(b, q - b))));
    while (q < close && s[q] == ' ') ++q;
    if (q < close) ok = ok && s[q++] == ',';
  }
  if (ok && dims.size() <= 64) {
    m.tensor_shape = std::move(dims);
  } else {
    unreadable(m, "tensor_shape", m.tensor_shape_text);
  }
  std::size_t t = find(s, "and type ", close);
  if (t != std::string_view::npos && t <= close + 3) {
    std::size_t b = t + 9, e = b;
    while (e < s.size() && e - b < 24 && (std::isalnum(static_cast<unsigned char>(s[e])) || s[e] == '_')) ++e;
    m.dtype = std::string(s.substr(b, e - b));
  }
  const std::size_t on = find(s, "device:GPU:", close);
  if (!m.device && on != std::string_view::npos && on < close + 200) {
    if (auto d = int_at(s, on + 11)) m.device = static_cast<int>(*d);
  }
  const std::size_t by = find(s, "by allocator ", close);
  if (m.allocator_name.empty() && by != std::string_view::npos && by < close + 300) {
    std::size_t b = by + 13, e = b;
    while (e < s.size() && e - b < 40 && (std::isalnum(static_cast<unsigned char>(s[e])) || s[e] == '_')) ++e;
    m.allocator_name = std::string(s.substr(b, e - b));
  }
  // The device is in the allocator's name too ("GPU_0_bfc"), should a wrap have cut "device:GPU:0".
  if (!m.device && m.allocator_name.rfind("GPU_", 0) == 0) {
    if (auto d = int_at(m.allocator_name, 4)) m.device = static_cast<int>(*d);
  }
}

// TF2 lists the failures of one step as "N root error(s) found. (0) RESOURCE_EXHAUSTED: ...".
void read_root_errors(std::string_view s, OomMessage& m) {
  const std::size_t r = find(s, " root error(s) found");
  if (r == std::string_view::npos) return;
  std::size_t b = r;
  while (b > 0 && is_digit(s[b - 1]) && r - b < 6) --b;
  if (b < r) m.root_errors = std::stoull(std::string(s.substr(b, r - b)));
}

// TensorFlow's BFC allocator: the request after "ran out of memory trying to allocate" (at `bfc`,
// npos when only its dump is there), then the dump; the op kernel's line when it is there too.
void read_tensorflow(std::string_view s, std::size_t bfc, OomMessage& m) {
  m.format = OomMessageFormat::tensorflow_bfc;
  if (bfc != std::string_view::npos) {
    std::size_t end = 0;
    m.requested = size_at(s, bfc + 35, &end);
    if (m.requested) {
      auto r = size_after_phrase(s, "(rounded to", end);
      if (r && find(s, "(rounded to", end) <= end + 2) m.rounded = r;
    }
  }
  read_bfc_dump(s, m);
  const std::size_t tensor = find(s, "OOM when allocating tensor");
  if (tensor != std::string_view::npos) read_tf_tensor(s, tensor, m);
}

// XLA/JAX at run time: the request after one of its phrases.
void read_xla(std::string_view s, OomMessage& m) {
  m.format = OomMessageFormat::xla;
  const std::size_t xla = find(s, "Out of memory while trying to allocate");
  const std::size_t xla2 = find(s, "Attempting to allocate");
  const std::size_t xla3 = find(s, "Failed to allocate request for");
  const std::size_t tpu = find(s, "Allocation (size=");
  if (xla != std::string_view::npos) m.requested = size_at(s, xla + 38);
  if (!m.requested && xla2 != std::string_view::npos) m.requested = size_at(s, xla2 + 22);
  if (!m.requested && xla3 != std::string_view::npos) {
    // "Failed to allocate request for 4.00GiB (4294967296B) on device ordinal 0"
    std::size_t end = 0;
    m.requested = size_at(s, xla3 + 30, &end);
    std::size_t paren = find(s, "(", end);
    if (paren != std::string_view::npos && paren <= end + 2) {
      if (auto exact = size_at(s, paren + 1)) m.requested = exact;
    }
    if (auto d = int_after_phrase(s, "device ordinal", xla3)) m.device = static_cast<int>(*d);
  }
  if (!m.requested && tpu != std::string_view::npos) {
    // TPU runtime: "Allocation (size=21474836480) would exceed memory (size=17179869184)".
    m.platform = GpuPlatform::tpu;
    m.requested = size_at(s, tpu + 17);
    const std::size_t mem = find(s, "would exceed memory (size=", tpu);
    if (mem != std::string_view::npos && mem < tpu + 60) m.device_total = size_at(s, mem + 26);
  }
  if (xla2 != std::string_view::npos) m.device_free = size_after_phrase(s, "There are", xla2);
  read_bfc_dump(s, m);  // XLA on GPU uses the BFC allocator and often prints its dump too
}

// XLA's compile-time check that a program's buffers fit its memory (TPU; openxla.org, error code
// E1000): "Ran out of memory in memory space hbm. Used 49.34G of 32.00G hbm. Exceeded hbm capacity
// by 17.34G." Sizes are HumanReadableNumBytes: binary multiples with one letter ("876.30M", "0B").
void read_xla_memory_space(std::string_view s, std::size_t at, OomMessage& m) {
  m.format = OomMessageFormat::xla_memory_space;
  m.platform = GpuPlatform::tpu;  // the TPU compiler's check (E1000); XLA on GPU fails at run time
  std::size_t p = at + std::string_view("Ran out of memory in memory space").size();
  while (p < s.size() && s[p] == ' ') ++p;
  std::size_t e = p;
  while (e < s.size() && e - p < 16 && (std::isalnum(static_cast<unsigned char>(s[e])) || s[e] == '_')) ++e;
  m.memory_space = std::string(s.substr(p, e - p));
  const std::size_t used = find(s, "Used ", e);
  if (used != std::string_view::npos && used < e + 40) {
    std::size_t end = 0;
    m.space_used = size_at(s, used + 5, &end, Unit::required);
    if (!m.space_used) unreadable(m, "space_used_bytes", printed_figure(s, used + 5));
    if (m.space_used && s.substr(end, 4) == " of ")
      m.space_limit = figure_after(m, "space_limit_bytes", s, " of ", end);
  }
  const std::size_t by = find(s, "capacity by", e);
  if (by != std::string_view::npos && by < e + 200)
    m.space_exceeded_by = figure_after(m, "space_exceeded_by_bytes", s, "capacity by", by);
}

// CuPy's memory pool (cupy/cuda/memory.pyx, OutOfMemoryError): "Out of memory allocating N bytes
// (allocated so far: M bytes)." after releasing its cached blocks and retrying; "..., limit set
// to: L bytes)." when the pool's limit refused it (checked before any release); no parenthesis
// when the pool's total is unknown. Sizes in bytes with thousands separators.
void read_cupy(std::string_view s, std::size_t at, OomMessage& m) {
  m.format = OomMessageFormat::cupy;
  m.requested = figure_after(m, "requested_bytes", s, "Out of memory allocating", at);
  const std::size_t so_far = find(s, "(allocated so far", at);
  if (so_far != std::string_view::npos && so_far < at + 80) {
    m.pool_allocated_so_far = figure_after(m, "allocated_so_far_bytes", s, "allocated so far", so_far);
    const std::size_t limit = find(s, "limit set to", so_far);
    if (limit != std::string_view::npos && limit < so_far + 80)
      m.allowed = figure_after(m, "allowed_bytes", s, "limit set to", limit);
  }
}

/// The statuses of CUDA libraries that come from an allocation failure, or most often do (handle
/// creation), and the library's name.
struct LibraryStatus {
  std::string_view status;
  const char* library;
};
constexpr LibraryStatus kLibraryStatuses[] = {
    {"CUBLAS_STATUS_ALLOC_FAILED", "cuBLAS"},
    {"CUBLAS_STATUS_NOT_INITIALIZED", "cuBLAS"},
    {"CUDNN_STATUS_ALLOC_FAILED", "cuDNN"},
    {"CUDNN_STATUS_NOT_INITIALIZED", "cuDNN"},
    {"CUFFT_ALLOC_FAILED", "cuFFT"},
    {"CUSOLVER_STATUS_ALLOC_FAILED", "cuSOLVER"},
    {"CUSPARSE_STATUS_ALLOC_FAILED", "cuSPARSE"},
    {"CURAND_STATUS_ALLOCATION_FAILED", "cuRAND"},
};

// A CUDA library's status that hides an allocation failure; true when one is in `s`. Also
// TensorFlow's "Could not create cudnn handle: CUDNN_STATUS_INTERNAL_ERROR" (the handle's memory,
// taken before TensorFlow's allocator had left any) and NCCL's "Cuda failure 'out of memory'".
bool read_cuda_library(std::string_view s, OomMessage& m) {
  std::size_t at = std::string_view::npos;
  for (const auto& l : kLibraryStatuses) {
    const std::size_t p = find(s, l.status);
    if (p < at) {
      at = p;
      m.library = l.library;
      m.library_status = std::string(l.status);
    }
  }
  const std::size_t handle = find(s, "Could not create cudnn handle: CUDNN_STATUS_INTERNAL_ERROR");
  if (at == std::string_view::npos && handle != std::string_view::npos) {
    at = handle;
    m.library = "cuDNN";
    m.library_status = "CUDNN_STATUS_INTERNAL_ERROR";
  }
  const std::size_t nccl = find(s, "Cuda failure");
  if (at == std::string_view::npos && nccl != std::string_view::npos) {
    const std::size_t oom = find(s, "out of memory", nccl);
    if (oom != std::string_view::npos && oom < nccl + 24) {
      at = nccl;
      m.library = "NCCL";
      m.library_status = "Cuda failure 'out of memory'";
    }
  }
  if (at == std::string_view::npos) return false;
  m.format = OomMessageFormat::cuda_library;
  // PyTorch: "... when calling `cublasCreate(handle)`".
  const std::size_t call = find(s, "when calling `", at);
  if (call != std::string_view::npos && call < at + 80) {
    const std::size_t close = s.find('`', call + 14);
    if (close != std::string_view::npos && close - call < 120)
      m.library_call = std::string(s.substr(call + 14, close - call - 14));
  }
  return true;
}

// A bare CUDA out-of-memory error. TensorFlow's and XLA's stream executor name the request:
// "failed to allocate 3.71GiB (3984588800 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY".
void read_cuda_error(std::string_view s, OomMessage& m) {
  m.format = OomMessageFormat::cuda_error;
  const std::size_t failed = find(s, "failed to allocate ");
  const std::size_t from = find(s, " from device", failed);
  if (failed == std::string_view::npos || from == std::string_view::npos || from > failed + 80) return;
  const std::size_t paren = find(s, "(", failed);
  if (paren != std::string_view::npos && paren < from) m.requested = size_at(s, paren + 1, nullptr, Unit::required);
  if (!m.requested) m.requested = size_at(s, failed + 19, nullptr, Unit::required);
}

bool is_unreadable(const OomMessage& m, std::string_view key) {
  return std::any_of(m.unreadable.begin(), m.unreadable.end(), [&](const UnreadableFigure& u) { return u.key == key; });
}

// A PyTorch message that has a request but lost the figures its form always carries. A last
// figure that is printed but unreadable (a wrap cut its unit) is there: the message is whole.
void mark_truncated(std::string_view s, bool is_pytorch, OomMessage& m) {
  if (is_pytorch && !m.truncated) {
    bool complete = m.format == OomMessageFormat::pytorch_sentence
                        ? m.reserved_unallocated.has_value() || is_unreadable(m, "reserved_unallocated_bytes")
                        : (m.reserved.has_value() || m.reserved_unallocated.has_value() ||
                           is_unreadable(m, "reserved_bytes") || is_unreadable(m, "reserved_unallocated_bytes"));
    if (!complete) m.truncated = true;
  }
  if (m.format == OomMessageFormat::mps && !m.truncated && !m.allowed && !is_unreadable(m, "allowed_bytes"))
    m.truncated = true;
  if (m.truncated) m.truncated_after = last_words(s);
}

/// A figure that a form always prints: its JSON key, its name for people, the field.
struct RequiredFigure {
  const char* key;
  const char* label;
  std::optional<PrintedSize> OomMessage::*field;
};

constexpr RequiredFigure kRequest{"requested_bytes", "request", &OomMessage::requested};
constexpr RequiredFigure kTotal{"device_total_bytes", "device total", &OomMessage::device_total};
constexpr RequiredFigure kFree{"device_free_bytes", "device free", &OomMessage::device_free};
constexpr RequiredFigure kAllocated{"allocated_bytes", "allocated", &OomMessage::allocated};
constexpr RequiredFigure kReserved{"reserved_bytes", "reserved (total)", &OomMessage::reserved};
constexpr RequiredFigure kCached{"reserved_unallocated_bytes", "reserved but unallocated",
                                 &OomMessage::reserved_unallocated};

// The figures each form always prints (PyTorch's format strings; the cudaMallocAsync, MPS and
// XLA messages); a form whose figures vary (a BFC dump, a bare error) has only its request, or none.
std::vector<RequiredFigure> required_figures(const OomMessage& m) {
  switch (m.format) {
    case OomMessageFormat::pytorch_cached:
      return {kRequest, kTotal, kAllocated, kFree, kCached};
    case OomMessageFormat::pytorch_reserved:
      return {kRequest, kTotal, kAllocated, kFree, kReserved};
    case OomMessageFormat::pytorch_sentence:
      return {kRequest, kTotal, kFree, kAllocated, kCached};
    case OomMessageFormat::pytorch_async:
      if (m.no_memory_fraction) return {kRequest, kAllocated, kTotal, kFree};
      return {kRequest, kAllocated, kTotal, kFree, {"allowed_bytes", "PyTorch limit", &OomMessage::allowed}};
    case OomMessageFormat::mps:
      return {{"allocated_bytes", "MPS allocated", &OomMessage::allocated},
              {"mps_other_bytes", "MPS other allocations", &OomMessage::mps_other},
              {"allowed_bytes", "max allowed", &OomMessage::allowed},
              kRequest};
    case OomMessageFormat::tensorflow_bfc:
      if (!m.tensor_shape_text.empty()) return {};  // the request is the op kernel's tensor
      return {kRequest};
    case OomMessageFormat::xla:
    case OomMessageFormat::cupy:
      return {kRequest};
    case OomMessageFormat::xla_memory_space:
      return {{"space_used_bytes", "used", &OomMessage::space_used},
              {"space_limit_bytes", "capacity", &OomMessage::space_limit},
              {"space_exceeded_by_bytes", "exceeded by", &OomMessage::space_exceeded_by}};
    default:
      return {};
  }
}

/// The name for people of a figure's JSON key.
const char* figure_label(std::string_view key) {
  static constexpr std::pair<std::string_view, const char*> kLabels[] = {
      {"requested_bytes", "request"},
      {"device_total_bytes", "device total"},
      {"device_free_bytes", "device free"},
      {"allocated_bytes", "allocated"},
      {"reserved_bytes", "reserved (total)"},
      {"reserved_unallocated_bytes", "reserved but unallocated"},
      {"allowed_bytes", "allowed (cap)"},
      {"process_in_use_bytes", "in use by this process"},
      {"private_pools_bytes", "allocated in private pools"},
      {"mps_other_bytes", "MPS other allocations"},
      {"space_used_bytes", "used"},
      {"space_limit_bytes", "capacity"},
      {"space_exceeded_by_bytes", "exceeded by"},
      {"allocated_so_far_bytes", "allocated so far"},
      {"tensor_shape", "tensor shape"},
  };
  for (const auto& [k, label] : kLabels)
    if (k == key) return label;
  return "figure";
}

// The figures its form always prints that were not read: m.missing, with a finding each.
void list_missing(OomMessage& m) {
  for (const RequiredFigure& r : required_figures(m)) {
    if ((m.*(r.field)).has_value()) continue;
    m.missing.emplace_back(r.key);
    if (!is_unreadable(m, r.key)) m.findings.push_back(fmt::format("{}: not in the message", r.label));
  }
  if (m.format == OomMessageFormat::tensorflow_tensor || !m.tensor_shape_text.empty()) {
    if (m.tensor_shape.empty()) m.missing.emplace_back("tensor_shape");
    if (m.dtype.empty()) m.missing.emplace_back("dtype");
    if (m.tensor_shape_text.empty()) m.findings.push_back("tensor shape: not in the message");
    if (m.dtype.empty()) m.findings.push_back("tensor type: not in the message");
  }
  for (const UnreadableFigure& u : m.unreadable)
    m.findings.push_back(fmt::format(
        "{}: printed as \"{}\", which does not read as {}, so it is not read", figure_label(u.key), u.printed,
        u.key == "tensor_shape" ? "a list of whole numbers"
                                : "a size in bytes (a unit missing, out of range, negative)"));
}

// What the reader read of the forms with words rather than sizes (TensorFlow's tensor, XLA's
// memory space, a library's status).
void list_form_findings(OomMessage& m) {
  if (!m.tensor_shape_text.empty())
    m.findings.push_back(fmt::format("tensor shape: \"{}\"{}", m.tensor_shape_text,
                                     m.dtype.empty() ? "" : fmt::format(", type \"{}\"", m.dtype)));
  if (m.root_errors > 1)
    m.findings.push_back(fmt::format(
        "{} root errors are listed; each out-of-memory error among them is read on its own", m.root_errors));
  if (!m.memory_space.empty()) m.findings.push_back(fmt::format("memory space: \"{}\"", m.memory_space));
  if (!m.library_status.empty())
    m.findings.push_back(fmt::format("{} status: \"{}\"{}", m.library, m.library_status,
                                     m.library_call.empty() ? "" : fmt::format(" from {}", m.library_call)));
  if (m.no_memory_fraction)
    m.findings.push_back(
        "PyTorch limit: none set (\"17179869184.00 GiB\" is 2^64 bytes, the cudaMallocAsync backend's value without "
        "a memory fraction)");
}

// The findings: each figure read, what its form should carry and does not, and the caveats.
void list_findings(OomMessage& m) {
  found(m, "request", m.requested);
  found(m, "rounded request", m.rounded);
  found(m, "device total", m.device_total);
  found(m, "device free", m.device_free);
  found(m, "allocated", m.allocated);
  found(m, "reserved (total)", m.reserved);
  found(m, "reserved but unallocated", m.reserved_unallocated);
  found(m, "allowed (cap)", m.allowed);
  found(m, "in use by this process", m.process_in_use);
  found(m, "allocated in private pools", m.private_pools);
  found(m, "MPS other allocations", m.mps_other);
  found(m, "used", m.space_used);
  found(m, "capacity", m.space_limit);
  found(m, "exceeded by", m.space_exceeded_by);
  found(m, "allocated so far (CuPy's pool)", m.pool_allocated_so_far);
  for (const auto& p : m.other_processes)
    m.findings.push_back(fmt::format("process {} in use: \"{}\"", p.pid, p.in_use.text));
  found(m, "BFC limit", m.bfc_limit);
  found(m, "BFC in use", m.bfc_in_use);
  found(m, "BFC max in use", m.bfc_max_in_use);
  found(m, "BFC region bytes", m.bfc_region_bytes);
  if (m.bfc_free_chunks) {
    m.findings.push_back(fmt::format("BFC free chunks: {} listed, {} bytes in all, largest {} bytes", m.bfc_free_chunks,
                                     m.bfc_free_chunks_bytes->bytes, m.bfc_largest_free_chunk->bytes));
  }
  list_form_findings(m);
  list_missing(m);
  if (m.platform == GpuPlatform::rocm)
    m.findings.push_back("a ROCm (HIP) message: its settings are PYTORCH_HIP_ALLOC_CONF");
  if (m.truncated) m.findings.push_back(fmt::format("the message is cut off after \"{}\"", m.truncated_after));
  if (m.capacity_typo) m.findings.push_back("spelling \"capacty\": PyTorch 2.1");
  if (m.expandable_hint)
    m.findings.push_back(
        "the expandable_segments hint is printed whether or not the setting is on; it says nothing about the settings");
}

}  // namespace

const char* gpu_platform_name(GpuPlatform p) noexcept {
  switch (p) {
    case GpuPlatform::cuda:
      return "cuda";
    case GpuPlatform::rocm:
      return "rocm";
    case GpuPlatform::mps:
      return "mps";
    case GpuPlatform::tpu:
      return "tpu";
  }
  return "cuda";
}

const char* oom_message_format_name(OomMessageFormat f) noexcept {
  switch (f) {
    case OomMessageFormat::unknown:
      return "unknown";
    case OomMessageFormat::pytorch_cached:
      return "pytorch_cached";
    case OomMessageFormat::pytorch_reserved:
      return "pytorch_reserved";
    case OomMessageFormat::pytorch_sentence:
      return "pytorch_sentence";
    case OomMessageFormat::pytorch_exabyte:
      return "pytorch_exabyte";
    case OomMessageFormat::pytorch_async:
      return "pytorch_async";
    case OomMessageFormat::tensorflow_bfc:
      return "tensorflow_bfc";
    case OomMessageFormat::xla:
      return "xla";
    case OomMessageFormat::cuda_error:
      return "cuda_error";
    case OomMessageFormat::pytorch_thc:
      return "pytorch_thc";
    case OomMessageFormat::mps:
      return "mps";
    case OomMessageFormat::tensorflow_tensor:
      return "tensorflow_tensor";
    case OomMessageFormat::xla_memory_space:
      return "xla_memory_space";
    case OomMessageFormat::cupy:
      return "cupy";
    case OomMessageFormat::cuda_library:
      return "cuda_library";
  }
  return "unknown";
}

const char* oom_message_format_description(OomMessageFormat f) noexcept {
  switch (f) {
    case OomMessageFormat::unknown:
      return "no out-of-memory message recognised";
    case OomMessageFormat::pytorch_cached:
      return "PyTorch <= 1.3 form (\"cached\" = reserved but unallocated)";
    case OomMessageFormat::pytorch_reserved:
      return "PyTorch 1.4-2.0 form (\"reserved in total by PyTorch\")";
    case OomMessageFormat::pytorch_sentence:
      return "PyTorch 2.1+ sentence form";
    case OomMessageFormat::pytorch_exabyte:
      return "PyTorch size check (\"more than 1EB\")";
    case OomMessageFormat::pytorch_async:
      return "PyTorch cudaMallocAsync backend form";
    case OomMessageFormat::tensorflow_bfc:
      return "TensorFlow/XLA BFC allocator form";
    case OomMessageFormat::xla:
      return "XLA/JAX RESOURCE_EXHAUSTED form";
    case OomMessageFormat::cuda_error:
      return "bare CUDA out-of-memory error";
    case OomMessageFormat::pytorch_thc:
      return "PyTorch <= 0.4 form (\"cuda runtime error (2) : out of memory\", no figures)";
    case OomMessageFormat::mps:
      return "PyTorch on Apple MPS (\"MPS backend out of memory\")";
    case OomMessageFormat::tensorflow_tensor:
      return "TensorFlow op kernel form (\"OOM when allocating tensor with shape[...] and type ...\")";
    case OomMessageFormat::xla_memory_space:
      return "XLA compile-time memory plan (\"Ran out of memory in memory space ...\", TPU)";
    case OomMessageFormat::cupy:
      return "CuPy memory pool form (\"Out of memory allocating N bytes\")";
    case OomMessageFormat::cuda_library:
      return "CUDA library status that hides an allocation failure (cuBLAS, cuDNN, NCCL, ...)";
  }
  return "unknown";
}

std::optional<std::uint64_t> parse_printed_size(std::string_view text) {
  std::string s = normalise(text);
  std::size_t end = 0;
  auto v = size_at(s, 0, &end);
  if (!v || end != s.size()) return std::nullopt;
  return v->bytes;
}

namespace {

constexpr std::size_t npos = std::string_view::npos;

// PyTorch 0.4 and older (THC): "RuntimeError: cuda runtime error (2) : out of memory at
// /pytorch/aten/src/THC/generic/THCStorage.cu:58". cudaErrorMemoryAllocation is error 2; the
// caching allocator of that era printed no figures.
void read_thc(OomMessage& m) {
  m.format = OomMessageFormat::pytorch_thc;
  m.findings.push_back(
      "PyTorch 0.4 or older (THC): \"cuda runtime error (2) : out of memory\" carries no figures (no request, no "
      "device state)");
}

bool has_cuda_error(std::string_view s) {
  for (std::string_view p : {"CUDA error: out of memory", "HIP error: out of memory", "hipErrorOutOfMemory",
                             "CUDA_ERROR_OUT_OF_MEMORY", "cudaErrorMemoryAllocation", "CUDA out of memory"})
    if (find(s, p) != npos) return true;
  return false;
}

// Which form `s` is, read by that form's reader, in this order: PyTorch (MPS, cudaMallocAsync, the
// caching allocator), TensorFlow (BFC, op kernel), XLA (compile-time plan, run time), CuPy, the
// CUDA libraries' statuses, PyTorch 0.4, a bare CUDA error. m.format stays unknown when none is there.
void read_form(std::string_view s, OomMessage& m) {
  const std::size_t mps = find(s, "MPS backend out of memory");
  const std::size_t async = find(s, "would exceed allowed memory");
  const std::size_t tried = find(s, "Tried to allocate");
  const std::size_t bfc = find(s, "an out of memory trying to allocate");  // "ran" and "Ran"
  const std::size_t tensor = find(s, "OOM when allocating tensor");
  const std::size_t space = find(s, "Ran out of memory in memory space");
  const std::size_t cupy = find(s, "Out of memory allocating");
  const bool xla = find(s, "Out of memory while trying to allocate") != npos ||
                   find(s, "Attempting to allocate") != npos || find(s, "Failed to allocate request for") != npos ||
                   find(s, "would exceed memory (size=") != npos;
  if (mps != npos) {
    read_mps(s, mps, m);
  } else if (async != npos) {
    const std::size_t head = find(s, "Allocation on device");
    read_pytorch_async(s, head == npos ? async : head, m);
  } else if (tried != npos) {
    read_pytorch(s, tried, m);
  } else if (bfc != npos || find(s, "Limit:") != npos) {
    read_tensorflow(s, bfc, m);
  } else if (tensor != npos) {
    m.format = OomMessageFormat::tensorflow_tensor;
    read_tf_tensor(s, tensor, m);
  } else if (space != npos) {
    read_xla_memory_space(s, space, m);
  } else if (xla) {
    read_xla(s, m);
  } else if (cupy != npos) {
    read_cupy(s, cupy, m);
  } else if (read_cuda_library(s, m)) {
    // read: a library's status
  } else if (find(s, "runtime error (2) : out of memory") != npos) {
    read_thc(m);
  } else if (has_cuda_error(s)) {
    read_cuda_error(s, m);
  }
  if (m.format == OomMessageFormat::tensorflow_bfc || m.format == OomMessageFormat::tensorflow_tensor)
    read_root_errors(s, m);
}

// The settings and platform a text names, whatever its form.
void read_context(std::string_view s, OomMessage& m) {
  // ROCm builds of PyTorch print the CUDA layout with "HIP" in place of "CUDA" and name their own
  // variable (c10/hip, hipified from c10/cuda).
  if (m.format != OomMessageFormat::mps && (find(s, "HIP out of memory") != npos || find(s, "HIP error") != npos ||
                                            find(s, "hipError") != npos || find(s, "PYTORCH_HIP_ALLOC_CONF") != npos))
    m.platform = GpuPlatform::rocm;
  if (find(s, "expandable_segments:True") != npos) m.expandable_hint = true;
  if (find(s, "max_split_size_mb") != npos) m.max_split_hint = true;
}

constexpr const char* kLookedFor =
    "no known out-of-memory text: looked for PyTorch's \"Tried to allocate\", the cudaMallocAsync \"would exceed "
    "allowed memory\", TensorFlow's \"ran out of memory trying to allocate\" / \"Limit:\" / \"OOM when allocating "
    "tensor\", XLA's \"Out of memory while trying to allocate\" / \"Ran out of memory in memory space\", the MPS "
    "\"MPS backend out of memory\", CuPy's \"Out of memory allocating\", the CUDA libraries' "
    "CUBLAS_STATUS_ALLOC_FAILED / CUDNN_STATUS_NOT_INITIALIZED (and the like), PyTorch 0.4's \"cuda runtime error "
    "(2) : out of memory\", \"CUDA error: out of memory\"";

}  // namespace

OomMessage parse_oom_message(std::string_view raw) {
  OomMessage m;
  if (raw.size() > kMaxMessageBytes) {
    m.findings.push_back(fmt::format("input is {} bytes; only the first {} were read", raw.size(), kMaxMessageBytes));
    raw = raw.substr(0, kMaxMessageBytes);
  }
  const std::string norm = normalise(unwrap_pasted_text(raw));
  std::string_view s = norm;
  if (s.empty()) {
    m.findings.push_back("the message is empty");
    return m;
  }
  read_form(s, m);
  if (m.format == OomMessageFormat::unknown) {
    m.findings.push_back(kLookedFor);
    return m;
  }
  if (m.format == OomMessageFormat::cuda_error && !m.requested)
    m.findings.push_back("a CUDA out-of-memory error without figures (no request, no device state)");
  read_context(s, m);
  bool is_pytorch = m.format == OomMessageFormat::pytorch_cached || m.format == OomMessageFormat::pytorch_reserved ||
                    m.format == OomMessageFormat::pytorch_sentence;
  mark_truncated(s, is_pytorch, m);
  list_findings(m);
  return m;
}

namespace {

// Where each message of a log begins. A message is found by its head (the phrase every message of
// its form has once: "Tried to allocate", "would exceed allowed memory", "runtime error (2) : out
// of memory", "OOM when allocating tensor", "Out of memory allocating") and begins at the first
// opening phrase ("CUDA out of memory", "MPS backend out of memory", "RESOURCE_EXHAUSTED", ...)
// between the previous head and this one, close before it; else at the head itself.
std::vector<std::size_t> message_starts(std::string_view s) {
  constexpr std::string_view kHeads[] = {"Tried to allocate", "would exceed allowed memory",
                                         "runtime error (2) : out of memory", "OOM when allocating tensor",
                                         "Out of memory allocating"};
  constexpr std::string_view kOpenings[] = {
      "OutOfMemoryError",          "CUDA out of memory",    "Cuda out of memory", "HIP out of memory",
      "MPS backend out of memory", "Allocation on device",  "cuda runtime error", "RESOURCE_EXHAUSTED",
      "Resource exhausted",        "ResourceExhaustedError"};
  constexpr std::size_t kOpeningWindow = 320;  // an opening more than this before its head is another text
  std::vector<std::size_t> heads;
  for (std::string_view h : kHeads)
    for (std::size_t p = s.find(h); p != std::string_view::npos; p = s.find(h, p + h.size())) heads.push_back(p);
  std::sort(heads.begin(), heads.end());
  std::vector<std::size_t> starts;
  std::size_t floor = 0;
  for (std::size_t head : heads) {
    std::size_t lo = std::max(floor, head > kOpeningWindow ? head - kOpeningWindow : 0);
    std::size_t start = head;
    for (std::string_view o : kOpenings) {
      std::size_t q = s.find(o, lo);
      if (q != std::string_view::npos && q < start) start = q;
    }
    if (starts.empty() || start > starts.back()) starts.push_back(start);
    floor = head + 1;
  }
  return starts;
}

}  // namespace

std::vector<OomMessage> parse_oom_messages(std::string_view raw) {
  const std::string norm = normalise(unwrap_pasted_text(raw.substr(0, std::min(raw.size(), kMaxMessageBytes))));
  const std::vector<std::size_t> starts = message_starts(norm);
  if (starts.size() <= 1) return {parse_oom_message(raw)};
  std::vector<OomMessage> out;
  for (std::size_t i = 0; i < starts.size(); ++i) {
    std::size_t end = i + 1 < starts.size() ? starts[i + 1] : norm.size();
    // The text before the first message (the traceback's head) belongs to the first.
    std::size_t begin = i == 0 ? 0 : starts[i];
    out.push_back(parse_oom_message(std::string_view(norm).substr(begin, end - begin)));
  }
  if (raw.size() > kMaxMessageBytes)
    out.front().findings.push_back(
        fmt::format("input is {} bytes; only the first {} were read", raw.size(), kMaxMessageBytes));
  return out;
}

}  // namespace vramtrace
