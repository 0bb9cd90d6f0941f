// Fault injection into the simulated device under a replay of real PyTorch traces
// (tests/data/torch-h200/*.torchtrace.jsonl.gz): the device fails its Nth allocation, or every
// allocation after the Nth, for every N up to the number of device allocations the trace needs.
// Whatever fails, the allocator must never corrupt its state (every invariant is checked after
// each of the first 64 failed allocations of a run, every 16th after that, and at the end), must
// count each OOM exactly once, must leave the caller's pointer
// untouched on failure, and frees of the blocks it did hand out must keep working.
// docs/reliability.md lists these runs.
#include <zlib.h>

#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "test_support.h"

using namespace vramtrace;
using namespace vramtrace::test;

namespace {

struct TraceOp {
  Action action;
  std::uint64_t addr;
  std::uint64_t size;
  std::uint64_t stream;
};

struct Trace {
  std::vector<TraceOp> ops;
  std::int64_t recorded_device_allocs = -1;  ///< header stats num_device_alloc
  /// The trace's segment_alloc (size, address) in order: the simulated device's address plan, so
  /// that best fit breaks ties as it did in the recorded program (SimulatedDevice::Options).
  std::vector<std::pair<std::uint64_t, DevicePtr>> segments;
};

// Reads PyTorch's allocator history as JSON lines (gzip), alloc and free entries only.
const Trace& load_trace(const std::string& name) {
  static std::map<std::string, Trace> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  const std::string path = std::string(VRAMTRACE_TEST_DATA_DIR) + "/torch-h200/" + name + ".torchtrace.jsonl.gz";
  gzFile f = gzopen(path.c_str(), "rb");
  INFO(path);
  REQUIRE(f != nullptr);
  Trace t;
  std::string line;
  char buf[1 << 16];
  for (;;) {
    line.clear();
    bool got = false;
    while (gzgets(f, buf, sizeof buf) != nullptr) {
      got = true;
      line += buf;
      if (!line.empty() && line.back() == '\n') break;
    }
    if (!got) break;
    const auto j = nlohmann::json::parse(line);
    if (j.contains("kind")) {
      if (j.contains("stats") && j["stats"].contains("num_device_alloc"))
        t.recorded_device_allocs = j["stats"]["num_device_alloc"].get<std::int64_t>();
      continue;
    }
    const auto action = parse_action(j.at("action").get<std::string>());
    REQUIRE(action.has_value());
    if (*action == Action::segment_alloc)
      t.segments.emplace_back(j.at("size").get<std::uint64_t>(), j.at("addr").get<std::uint64_t>());
    if (*action != Action::alloc && *action != Action::free_requested && *action != Action::free_completed) continue;
    t.ops.push_back({*action, j.at("addr").get<std::uint64_t>(), j.at("size").get<std::uint64_t>(),
                     j.value("stream", std::uint64_t{0})});
  }
  gzclose(f);
  REQUIRE(!t.ops.empty());
  return cache.emplace(name, std::move(t)).first->second;
}

struct Outcome {
  std::uint64_t ooms = 0;           ///< allocations that returned out_of_memory
  std::uint64_t device_allocs = 0;  ///< successful device allocations (allocate + map)
  DeviceStats stats;
};

// Replays `trace` with `conf` on a simulated device with `o`'s fault injection, checking the
// allocator's state after every failure and at the end.
Outcome replay(const Trace& trace, const std::string& conf, SimulatedDevice::Options o, const std::string& what) {
  // Catch2's INFO/REQUIRE cost more than an allocator call: the loop checks with plain ifs and
  // only builds a message on failure.
  auto fail = [&](std::uint64_t index, const std::string& why) { FAIL(what << ": trace op " << index << ": " << why); };
  o.address_plan = trace.segments;
  SimulatedDevice dev(o);
  CachingAllocator a(dev, settings_from(conf));
  std::unordered_map<std::uint64_t, DevicePtr> live;  // trace address -> our block
  std::unordered_map<std::uint64_t, DevicePtr> pending;
  Outcome out;
  std::uint64_t index = 0;
  std::string error;
  for (const TraceOp& op : trace.ops) {
    ++index;
    switch (op.action) {
      case Action::alloc: {
        constexpr DevicePtr kSentinel = 0xdeadbeef;
        DevicePtr p = kSentinel;
        const Status s = a.allocate(op.size, StreamId{op.stream}, &p);
        if (s == Status::ok) {
          if (p == 0 && op.size != 0) fail(index, "allocate returned ok and a null pointer");
          if (op.size != 0 && !live.emplace(op.addr, p).second) fail(index, "trace address allocated twice");
        } else {
          if (s != Status::out_of_memory) fail(index, std::string("allocate returned ") + status_name(s));
          if (p != kSentinel) fail(index, "a failed allocate changed the output pointer");
          ++out.ooms;
          // Every failure for the first 64 of a run, then every 16th (runs that fail every device
          // allocation have thousands of OOMs), and always at the end.
          if ((out.ooms <= 64 || out.ooms % 16 == 0) && !a.check_invariants(error))
            fail(index, "after OOM " + std::to_string(out.ooms) + ": " + error);
          // The trace frees this address later; that free is skipped (the program would have
          // died here; replay goes on as vramtrace replay does).
        }
        break;
      }
      case Action::free_requested: {
        auto it = live.find(op.addr);
        if (it == live.end()) break;  // its allocation failed
        if (a.deallocate_deferred(it->second) != Status::ok) fail(index, "deallocate_deferred failed");
        pending.emplace(op.addr, it->second);
        live.erase(it);
        break;
      }
      case Action::free_completed: {
        auto it = pending.find(op.addr);
        if (it == pending.end()) break;
        if (a.complete_deferred_free(it->second) != Status::ok) fail(index, "complete_deferred_free failed");
        pending.erase(it);
        break;
      }
      default:
        break;
    }
  }
  INFO(what);
  require_invariants(a);
  // A pointer that was never handed out is refused and changes nothing.
  REQUIRE(a.deallocate(0x1234500) == Status::invalid_value);
  out.stats = a.stats();
  out.device_allocs = dev.device_allocations();
  REQUIRE(out.stats.num_ooms == static_cast<std::int64_t>(out.ooms));
  // Everything still live is freed, the cache emptied: nothing may remain on the device.
  for (const auto& [addr, p] : pending) REQUIRE(a.complete_deferred_free(p) == Status::ok);
  for (const auto& [addr, p] : live) REQUIRE(a.deallocate(p) == Status::ok);
  dev.complete_events();
  a.empty_cache();
  require_invariants(a);
  const DeviceStats end = a.stats();
  REQUIRE(end.allocated_bytes[kStatAll].current == 0);
  REQUIRE(end.reserved_bytes[kStatAll].current == 0);
  REQUIRE(dev.used_bytes() == 0);
  return out;
}

void inject_everywhere(const std::string& trace_name, const std::string& conf) {
  const Trace& trace = load_trace(trace_name);
  const Outcome base = replay(trace, conf, {}, trace_name + " '" + conf + "' without faults");
  REQUIRE(base.ooms == 0);
  const std::uint64_t k = base.device_allocs;
  REQUIRE(k > 0);
  if (conf.empty() && trace.recorded_device_allocs >= 0)
    CHECK(base.stats.num_device_alloc == trace.recorded_device_allocs);

  std::uint64_t total_ooms = 0, retries = 0;
  for (std::uint64_t n = 1; n <= k + 1; ++n) {
    SimulatedDevice::Options o;
    o.fail_nth_allocation = n;
    const std::string what = trace_name + " '" + conf + "' failing device allocation " + std::to_string(n);
    const Outcome r = replay(trace, conf, o, what);
    INFO(what);
    if (n <= k) {
      // One failure, then the allocator releases cached blocks and tries again: the second try
      // succeeds. With max_split_size_mb, releasing the oversize cached blocks first
      // (release_available_cached_blocks) may already make room, which PyTorch does not count as
      // a retry; otherwise it is one counted retry (num_alloc_retries).
      CHECK(r.ooms == 0);
      if (conf.find("max_split_size_mb") == std::string::npos)
        CHECK(r.stats.num_alloc_retries == 1);
      else
        CHECK(r.stats.num_alloc_retries <= 1);
      retries += static_cast<std::uint64_t>(r.stats.num_alloc_retries);
    } else {
      // Never reached: exactly the run without faults.
      CHECK(r.stats.num_alloc_retries == 0);
      CHECK(r.stats.reserved_bytes[kStatAll].peak == base.stats.reserved_bytes[kStatAll].peak);
      CHECK(r.device_allocs == base.device_allocs);
    }
  }
  for (std::uint64_t n = 0; n <= k; ++n) {
    SimulatedDevice::Options o;
    if (n == 0)
      o.capacity_bytes = 1;  // every device allocation fails ("after 0" means never in Options)
    else
      o.fail_after_allocations = n;
    const std::string what = trace_name + " '" + conf + "' failing every device allocation after " + std::to_string(n);
    const Outcome r = replay(trace, conf, o, what);
    INFO(what);
    CHECK(r.device_allocs <= n);
    if (n < k)
      CHECK(r.ooms > 0);  // the run needed more than n device allocations
    else
      CHECK(r.ooms == 0);
    total_ooms += r.ooms;
  }
  INFO(trace_name << " '" << conf << "': " << k << " device allocations; " << total_ooms
                  << " OOMs over the fail-after runs; " << retries << " retries over the fail-nth runs");
  CHECK(total_ooms > 0);
}

}  // namespace

TEST_CASE("device allocation failures at every point of gpt2_train", "[fault]") {
  SECTION("default settings") { inject_everywhere("gpt2_train", ""); }
  SECTION("expandable segments") { inject_everywhere("gpt2_train", "expandable_segments:True"); }
  SECTION("max_split_size_mb") { inject_everywhere("gpt2_train", "max_split_size_mb:128"); }
}

TEST_CASE("device allocation failures at every point of resnet50_train", "[fault]") {
  SECTION("default settings") { inject_everywhere("resnet50_train", ""); }
  SECTION("expandable segments, garbage collection") {
    inject_everywhere("resnet50_train",
                      "expandable_segments:True,garbage_collection_threshold:0.5,per_process_memory_fraction:0.9");
  }
}
