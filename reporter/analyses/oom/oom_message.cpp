// Reader of out-of-memory messages. Hand-written phrase search rather than regular expressions:
// messages can be whole logs (TensorFlow dumps thousands of chunk lines), and std::regex recurses
// per character on long inputs.
#include "analyses/oom/oom_message.h"

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

std::optional<std::uint64_t> to_bytes(std::string_view number, std::string_view unit) {
  auto mult = unit_multiplier(unit);
  if (!mult || number.empty()) return std::nullopt;
  double v = 0;
  try {
    v = std::stod(std::string(number));
  } catch (...) {
    return std::nullopt;
  }
  double bytes = std::round(v * *mult);
  if (!(bytes >= 0) || bytes >= 18446744073709551616.0) return std::nullopt;
  return static_cast<std::uint64_t>(bytes);
}

/// A size token starting at `pos`: number, optional spaces, optional unit. Sets `end`.
std::optional<PrintedSize> size_at(std::string_view s, std::size_t pos, std::size_t* end = nullptr) {
  std::size_t i = pos;
  while (i < s.size() && s[i] == ' ') ++i;
  std::size_t num_begin = i;
  while (i < s.size() && (is_digit(s[i]) || (s[i] == '.' && i > num_begin))) ++i;
  if (i == num_begin) return std::nullopt;
  std::size_t num_end = i;
  while (num_end > num_begin && s[num_end - 1] == '.') --num_end;  // "1.54G." ends a sentence
  std::size_t j = i;
  while (j < s.size() && s[j] == ' ') ++j;
  std::size_t unit_begin = j;
  while (j < s.size() && is_alpha(s[j])) ++j;
  std::string_view unit = s.substr(unit_begin, j - unit_begin);
  std::size_t token_end = j;
  if (!unit_multiplier(unit)) {  // a following word that is not a unit: plain number of bytes
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
std::optional<PrintedSize> size_before(std::string_view s, std::size_t pos) {
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
  return std::string(unit_multiplier(s.substr(j, k - j)) ? s.substr(pos, k - pos) : s.substr(pos, i - pos));
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

std::optional<PrintedSize> size_before_phrase(std::string_view s, std::string_view phrase, std::size_t from = 0) {
  std::size_t p = find(s, phrase, from);
  if (p == std::string_view::npos) return std::nullopt;
  return size_before(s, p);
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

void found(OomMessage& m, const char* what, const std::optional<PrintedSize>& v) {
  if (v) m.findings.push_back(fmt::format("{}: \"{}\"", what, v->text));
}

void missing(OomMessage& m, const char* what) { m.findings.push_back(fmt::format("{}: not in the message", what)); }

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
  m.device_total = size_before_phrase(s, " total capacity;", start);
  m.allocated = size_before_phrase(s, " already allocated;", start);
  m.device_free = size_before_phrase(s, " free;", start);
  m.allowed = size_before_phrase(s, " allowed;", start);
  if (find(s, " reserved in total by PyTorch", start) != std::string_view::npos) {
    m.format = OomMessageFormat::pytorch_reserved;
    m.reserved = size_before_phrase(s, " reserved in total by PyTorch", start);
  } else if (find(s, " cached)", start) != std::string_view::npos ||
             find(s, " cached", start) != std::string_view::npos) {
    m.format = OomMessageFormat::pytorch_cached;
    m.reserved_unallocated = size_before_phrase(s, " cached", start);
  } else {
    m.format = OomMessageFormat::pytorch_reserved;  // best guess for the layout; figures say what is there
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
  m.device_total = size_after_phrase(s, m.capacity_typo ? "total capacty of" : "total capacity of", start);
  m.device_free = size_after_phrase(s, "of which", start);
  m.process_in_use = size_after_phrase(s, "this process has", start);
  // Other processes: "Process 1234 has 3.00 GiB memory in use."
  for (std::size_t q = find(s, "Process ", start); q != std::string_view::npos; q = find(s, "Process ", q + 8)) {
    auto pid = int_at(s, q + 8);
    if (!pid) continue;
    std::size_t r = q + 8;
    while (r < s.size() && (is_digit(s[r]) || s[r] == ' ')) ++r;
    if (s.substr(r, 4) != "has ") continue;
    auto use = size_at(s, r + 4);
    if (use) m.other_processes.push_back({*pid, *use});
  }
  m.allowed = size_before_phrase(s, " allowed;", start);
  m.allocated = size_after_phrase(s, "Of the allocated memory", start);
  m.private_pools = size_before_phrase(s, " allocated in private pools", start);
  if (m.private_pools) {
    // the size follows "with "
    std::size_t w = find(s, "with ", start);
    std::size_t q = find(s, " allocated in private pools", start);
    if (w != std::string_view::npos && q != std::string_view::npos && w < q) m.private_pools = size_at(s, w + 5);
  }
  m.reserved_unallocated = size_before_phrase(s, " is reserved by PyTorch but unallocated", start);
}

void read_pytorch_async(std::string_view s, std::size_t start, OomMessage& m) {
  m.format = OomMessageFormat::pytorch_async;
  if (auto d = int_after_phrase(s, "Allocation on device ", start)) m.device = static_cast<int>(*d);
  m.allocated = size_after_phrase(s, "Currently allocated", start);
  m.requested = size_after_phrase(s, "Requested", start);
  m.device_total = size_after_phrase(s, "Device limit", start);
  m.device_free = size_after_phrase(s, "Free (according to CUDA)", start);
  m.allowed = size_after_phrase(s, "PyTorch limit (set by user-supplied memory fraction)", start);
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
  m.allocated = size_after_phrase(s, "MPS allocated", at);
  m.mps_other = size_after_phrase(s, "other allocations", at);
  m.allowed = size_after_phrase(s, "max allowed", at);
  m.requested = size_after_phrase(s, "Tried to allocate", at);
}

// PyTorch's caching allocator: the form is told by what follows "Tried to allocate" (at `tried`).
void read_pytorch(std::string_view s, std::size_t tried, OomMessage& m) {
  std::size_t after = tried + 17;
  if (find(s, "more than 1EB", after) == after + 1) {
    m.format = OomMessageFormat::pytorch_exabyte;
    m.exceeds_1eb = true;
    m.findings.push_back("the request is more than 1 EiB (PyTorch's size check), so no figures follow");
  } else {
    std::size_t end = 0;
    m.requested = size_at(s, after, &end);
    if (!m.requested) m.unreadable_requested = printed_figure(s, after);
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

// TensorFlow's BFC allocator: the request after "ran out of memory trying to allocate" (at `bfc`,
// npos when only its dump is there), then the dump.
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
}

// XLA/JAX: the request after one of its three phrases (at `xla`, `xla2`, `xla3`; npos when absent).
void read_xla(std::string_view s, std::size_t xla, std::size_t xla2, std::size_t xla3, OomMessage& m) {
  m.format = OomMessageFormat::xla;
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
  if (xla2 != std::string_view::npos) m.device_free = size_after_phrase(s, "There are", xla2);
  read_bfc_dump(s, m);  // XLA on GPU uses the BFC allocator and often prints its dump too
}

// A PyTorch message that has a request but lost the figures its form always carries.
void mark_truncated(std::string_view s, bool is_pytorch, OomMessage& m) {
  if (is_pytorch && !m.truncated) {
    bool complete = m.format == OomMessageFormat::pytorch_sentence
                        ? m.reserved_unallocated.has_value()
                        : (m.reserved.has_value() || m.reserved_unallocated.has_value());
    if (!complete) m.truncated = true;
  }
  if (m.format == OomMessageFormat::mps && !m.truncated && !m.allowed) m.truncated = true;
  if (m.truncated) m.truncated_after = last_words(s);
}

// The findings: each figure read, what its form should carry and does not, and the caveats.
void list_findings(bool is_pytorch, OomMessage& m) {
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
  if (!m.requested && !m.exceeds_1eb) missing(m, "request");
  if (is_pytorch || m.format == OomMessageFormat::pytorch_async) {
    if (!m.device_total) missing(m, "device total");
    if (!m.device_free) missing(m, "device free");
    if (!m.allocated) missing(m, "allocated");
  }
  if (m.format == OomMessageFormat::mps) {
    if (!m.allocated) missing(m, "MPS allocated");
    if (!m.allowed) missing(m, "max allowed");
  }
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

OomMessage parse_oom_message(std::string_view raw) {
  OomMessage m;
  if (raw.size() > kMaxMessageBytes) {
    m.findings.push_back(fmt::format("input is {} bytes; only the first {} were read", raw.size(), kMaxMessageBytes));
    raw = raw.substr(0, kMaxMessageBytes);
  }
  const std::string norm = normalise(raw);
  std::string_view s = norm;
  if (s.empty()) {
    m.findings.push_back("the message is empty");
    return m;
  }

  // PyTorch: everything starts at "Tried to allocate" (the prefix "CUDA out of memory." may be
  // wrapped differently by each exception type).
  std::size_t tried = find(s, "Tried to allocate");
  std::size_t async = find(s, "would exceed allowed memory");
  std::size_t bfc = find(s, "an out of memory trying to allocate");  // "ran" and "Ran"
  std::size_t bfc_limit = find(s, "Limit:");
  std::size_t xla = find(s, "Out of memory while trying to allocate");
  std::size_t xla2 = find(s, "Attempting to allocate");
  std::size_t xla3 = find(s, "Failed to allocate request for");

  std::size_t mps = find(s, "MPS backend out of memory");
  std::size_t thc = find(s, "runtime error (2) : out of memory");
  if (mps != std::string_view::npos) {
    read_mps(s, mps, m);
  } else if (async != std::string_view::npos) {
    read_pytorch_async(
        s, find(s, "Allocation on device") == std::string_view::npos ? async : find(s, "Allocation on device"), m);
  } else if (tried != std::string_view::npos) {
    read_pytorch(s, tried, m);
  } else if (bfc != std::string_view::npos || bfc_limit != std::string_view::npos) {
    read_tensorflow(s, bfc, m);
  } else if (xla != std::string_view::npos || xla2 != std::string_view::npos || xla3 != std::string_view::npos) {
    read_xla(s, xla, xla2, xla3, m);
  } else if (thc != std::string_view::npos) {
    // PyTorch 0.4 and older (THC): "RuntimeError: cuda runtime error (2) : out of memory at
    // /pytorch/aten/src/THC/generic/THCStorage.cu:58". cudaErrorMemoryAllocation is error 2; the
    // caching allocator of that era printed no figures.
    m.format = OomMessageFormat::pytorch_thc;
    m.findings.push_back(
        "PyTorch 0.4 or older (THC): \"cuda runtime error (2) : out of memory\" carries no figures (no request, no "
        "device state)");
  } else if (find(s, "CUDA error: out of memory") != std::string_view::npos ||
             find(s, "HIP error: out of memory") != std::string_view::npos ||
             find(s, "hipErrorOutOfMemory") != std::string_view::npos ||
             find(s, "CUDA_ERROR_OUT_OF_MEMORY") != std::string_view::npos ||
             find(s, "cudaErrorMemoryAllocation") != std::string_view::npos ||
             find(s, "CUDA out of memory") != std::string_view::npos) {
    m.format = OomMessageFormat::cuda_error;
    m.findings.push_back("a CUDA out-of-memory error without figures (no request, no device state)");
  }

  if (m.format == OomMessageFormat::unknown) {
    m.findings.push_back(
        "no known out-of-memory text: looked for PyTorch's \"Tried to allocate\", the cudaMallocAsync "
        "\"would exceed allowed memory\", TensorFlow's \"ran out of memory trying to allocate\" / \"Limit:\", "
        "XLA's \"Out of memory while trying to allocate\", the MPS \"MPS backend out of memory\", PyTorch 0.4's "
        "\"cuda runtime error (2) : out of memory\"");
    return m;
  }
  // ROCm builds of PyTorch print the CUDA layout with "HIP" in place of "CUDA" and name their own
  // variable (c10/hip, hipified from c10/cuda).
  if (m.format != OomMessageFormat::mps &&
      (find(s, "HIP out of memory") != std::string_view::npos || find(s, "HIP error") != std::string_view::npos ||
       find(s, "hipError") != std::string_view::npos || find(s, "PYTORCH_HIP_ALLOC_CONF") != std::string_view::npos))
    m.platform = GpuPlatform::rocm;

  if (find(s, "expandable_segments:True") != std::string_view::npos) m.expandable_hint = true;
  if (find(s, "max_split_size_mb") != std::string_view::npos) m.max_split_hint = true;

  bool is_pytorch = m.format == OomMessageFormat::pytorch_cached || m.format == OomMessageFormat::pytorch_reserved ||
                    m.format == OomMessageFormat::pytorch_sentence;
  mark_truncated(s, is_pytorch, m);
  list_findings(is_pytorch, m);
  return m;
}

namespace {

// Where each message of a log begins. A message is found by its head (the phrase every message of
// its form has once: "Tried to allocate", "would exceed allowed memory", "runtime error (2) : out
// of memory") and begins at the first opening phrase ("CUDA out of memory", "MPS backend out of
// memory", ...) between the previous head and this one, close before it; else at the head itself.
std::vector<std::size_t> message_starts(std::string_view s) {
  constexpr std::string_view kHeads[] = {"Tried to allocate", "would exceed allowed memory",
                                         "runtime error (2) : out of memory"};
  constexpr std::string_view kOpenings[] = {"OutOfMemoryError",  "CUDA out of memory",        "Cuda out of memory",
                                            "HIP out of memory", "MPS backend out of memory", "Allocation on device",
                                            "cuda runtime error"};
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
  const std::string norm = normalise(raw.substr(0, std::min(raw.size(), kMaxMessageBytes)));
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
