// The typed figures of check and diff: taken from the model, they are what a summary document
// written from the same model says.
#include <catch2/catch.hpp>

#include <string>

#include "analyses/figures.h"
#include "analyses/summary.h"
#include "model/trace_model.h"
#include "readers/open_trace.h"

using namespace vramtrace;

namespace {
const std::string kData = std::string(VT_CHECK_SOURCE_DIR) + "/..";
}

TEST_CASE("figures from the model equal those read back from its summary document", "[figures]") {
  const char* traces[] = {
      "/reporter-reports/data/small.vramtrace.jsonl", "/data/check/c11_fresh.torchtrace.jsonl",
      "/data/check/c11_resumed.torchtrace.jsonl",     "/data/torch-h200/gpt2_train.torchtrace.jsonl.gz",
      "/fuzz/corpus/trace/vramtrace-cut.jsonl",       "/fuzz/corpus/trace/vramtrace-small.jsonl",
      "/fuzz/corpus/trace/snapshot-proto4.pickle",
  };
  for (const char* t : traces) {
    CAPTURE(t);
    auto reader = open_trace(kData + t);
    std::vector<TraceModel> models;
    models.push_back(build_trace_model(*reader));
    const auto from_model = figures_from_models(models);
    const auto from_json = figures_from_summary_json(summary_json(models), "summary");
    REQUIRE(from_model.size() == 1);
    CHECK_FALSE(from_model.front().devices.empty());
    CHECK(from_model == from_json);
  }
}

TEST_CASE("a summary document's figures: absent and non-integer ones are unset", "[figures]") {
  auto j = nlohmann::json::parse(R"({"traces": [{"path": "a.jsonl", "rank": 3, "incomplete": true, "devices": [
      {"device": 0, "stats": {"reserved_bytes.all.peak": 2000, "active_bytes.all.peak": "x"}, "ooms": 2,
       "peak": {"largest_free_block_bytes": 512}}]}, {"devices": []}]})");
  auto f = figures_from_summary_json(j, "x.json");
  REQUIRE(f.size() == 2);
  CHECK(f[0].path == "a.jsonl");
  CHECK(f[0].rank.empty());
  CHECK(f[0].incomplete);
  CHECK(f[0].incomplete_reason == "cut last line");
  REQUIRE(f[0].devices.size() == 1);
  CHECK(f[0].devices[0].reserved_bytes_peak == 2000);
  CHECK_FALSE(f[0].devices[0].allocated_bytes_peak);
  CHECK_FALSE(f[0].devices[0].active_bytes_peak);
  CHECK_FALSE(f[0].devices[0].num_ooms);
  CHECK(f[0].devices[0].oom_events == 2);
  CHECK(f[0].devices[0].largest_free_block_at_peak_bytes == 512u);
  CHECK_FALSE(f[0].devices[0].largest_free_block_at_end_bytes);
  CHECK_FALSE(f[1].path);
  CHECK_THROWS_WITH(
      figures_from_summary_json(
          nlohmann::json::parse(R"({"traces": [{"devices": [{"device": 0, "stats": {"num_ooms": 1.5}}]}]})"), "y"),
      Catch::Contains("y") && Catch::Contains("num_ooms"));
}
