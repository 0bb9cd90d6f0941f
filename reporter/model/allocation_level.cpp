#include "model/allocation_level.h"

#include <fmt/format.h>

#include <array>
#include <string_view>

#include "model/trace_model.h"

namespace vramtrace {

namespace {

// A caching allocator's library, recognised by a part of its file name.
struct KnownAllocator {
  std::string_view module_part;
  std::string_view name;
  bool pytorch;
};

constexpr std::array<KnownAllocator, 7> kAllocators{{
    {"libc10_cuda", "PyTorch's caching allocator", true},
    {"libc10_hip", "PyTorch's caching allocator", true},
    {"xla_extension", "XLA's allocator (JAX)", false},
    {"libjax", "XLA's allocator (JAX)", false},
    {"jaxlib", "XLA's allocator (JAX)", false},
    {"librmm", "RMM's memory resource", false},
    {"libtensorflow_framework", "TensorFlow's BFC allocator", false},
}};

std::string_view base_name(std::string_view path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// The allocator whose library a call stack of the trace passes through, or null.
const KnownAllocator* allocator_in_stacks(const TraceModel& m, std::string_view& module) {
  if (!m.stacks) return nullptr;
  for (std::uint32_t id = 1; id <= m.stacks->size(); ++id) {
    const auto* frames = m.stacks->get(id);
    if (!frames) continue;
    for (const Frame& f : *frames) {
      if (f.module.empty()) continue;
      const std::string_view base = base_name(f.module);
      for (const KnownAllocator& a : kAllocators)
        if (base.find(a.module_part) != std::string_view::npos) {
          module = base;
          return &a;
        }
      // CuPy's memory pool is a Cython module of its own (cupy/cuda/memory.cpython-*.so).
      if (f.module.find("cupy/cuda/memory") != std::string_view::npos) {
        static constexpr KnownAllocator kCupy{"cupy", "CuPy's memory pool", false};
        module = base;
        return &kCupy;
      }
    }
  }
  return nullptr;
}

// A Python interpreter, or a launcher that runs one (torchrun and the like, `env python3`, `uv
// run`), among the first words of the command line: every framework with a caching allocator of
// its own is used from Python.
bool python_program(const TraceModel& m) {
  static constexpr std::array<std::string_view, 10> kLaunchers{
      "torchrun", "accelerate", "deepspeed", "pytest", "ipython", "jupyter", "lightning", "composer", "uv", "poetry"};
  std::string_view cmd = m.header.workload;
  for (int word = 0; word < 3 && !cmd.empty(); ++word) {
    const std::string_view w = cmd.substr(0, cmd.find(' '));
    const std::string_view base = base_name(w);
    if (base.rfind("python", 0) == 0) return true;
    for (std::string_view l : kLaunchers)
      if (base == l) return true;
    cmd = w.size() < cmd.size() ? cmd.substr(w.size() + 1) : std::string_view{};
  }
  return false;
}

}  // namespace

AllocationLevelFinding allocation_level(const TraceModel& m) {
  AllocationLevelFinding out;
  if (m.header.format != "vramtrace") return out;
  // Rule 1: PyTorch's cache switched off: the shim saw every tensor.
  for (const auto& [key, value] : m.header.tool_settings)
    if (key == "pytorch_no_cuda_memory_caching" && value != "0") {
      out.evidence = "PyTorch's cache was off (PYTORCH_NO_CUDA_MEMORY_CACHING): the shim saw every tensor";
      return out;
    }
  RequestSizes sizes;
  for (const DeviceModel& d : m.devices) sizes.merge(d.request_sizes);
  // Mostly requests of 2 MiB multiples: libraries that ask the driver themselves (NCCL, cuDNN, a
  // CUDA extension) add some requests of their own sizes beside PyTorch's segments.
  const bool segment_sizes = sizes.requests > 0 && sizes.multiples_of_2mib * 4 >= sizes.requests * 3;
  // Rule 2: a caching allocator's library on an allocation's call stack.
  std::string_view module;
  if (const KnownAllocator* a = allocator_in_stacks(m, module)) {
    // PyTorch's segments are whole multiples of 2 MiB; a request that is not one came from
    // PyTorch with its cache off (a trace written before the header said so).
    if (a->pytorch && sizes.requests > 0 && !segment_sizes) {
      out.evidence = "its requests are not PyTorch's segment sizes: PyTorch's cache was off";
      return out;
    }
    out.level = AllocationLevel::allocator_segments;
    out.allocator = std::string(a->name);
    out.pytorch = a->pytorch;
    out.evidence = fmt::format("its allocations' call stacks pass through {}", module);
    return out;
  }
  // Rule 3: no stacks to tell, but a Python program that asks for segment sizes.
  if (!m.stacks && python_program(m) && segment_sizes) {
    out.level = AllocationLevel::allocator_segments;
    out.allocator = "PyTorch's caching allocator";
    out.pytorch = true;
    out.evidence = fmt::format("a Python program whose allocations are whole multiples of 2 MiB ({} of {}{})",
                               sizes.multiples_of_2mib, sizes.requests,
                               sizes.small_segments + sizes.large_segments
                                   ? fmt::format(", {} of them PyTorch's 2 MiB or 20 MiB segments",
                                                 sizes.small_segments + sizes.large_segments)
                                   : std::string());
  }
  return out;
}

}  // namespace vramtrace
