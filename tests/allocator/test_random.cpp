// A seeded random sequence of allocations and frees over many sizes and streams, with every
// invariant checked after each step (no overlap, blocks tile segments, free lists consistent,
// statistics equal a recount from the segments). VRAMTRACE_RANDOM_STEPS overrides the length
// (sanitizer builds use a shorter run).
#include <cmath>
#include <cstdlib>
#include <random>

#include "test_support.h"

using namespace vramtrace;
using namespace vramtrace::test;

namespace {

std::uint64_t steps_from_env(std::uint64_t fallback) {
  const char* s = std::getenv("VRAMTRACE_RANDOM_STEPS");
  return s != nullptr ? std::strtoull(s, nullptr, 10) : fallback;
}

struct Live {
  DevicePtr ptr;
  std::uint64_t size;
  bool deferred;
};

void run_random(const std::string& conf, std::uint64_t steps, std::uint64_t seed, std::uint64_t capacity) {
  SimulatedDevice::Options o;
  o.capacity_bytes = capacity;
  o.events_complete_immediately = false;
  SimulatedDevice dev(o);
  CachingAllocator a(dev, settings_from(conf));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<Live> live;
  std::uint64_t ooms = 0, allocs = 0;
  for (std::uint64_t step = 0; step < steps; ++step) {
    const double r = unit(rng);
    if (live.size() < 48 && (r < 0.55 || live.empty())) {
      // Sizes log-uniform from 1 B to 256 MiB, with a bias to exact powers of two and 512 multiples.
      auto size = static_cast<std::uint64_t>(std::exp(unit(rng) * std::log(256.0 * kMiB)));
      if (unit(rng) < 0.2) size = std::bit_floor(std::max<std::uint64_t>(size, 1));
      const StreamId stream{static_cast<std::uint64_t>(rng() % 3)};
      DevicePtr p = 0;
      const Status s = a.allocate(size, stream, &p);
      if (s == Status::ok) {
        live.push_back({p, size, false});
        ++allocs;
        if (unit(rng) < 0.1) a.record_stream(p, StreamId{stream.value + 1});
      } else {
        REQUIRE(s == Status::out_of_memory);
        ++ooms;
      }
    } else if (r < 0.95 && !live.empty()) {
      const std::size_t i = rng() % live.size();
      Live l = live[i];
      if (l.deferred) {
        REQUIRE(a.complete_deferred_free(l.ptr) == Status::ok);
        live[i] = live.back();
        live.pop_back();
      } else if (unit(rng) < 0.1) {
        REQUIRE(a.deallocate_deferred(l.ptr) == Status::ok);
        live[i].deferred = true;
      } else {
        REQUIRE(a.deallocate(l.ptr) == Status::ok);
        live[i] = live.back();
        live.pop_back();
      }
    } else if (r < 0.985) {
      dev.complete_events();
    } else {
      a.empty_cache();
    }
    std::string error;
    if (!a.check_invariants(error)) {
      INFO("conf '" << conf << "' seed " << seed << " step " << step << ": " << error);
      REQUIRE(false);
    }
  }
  INFO("conf '" << conf << "': " << allocs << " allocations, " << ooms << " OOMs");
  CHECK(allocs > steps / 4);
  const auto st = a.stats();
  CHECK(st.num_ooms == static_cast<std::int64_t>(ooms));
  CHECK(st.allocation[kStatAll].current ==
        static_cast<std::int64_t>(live.size() -
                                  std::count_if(live.begin(), live.end(), [](const Live& l) { return l.deferred; })));
}

}  // namespace

TEST_CASE("random allocation sequences keep every invariant", "[random]") {
  const std::uint64_t steps = steps_from_env(2'000'000);
  const std::uint64_t per = std::max<std::uint64_t>(steps / 6, 1);
  SECTION("PyTorch policy") { run_random("", per, 1, 4 * kGiB); }
  SECTION("max_split_size_mb") { run_random("max_split_size_mb:64", per, 2, 4 * kGiB); }
  SECTION("roundup_power2_divisions") { run_random("roundup_power2_divisions:[1:2,64:4,>:8]", per, 3, 4 * kGiB); }
  SECTION("expandable segments") { run_random("expandable_segments:True", per, 4, 4 * kGiB); }
  SECTION("garbage collection under a fraction") {
    run_random("per_process_memory_fraction:0.8,garbage_collection_threshold:0.6", per, 5, 4 * kGiB);
  }
  SECTION("a small device that runs out often") { run_random("", per, 6, 1 * kGiB); }
}
