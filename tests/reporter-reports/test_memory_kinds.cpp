// Kinds of memory from call stacks, and the next step by kind (analyses/oom/memory_kinds.h).
#include <catch2/catch.hpp>

#include "analyses/oom/memory_kinds.h"

using namespace vramtrace;

namespace {
Frame fr(std::string_view file, std::uint32_t line, std::string_view name) { return {file, line, name}; }
constexpr const char* kSite = "python3.12/site-packages/";
std::string sp(const char* tail) { return std::string(kSite) + tail; }
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("memory kinds: each rule from the frames PyTorch records", "[kinds]") {
  const std::string adam = sp("torch/optim/adam.py"), module = sp("torch/nn/modules/module.py"),
                    linear = sp("torch/nn/modules/linear.py"), autograd = sp("torch/autograd/__init__.py"),
                    ckpt = sp("torch/utils/checkpoint.py"), mu = sp("transformers/modeling_utils.py");
  // Optimizer state: the lazy state of Adam's step, under the user's loop.
  CHECK(memory_use_of({fr(adam, 182, "_init_group"), fr(adam, 240, "step"), fr("train.py", 73, "main")}) ==
        MemoryUse::optimizer_state);
  // Parameters: moved by nn.Module._apply, or by transformers' cuda().
  CHECK(memory_use_of({fr(module, 1340, "convert"), fr(module, 900, "_apply"), fr(module, 1355, "to"),
                       fr("train.py", 62, "main")}) == MemoryUse::parameters);
  CHECK(memory_use_of({fr(mu, 3645, "cuda"), fr("train.py", 62, "main")}) == MemoryUse::parameters);
  // The backward pass entered from Python, and an autograd node in a native stack.
  CHECK(memory_use_of({fr(autograd, 353, "backward"), fr("train.py", 72, "main")}) == MemoryUse::backward);
  CHECK(memory_use_of({fr("??", 0, "torch::autograd::generated::MmBackward0::apply")}) == MemoryUse::backward);
  // Activations: under a module's forward, or recomputed by checkpoint.
  CHECK(memory_use_of({fr(linear, 125, "forward"), fr(module, 1775, "_call_impl"), fr("train.py", 71, "main")}) ==
        MemoryUse::activations);
  CHECK(memory_use_of({fr(ckpt, 1120, "recompute_fn")}) == MemoryUse::activations);
  // The program's own tensors; an empty stack.
  CHECK(memory_use_of({fr("train.py", 67, "main")}) == MemoryUse::other);
  CHECK(memory_use_of({}) == MemoryUse::no_stack);
  // Whole path components: a user's helper files are not the framework's.
  CHECK(memory_use_of({fr("my_optimizer_utils.py", 3, "make"), fr("optimization_notes/run.py", 9, "main")}) ==
        MemoryUse::other);
  CHECK(memory_use_of({fr("project/optim/sgd.py", 3, "step")}) == MemoryUse::optimizer_state);
  // The order decides: optimizer state made inside a forward-named wrapper is still optimizer state.
  CHECK(memory_use_of({fr(adam, 182, "_init_group"), fr("wrap.py", 5, "forward")}) == MemoryUse::optimizer_state);
}

TEST_CASE("memory kinds: a state's blocks by kind, and the remedy for the largest", "[kinds]") {
  StackTable t;
  const std::string adam = sp("torch/optim/adam.py"), mu = sp("transformers/modeling_utils.py");
  const std::uint32_t opt = t.intern({fr(adam, 182, "_init_group"), fr("train.py", 73, "main")});
  const std::uint32_t par = t.intern({fr(mu, 3645, "cuda"), fr("train.py", 62, "main")});
  const std::uint32_t act = t.intern({fr("model.py", 40, "forward"), fr("train.py", 71, "main")});
  const std::uint64_t GiB = 1ull << 30;
  // A Llama-like OOM in the first optimizer step: state 5, parameters 4, gradients (no stack) 4.1.
  MemoryUses u =
      memory_uses({{opt, 5 * GiB, 250}, {par, 4 * GiB, 200}, {0, 4 * GiB + GiB / 10, 200}, {act, GiB / 2, 3}}, t);
  REQUIRE(u.rows.size() == 4);
  CHECK(u.rows[0].use == MemoryUse::optimizer_state);
  CHECK(u.rows[1].use == MemoryUse::no_stack);
  CHECK(u.rows[2].use == MemoryUse::parameters);
  CHECK(u.total_bytes == 5 * GiB + 4 * GiB + 4 * GiB + GiB / 10 + GiB / 2);
  CHECK(u.no_stack_like_gradients);  // within 10 % of the parameters' bytes
  CHECK(u.telling());
  const std::string step = next_step_by_use(u);
  CHECK(has(step, "Optimizer state holds the most (5.00 GiB, 37 % of the tensors)"));
  CHECK(has(step, "AdamW8bit"));
  CHECK(has(step, "Then gradients (no Python stack) (4.10 GiB, 30 %)"));
  const std::string text = render_memory_uses_text(u, "By kind:", "  ");
  CHECK(has(text, "  By kind:\n"));
  CHECK(has(text, "Next step by kind of memory: Optimizer state"));
  const auto j = memory_uses_json(u);
  CHECK(j["rows"][0]["kind"] == "optimizer_state");
  CHECK(j["no_stack_like_gradients"] == true);

  // Activations dominate: the remedy is checkpointing; a second kind below a quarter is not named.
  u = memory_uses({{act, 9 * GiB, 200}, {opt, GiB, 300}}, t);
  CHECK(has(next_step_by_use(u), "Activations (forward) holds the most"));
  CHECK(has(next_step_by_use(u), "gradient_checkpointing_enable"));
  CHECK_FALSE(has(next_step_by_use(u), "Then"));
  CHECK_FALSE(u.no_stack_like_gradients);

  // Stacks that tell nothing (the program's own lines, no stack): no table, no advice.
  const std::uint32_t own = t.intern({fr("train.py", 67, "main")});
  u = memory_uses({{own, GiB, 1}, {0, GiB, 1}, {12345, GiB, 1}}, t);  // 12345: not in the table
  CHECK_FALSE(u.telling());
  CHECK(next_step_by_use(u).empty());
  CHECK(render_memory_uses_text(u, "By kind:", "").empty());
  CHECK(u.rows.front().use == MemoryUse::no_stack);  // the unknown id counts as no stack
}
