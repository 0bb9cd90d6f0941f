#include "analyses/oom/memory_kinds.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <string_view>

#include "vramtrace/units.h"

namespace vramtrace {

namespace {

using u64 = std::uint64_t;

std::string fb(u64 v) { return format_bytes(static_cast<std::int64_t>(v), ByteStyle::pytorch); }

// The file's directory components and its own name, as seen in a recorded path (either slash).
struct PathParts {
  std::vector<std::string_view> dirs;
  std::string_view base;
  std::string_view parent() const { return dirs.empty() ? std::string_view() : dirs.back(); }
  bool has_dir(std::string_view d) const { return std::find(dirs.begin(), dirs.end(), d) != dirs.end(); }
};

PathParts parts_of(std::string_view path) {
  PathParts p;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= path.size(); ++i) {
    if (i < path.size() && path[i] != '/' && path[i] != '\\') continue;
    if (i > start) p.dirs.push_back(path.substr(start, i - start));
    start = i + 1;
  }
  if (!p.dirs.empty()) {
    p.base = p.dirs.back();
    p.dirs.pop_back();
  }
  return p;
}

bool one_of(std::string_view s, std::initializer_list<std::string_view> list) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

// The rules of memory_use_of, each on one frame. Where each comes from: PyTorch's optimizers
// allocate their state lazily in step() (torch/optim/adam.py `_init_group`); modules move their
// parameters in nn.Module._apply (to, cuda) and load them in load_state_dict; transformers and
// accelerate place weights in from_pretrained / set_module_tensor_to_device; the backward pass is
// entered from torch/autograd (backward, _engine_run_backward) and, in native stacks, runs
// autograd nodes (...Backward0::apply) on the engine's thread; activations are made under a
// module's forward (and recomputed by torch/utils/checkpoint.py).
bool is_optimizer(const Frame& f, const PathParts& p) {
  (void)f;
  for (std::string_view d : {"optim", "optimizers", "optimizer"})
    if (p.has_dir(d)) return true;
  return one_of(p.base, {"optimizer.py", "optimization.py"});
}

bool is_parameters(const Frame& f, const PathParts& p) {
  if (p.base == "module.py" && p.parent() == "modules" &&
      one_of(f.name,
             {"_apply", "to", "cuda", "to_empty", "load_state_dict", "_load_from_state_dict", "register_parameter"}))
    return true;
  if (p.base == "parameter.py" && p.parent() == "nn") return true;
  if (p.base == "init.py" && p.parent() == "nn") return true;
  if (p.base == "modeling_utils.py" && one_of(f.name, {"cuda", "to"})) return true;
  return one_of(f.name, {"from_pretrained", "_load_pretrained_model", "_load_state_dict_into_meta_model",
                         "set_module_tensor_to_device", "load_checkpoint_and_dispatch", "reset_parameters"});
}

bool is_backward(const Frame& f, const PathParts& p) {
  if (p.has_dir("autograd") && one_of(f.name, {"backward", "_engine_run_backward", "grad"})) return true;
  if (p.base == "_tensor.py" && f.name == "backward") return true;
  // Native frames (PyTorch's C++ stacks, the shim's named frames).
  return f.name.find("Backward") != std::string_view::npos || f.name.find("autograd::Engine") != std::string_view::npos;
}

bool is_activations(const Frame& f, const PathParts& p) {
  if (f.name == "forward" || f.name == "_call_impl" || f.name == "_wrapped_call_impl") return true;
  return p.base == "checkpoint.py" && p.parent() == "utils";
}

// One slot per MemoryUse, indexed by its value (the enum lists the kinds in this order).
constexpr std::size_t kUses = static_cast<std::size_t>(MemoryUse::no_stack) + 1;
std::size_t slot(MemoryUse u) { return static_cast<std::size_t>(u); }

const char* words_of(MemoryUse u, bool like_gradients = false) {
  switch (u) {
    case MemoryUse::optimizer_state:
      return "optimizer state";
    case MemoryUse::parameters:
      return "parameters";
    case MemoryUse::backward:
      return "backward pass";
    case MemoryUse::activations:
      return "activations (forward)";
    case MemoryUse::other:
      return "other tensors";
    case MemoryUse::no_stack:
      return like_gradients ? "gradients (no Python stack)" : "no Python stack";
  }
  return "?";
}

std::string share(u64 part, u64 total) {
  return total == 0 ? std::string("-") : fmt::format("{:.0f} %", 100.0 * static_cast<double>(part) / total);
}

std::string remedy(MemoryUse u, bool like_gradients) {
  switch (u) {
    case MemoryUse::optimizer_state:
      return "Adam and AdamW keep two fp32 moments per parameter (8 bytes each): an 8-bit optimizer "
             "(bitsandbytes.optim.AdamW8bit) needs about a quarter of that, a sharded one (ZeRO stage 1-2 in "
             "DeepSpeed, FSDP) divides it by the number of GPUs, and SGD with momentum keeps one moment.";
    case MemoryUse::parameters:
      return "Keep the weights in bf16 (model.to(torch.bfloat16), with fp32 master weights in the optimizer where "
             "needed), shard them across GPUs (FSDP, ZeRO-3), load a frozen model quantized (8- or 4-bit), or offload "
             "layers to the CPU.";
    case MemoryUse::backward:
      return "Gradients and the backward pass's temporaries: a smaller micro-batch with gradient accumulation cuts the "
             "temporaries; zero_grad(set_to_none=True) frees the gradients between steps; FSDP or ZeRO-2 shards them.";
    case MemoryUse::activations:
      return "Tensors the forward pass keeps for backward: activation checkpointing "
             "(model.gradient_checkpointing_enable() in transformers, torch.utils.checkpoint) recomputes them, a "
             "smaller micro-batch with gradient accumulation or shorter sequences cut them in proportion, and autocast "
             "to bf16, where the program does not use it yet, halves most of them.";
    case MemoryUse::other:
      return "Tensors of the program's own lines (inputs, outputs, what it keeps across steps, such as losses not "
             "detached with .item()): the sites above name them.";
    case MemoryUse::no_stack:
      return like_gradients
                 ? "About the parameters' size: in a training step these are most likely the gradients, which the "
                   "autograd engine makes on its own thread (no Python frames): zero_grad(set_to_none=True) frees "
                   "them between steps, and FSDP or ZeRO-2 shards them."
                 : "Allocated where no Python frame was running: in PyTorch, the autograd engine's thread (the "
                   "backward pass: gradients and their temporaries) or other native threads.";
  }
  return {};
}

}  // namespace

const char* memory_use_name(MemoryUse u) noexcept {
  switch (u) {
    case MemoryUse::optimizer_state:
      return "optimizer_state";
    case MemoryUse::parameters:
      return "parameters";
    case MemoryUse::backward:
      return "backward";
    case MemoryUse::activations:
      return "activations";
    case MemoryUse::other:
      return "other";
    case MemoryUse::no_stack:
      return "no_stack";
  }
  return "other";
}

MemoryUse memory_use_of(const std::vector<Frame>& stack) {
  if (stack.empty()) return MemoryUse::no_stack;
  std::vector<PathParts> parts;
  parts.reserve(stack.size());
  for (const Frame& f : stack) parts.push_back(parts_of(f.filename));
  using Rule = bool (*)(const Frame&, const PathParts&);
  const std::array<std::pair<Rule, MemoryUse>, 4> rules = {{{is_optimizer, MemoryUse::optimizer_state},
                                                            {is_parameters, MemoryUse::parameters},
                                                            {is_backward, MemoryUse::backward},
                                                            {is_activations, MemoryUse::activations}}};
  for (const auto& [rule, use] : rules)
    for (std::size_t i = 0; i < stack.size(); ++i)
      if (rule(stack[i], parts[i])) return use;
  return MemoryUse::other;
}

bool MemoryUses::telling() const noexcept {
  for (const auto& r : rows)
    if (r.use != MemoryUse::other && r.use != MemoryUse::no_stack) return true;
  return false;
}

MemoryUses memory_uses(const std::vector<StackBytes>& stacks, const StackTable& table) {
  std::array<UseBytes, kUses> acc{};
  for (std::size_t i = 0; i < kUses; ++i) acc[i].use = static_cast<MemoryUse>(i);
  for (const auto& sb : stacks) {
    const std::vector<Frame>* st = sb.stack ? table.get(sb.stack) : nullptr;
    const MemoryUse u = st ? memory_use_of(*st) : MemoryUse::no_stack;
    UseBytes& a = acc[slot(u)];
    a.bytes += sb.bytes;
    a.blocks += sb.blocks;
  }
  MemoryUses out;
  for (const auto& a : acc) {
    out.total_bytes += a.bytes;
    if (a.bytes) out.rows.push_back(a);
  }
  const u64 params = acc[slot(MemoryUse::parameters)].bytes, none = acc[slot(MemoryUse::no_stack)].bytes;
  out.no_stack_like_gradients = params > 0 && none > 0 && none * 10 >= params * 9 && none * 10 <= params * 11;
  std::stable_sort(out.rows.begin(), out.rows.end(),
                   [](const UseBytes& a, const UseBytes& b) { return a.bytes > b.bytes; });
  return out;
}

std::string next_step_by_use(const MemoryUses& uses) {
  if (!uses.telling() || uses.rows.empty()) return {};
  const UseBytes& top = uses.rows.front();
  const bool g = uses.no_stack_like_gradients;
  std::string s = fmt::format("{} holds the most ({}, {} of the tensors). {}", words_of(top.use, g), fb(top.bytes),
                              share(top.bytes, uses.total_bytes), remedy(top.use, uses.no_stack_like_gradients));
  if (uses.rows.size() > 1) {
    const UseBytes& next = uses.rows[1];
    if (next.bytes * 4 >= uses.total_bytes)
      s += fmt::format(" Then {} ({}, {}). {}", words_of(next.use, g), fb(next.bytes),
                       share(next.bytes, uses.total_bytes), remedy(next.use, uses.no_stack_like_gradients));
  }
  s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
  return s;
}

std::string render_memory_uses_text(const MemoryUses& uses, const std::string& title, const std::string& indent) {
  if (!uses.telling()) return {};
  std::string out = indent + title + "\n";
  for (const auto& r : uses.rows)
    out +=
        fmt::format("{}    {:<28} {:>12} {:>6}  ({} blocks)\n", indent, words_of(r.use, uses.no_stack_like_gradients),
                    fb(r.bytes), share(r.bytes, uses.total_bytes), r.blocks);
  out += indent + "Next step by kind of memory: " + next_step_by_use(uses) + "\n";
  return out;
}

nlohmann::json memory_uses_json(const MemoryUses& uses) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : uses.rows)
    rows.push_back({{"kind", memory_use_name(r.use)},
                    {"bytes", r.bytes},
                    {"blocks", r.blocks},
                    {"share", uses.total_bytes ? static_cast<double>(r.bytes) / uses.total_bytes : 0.0}});
  return {{"rows", rows},
          {"total_bytes", uses.total_bytes},
          {"no_stack_like_gradients", uses.no_stack_like_gradients},
          {"next_step", next_step_by_use(uses)}};
}

}  // namespace vramtrace
