// The model on the real H200 traces: its figures must equal the memory_stats() PyTorch recorded.
#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "model/load_models.h"
#include "model/trace_model.h"
#include "peak_check.h"
#include "readers/open_trace.h"

using namespace vramtrace;

namespace {
std::map<std::string, std::int64_t> recorded(const TraceModel& m) {
  std::map<std::string, std::int64_t> out;
  for (const auto& [k, v] : m.header.recorded_stats) out[k] = v;
  return out;
}
}  // namespace

TEST_CASE("gpt2 and resnet50 traces: figures equal PyTorch's memory_stats()", "[model][real]") {
  for (const char* name : {"gpt2_train", "resnet50_train"}) {
    INFO(name);
    auto reader = open_trace(std::string(VRAMTRACE_TEST_DATA_DIR) + "/torch-h200/" + name + ".torchtrace.jsonl.gz");
    auto m = build_trace_model(*reader);
    REQUIRE(m.devices.size() == 1);
    const auto& st = m.devices[0].stats;
    auto rec = recorded(m);
    REQUIRE(rec.count("allocated_bytes.all.peak"));
    CHECK(st.allocated_bytes[kStatAll].peak == rec["allocated_bytes.all.peak"]);
    CHECK(st.reserved_bytes[kStatAll].peak == rec["reserved_bytes.all.peak"]);
    CHECK(st.requested_bytes[kStatAll].peak == rec["requested_bytes.all.peak"]);
    CHECK(st.active_bytes[kStatAll].peak == rec["active_bytes.all.peak"]);
    CHECK(st.allocation[kStatAll].allocated == rec["allocation.all.allocated"]);
    CHECK(st.num_device_alloc == rec["num_device_alloc"]);
    CHECK(st.segment[kStatAll].peak == rec["segment.all.peak"]);
    if (rec.count("inactive_split_bytes.all.peak"))
      CHECK(st.inactive_split_bytes[kStatAll].peak == rec["inactive_split_bytes.all.peak"]);
    CHECK(st.allocated_bytes[kStatAll].current == rec["allocated_bytes.all.current"]);
    CHECK(st.reserved_bytes[kStatAll].current == rec["reserved_bytes.all.current"]);
    CHECK(m.devices[0].layout_conflicts == 0);
    CHECK(m.devices[0].orphan_allocs == 0);
    const auto& peak = m.devices[0].at_peak;
    REQUIRE(peak.captured);
    CHECK(peak.stats.allocated_bytes[kStatAll].current == rec["allocated_bytes.all.peak"]);
    CHECK(peak.biggest.size() == 10);
  }
}

TEST_CASE("snapshot pickle: the model reaches PyTorch's recorded peaks", "[model][real][snapshot]") {
  auto reader = open_trace(std::string(VRAMTRACE_TEST_DATA_DIR) + "/torch-h200/encoder_varlen.snapshot.pickle");
  auto m = build_trace_model(*reader);
  REQUIRE(m.devices.size() >= 1);
  const auto& st = m.devices[0].stats;
  // tests/data/torch-h200/README.md: peak allocated 1598815744 B, peak reserved 2000683008 B.
  CHECK(st.allocated_bytes[kStatAll].peak == 1598815744);
  CHECK(st.reserved_bytes[kStatAll].peak == 2000683008);
  CHECK(m.devices[0].layout_conflicts == 0);
}

TEST_CASE("the layout at the peak equals the end state of the trace cut at the peak", "[model][real][peak]") {
  // Note [the layout at the peak]: taken through the journal, not copied at each new peak.
  for (const char* name : {"gpt2_train.torchtrace.jsonl.gz", "resnet50_train.torchtrace.jsonl.gz"}) {
    INFO(name);
    auto reader = open_trace(std::string(VRAMTRACE_TEST_DATA_DIR) + "/torch-h200/" + name);
    std::vector<TraceRecord> records;
    TraceRecord r;
    while (reader->next(r)) records.push_back(r);
    const TraceModel m = testing::check_peak_layouts(records, reader->header());
    REQUIRE(!m.devices.empty());
    CHECK(!m.devices[0].at_peak.layout.segments.empty());
  }
}

TEST_CASE("a vramtrace trace written by the shim (killed: no trailer) is modelled", "[model][vramtrace]") {
  auto models = load_models({std::string(VRAMTRACE_REPORTS_TEST_DIR) + "/data/small.vramtrace.jsonl"});
  REQUIRE(models.size() == 1);
  const auto& m = models[0];
  CHECK(m.header.format == "vramtrace");
  CHECK(m.incomplete);  // no trailer
  REQUIRE(m.devices.size() == 1);
  const auto& d = m.devices[0];
  // block sizes from the layout equal the "b" the shim recorded: 1024 + 5.5 MiB + 14.5 MiB (not split)
  CHECK(d.stats.allocated_bytes[kStatAll].peak == 1024 + 5767168 + 15204352);
  CHECK(d.stats.allocated_bytes[kStatAll].current == 5767168 + 15204352);
  CHECK(d.stats.reserved_bytes[kStatAll].current == 22 << 20);
  CHECK(m.header.device_total_bytes == 1024u << 20);
  bool mark = false;
  for (const auto& mk : d.markers) mark |= mk.kind == "mark";
  CHECK(mark);
  CHECK(d.layout_conflicts == 0);
}

TEST_CASE("runs that died of an OOM: every statistic equals PyTorch's memory_stats()", "[model][real][oom]") {
  // The fixtures of tests/data/oom: PyTorch's history of a real run and, in the sidecar, the
  // memory_stats() it reported at the end. Totals too (allocated, freed), not only current and
  // peak: a model that counted a segment's share once out and once in at each event would
  // still agree on those.
  for (const char* run : {"bert_16g/bert.485", "encoder_10g/encoder.484", "llama_t4/llama.470"}) {
    INFO(run);
    const std::string base = std::string(VRAMTRACE_TEST_DATA_DIR) + "/oom/" + run + ".torch.pickle";
    auto reader = open_trace(base + ".gz");
    auto m = build_trace_model(*reader);
    REQUIRE(m.devices.size() == 1);
    std::ifstream in(base + ".json");
    REQUIRE(in);
    const nlohmann::json sidecar = nlohmann::json::parse(in);
    const nlohmann::json& recorded_stats = sidecar.at("devices").at(0).at("memory_stats");
    std::size_t compared = 0;
    for (const auto& [key, value] : flatten_stats(m.devices[0].stats)) {
      // num_sync_all_streams is in no trace; PyTorch's history has no entry for a retry, so the
      // retries come from the sidecar, which `summary` reads beside the history (oom_count.h).
      if (key == "num_sync_all_streams" || key == "num_alloc_retries" || !recorded_stats.contains(key)) continue;
      INFO(key);
      CHECK(value == recorded_stats.at(key).get<std::int64_t>());
      ++compared;
    }
    CHECK(compared > 100);
  }
}
