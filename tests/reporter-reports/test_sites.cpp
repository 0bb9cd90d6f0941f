// Allocation sites: the grouping rule, the snapshot reader's stacks, the model's bytes per stack,
// and the sites tables of summary and oom.
#include <catch2/catch.hpp>
#include <fstream>

#include "analyses/oom/oom_report.h"
#include "analyses/sites.h"
#include "analyses/summary.h"
#include "model/load_models.h"
#include "readers/open_trace.h"
#include "vector_reader.h"

using namespace vramtrace;

namespace {

const std::string kData = VRAMTRACE_TEST_DATA_DIR;
const std::string kSites = kData + "/pickle/sites.snapshot.pickle";
constexpr std::uint64_t MiB = 1 << 20;

Frame fr(std::string_view file, std::uint32_t line, std::string_view name) { return {file, line, name}; }

std::string label(const std::vector<Frame>& st, std::size_t i) {
  return i == SiteFrames::none ? "none" : frame_label(st[i]);
}

}  // namespace

TEST_CASE("sites: frame kinds from file names", "[sites]") {
  CHECK(frame_kind("train.py") == FrameKind::user);
  CHECK(frame_kind("/home/me/project/model.py") == FrameKind::user);
  CHECK(frame_kind("/home/me/torch_utils.py") == FrameKind::user);  // whole components only
  CHECK(frame_kind("/home/me/mytorch/x.py") == FrameKind::user);
  CHECK(frame_kind("python3.12/site-packages/torch/nn/modules/module.py") == FrameKind::torch);
  CHECK(frame_kind("/opt/pytorch/torch/nn/functional.py") == FrameKind::torch);
  CHECK(frame_kind("/venv/lib/python3.12/site-packages/transformers/models/gpt2/modeling_gpt2.py") ==
        FrameKind::library);
  CHECK(frame_kind("/usr/lib/python3/dist-packages/numpy/core/numeric.py") == FrameKind::library);
  CHECK(frame_kind("/usr/lib/python3.12/contextlib.py") == FrameKind::runtime);
  CHECK(frame_kind("/usr/lib64/python3.13t/runpy.py") == FrameKind::runtime);
  // A virtual environment in a directory named torch: the package decides, not the path.
  CHECK(frame_kind("/opt/torch/.venv/lib/python3.12/site-packages/transformers/activations.py") == FrameKind::library);
  CHECK(frame_kind("/opt/torch/.venv/lib/python3.12/site-packages/torch/nn/modules/module.py") == FrameKind::torch);
  CHECK(frame_kind("/opt/torch/.venv/lib/python3.12/site-packages/torchvision/ops/boxes.py") == FrameKind::library);
  CHECK(frame_kind("/home/me/pytorch/torch/nn/modules/module.py") == FrameKind::torch);
  CHECK(frame_kind("<frozen runpy>") == FrameKind::runtime);
  CHECK(frame_kind("<string>") == FrameKind::runtime);
  CHECK(frame_kind("??") == FrameKind::native);
  CHECK(frame_kind("") == FrameKind::native);
  CHECK(frame_kind("CUDACachingAllocator.cpp") == FrameKind::native);
  CHECK(frame_kind("/src/c10/util/Exception.h") == FrameKind::native);
  CHECK(frame_kind("kernel.cu") == FrameKind::native);
}

TEST_CASE("sites: the user's line and the framework line below it", "[sites]") {
  const std::string sp = "/venv/lib/python3.12/site-packages/";
  // The frames' views need strings that outlive them.
  const std::string functional = sp + "torch/nn/functional.py",
                    gpt2_py = sp + "transformers/models/gpt2/modeling_gpt2.py",
                    module = sp + "torch/nn/modules/module.py";
  std::vector<Frame> gpt2 = {fr("??", 0, "torch::unwind::unwind()"),
                             fr("CUDACachingAllocator.cpp", 0, "c10::cuda::malloc(unsigned long)"),
                             fr(functional, 2345, "linear"),
                             fr(gpt2_py, 200, "forward"),
                             fr(module, 1779, "_wrapped_call_impl"),
                             fr(gpt2_py, 900, "forward"),
                             fr("train.py", 42, "step"),
                             fr("<frozen runpy>", 88, "_run_code")};
  SiteFrames s = site_frames(gpt2);
  CHECK(label(gpt2, s.user) == "train.py:42 in step");
  // The innermost library frame, not torch's and not the outermost transformers frame.
  CHECK(label(gpt2, s.via) == "transformers/models/gpt2/modeling_gpt2.py:200 in forward");  // from its package on

  std::vector<Frame> plain = {
      fr("??", 0, "f()"), fr("python3.12/site-packages/torch/nn/modules/linear.py", 125, "forward"),
      fr("python3.12/site-packages/torch/nn/modules/module.py", 1779, "_call_impl"), fr("snap.py", 10, "<module>")};
  s = site_frames(plain);
  CHECK(label(plain, s.user) == "snap.py:10 in <module>");
  CHECK(label(plain, s.via) == "torch/nn/modules/linear.py:125 in forward");
  CHECK(s.caller == SiteFrames::none);  // torch frames only: no library caller

  // A library helper (transformers' activations.py) called from the model's code: the model's
  // line is named too, the nearest library frame of another file outward.
  const std::string activations = sp + "transformers/activations.py";
  const std::vector<Frame> helper{fr(functional, 1700, "gelu"),   fr(activations, 66, "forward"),
                                  fr(module, 1779, "_call_impl"), fr(activations, 60, "x"),
                                  fr(gpt2_py, 290, "forward"),    fr(gpt2_py, 400, "forward"),
                                  fr("train.py", 71, "main")};
  s = site_frames(helper);
  CHECK(label(helper, s.via) == "transformers/activations.py:66 in forward");
  CHECK(label(helper, s.caller) == "transformers/models/gpt2/modeling_gpt2.py:290 in forward");
  CHECK(label(helper, s.user) == "train.py:71 in main");

  // All framework: the innermost Python frame; nothing below it.
  std::vector<Frame> framework = {fr("??", 0, "g()"),
                                  fr("/usr/lib/python3.12/site-packages/torch/_tensor.py", 631, "backward"),
                                  fr("<string>", 1, "<module>")};
  s = site_frames(framework);
  CHECK(label(framework, s.user) == "torch/_tensor.py:631 in backward");
  CHECK(s.via == SiteFrames::none);

  // Native only (the autograd engine's thread): the autograd node, its parameters dropped.
  std::vector<Frame> backward = {
      fr("??", 0, "torch::unwind::unwind()"), fr("", 0, "at::detail::empty_cuda(c10::ArrayRef<long>)"),
      fr("Functions.cpp", 0, "torch::autograd::generated::MulBackward0_apply_functional(std::vector<at::Tensor>&&)"),
      fr("??", 0,
         "torch::autograd::generated::MulBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)"),
      fr("??", 0, "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)")};
  s = site_frames(backward);
  CHECK(label(backward, s.user) == "?? in torch::autograd::generated::MulBackward0::apply");
  CHECK(frame_label(fr("x.cpp", 0, "at::(anonymous namespace)::wrapper(at::Tensor const&)")) ==
        "x.cpp in at::(anonymous namespace)::wrapper");

  std::vector<Frame> none;
  CHECK(site_frames(none).user == SiteFrames::none);
}

namespace {
// A native frame of a vramtrace trace, as its reader makes it before symbols: module, address,
// and "name+0x..." as the name.
Frame native(std::string_view module, std::string_view label, std::uint64_t address = 0x1234) {
  Frame f;
  f.module = module;
  f.name = label;
  f.address = address;
  return f;
}
}  // namespace

TEST_CASE("sites: native frames of the shim's traces are classified by their module", "[sites]") {
  CHECK(module_kind("/usr/lib/x86_64-linux-gnu/libcuda.so.1") == FrameKind::native);
  CHECK(module_kind("/usr/local/cuda/lib64/libcudart.so.12.4.127") == FrameKind::native);
  CHECK(module_kind("/venv/lib/python3.12/site-packages/nvidia/cublas/lib/libcublasLt.so.12") == FrameKind::native);
  CHECK(module_kind("/venv/lib/python3.12/site-packages/torch/lib/libc10_cuda.so") == FrameKind::native);
  CHECK(module_kind("/opt/libtorch/lib/libtorch_cuda.so") == FrameKind::native);
  CHECK(module_kind(
            "/venv/lib/python3.12/site-packages/cupy_backends/cuda/api/runtime.cpython-312-x86_64-linux-gnu.so") ==
        FrameKind::native);
  CHECK(module_kind("/venv/lib/python3.12/site-packages/jaxlib/xla_extension.so") == FrameKind::native);
  CHECK(module_kind("/venv/lib/python3.12/site-packages/jax_cuda12_plugin/xla_cuda_plugin.so") == FrameKind::native);
  CHECK(module_kind("/venv/lib/python3.12/site-packages/numba/cuda/cudadrv/_helperlib.so") == FrameKind::native);
  CHECK(module_kind("/opt/vramtrace/lib/libvramtrace.so") == FrameKind::native);
  CHECK(module_kind("/lib/x86_64-linux-gnu/libc.so.6") == FrameKind::runtime);
  CHECK(module_kind("/lib64/ld-linux-x86-64.so.2") == FrameKind::runtime);
  CHECK(module_kind("/usr/lib/x86_64-linux-gnu/libstdc++.so.6") == FrameKind::runtime);
  CHECK(module_kind("/usr/lib/x86_64-linux-gnu/libffi.so.8") == FrameKind::runtime);
  CHECK(module_kind("/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0") == FrameKind::runtime);
  CHECK(module_kind("/usr/bin/python3.12") == FrameKind::runtime);
  CHECK(module_kind("/usr/lib/python3.12/lib-dynload/_ctypes.cpython-312-x86_64-linux-gnu.so") == FrameKind::runtime);
  CHECK(module_kind("/venv/lib/python3.12/site-packages/scipy/linalg/_fblas.cpython-312.so") == FrameKind::library);
  CHECK(module_kind("/home/me/app/build/solver") == FrameKind::user);
  CHECK(module_kind("/home/me/app/build/libmykernels.so") == FrameKind::user);
  CHECK(module_kind("/home/me/torchlike/libmine.so") == FrameKind::user);  // whole components only
  // frame_kind of a frame: by module when native, by file otherwise
  CHECK(frame_kind(native("/home/me/solver", "solver+0x10")) == FrameKind::user);
  CHECK(frame_kind(fr("train.py", 3, "main")) == FrameKind::user);
}

TEST_CASE("sites: the user's line of native stacks, Python frames preferred", "[sites]") {
  const std::string cudart = "/usr/local/cuda/lib64/libcudart.so.12", app = "/home/me/solver",
                    libc = "/lib/x86_64-linux-gnu/libc.so.6", mine = "/home/me/libkernels.so";
  // A C++ program: the first frame outside the framework, and the framework function it called.
  std::vector<Frame> plain = {native(cudart, "libcudart.so.12+0x5a3e0"), native(cudart, "libcudart.so.12+0x1000"),
                              native(mine, "libkernels.so+0x40"), native(app, "solver+0x1200"),
                              native(libc, "libc.so.6+0x29d90")};
  SiteFrames s = site_frames(plain);
  CHECK(label(plain, s.user) == "libkernels.so+0x40");
  CHECK(label(plain, s.via) == "libcudart.so.12+0x1000");
  // The program called cudaMalloc itself (the shim's frames are not recorded): nothing below.
  std::vector<Frame> direct = {native(app, "solver+0x1200"), native(libc, "libc.so.6+0x29d90")};
  s = site_frames(direct);
  CHECK(label(direct, s.user) == "solver+0x1200");
  CHECK(s.via == SiteFrames::none);
  // With Python frames, the Python line wins over the program's native code below it.
  const std::string cupy = "/venv/lib/python3.12/site-packages/cupy/_core/core.cpython-312-x86_64-linux-gnu.so",
                    py = "/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0",
                    cupy_py = "/venv/lib/python3.12/site-packages/cupy/_creation/basic.py";
  std::vector<Frame> mixed = {native(cupy, "core.so+0x10"), native(mine, "libkernels.so+0x40"),
                              native(py, "libpython3.12.so.1.0+0x99"), fr(cupy_py, 20, "zeros"),
                              fr("/home/me/job.py", 8, "run")};
  s = site_frames(mixed);
  CHECK(label(mixed, s.user) == "/home/me/job.py:8 in run");
  CHECK(label(mixed, s.via) == "cupy/_creation/basic.py:20 in zeros");
  // Framework and runtime only (CuPy allocates with the GIL released: no Python frames): where
  // the interpreter entered the framework, and the frame that allocated below it.
  const std::string runtime = "/venv/lib/python3.12/site-packages/cupy_backends/cuda/api/runtime.so",
                    memory = "/venv/lib/python3.12/site-packages/cupy/cuda/memory.so";
  std::vector<Frame> nogil = {
      native(cudart, "libcudart.so.12+0x5a3e0"), native(runtime, "runtime.so+0x10"),
      native(memory, "memory.so+0x20"),          native(cupy, "core.so+0x30"),
      native(py, "libpython3.12.so.1.0+0x99"),   native("/usr/bin/python3.12", "python3.12+0x1"),
      native(libc, "libc.so.6+0x29d90")};
  s = site_frames(nogil);
  CHECK(label(nogil, s.user) == "core.so+0x30");
  CHECK(label(nogil, s.via) == "libcudart.so.12+0x5a3e0");
  // Runtime frames only (ctypes calling the driver): frame 0.
  std::vector<Frame> ctypes = {native("/usr/lib/x86_64-linux-gnu/libffi.so.8", "libffi.so.8+0x7"),
                               native(py, "libpython3.12.so.1.0+0x99")};
  CHECK(site_frames(ctypes).user == 0);
  // Once symbolized (reporter/readers/native_names.h): the source line and the function, its
  // parameters dropped; the kind still by module.
  Frame named = native(app, "solver+0x1200");
  named.filename = "/home/me/src/solver.rs";
  named.line = 88;
  named.name = "solver::run(int)";
  CHECK(frame_label(named) == "/home/me/src/solver.rs:88 in solver::run");
  CHECK(frame_kind(named) == FrameKind::user);
  Frame only_name = native(cudart, "cudaMalloc");
  CHECK(frame_label(only_name) == "cudaMalloc");
  CHECK(frame_kind(only_name) == FrameKind::native);
  std::vector<Frame> symbolized = {only_name, named, native(libc, "__libc_start_call_main")};
  s = site_frames(symbolized);
  CHECK(label(symbolized, s.user) == "/home/me/src/solver.rs:88 in solver::run");
  CHECK(label(symbolized, s.via) == "cudaMalloc");
  // nvcc's default links the CUDA runtime into the program: its frames lie in the program's own
  // module, and only their names say they are the runtime's.
  Frame internal = native(app, "solver+0x9000"), api = native(app, "solver+0x8000"),
        user_main = native(app, "solver+0x100");
  internal.name = "libcudart_static_5382377d5c772c9d197c0cda9fd9742ee6ad893c";
  api.name = "cudaMalloc";
  user_main.name = "main";
  Frame hidden = native(app, "solver+0x9100");
  hidden.name = "__cudart1234";
  std::vector<Frame> static_rt = {internal, hidden, api, user_main, native(libc, "__libc_start_call_main")};
  s = site_frames(static_rt);
  CHECK(label(static_rt, s.user) == "main");
  CHECK(label(static_rt, s.via) == "cudaMalloc");
  CHECK(is_static_cuda_runtime("cudaMallocAsync"));
  CHECK_FALSE(is_static_cuda_runtime("cuda"));
  CHECK_FALSE(is_static_cuda_runtime("cudaify"));  // not the runtime's naming
  CHECK_FALSE(is_static_cuda_runtime("main"));
  // A return address in no known module reads as its address.
  Frame lost;
  lost.name = "0x7f0012345678";
  CHECK(frame_label(lost) == "0x7f0012345678");
  CHECK(frame_label(native(cudart, "libcudart.so.12+0x5a3e0")) == "libcudart.so.12+0x5a3e0");
}

TEST_CASE("sites: a label escapes the control characters of its frame", "[sites]") {
  // C0 and DEL as \xHH (\r, \n, \t by name), C1 in UTF-8 as \u00HH; other UTF-8 is kept.
  CHECK(frame_label(fr("a\x1b[31m\r\n\t\x7f.py", 7, "f\xc2\x9b\xc3\xa9")) ==
        "a\\x1b[31m\\r\\n\\t\\x7f.py:7 in f\\u009b\xc3\xa9");
  CHECK(frame_label(fr("train.py", 3, "main")) == "train.py:3 in main");
  // A byte of 0x80..0xff that starts no valid UTF-8 sequence (a raw 8-bit CSI, a cut sequence) as
  // \xHH; valid sequences of 2 to 4 bytes are kept.
  CHECK(frame_label(fr("a\x9b"
                       "2J.py",
                       1, "f\xe2\x82")) == "a\\x9b2J.py:1 in f\\xe2\\x82");
  CHECK(frame_label(fr("\xe2\x82\xac.py", 1, "\xf0\x9f\x98\x80")) == "\xe2\x82\xac.py:1 in \xf0\x9f\x98\x80");
  CHECK(frame_label(fr("\xc0\xaf.py", 1, "f")) == "\\xc0\\xaf.py:1 in f");  // an overlong "/"
}

TEST_CASE("sites: stacks are interned by content", "[sites]") {
  StackTable t;
  std::string a = "train.py", b = "train.py";  // equal content, different storage
  std::uint32_t id1 = t.intern({fr(a, 1, "f"), fr("??", 0, "g")});
  std::uint32_t id2 = t.intern({fr(b, 1, "f"), fr("??", 0, "g")});
  std::uint32_t id3 = t.intern({fr(a, 2, "f")});
  CHECK(id1 == 1);
  CHECK(id2 == id1);
  CHECK(id3 == 2);
  CHECK(t.size() == 2);
  CHECK(t.intern({}) == 0);
  a = "changed";  // the table keeps its own copies
  REQUIRE(t.get(id1) != nullptr);
  CHECK((*t.get(id1))[0].filename == "train.py");
  CHECK(t.get(0) == nullptr);
  CHECK(t.get(3) == nullptr);
}

TEST_CASE("sites: the snapshot reader gives each alloc its frames, and tolerates bad ones", "[sites][pickle]") {
  auto r = open_trace(kSites);
  std::vector<TraceRecord> recs;
  TraceRecord rec;
  while (r->next(rec)) recs.push_back(rec);
  REQUIRE(recs.size() == 9);
  auto frames = [&](std::size_t i) { return r->stack(recs[i].stack_id); };
  REQUIRE(frames(1) != nullptr);
  CHECK(frames(1)->size() == 11);
  CHECK(frames(1)->front().filename == "??");
  CHECK(frame_label(frames(1)->at(8)) == "train.py:42 in step");
  CHECK(recs[3].stack_id == 0);  // frames that are not dicts: no stack, the entry kept
  CHECK(recs[4].stack_id == 0);  // no frames at all
  // The frees share the alloc's list: the same stack, or none once the unpickler has delivered and
  // dropped the alloc (pickle batches of 1000 entries); never another stack.
  CHECK((recs[5].stack_id == 0 || recs[5].stack_id == recs[2].stack_id));
  REQUIRE(frames(8) != nullptr);  // the oom entry: the refused request's stack
  CHECK(frame_label(frames(8)->back()) == "train.py:70 in step");
  // The end state's blocks: the preload block (not shared with the history) has its own frames.
  const Snapshot* end = r->final_state();
  REQUIRE(end != nullptr);
  REQUIRE(end->segments.size() == 2);
  const auto& pre = end->segments[1].blocks[0];
  REQUIRE(r->stack(pre.stack_id) != nullptr);
  CHECK(frame_label(r->stack(pre.stack_id)->back()) == "preload.py:3 in <module>");
  // Ids are stable: a second read of the file gives the same ones.
  auto r2 = open_trace(kSites);
  std::size_t i = 0;
  while (r2->next(rec)) CHECK(rec.stack_id == recs[i++].stack_id);
}

TEST_CASE("sites: bytes alive per site at the peak, the OOM and the end", "[sites]") {
  auto models = load_models({kSites});
  REQUIRE(models.size() == 1);
  const TraceModel& m = models[0];
  REQUIRE(m.stacks != nullptr);
  auto sites = trace_sites(m);
  REQUIRE(sites.size() == 1);
  const DeviceSites& d = sites[0];

  // The peak: 4 + 2 + 3 + 2 MiB; the last two have no stack.
  REQUIRE(d.at_peak.sites.size() == 2);
  CHECK(d.at_peak.total_bytes == 11 * MiB);
  CHECK(d.at_peak.sites[0].label == "train.py:42 in step");
  CHECK(d.at_peak.sites[0].bytes == 4 * MiB);
  CHECK(d.at_peak.sites[0].blocks == 1);
  REQUIRE(d.at_peak.sites[0].via.size() == 1);
  CHECK(d.at_peak.sites[0].via[0].label == "transformers/models/gpt2/modeling_gpt2.py:200 in forward");
  // The full stack: from the innermost frame to the user's frame.
  CHECK(d.at_peak.sites[0].frames.size() == 9);
  CHECK(d.at_peak.sites[1].label == "train.py:50 in step");
  CHECK(d.at_peak.sites[1].bytes == 2 * MiB);
  CHECK(d.at_peak.no_stack_bytes == 5 * MiB);
  CHECK(d.at_peak.no_stack_blocks == 2);

  // The OOM: the 2 MiB of train.py:50 were freed and train.py:60 took their place.
  REQUIRE(d.at_oom.size() == 1);
  REQUIRE(d.at_oom[0].sites.size() == 2);
  CHECK(d.at_oom[0].sites[1].label == "train.py:60 in step");
  CHECK(d.at_oom[0].sites[1].via.at(0).label.empty());  // contextlib is the runtime: no framework line

  // The end: the history's blocks, plus the preload block only the end state holds.
  REQUIRE(d.at_end.sites.size() == 3);
  CHECK(d.at_end.sites[0].label == "preload.py:3 in <module>");
  CHECK(d.at_end.sites[0].bytes == 8 * MiB);
  CHECK(d.at_end.end_state_only_bytes == 8 * MiB);
  CHECK(d.at_end.total_bytes == 19 * MiB);

  // Top N: the rest is summed; `all` keeps every site.
  SitesAt top1 = sites_of(m.devices[0].at_peak.stacks, *m.stacks, 1);
  REQUIRE(top1.sites.size() == 1);
  CHECK(top1.other_sites == 1);
  CHECK(top1.other_bytes == 2 * MiB);
  CHECK(top1.all == std::vector<SiteBytes>{{"train.py:42 in step", 4 * MiB, 1}, {"train.py:50 in step", 2 * MiB, 1}});
}

TEST_CASE("sites: each site names its largest stack by id, and how many stacks it groups", "[sites]") {
  // Two stacks of one user line (different framework lines), 3 MiB and 1 MiB, and one of another.
  auto table = std::make_shared<StackTable>();
  const std::uint32_t big =
      table->intern({fr("", 0, "malloc"), fr("/v/site-packages/torch/nn/functional.py", 9, "linear"),
                     fr("train.py", 5, "step"), fr("train.py", 90, "main")});
  const std::uint32_t small =
      table->intern({fr("", 0, "malloc"), fr("/v/site-packages/torch/nn/modules/conv.py", 3, "forward"),
                     fr("train.py", 5, "step"), fr("train.py", 91, "main")});
  const std::uint32_t other = table->intern({fr("eval.py", 7, "run")});
  const SitesAt s =
      sites_of({{small, 1 * MiB, 1}, {big, 3 * MiB, 2}, {other, 2 * MiB, 1}, {0, 5 * MiB, 1}}, *table, 10);
  REQUIRE(s.sites.size() == 2);
  CHECK(s.sites[0].label == "train.py:5 in step");
  CHECK(s.sites[0].bytes == 4 * MiB);
  CHECK(s.sites[0].stack == big);  // the stack holding the most bytes, whatever the order
  CHECK(s.sites[0].stacks == 2);
  CHECK(s.sites[0].frames.size() == 3);  // up to the user's line; `stack` has its callers too
  CHECK(table->get(s.sites[0].stack)->size() == 4);
  CHECK(s.sites[1].stack == other);
  CHECK(s.sites[1].stacks == 1);
  // Every site's bytes, for diff: they sum to the bytes with a stack.
  REQUIRE(s.all.size() == 2);
  CHECK(s.all[0].bytes + s.all[1].bytes == s.total_bytes - s.no_stack_bytes);

  // all_sites round-trips through the JSON that `summary --json` writes.
  const nlohmann::json j = sites_json(s);
  REQUIRE(j["all_sites"].size() == 2);
  CHECK(j["all_sites"][0] == nlohmann::json({{"site", "train.py:5 in step"}, {"bytes", 4 * MiB}, {"blocks", 3}}));
  CHECK(site_bytes_from_json(j) == s.all);
  CHECK_FALSE(site_bytes_from_json(nlohmann::json(nullptr)).has_value());   // a state not captured
  CHECK_FALSE(site_bytes_from_json(nlohmann::json::object()).has_value());  // a document before all_sites
  CHECK_THROWS(site_bytes_from_json(nlohmann::json::parse(R"({"all_sites": [{"site": 1}]})")));
}

TEST_CASE("sites: summary and oom show them; JSON has full stacks", "[sites]") {
  auto models = load_models({kSites});
  std::string text = render_summary_text(models);
  CHECK_THAT(text, Catch::Contains("Top allocation sites at the peak (device 0):"));
  CHECK_THAT(text, Catch::Contains("train.py:42 in step"));
  CHECK_THAT(text, Catch::Contains("via transformers/models/gpt2/modeling_gpt2.py:200 in forward"));
  CHECK_THAT(text, Catch::Contains("Top allocation sites at the end (device 0):"));
  CHECK_THAT(text, Catch::Contains("no stack recorded: 5.00 MiB in 2 blocks"));

  nlohmann::json j = summary_json(models);
  const auto& s = j["traces"][0]["sites"];
  REQUIRE(s["devices"].size() == 1);
  const auto& peak = s["devices"][0]["at_peak"];
  CHECK(peak["sites"][0]["site"] == "train.py:42 in step");
  CHECK(peak["sites"][0]["bytes"] == 4 * MiB);
  REQUIRE(peak["sites"][0]["frames"].size() == 9);
  CHECK(peak["sites"][0]["frames"][8]["filename"] == "train.py");
  CHECK(peak["sites"][0]["frames"][8]["line"] == 42);
  CHECK(peak["sites"][0]["frames"][8]["kind"] == "user");
  CHECK(peak["sites"][0]["frames"][4]["kind"] == "library");
  CHECK(peak["sites"][0]["frames"][0]["kind"] == "native");
  CHECK(s["devices"][0]["at_end"]["sites"][0]["site"] == "preload.py:3 in <module>");

  auto cases = oom_cases(models[0]);
  REQUIRE(cases.size() == 1);
  std::string oom = render_oom_text(models[0], cases, WhatIfRun{});
  CHECK_THAT(oom, Catch::Contains("requested at                           train.py:70 in step"));
  CHECK_THAT(oom, Catch::Contains("Top allocation sites alive at this moment:"));
  CHECK_THAT(oom, Catch::Contains("train.py:60 in step"));
  nlohmann::json oj = oom_json(models[0], cases, WhatIfRun{});
  CHECK(oj["ooms"][0]["request_site"] == "train.py:70 in step");
  CHECK(oj["ooms"][0]["sites"]["sites"][0]["site"] == "train.py:42 in step");
}

TEST_CASE("sites: a trace without stacks says nothing in text, why in JSON", "[sites]") {
  testing::RecordList l;
  l.add(Action::segment_alloc, 0x1000000, 2 * MiB).add(Action::alloc, 0x1000000, 512);
  testing::VectorReader r(l.records);
  std::vector<TraceModel> models{build_trace_model(r)};
  CHECK(models[0].stacks == nullptr);
  CHECK(trace_sites(models[0]).empty());
  std::string text = render_summary_text(models);
  CHECK_THAT(text, !Catch::Contains("allocation sites"));
  nlohmann::json j = summary_json(models);
  CHECK(j["traces"][0]["sites"]["devices"].empty());
  CHECK_THAT(j["traces"][0]["sites"]["reason"].get<std::string>(), Catch::Contains("no call stacks"));
}

TEST_CASE("sites: the real encoder snapshot names the script's lines", "[sites][real]") {
  auto models = load_models({kData + "/torch-h200/encoder_varlen.snapshot.pickle"});
  const TraceModel& m = models.at(0);
  REQUIRE(m.stacks != nullptr);
  CHECK(m.stacks->size() < 200);  // 5444 entries, a few dozen unique stacks
  auto sites = trace_sites(m);
  REQUIRE(sites.size() == 1);
  const SitesAt& peak = sites[0].at_peak;
  REQUIRE(!peak.sites.empty());
  CHECK(peak.sites[0].label == "snap_dump.py:10 in <module>");
  CHECK(peak.sites[0].bytes > 1000 * MiB);
  // Every allocated byte at the peak is in a site, the rest of the table, or the no-stack line.
  std::uint64_t sum = peak.other_bytes + peak.no_stack_bytes;
  for (const auto& s : peak.sites) sum += s.bytes;
  CHECK(sum == static_cast<std::uint64_t>(m.devices[0].at_peak.stats.allocated_bytes[kStatAll].current));
  bool model_line = false;
  for (const auto& s : peak.sites)
    if (s.label == "snap_dump.py:6 in <module>") model_line = true;
  CHECK(model_line);
}

TEST_CASE("sites: a snapshot with an empty history names the code of its end state", "[sites]") {
  auto models = load_models({kData + "/pickle/sites_end_only.snapshot.pickle"});
  const TraceModel& m = models.at(0);
  REQUIRE(m.stacks != nullptr);
  auto sites = trace_sites(m);
  REQUIRE(sites.size() == 1);
  const SitesAt& end = sites[0].at_end;
  REQUIRE(end.sites.size() == 3);
  CHECK(end.sites[0].label == "preload.py:3 in <module>");
  CHECK(end.sites[1].label == "train.py:42 in step");
  CHECK(end.sites[2].label == "train.py:60 in step");
  CHECK(end.total_bytes == 14 * MiB);  // the blocks without frames are not counted: no stack, no site
  CHECK(end.end_state_only_bytes == 14 * MiB);
  CHECK_THAT(render_summary_text(models), Catch::Contains("preload.py:3 in <module>"));
  nlohmann::json j = summary_json(models);
  CHECK(j["traces"][0]["sites"]["devices"][0]["at_end"]["sites"][0]["site"] == "preload.py:3 in <module>");
  // No history: the peak is the end state (at least), and so are its sites.
  CHECK(j["traces"][0]["sites"]["devices"][0]["at_peak"]["sites"][0]["site"] == "preload.py:3 in <module>");
  CHECK(j["traces"][0]["sites"]["devices"][0]["at_peak"]["sites"].size() == 3);
}

TEST_CASE("sites: GPT-2 training under vramtrace run names the script and modeling_gpt2.py", "[sites][real]") {
  // The default `vramtrace run` of GPT-2 124M training on the H200 (tests/data/torch-h200/README.md).
  auto models = load_models({kData + "/torch-h200/gpt2_run.snapshot.pickle.zst"});
  const TraceModel& m = models.at(0);
  REQUIRE(m.stacks != nullptr);
  auto sites = trace_sites(m);
  REQUIRE(sites.size() == 1);
  const SitesAt& peak = sites[0].at_peak;
  REQUIRE(peak.sites.size() >= 3);
  CHECK_THAT(peak.sites[0].label, Catch::EndsWith("tests/gpu/torch_train.py:71 in main"));
  bool model_line = false;
  for (const auto& s : peak.sites)
    for (const auto& v : s.via)
      if (v.label.find("transformers/models/gpt2/modeling_gpt2.py:") != std::string::npos) model_line = true;
  CHECK(model_line);

  // The figures computed from the history equal what PyTorch counted at the same exit.
  std::ifstream f(kData + "/torch-h200/gpt2_run.memory_stats.json");
  REQUIRE(f.good());
  const nlohmann::json recorded = nlohmann::json::parse(f)["memory_stats"];
  const nlohmann::json stats = summary_json(models)["traces"][0]["devices"][0]["stats"];
  REQUIRE(recorded.size() == 5);
  for (const auto& [key, value] : recorded.items()) {
    INFO(key);
    CHECK(stats.at(key) == value);
  }
}
