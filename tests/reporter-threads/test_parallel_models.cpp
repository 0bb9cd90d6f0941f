// parallel_map's contract (order, the exception a sequential loop would have met first, one
// worker = the caller's thread), and models of real traces built on several threads at once equal
// the same models built one after another.
#include <atomic>
#include <catch2/catch.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "model/load_models.h"
#include "model/parallel_map.h"

using namespace vramtrace;

TEST_CASE("parallel_map returns the results in index order") {
  for (unsigned workers : {1u, 2u, 4u, 16u}) {
    INFO(workers);
    const auto out = parallel_map<std::size_t>(
        200, [](std::size_t i) { return i * i; }, workers);
    REQUIRE(out.size() == 200);
    for (std::size_t i = 0; i < out.size(); ++i) CHECK(out[i] == i * i);
  }
  CHECK(parallel_map<int>(
            0, [](std::size_t) { return 1; }, 4)
            .empty());
}

TEST_CASE("parallel_map rethrows the failure of the lowest index, after every call returned") {
  std::atomic<int> running{0};
  for (int round = 0; round < 20; ++round) {
    try {
      parallel_map<int>(
          100,
          [&running](std::size_t i) {
            ++running;
            std::this_thread::yield();
            --running;
            if (i == 70 || i == 30 || i == 31) throw std::runtime_error(std::to_string(i));
            return static_cast<int>(i);
          },
          4);
      FAIL("no exception");
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()) == "30");
    }
    CHECK(running.load() == 0);
  }
}

TEST_CASE("parallel_map with one worker runs on the caller's thread, in order, and stops at a failure") {
  const auto me = std::this_thread::get_id();
  std::vector<std::size_t> order;
  CHECK_THROWS_AS(parallel_map<int>(
                      10,
                      [&](std::size_t i) {
                        CHECK(std::this_thread::get_id() == me);
                        order.push_back(i);
                        if (i == 3) throw std::logic_error("3");
                        return 0;
                      },
                      1),
                  std::logic_error);
  CHECK(order == std::vector<std::size_t>{0, 1, 2, 3});
}

TEST_CASE("map_workers: never more than the tasks, at least one, VRAMTRACE_JOBS when valid") {
  CHECK(map_workers(0) == 1);
  CHECK(map_workers(1) == 1);
  CHECK(map_workers(1000) >= 1);
  CHECK(map_workers(1000) <= 1024);
}

TEST_CASE("models of real traces built on several threads equal those built one by one") {
  const std::string dir = VRAMTRACE_TEST_DATA_DIR;
  std::vector<std::string> paths = {
      dir + "/torch-h200/gpt2_train.torchtrace.jsonl.gz",
      dir + "/torch-h200/resnet50_train.torchtrace.jsonl.gz",
      dir + "/torch-h200/encoder_varlen.snapshot.pickle",
      dir + "/oom/plain_oom.vramtrace.jsonl",
      dir + "/oom/retries.vramtrace.jsonl",
      dir + "/oom/full_run.torchtrace.jsonl",
      dir + "/torch-h200/gpt2_run.snapshot.pickle.zst",
  };
  // Each trace twice, so that two threads read the same file at the same time.
  const std::size_t n = paths.size();
  for (std::size_t i = 0; i < n; ++i) paths.push_back(paths[i]);
  auto figures = [](const TraceModel& m) {
    std::vector<std::int64_t> f;
    for (const auto& d : m.devices) {
      f.push_back(d.device);
      f.push_back(static_cast<std::int64_t>(d.events));
      f.push_back(d.stats.allocated_bytes[kStatAll].peak);
      f.push_back(d.stats.reserved_bytes[kStatAll].peak);
      f.push_back(d.at_peak.stats.allocated_bytes[kStatAll].current);
      f.push_back(static_cast<std::int64_t>(d.at_peak.layout.segments.size()));
      f.push_back(static_cast<std::int64_t>(d.at_peak.biggest.size()));
      f.push_back(static_cast<std::int64_t>(d.timeline.size()));
      f.push_back(static_cast<std::int64_t>(d.oom_count.ooms));
    }
    return f;
  };
  std::vector<std::vector<std::int64_t>> one_by_one;
  for (const auto& p : paths) one_by_one.push_back(figures(load_models({p}).front()));
  const auto together = parallel_map<std::vector<std::int64_t>>(
      paths.size(), [&](std::size_t i) { return figures(load_models({paths[i]}).front()); }, 4);
  REQUIRE(together.size() == paths.size());
  for (std::size_t i = 0; i < paths.size(); ++i) {
    INFO(paths[i]);
    CHECK(!together[i].empty());
    CHECK(together[i] == one_by_one[i]);
  }
  // drop_detail keeps the figures the process x device view reads.
  TraceModel m = load_models({paths[0]}).front();
  const auto peak = m.devices.front().stats.reserved_bytes[kStatAll].peak;
  drop_detail(m);
  CHECK(m.devices.front().stats.reserved_bytes[kStatAll].peak == peak);
  CHECK(m.devices.front().at_peak.layout.segments.empty());
  CHECK(m.devices.front().timeline.empty());
}
