// Golden tests: the text outputs of summary, oom and explain for a small checked-in trace and the
// case messages, compared byte for byte with golden/*.txt. After an intended change, regenerate
// with VRAMTRACE_UPDATE_GOLDEN=1 and review the diff.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "analyses/oom/explain.h"
#include "analyses/oom/oom_report.h"
#include "analyses/oom/oom_whatif.h"
#include "analyses/summary.h"
#include "messages.h"
#include "model/load_models.h"

using namespace vramtrace;

namespace {
const std::string kDir = VRAMTRACE_REPORTS_TEST_DIR;

void check_golden(const std::string& name, const std::string& actual) {
  const std::string path = kDir + "/golden/" + name;
  if (const char* u = std::getenv("VRAMTRACE_UPDATE_GOLDEN"); u && std::string(u) == "1") {
    std::ofstream(path, std::ios::binary) << actual;
    WARN("updated " << path);
    return;
  }
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  INFO("golden file " << path << " (regenerate with VRAMTRACE_UPDATE_GOLDEN=1)");
  CHECK(ss.str() == actual);
}

TraceModel golden_model() {
  auto models = load_models({kDir + "/data/golden_small.torchtrace.jsonl"});
  models.front().header.path = "golden_small.torchtrace.jsonl";  // stable across checkouts
  return std::move(models.front());
}
}  // namespace

TEST_CASE("golden: summary of the small trace", "[golden]") {
  std::vector<TraceModel> v;
  v.push_back(golden_model());
  check_golden("summary_small.txt", render_summary_text(v));
}

TEST_CASE("golden: oom post-mortem of the small trace, with replays", "[golden][oom]") {
  TraceModel m = golden_model();
  auto cases = oom_cases(m);
  REQUIRE(cases.size() == 1);
  CHECK(cases[0].diagnosis.code == DiagnosisCode::fragmentation);
  CHECK(*cases[0].figures.largest_free_block == 60u << 20);
  auto cap = whatif_capacity(m, cases, std::nullopt);
  CHECK(cap.bytes == (122u + 150u) << 20);  // reserved + free on the device at the OOM
  auto run = run_whatifs(kDir + "/data/golden_small.torchtrace.jsonl", m);
  REQUIRE(!run.rows.empty());
  CHECK(run.rows[0].settings.empty());
  CHECK(run.rows[0].error.empty());
  CHECK(run.rows[0].judgement.ooms > 0);  // the trace's own settings reproduce the OOM
  CHECK(run.rows[0].judgement.verdict == WhatIfVerdict::does_not_fit);
  CHECK(run.reproduces);
  // The trace stops at its OOM (only frees follow): what gets past the failure has no verdict.
  CHECK(run.covers == WhatIfCovers::to_failure);
  CHECK(run.partial);
  note_replays_in_cases(cases, run);
  check_golden("oom_small.txt", render_oom_text(m, cases, run));
}

TEST_CASE("golden: explain M1 and C4", "[golden][explain]") {
  check_golden("explain_m1.txt", render_explain_text(explain_message(test_messages::kM1)));
  check_golden("explain_c4.txt", render_explain_text(explain_message(test_messages::kC4)));
}
