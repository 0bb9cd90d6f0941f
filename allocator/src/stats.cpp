// Flattening of DeviceStats into PyTorch's memory_stats() names.
#include <algorithm>

#include "vramtrace/snapshot.h"
#include "vramtrace/stats.h"

namespace vramtrace {

void DeviceStats::reset_peaks() noexcept {
#define VRAMTRACE_RESET_POOL(name) \
  for (auto& s : name) s.reset_peak();
  VRAMTRACE_POOL_STATS(VRAMTRACE_RESET_POOL)
#undef VRAMTRACE_RESET_POOL
#define VRAMTRACE_RESET_SINGLE(name) name.reset_peak();
  VRAMTRACE_SINGLE_STATS(VRAMTRACE_RESET_SINGLE)
#undef VRAMTRACE_RESET_SINGLE
}

namespace {
void add_stat(std::vector<std::pair<std::string, std::int64_t>>& out, const std::string& prefix, const Stat& s) {
  out.emplace_back(prefix + ".current", s.current);
  out.emplace_back(prefix + ".peak", s.peak);
  out.emplace_back(prefix + ".allocated", s.allocated);
  out.emplace_back(prefix + ".freed", s.freed());
}
}  // namespace

std::vector<std::pair<std::string, std::int64_t>> flatten_stats(const DeviceStats& s) {
  std::vector<std::pair<std::string, std::int64_t>> out;
  out.reserve(128);
#define VRAMTRACE_FLAT_POOL(name)                         \
  add_stat(out, #name ".all", s.name[kStatAll]);          \
  add_stat(out, #name ".large_pool", s.name[kStatLarge]); \
  add_stat(out, #name ".small_pool", s.name[kStatSmall]);
  VRAMTRACE_POOL_STATS(VRAMTRACE_FLAT_POOL)
#undef VRAMTRACE_FLAT_POOL
#define VRAMTRACE_FLAT_SINGLE(name) add_stat(out, #name, s.name);
  VRAMTRACE_SINGLE_STATS(VRAMTRACE_FLAT_SINGLE)
#undef VRAMTRACE_FLAT_SINGLE
#define VRAMTRACE_FLAT_COUNTER(name) out.emplace_back(#name, s.name);
  VRAMTRACE_COUNTERS(VRAMTRACE_FLAT_COUNTER)
#undef VRAMTRACE_FLAT_COUNTER
  out.emplace_back("max_split_size", s.max_split_size);
  std::sort(out.begin(), out.end());
  return out;
}

std::uint64_t Snapshot::largest_free_block() const noexcept {
  std::uint64_t best = 0;
  for (const auto& seg : segments)
    for (const auto& b : seg.blocks)
      if (b.state == BlockState::inactive && b.mapped) best = std::max(best, b.size);
  return best;
}

}  // namespace vramtrace
