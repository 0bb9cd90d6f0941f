// A synthetic training loop as allocator trace records, for growth and check tests: parameters,
// per-step activations freed in reverse order, optional warm-up state, a leak, and noise.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "readers/open_trace.h"
#include "vramtrace/types.h"

namespace vramtrace::test {

struct TrainingShape {
  int steps = 30;
  std::uint64_t params_bytes = 500 * kMiB;
  int activations = 20;  ///< per step; their sum is activation_bytes
  std::uint64_t activation_bytes = 100 * kMiB;
  std::uint64_t leak_per_step = 0;  ///< kept forever each step
  int warmup_growth_steps = 0;      ///< steps that each keep warmup_bytes for good
  std::uint64_t warmup_bytes = 50 * kMiB;
  bool marks = true;   ///< a mark at the start of each step
  bool noise = false;  ///< random temporaries, and a cache that comes and goes
  std::uint32_t seed = 1;
};

/// Records of the loop, in order, device 0, stream 0, times 1 us apart.
inline std::vector<TraceRecord> training_trace(const TrainingShape& s) {
  std::vector<TraceRecord> out;
  std::int64_t t = 1'000'000;
  std::uint64_t next_addr = 0x7f0000000000;
  std::mt19937_64 rng(s.seed);
  auto alloc = [&](std::uint64_t size) {
    DevicePtr a = next_addr;
    // Room for a segment of the size rounded to 2 MiB (tests write one per block), plus a gap.
    next_addr += ((size + 2 * kMiB - 1) & ~(2 * kMiB - 1)) + 2 * kMiB;
    out.push_back({Action::alloc, a, size, 0, t += 1000, 0, 0});
    return std::pair{a, size};
  };
  auto free = [&](std::pair<DevicePtr, std::uint64_t> b) {
    out.push_back({Action::free_requested, b.first, b.second, 0, t += 1000, 0, 0});
    out.push_back({Action::free_completed, b.first, b.second, 0, t += 1000, 0, 0});
  };
  auto mark = [&]() { out.push_back({Action::mark, 0, 0, 0, t += 1000, 0, 0}); };
  alloc(s.params_bytes);
  std::vector<std::pair<DevicePtr, std::uint64_t>> cache;
  for (int step = 0; step < s.steps; ++step) {
    if (s.marks) mark();
    std::vector<std::pair<DevicePtr, std::uint64_t>> acts;
    for (int i = 0; i < s.activations; ++i) {
      acts.push_back(alloc(s.activation_bytes / static_cast<std::uint64_t>(s.activations)));
      if (s.noise && i == s.activations / 2) {
        // A temporary of random size (0-8 MiB) and random small allocations, freed at once.
        auto tmp = alloc(512 + rng() % (8 * kMiB));
        int small = static_cast<int>(rng() % 3);
        for (int k = 0; k < small; ++k) free(alloc(512 + rng() % 4096));
        free(tmp);
      }
    }
    if (step < s.warmup_growth_steps) alloc(s.warmup_bytes);
    if (s.leak_per_step) alloc(s.leak_per_step);
    if (s.noise) {
      // A cache entry of random size that lives until the next step: +/- up to 1 MiB at the boundary.
      for (auto& c : cache) free(c);
      cache.clear();
      cache.push_back(alloc(rng() % kMiB + 512));
    }
    for (auto it = acts.rbegin(); it != acts.rend(); ++it) free(*it);
  }
  if (s.marks) mark();
  return out;
}

}  // namespace vramtrace::test
