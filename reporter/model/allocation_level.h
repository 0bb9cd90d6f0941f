// Whose requests a trace's allocations are: the program's own (tensors, buffers), or the
// segments of a caching allocator that ran inside the program above the shim.
#pragma once

#include <cstdint>
#include <string>

namespace vramtrace {

struct TraceModel;  // model/trace_model.h, which holds a finding of this file

/// What a trace's `alloc` entries (and the device memory the shim forwarded) stand for.
enum class AllocationLevel : std::uint8_t {
  /// The program's own requests: PyTorch's allocator history and snapshots (its tensors), or the
  /// shim's trace of a program that asks the driver itself (plain CUDA), or of PyTorch with its
  /// cache switched off (`vramtrace run --tensors`). A replay of them through a caching allocator
  /// is a replay of what that allocator would be asked.
  requests,
  /// The segments of a caching allocator inside the program (PyTorch's, XLA's, CuPy's, RMM's):
  /// the shim saw that allocator ask the driver for memory, not what the program asked the
  /// allocator for. What that allocator held free inside its segments is not in the trace.
  allocator_segments,
};

/// The level of a trace and what shows it.
struct AllocationLevelFinding {
  AllocationLevel level = AllocationLevel::requests;
  /// allocator_segments: whose allocator, in words ("PyTorch's caching allocator"); empty otherwise.
  std::string allocator;
  /// Why, in one clause for a report ("its allocations' call stacks pass through libc10_cuda.so").
  std::string evidence;
  /// The allocator is PyTorch's: its tensor level can be recorded (`vramtrace run`).
  bool pytorch = false;
};

/// Note [the level of a trace]
/// The shim sits below every allocator in the process. Under a framework with a caching
/// allocator of its own, each event of the shim's trace is one of that allocator's segments
/// (PyTorch asks cudaMalloc for 2 MiB, 20 MiB or a 2 MiB multiple and splits it into tensors
/// itself), so a replay of those events through PyTorch's rules would cache PyTorch's segments a
/// second time and model nothing that happened, and the trace cannot say whether the framework's
/// cache was fragmented. The rule, for a vramtrace trace (PyTorch's own formats are always
/// `requests`):
///  1. the header says PyTorch's cache was off (`pytorch_no_cuda_memory_caching` set to anything
///     but "0", as `vramtrace run --tensors` sets it): requests;
///  2. a call stack of an allocation passes through a caching allocator's library (libc10_cuda:
///     PyTorch; xla_extension, libjax, jaxlib: XLA; cupy's memory module; librmm; TensorFlow's
///     framework library): allocator_segments, named after it; for PyTorch only when at least
///     75 % of the requests are whole multiples of 2 MiB (a trace written before the header
///     recorded rule 1's setting, under --tensors, asks for tensor sizes; libraries that ask the
///     driver themselves, NCCL or cuDNN say, add some requests of other sizes beside the segments);
///  3. no stacks, but the program is Python (an interpreter, or a launcher of one: torchrun,
///     accelerate, `env python3`, ...) and at least 75 % of its requests are whole multiples of
///     2 MiB: allocator_segments (PyTorch's, by its segment sizes; every framework with a caching
///     allocator is used from Python, and a Python program's own cudaMalloc calls rarely have
///     such sizes);
///  4. otherwise requests.
/// A Python program that allocates with cudaMalloc itself, with stacks off, may be taken for
/// PyTorch by rule 3 only if most of its requests have segment sizes; the reports then withhold
/// verdicts they could have given, rather than give ones the trace cannot support. Pure.
AllocationLevelFinding allocation_level(const TraceModel& m);

}  // namespace vramtrace
