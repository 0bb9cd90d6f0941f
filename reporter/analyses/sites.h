// Allocation sites: which code holds the memory. The blocks alive at a moment (the peak of
// allocated bytes, each OOM, the end), grouped by the user's line of the call stack that
// allocated them (TraceRecord::stack_id; PyTorch's snapshots record it as `frames`).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/trace_model.h"

namespace vramtrace {

/// What a frame's file is, for finding the user's line (see site_frames).
enum class FrameKind : std::uint8_t {
  user,     ///< the program's own code: any file the other kinds do not claim
  library,  ///< a Python package other than torch: under site-packages/ or dist-packages/
  torch,    ///< PyTorch itself: a file under a torch/ directory
  runtime,  ///< the Python standard library (lib/pythonX.Y/), or generated code: "<frozen ...>", "<string>"
  native,   ///< C and C++ frames: no file name, "??", or a .c/.cc/.cpp/.cxx/.cu/.h/.hh/.hpp/.cuh file
};

/// The kind of a native frame from the module its return address lay in (Frame::module, the path
/// as the traced process saw it; vramtrace traces record it). `native`: the framework the program
/// allocates through -- CUDA's libraries (libcuda, libcudart, cuBLAS, cuDNN, NCCL, ... and the
/// nvidia/ wheels that carry them), libtorch and libc10, CuPy, JAX and XLA, numba, Triton, and
/// libvramtrace itself. `runtime`: what runs every program -- the C and C++ runtime (libc, libm,
/// libstdc++, libgcc_s, ld.so), the Python interpreter (the python executable, libpython, its
/// lib-dynload/ modules, libffi). `library`: another package's extension module under
/// site-packages/ or dist-packages/. `user`: anything else (the program and its own libraries).
/// Files are matched by their name and by whole directory components, as frame_kind.
FrameKind module_kind(std::string_view module) noexcept;

/// Whether a native function name is the CUDA runtime linked statically into a program (nvcc's
/// default): "libcudart_static_<hash>" and "__cudart<n>" (its internal symbols) or a runtime API
/// name, "cuda" followed by a capital letter. A program's own function named so (cudaCheck) is
/// then taken for the runtime, and the site is its caller.
bool is_static_cuda_runtime(std::string_view name) noexcept;

/// The kind of a frame: by its module for a native frame of a vramtrace trace (module_kind, named
/// or not; a frame of the program's own module in the statically linked CUDA runtime,
/// is_static_cuda_runtime, is `native`), by its file name otherwise (frame_kind of the name).
FrameKind frame_kind(const Frame& f) noexcept;

/// The kind of a frame from its file name alone. Paths may be absolute or relative, as PyTorch
/// records them ("python3.12/site-packages/torch/nn/modules/module.py"); directories match whole
/// path components ("torch", "site-packages", "dist-packages", "lib/python3.12"), so that
/// "torch_utils.py" or "~/mytorch/" stay the user's. Under site-packages or dist-packages the
/// package after it decides (torch is torch, any other a library), whatever directories hold the
/// environment (/opt/torch/.venv/...); elsewhere a "torch" component means torch (a source
/// checkout).
FrameKind frame_kind(std::string_view filename) noexcept;

/// Where a stack's site is: indices into the stack (innermost first).
struct SiteFrames {
  static constexpr std::size_t none = static_cast<std::size_t>(-1);
  /// The user's line: the innermost frame whose kind is user (frame_kind(const Frame&)); when the
  /// stack has Python frames, only a Python frame counts (a program's Python line is what its
  /// author reads, not the C function below it). When every frame is framework (all but user),
  /// the innermost frame that is not native (a Python frame); when all are native (the autograd
  /// engine's thread runs the backward pass without Python frames; a framework that released the
  /// GIL), the innermost autograd node (torch::autograd::generated::...Backward0::apply), else,
  /// for native frames with modules, the outermost framework frame below the first runtime frame
  /// (where the interpreter or the C runtime entered the framework: the framework's function the
  /// program called), else frame 0. `none` only for an empty stack.
  std::size_t user = none;
  /// The framework line below it (between the innermost frame and the user's frame) that says
  /// what the user's line called into: the innermost library frame (e.g. transformers'
  /// modeling_gpt2.py line that made the tensor), else the innermost torch frame (the torch
  /// Python code nearest to the allocation, e.g. nn/modules/linear.py's `forward`). `none` when
  /// there is no such frame. For a user frame of native code (a module frame), the framework
  /// frame right below it: the function of the framework the program's code called (cudaMalloc's
  /// frame in libcudart, say); for the framework entry frame of an all-framework native stack,
  /// frame 0 (the frame that allocated).
  std::size_t via = none;
  /// When `via` is a library frame: the nearest library frame outward from it (towards the user's
  /// line) in another file, the model code that called a helper (modeling_gpt2.py's line above
  /// transformers' activations.py or pytorch_utils.py). `none` otherwise.
  std::size_t caller = none;
};

/// The grouping rule of every sites table (docs/reports.md, "Allocation sites").
SiteFrames site_frames(const std::vector<Frame>& stack);

/// "file:line in name" ("file in name" when the line is 0); C++ names without their parameter
/// list; a file under site-packages/ or dist-packages/ from its package on (transformers/...).
std::string frame_label(const Frame& f);

/// One framework line below a site's user line, and what was allocated through it.
struct SiteVia {
  std::string label;  ///< frame_label; "" for stacks with no framework line below the user's line
  std::uint64_t bytes = 0;
  std::uint64_t blocks = 0;
};

/// One user line and the blocks alive that it allocated.
struct Site {
  std::string label;  ///< frame_label of the user's frame
  std::uint64_t bytes = 0;
  std::uint64_t blocks = 0;
  std::vector<SiteVia> via;  ///< by bytes, largest first
  /// The full stack of the stack that gave the most bytes to this site, from the innermost frame
  /// up to and including the user's frame (views into TraceModel::stacks).
  std::vector<Frame> frames;
  /// That stack's id in the trace's StackTable (its whole stack, callers of the user's line
  /// included: what the report shows on hover); of stacks with equal bytes, the first in the
  /// state's list.
  std::uint32_t stack = 0;
  std::uint64_t stacks = 0;  ///< distinct stacks grouped into this site
};

/// One site's bytes and blocks at one moment, for every site of the state (not only the top N):
/// what `diff` compares between two runs.
struct SiteBytes {
  std::string label;  ///< frame_label of the user's frame, as Site::label
  std::uint64_t bytes = 0;
  std::uint64_t blocks = 0;
  bool operator==(const SiteBytes&) const = default;
};

/// The sites of one state.
struct SitesAt {
  std::vector<Site> sites;        ///< top N by bytes, largest first (ties by label)
  std::uint64_t total_bytes = 0;  ///< allocated bytes of the state (with or without a stack)
  std::uint64_t total_blocks = 0;
  std::uint64_t other_sites = 0;  ///< sites beyond the top N, and their bytes and blocks
  std::uint64_t other_bytes = 0;
  std::uint64_t other_blocks = 0;
  std::uint64_t no_stack_bytes = 0;  ///< blocks whose allocation recorded no stack
  std::uint64_t no_stack_blocks = 0;
  /// Of the totals, blocks that only the recorded end state holds (allocated before the history
  /// began; TraceModel::recorded_end_stacks); 0 except at the end.
  std::uint64_t end_state_only_bytes = 0;
  std::uint64_t end_state_only_blocks = 0;
  /// Every site of the state, the top N included, largest first (ties by label). Its bytes sum
  /// to total_bytes - no_stack_bytes.
  std::vector<SiteBytes> all;
  bool empty() const noexcept { return sites.empty(); }
};

/// Groups `stacks` (one state's StackBytes) by site_frames' user line; keeps the top `top_n`.
SitesAt sites_of(const std::vector<StackBytes>& stacks, const StackTable& table, std::size_t top_n = 10);

/// The sites of each device of a trace: at the peak of allocated bytes, at each OOM whose layout
/// the model kept (OomRecord order), at the end (with the blocks of the recorded end state that the
/// history does not cover, TraceModel::recorded_end_stacks).
struct DeviceSites {
  std::int32_t device = 0;
  SitesAt at_peak;
  std::vector<SitesAt> at_oom;  ///< one per DeviceModel::ooms entry (empty SitesAt when not kept)
  SitesAt at_end;
};

/// The site of one stack (site_frames' user frame, with its framework line): "" when `stack` is
/// 0 or unknown. For a single allocation, e.g. the request an OOM refused.
std::string stack_site_label(const StackTable& table, std::uint32_t stack);

/// Empty when the trace records no stacks (TraceModel::stacks null). Devices in id order.
std::vector<DeviceSites> trace_sites(const TraceModel& m, std::size_t top_n = 10);

/// Text table: a title line ("Top allocation sites at the peak (device 0):") and one line per
/// site, its framework lines below it (up to 3). "" when `s` has no site.
std::string render_sites_text(const SitesAt& s, const std::string& title, const std::string& indent = "");

/// JSON of one state's sites: {"total_bytes", "total_blocks", "no_stack_bytes", "no_stack_blocks",
/// "other_sites", "other_bytes", "other_blocks", "end_state_only_bytes", "end_state_only_blocks", "sites": [{"site",
/// "bytes", "blocks", "via": [{"site", "bytes", "blocks"}], "frames": [{"filename", "line", "name", "kind"}]}],
/// "all_sites": [{"site", "bytes", "blocks"}] (SitesAt::all)}.
nlohmann::json sites_json(const SitesAt& s);

/// Reads SitesAt::all back from a sites_json object's "all_sites" (a `summary --json` document
/// given to diff). nullopt when `state` is not an object with such an array (a document written
/// before it existed, or a state that was not captured: null); throws nlohmann::json exceptions
/// for entries of the wrong type.
std::optional<std::vector<SiteBytes>> site_bytes_from_json(const nlohmann::json& state);

/// The "sites" object of a trace in `summary --json`: {"top_n", "devices": [{"device", "at_peak",
/// "at_end"}]}, or {"devices": [], "reason": "..."} when the trace records no stacks.
nlohmann::json trace_sites_json(const TraceModel& m, const std::vector<DeviceSites>& sites, std::size_t top_n = 10);

const char* frame_kind_name(FrameKind k) noexcept;

}  // namespace vramtrace
