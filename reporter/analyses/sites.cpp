#include "analyses/sites.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "analyses/printable.h"
#include "vramtrace/units.h"

namespace vramtrace {

namespace {

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// "python3", "python3.12", "python3.13t" (free-threaded builds): the directory of a Python
// installation's standard library, under lib/.
bool is_python_dir(std::string_view c) {
  if (c.substr(0, 6) != "python") return false;
  c.remove_prefix(6);
  if (c.empty()) return false;
  if (c.back() == 't') c.remove_suffix(1);
  bool digit = false;
  for (char ch : c) {
    if (ch >= '0' && ch <= '9')
      digit = true;
    else if (ch != '.')
      return false;
  }
  return digit;
}

}  // namespace

const char* frame_kind_name(FrameKind k) noexcept {
  switch (k) {
    case FrameKind::user:
      return "user";
    case FrameKind::library:
      return "library";
    case FrameKind::torch:
      return "torch";
    case FrameKind::runtime:
      return "runtime";
    case FrameKind::native:
      return "native";
  }
  return "user";
}

FrameKind frame_kind(std::string_view f) noexcept {
  if (f.empty() || f == "??") return FrameKind::native;
  for (std::string_view ext : {".c", ".cc", ".cpp", ".cxx", ".cu", ".h", ".hh", ".hpp", ".cuh", ".inl"})
    if (ends_with(f, ext)) return FrameKind::native;
  if (f.front() == '<') return FrameKind::runtime;  // <frozen runpy>, <string>, <eval_with_key>.3
  // Path components, in order; the file's own name is not a directory.
  std::vector<std::string_view> dirs;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= f.size(); ++i) {
    if (i == f.size() || f[i] == '/' || f[i] == '\\') {
      if (i > start && i < f.size()) dirs.push_back(f.substr(start, i - start));
      start = i + 1;
    }
  }
  // Under an installation tree the package is the component after it: a virtual environment may
  // itself live in a directory named torch (/opt/torch/.venv/lib/.../site-packages/transformers).
  for (std::size_t i = dirs.size(); i-- > 0;) {
    if (dirs[i] == "site-packages" || dirs[i] == "dist-packages")
      return i + 1 < dirs.size() && dirs[i + 1] == "torch" ? FrameKind::torch : FrameKind::library;
  }
  for (auto d : dirs)
    if (d == "torch") return FrameKind::torch;  // a source checkout (pytorch/torch/nn/...)
  for (std::size_t i = 0; i < dirs.size(); ++i)
    if (is_python_dir(dirs[i]) && (i == 0 || dirs[i - 1] == "lib" || dirs[i - 1] == "lib64")) return FrameKind::runtime;
  return FrameKind::user;
}

namespace {

std::string_view base_name(std::string_view path) {
  const auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// The directory components of a path, in order (not the file's own name).
std::vector<std::string_view> directories(std::string_view path) {
  std::vector<std::string_view> dirs;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      if (i > start && i < path.size()) dirs.push_back(path.substr(start, i - start));
      start = i + 1;
    }
  }
  return dirs;
}

// "python", "python3", "python3.12", "python3.13t": the interpreter's executable.
bool is_python_executable(std::string_view name) {
  if (name == "python") return true;
  return is_python_dir(name);
}

}  // namespace

FrameKind module_kind(std::string_view module) noexcept {
  const std::string_view name = base_name(module);
  const std::vector<std::string_view> dirs = directories(module);
  // Packages that ship the framework in their own directories (pip wheels and source trees).
  for (std::string_view d : dirs) {
    for (std::string_view pkg :
         {"torch", "cupy", "cupy_backends", "cupyx", "jax", "jaxlib", "jax_plugins", "numba", "triton", "nvidia"})
      if (d == pkg) return FrameKind::native;
    if (starts_with(d, "jax_cuda") || starts_with(d, "jax_rocm")) return FrameKind::native;  // jax_cuda12_plugin
  }
  for (std::string_view lib :
       {"libcuda.",    "libcudart",     "libcublas",   "libcudnn",    "libnccl",  "libcufft",     "libcurand",
        "libcusparse", "libcusolver",   "libcutensor", "libcufile",   "libnvrtc", "libnvJitLink", "libnvjitlink",
        "libcupti",    "libnvToolsExt", "libnvidia-",  "libnvshmem",  "libtorch", "libc10",       "libcaffe2",
        "libshm",      "libxla",        "libtriton",   "libvramtrace"})
    if (starts_with(name, lib)) return FrameKind::native;
  for (std::string_view d : dirs)
    if (d == "lib-dynload") return FrameKind::runtime;  // the interpreter's own extension modules
  for (std::string_view lib :
       {"libc.so", "libc-", "libm.so", "libm-", "libstdc++", "libgcc_s", "ld-linux", "ld64.so", "libpthread",
        "libdl.so", "librt.so", "libutil", "libpython", "libffi", "linux-vdso", "libgomp", "libiomp"})
    if (starts_with(name, lib)) return FrameKind::runtime;
  if (is_python_executable(name)) return FrameKind::runtime;
  for (std::string_view d : dirs)
    if (d == "site-packages" || d == "dist-packages") return FrameKind::library;
  return FrameKind::user;
}

bool is_static_cuda_runtime(std::string_view name) noexcept {
  // nvcc links libcudart_static.a into the program by default, so its frames lie in the program's
  // own module. Its internal functions are local symbols named "libcudart_static_<hash>" or
  // "__cudart<n>"; its API functions keep the runtime's names, "cuda" and a capital letter
  // (cudaMalloc, cudaMallocAsync, and the header's template cudaMalloc<T>).
  if (starts_with(name, "libcudart_static_") || starts_with(name, "__cudart")) return true;
  return name.size() > 4 && starts_with(name, "cuda") && name[4] >= 'A' && name[4] <= 'Z';
}

FrameKind frame_kind(const Frame& f) noexcept {
  // Only native frames have a module; once symbolized their file is a source file of any
  // language, which says nothing of whose code it is.
  if (f.module.empty()) return frame_kind(f.filename);
  const FrameKind k = module_kind(f.module);
  return k == FrameKind::user && is_static_cuda_runtime(f.name) ? FrameKind::native : k;
}

namespace {

// An autograd node's apply() ("torch::autograd::generated::MulBackward0::apply(...)"): what a
// stack of the backward pass's engine thread, which has no Python frame, is working for.
bool is_autograd_node(std::string_view name) {
  return name.find("torch::autograd::generated::") != std::string_view::npos &&
         name.find("::apply(") != std::string_view::npos;
}

}  // namespace

SiteFrames site_frames(const std::vector<Frame>& stack) {
  SiteFrames s;
  if (stack.empty()) return s;
  // Kinds by module for native frames; with Python frames present, every native frame counts as
  // framework, so that the Python line is the site.
  std::vector<FrameKind> kind(stack.size());
  std::vector<bool> native(stack.size());
  bool python = false, modules = false;
  for (std::size_t i = 0; i < stack.size(); ++i) {
    native[i] = !stack[i].module.empty() || frame_kind(stack[i].filename) == FrameKind::native;
    kind[i] = frame_kind(stack[i]);
    python = python || !native[i];
    modules = modules || !stack[i].module.empty();
  }
  if (python)
    for (std::size_t i = 0; i < stack.size(); ++i)
      if (native[i]) kind[i] = FrameKind::native;
  std::size_t first_python = SiteFrames::none, first_node = SiteFrames::none;
  for (std::size_t i = 0; i < stack.size(); ++i) {
    if (kind[i] == FrameKind::user) {
      s.user = i;
      break;
    }
    if (!native[i] && first_python == SiteFrames::none) first_python = i;
    if (native[i] && first_node == SiteFrames::none && is_autograd_node(stack[i].name)) first_node = i;
  }
  if (s.user != SiteFrames::none && native[s.user]) {
    // The program's own native code: below it, the framework function it called.
    for (std::size_t i = 0; i < s.user; ++i)
      if (kind[i] == FrameKind::library) s.via = i;
    if (s.via == SiteFrames::none && s.user > 0) s.via = s.user - 1;
    return s;
  }
  if (s.user == SiteFrames::none) {
    s.user = first_python != SiteFrames::none ? first_python : first_node;
    if (s.user == SiteFrames::none && modules) {
      // Framework and runtime only: where the runtime (the interpreter, the C runtime's thread
      // start) entered the framework, the framework's function the program called.
      std::size_t entry = SiteFrames::none;
      for (std::size_t i = 0; i < stack.size() && kind[i] != FrameKind::runtime; ++i)
        if (kind[i] == FrameKind::native || kind[i] == FrameKind::library) entry = i;
      if (entry != SiteFrames::none && entry > 0) {
        s.user = entry;
        s.via = 0;
        return s;
      }
    }
    if (s.user == SiteFrames::none) s.user = 0;
  }
  std::size_t inner_torch = SiteFrames::none;
  for (std::size_t i = 0; i < s.user; ++i) {
    FrameKind k = kind[i];
    if (k == FrameKind::library) {
      s.via = i;
      for (std::size_t j = i + 1; j < s.user; ++j) {
        if (kind[j] == FrameKind::library && stack[j].filename != stack[i].filename) {
          s.caller = j;
          break;
        }
      }
      return s;
    }
    if (k == FrameKind::torch && inner_torch == SiteFrames::none) inner_torch = i;
  }
  s.via = inner_torch;
  return s;
}

std::string frame_label(const Frame& f) {
  std::string_view file = f.filename.empty() ? std::string_view("??") : f.filename;
  for (std::string_view tree : {"site-packages/", "dist-packages/"}) {
    const auto at = file.rfind(tree);
    if (at != std::string_view::npos) {
      file.remove_prefix(at + tree.size());
      break;
    }
  }
  std::string_view name = f.name;
  // C++ signatures run to hundreds of characters; the parameter list (the balanced parentheses
  // at the end, "(anonymous namespace)" kept) says little in a table.
  if ((!f.module.empty() || frame_kind(f.filename) == FrameKind::native) && !name.empty() && name.back() == ')') {
    int depth = 0;
    for (std::size_t i = name.size(); i-- > 0;) {
      if (name[i] == ')') ++depth;
      if (name[i] == '(' && --depth == 0) {
        if (i > 0) name = name.substr(0, i);
        break;
      }
    }
  }
  // A native frame of a vramtrace trace that no symbolizer named: its name says all there is
  // ("libcudart.so.12+0x5a3e0").
  if (f.filename.empty() && !f.name.empty() && (!f.module.empty() || starts_with(f.name, "0x"))) return printable(name);
  if (f.line == 0) return fmt::format("{} in {}", printable(file), printable(name));
  return fmt::format("{}:{} in {}", printable(file), f.line, printable(name));
}

SitesAt sites_of(const std::vector<StackBytes>& stacks, const StackTable& table, std::size_t top_n) {
  SitesAt out;
  struct Acc {
    Site site;
    std::map<std::string, SiteVia> via;
    std::uint64_t best_bytes = 0;
    std::set<std::uint32_t> ids;  // the end lists a stack twice: in the history and in the end state only
  };
  // Keyed by the user frame's content: several stacks (different callers below or above) share it.
  std::map<std::tuple<std::string_view, std::uint32_t, std::string_view>, Acc> by;
  for (const auto& sb : stacks) {
    out.total_bytes += sb.bytes;
    out.total_blocks += sb.blocks;
    const std::vector<Frame>* st = table.get(sb.stack);
    SiteFrames where = st ? site_frames(*st) : SiteFrames{};
    if (!st || where.user == SiteFrames::none) {
      out.no_stack_bytes += sb.bytes;
      out.no_stack_blocks += sb.blocks;
      continue;
    }
    const Frame& u = (*st)[where.user];
    Acc& a = by[{u.filename, u.line, u.name}];
    if (a.site.label.empty()) a.site.label = frame_label(u);
    a.site.bytes += sb.bytes;
    a.site.blocks += sb.blocks;
    a.ids.insert(sb.stack);
    if (sb.bytes > a.best_bytes || a.site.frames.empty()) {
      a.best_bytes = sb.bytes;
      a.site.frames.assign(st->begin(), st->begin() + static_cast<std::ptrdiff_t>(where.user) + 1);
      a.site.stack = sb.stack;
    }
    std::string via = where.via == SiteFrames::none ? std::string() : frame_label((*st)[where.via]);
    if (where.caller != SiteFrames::none) via += ", from " + frame_label((*st)[where.caller]);
    SiteVia& v = a.via[via];
    v.label = via;
    v.bytes += sb.bytes;
    v.blocks += sb.blocks;
  }
  std::vector<Site> all;
  all.reserve(by.size());
  for (auto& [key, a] : by) {
    for (auto& [label, v] : a.via) a.site.via.push_back(std::move(v));
    a.site.stacks = a.ids.size();
    std::sort(a.site.via.begin(), a.site.via.end(), [](const SiteVia& x, const SiteVia& y) {
      return x.bytes != y.bytes ? x.bytes > y.bytes : x.label < y.label;
    });
    all.push_back(std::move(a.site));
  }
  std::sort(all.begin(), all.end(),
            [](const Site& x, const Site& y) { return x.bytes != y.bytes ? x.bytes > y.bytes : x.label < y.label; });
  out.all.reserve(all.size());
  for (const auto& x : all) out.all.push_back({x.label, x.bytes, x.blocks});
  for (std::size_t i = top_n; i < all.size(); ++i) {
    ++out.other_sites;
    out.other_bytes += all[i].bytes;
    out.other_blocks += all[i].blocks;
  }
  if (all.size() > top_n) all.resize(top_n);
  out.sites = std::move(all);
  return out;
}

std::string stack_site_label(const StackTable& table, std::uint32_t stack) {
  const std::vector<Frame>* st = table.get(stack);
  if (!st) return "";
  SiteFrames where = site_frames(*st);
  if (where.user == SiteFrames::none) return "";
  std::string out = frame_label((*st)[where.user]);
  if (where.via != SiteFrames::none) out += ", via " + frame_label((*st)[where.via]);
  return out;
}

std::vector<DeviceSites> trace_sites(const TraceModel& m, std::size_t top_n) {
  std::vector<DeviceSites> out;
  if (!m.stacks) return out;
  const StackTable& t = *m.stacks;
  auto recorded_end = [&](std::int32_t device) -> const std::vector<StackBytes>* {
    for (const auto& [d, v] : m.recorded_end_stacks)
      if (d == device) return &v;
    return nullptr;
  };
  for (const auto& d : m.devices) {
    DeviceSites s;
    s.device = d.device;
    if (d.at_peak.captured) s.at_peak = sites_of(d.at_peak.stacks, t, top_n);
    for (const auto& o : d.ooms) s.at_oom.push_back(sites_of(o.state.stacks, t, top_n));
    std::vector<StackBytes> end = d.at_end.stacks;
    const auto* extra = recorded_end(d.device);
    if (extra) end.insert(end.end(), extra->begin(), extra->end());
    s.at_end = sites_of(end, t, top_n);
    for (const auto& e : extra ? *extra : std::vector<StackBytes>{}) {
      s.at_end.end_state_only_bytes += e.bytes;
      s.at_end.end_state_only_blocks += e.blocks;
    }
    // Without a history the end state is the only state known, and the peak is that state.
    if (d.history == DeviceModel::History::none) s.at_peak = s.at_end;
    out.push_back(std::move(s));
  }
  // Devices that only the recorded end state knows (a snapshot whose history is empty).
  for (const auto& [device, v] : m.recorded_end_stacks) {
    const std::int32_t dev = device;  // a copy: clang 14 cannot capture a structured binding
    if (std::any_of(out.begin(), out.end(), [&](const DeviceSites& s) { return s.device == dev; })) continue;
    DeviceSites s;
    s.device = dev;
    s.at_end = sites_of(v, t, top_n);
    s.at_end.end_state_only_bytes = s.at_end.total_bytes;
    s.at_end.end_state_only_blocks = s.at_end.total_blocks;
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), [](const DeviceSites& a, const DeviceSites& b) { return a.device < b.device; });
  return out;
}

std::string render_sites_text(const SitesAt& s, const std::string& title, const std::string& indent) {
  if (s.empty()) return "";
  auto fb = [](std::uint64_t v) { return format_bytes(static_cast<double>(v), ByteStyle::pytorch); };
  std::string out = indent + title + "\n";
  out += fmt::format("{}  {:>3}  {:>12}  {:>7}  {}\n", indent, "#", "bytes", "blocks",
                     "site (user's line; below it, the framework line it called)");
  int i = 1;
  for (const auto& site : s.sites) {
    out += fmt::format("{}  {:>3}  {:>12}  {:>7}  {}\n", indent, i++, fb(site.bytes), site.blocks, site.label);
    const auto named = static_cast<std::size_t>(
        std::count_if(site.via.begin(), site.via.end(), [](const SiteVia& x) { return !x.label.empty(); }));
    std::size_t shown = 0;
    for (const auto& v : site.via) {
      if (v.label.empty()) continue;
      if (shown == 3) {
        out += fmt::format("{}  {:>3}  {:>12}  {:>7}      ... {} more framework lines\n", indent, "", "", "",
                           named - shown);
        break;
      }
      out += fmt::format("{}  {:>3}  {:>12}  {:>7}      via {}\n", indent, "", fb(v.bytes), v.blocks, v.label);
      ++shown;
    }
  }
  if (s.other_sites)
    out +=
        fmt::format("{}  {} more sites: {} in {} blocks\n", indent, s.other_sites, fb(s.other_bytes), s.other_blocks);
  if (s.no_stack_blocks)
    out += fmt::format("{}  no stack recorded: {} in {} blocks\n", indent, fb(s.no_stack_bytes), s.no_stack_blocks);
  if (s.end_state_only_blocks)
    out += fmt::format(
        "{}  of these, {} in {} blocks are in the recorded end state only (allocated before the history began)\n",
        indent, fb(s.end_state_only_bytes), s.end_state_only_blocks);
  return out;
}

nlohmann::json sites_json(const SitesAt& s) {
  nlohmann::json all = nlohmann::json::array();
  for (const auto& x : s.all) all.push_back({{"site", x.label}, {"bytes", x.bytes}, {"blocks", x.blocks}});
  nlohmann::json sites = nlohmann::json::array();
  for (const auto& site : s.sites) {
    nlohmann::json via = nlohmann::json::array();
    for (const auto& v : site.via)
      via.push_back({{"site", v.label.empty() ? nlohmann::json(nullptr) : nlohmann::json(v.label)},
                     {"bytes", v.bytes},
                     {"blocks", v.blocks}});
    nlohmann::json frames = nlohmann::json::array();
    for (const auto& f : site.frames) {
      nlohmann::json j = {{"filename", std::string(f.filename)},
                          {"line", f.line},
                          {"name", std::string(f.name)},
                          {"kind", frame_kind_name(frame_kind(f))}};
      if (!f.module.empty()) {
        j["module"] = std::string(f.module);
        j["address"] = f.address;
        if (!f.build_id.empty()) j["build_id"] = std::string(f.build_id);
      }
      frames.push_back(std::move(j));
    }
    sites.push_back(
        {{"site", site.label}, {"bytes", site.bytes}, {"blocks", site.blocks}, {"via", via}, {"frames", frames}});
  }
  return {{"total_bytes", s.total_bytes},
          {"total_blocks", s.total_blocks},
          {"no_stack_bytes", s.no_stack_bytes},
          {"no_stack_blocks", s.no_stack_blocks},
          {"other_sites", s.other_sites},
          {"other_bytes", s.other_bytes},
          {"other_blocks", s.other_blocks},
          {"end_state_only_bytes", s.end_state_only_bytes},
          {"end_state_only_blocks", s.end_state_only_blocks},
          {"sites", sites},
          {"all_sites", all}};
}

std::optional<std::vector<SiteBytes>> site_bytes_from_json(const nlohmann::json& state) {
  if (!state.is_object()) return std::nullopt;
  const auto it = state.find("all_sites");
  if (it == state.end() || !it->is_array()) return std::nullopt;
  std::vector<SiteBytes> out;
  out.reserve(it->size());
  for (const auto& e : *it)
    out.push_back(
        {e.at("site").get<std::string>(), e.at("bytes").get<std::uint64_t>(), e.at("blocks").get<std::uint64_t>()});
  return out;
}

nlohmann::json trace_sites_json(const TraceModel& m, const std::vector<DeviceSites>& sites, std::size_t top_n) {
  nlohmann::json devs = nlohmann::json::array();
  if (!m.stacks)
    return {{"devices", devs},
            {"reason",
             "the trace records no call stacks (PyTorch snapshots record them as frames; "
             "torch.cuda.memory._record_memory_history(stacks=\"python\" or \"all\"); vramtrace traces "
             "from format 1.2 on, unless VRAMTRACE_STACKS=none)"}};
  for (const auto& s : sites) {
    nlohmann::json d = {{"device", s.device}, {"at_end", sites_json(s.at_end)}};
    const bool has_peak = std::any_of(m.devices.begin(), m.devices.end(),
                                      [&](const DeviceModel& x) { return x.device == s.device && x.at_peak.captured; });
    d["at_peak"] = has_peak ? sites_json(s.at_peak) : nlohmann::json(nullptr);
    devs.push_back(d);
  }
  return {{"top_n", top_n}, {"devices", devs}};
}

}  // namespace vramtrace
