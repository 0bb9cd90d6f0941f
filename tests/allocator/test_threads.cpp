// 64 threads allocating, freeing, querying and emptying the cache at random on one
// CachingAllocator (the shim's situation in a multi-threaded program), in rounds. Between rounds,
// with every thread parked, the test checks every invariant, that no two live blocks overlap, that
// each live block is found with its size, and that the statistics equal what the threads did.
// Run under the thread sanitizer by the `tsan` preset (docs/reliability.md).
// VRAMTRACE_THREAD_OPS overrides the operations per thread per round.
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdlib>
#include <random>
#include <thread>

#include "test_support.h"

using namespace vramtrace;
using namespace vramtrace::test;

namespace {

constexpr int kThreads = 64;

struct Live {
  DevicePtr ptr = 0;
  std::uint64_t size = 0;
  StreamId stream{};
};

struct ThreadState {
  std::vector<Live> live;
  std::uint64_t allocs = 0, frees = 0, ooms = 0, failures = 0;
  std::uint64_t handed_over = 0;
};

std::uint64_t ops_from_env(std::uint64_t fallback) {
  const char* s = std::getenv("VRAMTRACE_THREAD_OPS");
  return s != nullptr ? std::strtoull(s, nullptr, 10) : fallback;
}

std::uint64_t run_threads(const std::string& conf, std::uint64_t capacity, int rounds, std::uint64_t ops_per_round) {
  SimulatedDevice::Options o;
  o.capacity_bytes = capacity;
  SimulatedDevice dev(o);
  CachingAllocator a(dev, settings_from(conf));

  std::vector<ThreadState> state(kThreads);
  // A mailbox per thread: blocks another thread allocated and this one must free (frees from a
  // thread other than the allocating one, as a data loader or a stream callback does).
  std::vector<std::mutex> mailbox_mu(kThreads);
  std::vector<std::vector<Live>> mailbox(kThreads);
  std::barrier round_start(kThreads + 1), round_end(kThreads + 1);
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> bad_status{0};

  auto worker = [&](int t) {
    std::mt19937_64 rng(1000 + t);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    ThreadState& me = state[t];
    for (;;) {
      round_start.arrive_and_wait();
      if (stop.load()) return;
      for (std::uint64_t i = 0; i < ops_per_round; ++i) {
        const double r = unit(rng);
        if (r < 0.5 && me.live.size() < 8) {
          // Log-uniform sizes from 1 B to 64 MiB: both pools, splits and oversize blocks.
          const auto size = static_cast<std::uint64_t>(std::exp(unit(rng) * std::log(64.0 * kMiB)));
          const StreamId stream{static_cast<std::uint64_t>(t % 4)};
          DevicePtr p = 0;
          const Status s = a.allocate(size, stream, &p);
          if (s == Status::ok) {
            me.live.push_back({p, size, stream});
            ++me.allocs;
            if (unit(rng) < 0.05) a.record_stream(p, StreamId{stream.value + 1});
          } else if (s == Status::out_of_memory) {
            ++me.ooms;
          } else {
            bad_status.fetch_add(1);
          }
        } else if (r < 0.9 && !me.live.empty()) {
          const std::size_t k = rng() % me.live.size();
          const Live l = me.live[k];
          me.live[k] = me.live.back();
          me.live.pop_back();
          if (unit(rng) < 0.2) {
            const int to = static_cast<int>(rng() % kThreads);
            std::lock_guard<std::mutex> g(mailbox_mu[to]);
            mailbox[to].push_back(l);
            ++me.handed_over;
          } else if (a.deallocate(l.ptr) == Status::ok) {
            ++me.frees;
          } else {
            ++me.failures;
          }
        } else if (r < 0.95) {
          std::vector<Live> mine;
          {
            std::lock_guard<std::mutex> g(mailbox_mu[t]);
            mine.swap(mailbox[t]);
          }
          for (const Live& l : mine) (a.deallocate(l.ptr) == Status::ok ? me.frees : me.failures)++;
        } else if (r < 0.97) {
          const DeviceStats s = a.stats();
          if (s.allocated_bytes[kStatAll].current < 0 ||
              s.reserved_bytes[kStatAll].current < s.allocated_bytes[kStatAll].current)
            bad_status.fetch_add(1);
        } else if (r < 0.98) {
          (void)a.snapshot();
          (void)a.cached_free_bytes();
        } else if (r < 0.99 && !me.live.empty()) {
          const Live& l = me.live[rng() % me.live.size()];
          const auto info = a.find(l.ptr);
          if (!info || info->requested_size != l.size) bad_status.fetch_add(1);
        } else if (r < 0.995) {
          a.empty_cache();
        } else {
          dev.complete_events();
        }
      }
      round_end.arrive_and_wait();
    }
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);

  auto check_quiet_state = [&](int round) {
    INFO("conf '" << conf << "' after round " << round);
    REQUIRE(bad_status.load() == 0);
    require_invariants(a);
    std::vector<Live> all;
    for (const auto& s : state) all.insert(all.end(), s.live.begin(), s.live.end());
    for (const auto& box : mailbox) all.insert(all.end(), box.begin(), box.end());
    std::sort(all.begin(), all.end(), [](const Live& x, const Live& y) { return x.ptr < y.ptr; });
    std::uint64_t requested = 0;
    for (std::size_t i = 0; i < all.size(); ++i) {
      const auto info = a.find(all[i].ptr);
      REQUIRE(info.has_value());
      REQUIRE(info->requested_size == all[i].size);
      REQUIRE(info->size >= all[i].size);
      if (i + 1 < all.size()) REQUIRE(all[i].ptr + info->size <= all[i + 1].ptr);  // no overlap
      requested += all[i].size;
    }
    std::uint64_t allocs = 0, frees = 0, ooms = 0, failures = 0;
    for (const auto& s : state) {
      allocs += s.allocs;
      frees += s.frees;
      ooms += s.ooms;
      failures += s.failures;
    }
    REQUIRE(failures == 0);
    const DeviceStats st = a.stats();
    CHECK(st.allocation[kStatAll].current == static_cast<std::int64_t>(all.size()));
    CHECK(st.allocation[kStatAll].allocated == static_cast<std::int64_t>(allocs));
    CHECK(st.allocation[kStatAll].freed() == static_cast<std::int64_t>(frees));
    // A block freed while another stream still uses it (record_stream) stays active, and its
    // requested bytes stay counted, until its event completes (PyTorch's free_block rule).
    std::uint64_t pending_requested = 0;
    for (const auto& seg : a.snapshot().segments)
      for (const auto& b : seg.blocks)
        if (b.state == BlockState::active_pending_free) pending_requested += b.requested_size;
    CHECK(st.requested_bytes[kStatAll].current == static_cast<std::int64_t>(requested + pending_requested));
    CHECK(st.num_ooms == static_cast<std::int64_t>(ooms));
    return ooms;
  };

  std::uint64_t ooms = 0;
  for (int round = 0; round < rounds; ++round) {
    round_start.arrive_and_wait();
    round_end.arrive_and_wait();
    ooms = check_quiet_state(round);
  }
  stop.store(true);
  round_start.arrive_and_wait();
  for (auto& th : threads) th.join();

  // Free everything; the allocator must end empty and consistent.
  for (auto& s : state)
    for (const Live& l : s.live) REQUIRE(a.deallocate(l.ptr) == Status::ok);
  for (auto& box : mailbox)
    for (const Live& l : box) REQUIRE(a.deallocate(l.ptr) == Status::ok);
  dev.complete_events();
  a.empty_cache();
  require_invariants(a);
  const DeviceStats st = a.stats();
  CHECK(st.allocated_bytes[kStatAll].current == 0);
  CHECK(st.requested_bytes[kStatAll].current == 0);
  CHECK(st.reserved_bytes[kStatAll].current == 0);
  CHECK(dev.used_bytes() == 0);
  std::uint64_t allocs = 0;
  for (const auto& s : state) allocs += s.allocs;
  INFO(allocs << " allocations, " << ooms << " OOMs");
  CHECK(allocs > 0);
  return ooms;
}

}  // namespace

TEST_CASE("64 threads allocate and free at random on one allocator", "[threads]") {
  const std::uint64_t ops = ops_from_env(1000);
  SECTION("default settings, plenty of memory") { run_threads("", 80 * kGiB, 4, ops); }
  SECTION("default settings, tight memory: OOMs under contention") { CHECK(run_threads("", 1 * kGiB, 4, ops) > 0); }
  SECTION("expandable segments") { run_threads("expandable_segments:True", 6 * kGiB, 4, ops); }
  SECTION("max_split_size_mb and garbage collection") {
    run_threads("max_split_size_mb:32,garbage_collection_threshold:0.6,per_process_memory_fraction:0.5", 8 * kGiB, 4,
                ops);
  }
}
