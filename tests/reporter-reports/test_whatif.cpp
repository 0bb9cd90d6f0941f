// What-if verdicts and the limits of the diagnosis (oom_whatif.h, verdict.h, oom_report.h): the
// error bound and the three verdicts, the caps a trace records and --capacity in the diagnosis, a
// trace that ends at its OOM, a complete trace given with --full, and the trace's own row.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "analyses/oom/oom_report.h"
#include "analyses/oom/oom_whatif.h"
#include "analyses/oom/verdict.h"
#include "model/load_models.h"
#include "readers/open_trace.h"

using namespace vramtrace;
namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t GiB = 1ull << 30;

/// PyTorch's history as JSON lines (tests/data/torch-h200/README.md), written line by line.
class TorchTrace {
 public:
  explicit TorchTrace(std::string header) { out_ << header << "\n"; }
  TorchTrace& entry(const char* action, std::uint64_t addr, std::uint64_t size) {
    out_ << R"({"action": ")" << action << R"(", "addr": )" << addr << R"(, "size": )" << size
         << R"(, "stream": 0, "time_us": )" << (t_ += 10) << "}\n";
    return *this;
  }
  TorchTrace& oom(std::uint64_t size, std::uint64_t device_free) {
    out_ << R"({"action": "oom", "size": )" << size << R"(, "stream": 0, "time_us": )" << (t_ += 10)
         << R"(, "device_free": )" << device_free << "}\n";
    return *this;
  }
  /// A segment of `segment` bytes and one block of `size` in it, at `addr`.
  TorchTrace& block(std::uint64_t addr, std::uint64_t segment, std::uint64_t size) {
    return entry("segment_alloc", addr, segment).entry("alloc", addr, size);
  }
  TorchTrace& free(std::uint64_t addr, std::uint64_t size) {
    return entry("free_requested", addr, size).entry("free_completed", addr, size);
  }
  std::string write(const fs::path& path) const {
    std::ofstream(path) << out_.str();
    return path.string();
  }

 private:
  std::ostringstream out_;
  std::uint64_t t_ = 1000000;
};

struct TempDir {
  fs::path dir = fs::temp_directory_path() / ("vt-whatif-" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(dir); }
  ~TempDir() { fs::remove_all(dir); }
};

constexpr std::uint64_t kBase = 0x7f0000000000ull;

/// Eight 11 MiB tensors, each in a 12 MiB segment (PyTorch leaves a 1 MiB remainder unsplit in
/// the large pool, so each block is 12 MiB), then a ninth that fails: 96 MiB reserved, no free
/// block, under a 100 MiB cap. With expandable segments the blocks are split (11 MiB each) and
/// the ninth fits in the pages already mapped.
TorchTrace capped_run(const std::string& header) {
  TorchTrace t(header);
  for (int i = 0; i < 8; ++i) t.block(kBase + i * (1ull << 30), 12 * MiB, 11 * MiB);
  t.oom(11 * MiB, 7 * GiB);
  return t;
}

const WhatIf* row(const WhatIfRun& run, const std::string& settings) {
  for (const auto& w : run.rows)
    if (w.settings == settings) return &w;
  return nullptr;
}

ReplayResult result(std::int64_t peak_reserved, std::uint64_t ooms) {
  ReplayResult r;
  r.stats.reserved_bytes[kStatAll].peak = peak_reserved;
  r.failed_allocs = ooms;
  return r;
}

}  // namespace

Judgement judge_on(const ReplayResult& at, const ReplayResult* wide, std::uint64_t capacity) {
  JudgeContext ctx;
  ctx.capacity_bytes = capacity;
  return judge(at, wide, ctx);
}

TEST_CASE("verdicts: fits above the bound, marginal within it either way, does not fit beyond it", "[whatif]") {
  CHECK(whatif_error_bound(24351 * MiB) == static_cast<std::uint64_t>(std::ceil(24351.0 * MiB * 0.02)));
  CHECK(whatif_error_bound(1 * GiB) == 40 * MiB);  // 2 % is less than two 20 MiB segments
  const std::uint64_t cap = 24351 * MiB;
  // The H200 measurement: 1 and 11 MiB spare were said to fit and ran out on the real GPU.
  for (std::uint64_t spare : {1 * MiB, 11 * MiB}) {
    auto j = judge_on(result(static_cast<std::int64_t>(cap - spare), 0), nullptr, cap);
    CHECK(j.verdict == WhatIfVerdict::marginal);
    CHECK(j.margin_bytes == spare);
    CHECK_FALSE(j.shortfall_bytes);
  }
  // 1.83 GiB spare did fit.
  auto fits = judge_on(result(static_cast<std::int64_t>(cap - 1874 * MiB), 0), nullptr, cap);
  CHECK(fits.verdict == WhatIfVerdict::fits);
  // An OOM that the bound's extra memory removes is marginal, with how far it went past, and no
  // margin beside it.
  auto wide = result(static_cast<std::int64_t>(cap + 30 * MiB), 0);
  auto short_by = judge_on(result(static_cast<std::int64_t>(cap), 2), &wide, cap);
  CHECK(short_by.verdict == WhatIfVerdict::marginal);
  REQUIRE(short_by.shortfall_bytes);
  CHECK(*short_by.shortfall_bytes == 30 * MiB);
  CHECK_FALSE(short_by.margin_bytes);
  CHECK_FALSE(short_by.short_beyond_error);  // within the 51 MiB the replays were measured to be off
  CHECK(tune_candidate(short_by));
  // Short by more than the measured replay error: still marginal, said with the figure, and not a
  // candidate for tune.
  auto far = result(static_cast<std::int64_t>(cap + 280 * MiB), 0);
  auto far_short = judge_on(result(static_cast<std::int64_t>(cap), 2), &far, cap);
  CHECK(far_short.verdict == WhatIfVerdict::marginal);
  CHECK(far_short.short_beyond_error);
  CHECK_FALSE(tune_candidate(far_short));
  CHECK(judgement_text(far_short).find("short by 280.00 MiB") != std::string::npos);
  // Out of memory with the bound too, or without a bound lane: does not fit, and no margin.
  auto still = result(static_cast<std::int64_t>(cap + whatif_error_bound(cap)), 1);
  const Judgement dnf = judge_on(result(static_cast<std::int64_t>(cap), 2), &still, cap);
  CHECK(dnf.verdict == WhatIfVerdict::does_not_fit);
  CHECK_FALSE(dnf.margin_bytes);
  CHECK_FALSE(dnf.shortfall_bytes);
  CHECK(judge_on(result(static_cast<std::int64_t>(cap), 2), nullptr, cap).verdict == WhatIfVerdict::does_not_fit);
  CHECK(std::string(whatif_verdict_name(WhatIfVerdict::does_not_fit)) == "does_not_fit");
}

TEST_CASE("the JSON of a judgement never contradicts its verdict", "[whatif][json]") {
  const std::uint64_t cap = 10 * GiB;
  auto wide = result(static_cast<std::int64_t>(cap + 30 * MiB), 0);
  const Judgement marginal_oom = judge_on(result(static_cast<std::int64_t>(cap), 2), &wide, cap);
  const Judgement marginal_spare = judge_on(result(static_cast<std::int64_t>(cap - MiB), 0), nullptr, cap);
  const Judgement fits = judge_on(result(static_cast<std::int64_t>(cap / 2), 0), nullptr, cap);
  const Judgement dnf = judge_on(result(static_cast<std::int64_t>(cap), 2), nullptr, cap);
  Withheld why{"because", "how"};
  JudgeContext ctx;
  ctx.capacity_bytes = cap;
  ctx.withheld = &why;
  const Judgement withheld = judge(result(static_cast<std::int64_t>(cap / 2), 0), nullptr, ctx);
  for (const Judgement* j : {&marginal_oom, &marginal_spare, &fits, &dnf, &withheld}) {
    const auto o = judgement_json(*j);
    INFO(o.dump());
    CHECK(o["fits"].get<bool>() == (o["verdict"] == "fits"));
    CHECK((o["margin_bytes"].is_null() || o["shortfall_bytes"].is_null()));
    if (o["verdict"] == "does_not_fit") CHECK(o["margin_bytes"].is_null());
  }
  CHECK(judgement_json(withheld)["verdict"].is_null());
  CHECK(judgement_json(withheld)["withheld"] == "because");
  CHECK(judgement_json(withheld)["how_to_get_a_verdict"] == "how");
}

TEST_CASE("verdicts under a memory fraction or a limit: spare below the cap, the bound added to the cap",
          "[whatif][limits]") {
  const std::uint64_t device = 140 * GiB;
  AllocatorSettings limit, fraction, both;
  std::string err;
  REQUIRE(AllocatorSettings::parse("limit:15GiB", limit, err));
  REQUIRE(AllocatorSettings::parse("per_process_memory_fraction:0.05", fraction, err));
  REQUIRE(AllocatorSettings::parse("per_process_memory_fraction:0.5,limit:15GiB", both, err));
  CHECK(allowed_bytes(AllocatorSettings{}, device) == device);
  CHECK(allowed_bytes(limit, device) == 15 * GiB);
  CHECK(allowed_bytes(fraction, device) == 7 * GiB);
  CHECK(allowed_bytes(both, device) == 15 * GiB);
  // 14.24 GiB reserved under a 15 GiB limit on a 140 GiB device: 0.76 GiB spare, within the bound.
  ReplayResult at = result(static_cast<std::int64_t>(device / 140 * 1424 / 100), 0);
  at.config.settings = limit;
  at.config.capacity_bytes = device;
  const Judgement j = judge_on(at, nullptr, device);
  CHECK(j.allowed_bytes == 15 * GiB);
  CHECK(j.margin_bytes == 15 * GiB - device / 140 * 1424 / 100);
  // The bound is 2 % of the 15 GiB allowed (307 MiB), not of the device (2.8 GiB): 0.76 GiB fits.
  CHECK(j.bound_bytes == whatif_error_bound(15 * GiB));
  CHECK(j.verdict == WhatIfVerdict::fits);
  // The bound's lane widens what binds: the limit, and the fraction to the same bytes more.
  std::vector<ReplayConfig> configs(2);
  configs[0].settings = limit;
  configs[1].settings = fraction;
  for (auto& c : configs) c.capacity_bytes = device;
  const std::vector<ReplayConfig> lanes = with_bound_lanes(configs);
  REQUIRE(lanes.size() == 4);
  const std::uint64_t limit_bound = whatif_error_bound(15 * GiB), fraction_bound = whatif_error_bound(7 * GiB);
  CHECK(lanes[2].capacity_bytes == device + limit_bound);
  CHECK(allowed_bytes(lanes[2].settings, lanes[2].capacity_bytes) == 15 * GiB + limit_bound);
  const double widened = static_cast<double>(allowed_bytes(lanes[3].settings, lanes[3].capacity_bytes));
  CHECK(widened == Approx(static_cast<double>(7 * GiB + fraction_bound)).epsilon(1e-9));
}

TEST_CASE("a cap the trace records makes the diagnosis capacity, not unexplained", "[whatif][oom][limits]") {
  TempDir tmp;
  // The device had 7 GiB free; PyTorch's memory fraction allowed 100 MiB.
  const std::string capped = capped_run(R"({"kind": "header", "workload": "capped", "conf": "", "total": 8589934592, )"
                                        R"("cap_gib": 0.09765625})")
                                 .write(tmp.dir / "capped.torchtrace.jsonl");
  const std::string uncapped = capped_run(R"({"kind": "header", "workload": "uncapped", "conf": "", )"
                                          R"("total": 8589934592})")
                                   .write(tmp.dir / "uncapped.torchtrace.jsonl");
  auto models = load_models({capped, uncapped});
  REQUIRE(models[0].header.cap_of(0));
  CHECK(models[0].header.cap_of(0)->bytes == 100 * MiB);

  auto plain = oom_cases(models[1]);
  REQUIRE(plain.size() == 1);
  CHECK(plain[0].diagnosis.code == DiagnosisCode::unexplained);  // nothing says there was a cap

  auto cases = oom_cases(models[0]);
  REQUIRE(cases.size() == 1);
  CHECK(cases[0].diagnosis.code == DiagnosisCode::capacity);
  CHECK(cases[0].figures.allowed == 100 * MiB);
  CHECK(cases[0].figures.allowed_name == "PyTorch's memory fraction");

  // --capacity does the same for a trace that records no cap.
  OomOptions with_capacity;
  with_capacity.capacity_bytes = 100 * MiB;
  auto given = oom_cases(models[1], with_capacity);
  CHECK(given[0].diagnosis.code == DiagnosisCode::capacity);
  CHECK(given[0].figures.allowed_name == "--capacity");

  // The replays run on the cap, not on the 7 GiB the device had free.
  auto cap = whatif_capacity(models[0], cases, std::nullopt);
  CHECK(cap.bytes == 100 * MiB);
  CHECK(cap.source == "PyTorch's memory fraction");
  CHECK(cap.kind == WhatIfCapacity::Kind::recorded_cap);
  CHECK(cap.pytorch_fraction_cap);
  auto run = run_whatifs(capped, models[0]);
  CHECK(run.reproduces);
  CHECK(run.warnings.empty());
  CHECK_FALSE(run.withheld);
  REQUIRE(run.partial);  // the trace ends at its OOM
  const WhatIf* own = row(run, "");
  REQUIRE(own);
  CHECK(own->judgement.verdict == WhatIfVerdict::does_not_fit);  // the recorded run's answer, whatever the bound adds
  CHECK(own->judgement.recorded_outcome);
  CHECK(own->judgement.ooms == 1);
  const WhatIf* exp = row(run, "expandable_segments:True");
  REQUIRE(exp);
  CHECK(exp->judgement.ooms == 0);
  // 100 MiB mapped in 20 MiB pages: it gets past the failure with no spare, and the rest of the
  // run was never recorded: no verdict.
  CHECK(exp->judgement.verdict == WhatIfVerdict::withheld);
  CHECK(exp->judgement.margin_bytes == 0u);

  // A capacity verdict never says settings cannot help while a replay gets past the failure.
  note_replays_in_cases(cases, run);
  const std::string text = render_oom_text(models[0], cases, run);
  CHECK(text.find("cannot fix") == std::string::npos);
  CHECK(text.find("get past the failure under: expandable_segments:True (no verdict") != std::string::npos);
  CHECK(text.find("cap (PyTorch's memory fraction)") != std::string::npos);
  auto j = oom_json(models[0], cases, run);
  CHECK(j["ooms"][0]["figures"]["cap_bytes"] == 100 * MiB);
  CHECK(j["whatif"]["capacity_source"] == "PyTorch's memory fraction");
  CHECK(j["replays"][0]["verdict"] == "does_not_fit");

  // Without the cap, the replays of the same trace run on 7 GiB: every row fits, the trace's own
  // too, and the report says that it does not reproduce the OOM.
  auto free_run = run_whatifs(uncapped, models[1]);
  CHECK_FALSE(free_run.reproduces);
  REQUIRE(free_run.withheld);
  CHECK(free_run.withheld->how.find("--capacity") != std::string::npos);
  for (const auto& w : free_run.rows) CHECK(w.judgement.verdict == WhatIfVerdict::withheld);
  note_replays_in_cases(plain, free_run);  // unexplained: left alone
  CHECK(render_oom_text(models[1], plain, free_run)
            .find("NO VERDICT on any setting: the replay of the trace's own settings runs "
                  "without an OOM") != std::string::npos);
  CHECK(tune_command(free_run, 100 * MiB, "").empty());
}

TEST_CASE("the shim's limit setting is a cap of the trace", "[whatif][limits]") {
  TempDir tmp;
  const fs::path p = tmp.dir / "t.jsonl";
  std::ofstream(p)
      << R"({"a":"header","format":"vramtrace","version":"1.1","pid":7,"devices":[{"id":0,"name":"A","total_bytes":268435456},{"id":1,"name":"B","total_bytes":536870912}],"allocator_settings":"","settings":{"reuse":"lazy_sync","limit":"[0:268435456,*:536870912]"},"entry_points":[""]})"
      << "\n"
      << R"({"a":"segment_alloc","t":1,"d":0,"p":4096000000,"r":20971520})"
      << "\n";
  auto r = open_trace(p.string());
  const TraceHeader& h = r->header();
  REQUIRE(h.cap_of(0));
  CHECK(h.cap_of(0)->bytes == 256 * MiB);
  CHECK(h.cap_of(0)->what == "the cap of vramtrace run --limit");
  REQUIRE(h.cap_of(1));
  CHECK(h.cap_of(1)->bytes == 512 * MiB);  // `*`
  // A single size applies to every device.
  const fs::path q = tmp.dir / "u.jsonl";
  std::ofstream(q)
      << R"({"a":"header","format":"vramtrace","version":"1.1","pid":7,"devices":[],"allocator_settings":"","settings":{"limit":"15654932480"},"entry_points":[""]})"
      << "\n";
  auto r2 = open_trace(q.string());
  REQUIRE(r2->header().cap_of(3));
  CHECK(r2->header().cap_of(3)->bytes == 15654932480ull);
  // No limit: no cap.
  const fs::path n = tmp.dir / "n.jsonl";
  std::ofstream(n)
      << R"({"a":"header","format":"vramtrace","version":"1.1","pid":7,"devices":[],"allocator_settings":"","settings":{"reuse":"lazy_sync"},"entry_points":[""]})"
      << "\n";
  CHECK(open_trace(n.string())->header().cap_of(0) == nullptr);
}

TEST_CASE("a trace that ends at its OOM: the verdicts say what they cover", "[whatif][oom]") {
  TempDir tmp;
  const std::string header = R"({"kind": "header", "workload": "w", "conf": "", "total": 8589934592, )"
                             R"("cap_gib": 0.09765625})";
  // Dies at the failure: only the frees of its unwinding follow.
  TorchTrace died = capped_run(header);
  for (int i = 0; i < 8; ++i) died.free(kBase + i * (1ull << 30), 11 * MiB);
  const std::string died_path = died.write(tmp.dir / "died.torchtrace.jsonl");
  auto models = load_models({died_path});
  auto cov = failure_coverage(models[0]);
  CHECK(cov.ends_at_failure);
  CHECK(cov.allocs_after == 0);
  CHECK(cov.allocs_before == 8);
  auto cases = oom_cases(models[0]);
  auto run = run_whatifs(died_path, models[0]);
  CHECK(run.covers == WhatIfCovers::to_failure);
  std::string text = render_whatif_text(run);
  CHECK(text.find("up to its failure") != std::string::npos);
  CHECK(text.find("expandable_segments:True: no verdict (gets through the recorded part with") != std::string::npos);
  CHECK(text.find("the rest of the run was never recorded") != std::string::npos);
  CHECK(text.find("--full TRACE") != std::string::npos);

  // A program that caught the error and went on (a smaller batch): its trace covers what followed.
  TorchTrace went_on = capped_run(header);
  for (int i = 0; i < 8; ++i) went_on.free(kBase + i * (1ull << 30), 11 * MiB);
  for (int i = 0; i < 4; ++i)
    went_on.entry("alloc", kBase + i * (1ull << 30), 5 * MiB).free(kBase + i * (1ull << 30), 5 * MiB);
  const std::string went_path = went_on.write(tmp.dir / "went_on.torchtrace.jsonl");
  auto m2 = load_models({went_path});
  CHECK_FALSE(failure_coverage(m2[0]).ends_at_failure);
  auto c2 = oom_cases(m2[0]);
  CHECK(run_whatifs(went_path, m2[0]).covers == WhatIfCovers::whole_trace);
  CHECK(ends_at_failure(100, 1));
  CHECK_FALSE(ends_at_failure(100, 2));

  // A trace cut short (the process was killed): the replays cover it up to its last event.
  const std::string cut_path = (tmp.dir / "cut.jsonl").string();
  std::ofstream(cut_path)
      << R"({"a":"header","format":"vramtrace","version":"1.1","pid":7,"devices":[{"id":0,"name":"A","total_bytes":8589934592}],"allocator_settings":"","settings":{},"entry_points":[""]})"
      << "\n"
      << R"({"a":"segment_alloc","t":1,"p":4096000000,"r":12582912})"
      << "\n"
      << R"({"a":"alloc","t":2,"p":4096000000,"r":11534336,"b":12582912})"
      << "\n"
      << R"({"a":"alloc","t":3,"p":40)";
  auto mc = load_models({cut_path});
  REQUIRE(mc[0].incomplete);
  auto cc = oom_cases(mc[0]);
  REQUIRE(cc.size() == 1);
  CHECK(cc[0].last_state);
  auto cut_run = run_whatifs(cut_path, mc[0]);
  CHECK(cut_run.capacity.bytes == 8 * GiB);  // the device total: no OOM figures, no cap
  CHECK(cut_run.capacity.kind == WhatIfCapacity::Kind::device_total);
  REQUIRE(cut_run.partial);  // the run did not finish: what got through it has no verdict
  CHECK(cut_run.partial->why.find("did not finish") != std::string::npos);
  for (const auto& w : cut_run.rows) CHECK(w.judgement.verdict == WhatIfVerdict::withheld);

  // --full: a complete trace of the same program (the same allocations, then the rest of the run)
  // is what the verdicts judge; here the rest needs more than the cap under any setting.
  TorchTrace full(R"({"kind": "header", "workload": "w", "conf": "", "total": 8589934592})");
  for (int i = 0; i < 8; ++i) full.block(kBase + i * (1ull << 30), 12 * MiB, 11 * MiB);
  full.block(kBase + 8 * (1ull << 30), 12 * MiB, 11 * MiB);
  full.block(kBase + 9 * (1ull << 30), 80 * MiB, 80 * MiB);
  for (int i = 0; i < 9; ++i) full.free(kBase + i * (1ull << 30), 11 * MiB);
  full.free(kBase + 9 * (1ull << 30), 80 * MiB);
  const std::string full_path = full.write(tmp.dir / "full.torchtrace.jsonl");
  auto match = match_traces(died_path, full_path);
  CHECK(match.first_difference.empty());
  CHECK(match.matching == 8);
  CHECK(match.compared == 8);
  CHECK(match.full_allocs == 10);
  WhatIfOptions wo;
  wo.full_path = full_path;
  auto judged = run_whatifs(died_path, models[0], wo);
  CHECK(judged.covers == WhatIfCovers::full_trace);
  CHECK(judged.warnings.empty());
  CHECK_FALSE(judged.partial);
  for (const auto& w : judged.rows) CHECK(w.judgement.verdict == WhatIfVerdict::does_not_fit);
  CHECK(render_whatif_text(judged).find("a complete trace of the same program, --full") != std::string::npos);

  // A full trace of another program is named as such.
  TorchTrace other(R"({"kind": "header", "workload": "x", "conf": ""})");
  other.block(kBase, 2 * MiB, 4096).free(kBase, 4096);
  const std::string other_path = other.write(tmp.dir / "other.torchtrace.jsonl");
  auto mismatch = match_traces(died_path, other_path);
  CHECK(mismatch.matching == 0);
  CHECK(mismatch.first_difference.find("allocation #0") != std::string::npos);
  wo.full_path = other_path;
  auto warned = run_whatifs(died_path, models[0], wo);
  REQUIRE_FALSE(warned.warnings.empty());
  CHECK(warned.warnings[0].find("may not be the same program") != std::string::npos);
  // A "full" trace that records an OOM is not a complete run.
  wo.full_path = died_path;
  auto self = run_whatifs(died_path, models[0], wo);
  REQUIRE(self.partial);
  CHECK(self.partial->why.find("not a complete run") != std::string::npos);
}
