// Reading a pasted out-of-memory message: every generation of PyTorch's CUDA OOM text, the
// cudaMallocAsync backend's, TensorFlow's BFC allocator and XLA/JAX. The reader only records what
// the text says; arithmetic and the verdict live in diagnosis.h.
//
// Message layouts are listed in docs/pytorch-allocator.md, "The OOM message across PyTorch
// versions".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vramtrace {

/// Which generation of message the text is.
enum class OomMessageFormat : std::uint8_t {
  unknown,           ///< no known OOM text found
  pytorch_cached,    ///< PyTorch <= 1.3: "... N free; N cached)" (cached = reserved - allocated)
  pytorch_reserved,  ///< PyTorch 1.4 to 2.0: "... N free; [N allowed; ]N reserved in total by PyTorch)"
  pytorch_sentence,  ///< PyTorch 2.1+: "GPU d has a total capacity of N of which N is free. ..."
  pytorch_exabyte,   ///< "Tried to allocate more than 1EB memory." (size sanity check)
  pytorch_async,     ///< backend:cudaMallocAsync: "Allocation on device d would exceed allowed memory."
  tensorflow_bfc,    ///< TensorFlow/XLA BFC allocator: "ran out of memory trying to allocate ..." / "Limit: ..."
  xla,               ///< XLA/JAX: "RESOURCE_EXHAUSTED: Out of memory while trying to allocate N bytes"
  cuda_error,        ///< a bare CUDA error ("CUDA error: out of memory") without figures
};

/// Stable name of a format ("pytorch_sentence", ...), used in --json. Never null.
const char* oom_message_format_name(OomMessageFormat f) noexcept;
/// One line describing a format for people ("PyTorch 2.1+ sentence form"). Never null.
const char* oom_message_format_description(OomMessageFormat f) noexcept;

/// A size as printed in the message and its value in bytes. Printed sizes carry two decimals
/// ("14.58 GiB"), so `bytes` is exact only to half a unit of the last printed digit.
struct PrintedSize {
  std::uint64_t bytes = 0;
  std::string text;  ///< as it appeared, e.g. "26.39 MiB", "802160640"
};

/// Another process named in a PyTorch 2.1+ message ("Process 1234 has 3.00 GiB memory in use").
struct ProcessUse {
  std::int64_t pid = 0;
  PrintedSize in_use;
};

/// Everything read from one message. Every optional is set only when the text contains the
/// figure; nothing is derived here.
struct OomMessage {
  OomMessageFormat format = OomMessageFormat::unknown;
  std::optional<int> device;                ///< "GPU 0", "device 1", "GPU_0_bfc"
  std::optional<PrintedSize> requested;     ///< "Tried to allocate" / "Requested" / "trying to allocate"
  std::optional<PrintedSize> rounded;       ///< TensorFlow "(rounded to N)"
  std::optional<PrintedSize> device_total;  ///< "total capacity" / "Device limit"
  std::optional<PrintedSize> device_free;   ///< "free" (cudaMemGetInfo) / "There are N free"
  std::optional<PrintedSize> allocated;     ///< "already allocated" / "is allocated by PyTorch" / "Currently allocated"
  std::optional<PrintedSize> reserved;      ///< "reserved in total by PyTorch" (total reserved)
  std::optional<PrintedSize> reserved_unallocated;  ///< "cached" (<= 1.3) / "reserved by PyTorch but unallocated"
  std::optional<PrintedSize> allowed;         ///< "N allowed" / "PyTorch limit (set by user-supplied memory fraction)"
  std::optional<PrintedSize> process_in_use;  ///< "Including non-PyTorch memory, this process has N memory in use"
  std::optional<PrintedSize> private_pools;   ///< "with N allocated in private pools (e.g., CUDA Graphs)"
  std::vector<ProcessUse> other_processes;    ///< "Process P has N memory in use"
  // TensorFlow BFC dump figures.
  std::string allocator_name;                         ///< "GPU_0_bfc"
  std::optional<PrintedSize> bfc_limit;               ///< "Limit:"
  std::optional<PrintedSize> bfc_in_use;              ///< "InUse:"
  std::optional<PrintedSize> bfc_max_in_use;          ///< "MaxInUse:"
  std::optional<PrintedSize> bfc_region_bytes;        ///< "total_region_allocated_bytes_:"
  std::optional<PrintedSize> bfc_largest_free_chunk;  ///< largest "Free at ... of size N" chunk
  std::optional<PrintedSize> bfc_free_chunks_bytes;   ///< sum of the "Free at" chunks
  std::uint64_t bfc_free_chunks = 0;                  ///< number of "Free at" chunk lines

  bool exceeds_1eb = false;      ///< "Tried to allocate more than 1EB memory"
  bool capacity_typo = false;    ///< "total capacty" (PyTorch 2.1)
  bool expandable_hint = false;  ///< the hint to set expandable_segments:True (printed even when it is on)
  bool max_split_hint = false;   ///< the hint to set max_split_size_mb
  bool truncated = false;        ///< the text stops before the figures its form always has
  std::string truncated_after;   ///< the last words before the cut, when truncated
  /// What the reader found and what it looked for in vain, in plain sentences.
  std::vector<std::string> findings;
};

/// Reads `text`, which may be a whole traceback or log: the OOM sentence is found inside it.
/// Whitespace and line breaks are normalised first. Never throws on any input (including empty
/// and binary text); a text without a known form returns format == unknown with findings saying
/// so. Thread-safe (no shared state).
OomMessage parse_oom_message(std::string_view text);

/// Parses a printed size: "26.39 MiB", "0 bytes", "765.00MiB", "1.54G", "3.50 GB", "802160640".
/// Binary units (KiB, MiB, GiB, TiB, PiB, EiB; also K/M/G/T and KB/MB/GB/TB, which these
/// frameworks print for binary multiples). Result rounded to the nearest byte. nullopt if not a
/// size or above 2^64.
std::optional<std::uint64_t> parse_printed_size(std::string_view text);

}  // namespace vramtrace
