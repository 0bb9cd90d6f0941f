// What the memory alive at a moment is for -- parameters, gradients, optimizer state, activations
// -- read from the call stacks that allocated it, and the remedy that fits the kind that
// dominates: the next step of an OOM by kind of memory.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/trace_model.h"

namespace vramtrace {

/// What a block of a training or inference program holds, from its allocation's call stack.
enum class MemoryUse : std::uint8_t {
  optimizer_state,  ///< allocated inside an optimizer (torch/optim/, bitsandbytes' optim, DeepSpeed's adam, ...)
  parameters,       ///< moving or loading a model (nn.Module.to/cuda/_apply, from_pretrained, load_state_dict, nn.init)
  backward,         ///< the backward pass: torch.autograd frames, or an autograd node in a native stack
  activations,      ///< a model's forward pass (a frame named forward, or checkpoint's recomputation)
  other,            ///< the program's own tensors: inputs, outputs, anything the rules above do not claim
  no_stack,         ///< allocated with no usable stack (in PyTorch's history: the autograd engine's own thread)
};

/// Stable name ("optimizer_state", "parameters", "backward", "activations", "other", "no_stack"), for --json.
const char* memory_use_name(MemoryUse u) noexcept;

/// The use of one allocation from its stack (innermost frame first). The first rule that matches
/// any frame, in this order: optimizer state, parameters, backward, activations; else other; an
/// empty stack is no_stack. Paths match whole components ("optim" in ".../torch/optim/adam.py"),
/// so that a user's "optimizer_utils.py" is not an optimizer. Pure.
MemoryUse memory_use_of(const std::vector<Frame>& stack);

/// One kind of memory at a moment.
struct UseBytes {
  MemoryUse use = MemoryUse::other;
  std::uint64_t bytes = 0;  ///< block bytes, as allocated_bytes counts them
  std::uint64_t blocks = 0;
};

/// The kinds of the memory alive at one moment, largest first (ties in MemoryUse order).
struct MemoryUses {
  std::vector<UseBytes> rows;     ///< only kinds with bytes
  std::uint64_t total_bytes = 0;  ///< allocated bytes in the rows
  /// Bytes without a stack that are within 10 % of the parameters' bytes: in a training step, the
  /// gradients (one per parameter, made on autograd's thread, which has no Python frames).
  bool no_stack_like_gradients = false;
  /// Whether any row is a kind the stacks tell (optimizer state, parameters, backward, activations):
  /// without one the table says nothing that the sites do not.
  bool telling() const noexcept;
};

/// Groups one state's allocated blocks (StackBytes) by memory_use_of their stack. Stacks absent
/// from `table` count as no_stack. Pure.
MemoryUses memory_uses(const std::vector<StackBytes>& stacks, const StackTable& table);

/// The remedy for the kind that holds the most (and for the next one when it holds at least a
/// quarter of the total): one paragraph naming the kind, its bytes and share, and the standard
/// ways to cut that kind (8-bit or sharded optimizers, bf16 or sharded parameters, activation
/// checkpointing, smaller micro-batches). Empty when !uses.telling(). Pure.
std::string next_step_by_use(const MemoryUses& uses);

/// Text: a title line, one line per kind (bytes, share), then "Next step by kind of memory: ...".
/// "" when !uses.telling().
std::string render_memory_uses_text(const MemoryUses& uses, const std::string& title, const std::string& indent);

/// {"rows": [{"kind", "bytes", "blocks", "share"}], "total_bytes", "no_stack_like_gradients", "next_step"}.
nlohmann::json memory_uses_json(const MemoryUses& uses);

}  // namespace vramtrace
