// Budgets: sizes, the budget file, every budget both ways, baseline comparison with noise margin.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "analyses/budgets.h"
#include "vramtrace/types.h"

using namespace vramtrace;

namespace {

DeviceMeasures measures(std::int64_t reserved, std::int64_t allocated, std::int64_t ooms = 0,
                        std::optional<std::int64_t> retries = 0) {
  DeviceMeasures m;
  m.trace = "run.jsonl";
  m.device = 0;
  m.peak_reserved = reserved;
  m.peak_allocated = allocated;
  m.num_ooms = ooms;
  m.num_alloc_retries = retries;
  return m;
}

BudgetResult only(const Budgets& b, const DeviceMeasures& m, const std::vector<DeviceMeasures>* base = nullptr) {
  auto r = evaluate_budgets(b, {m}, base);
  REQUIRE(r.size() == 1);
  return r[0];
}

std::filesystem::path write_temp(const std::string& name, const std::string& text) {
  auto p = std::filesystem::temp_directory_path() / ("vt_check_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p) << text;
  return p;
}

GrowthFit fit_of(double slope_mib) {
  std::vector<StepSample> s;
  for (int k = 0; k < 20; ++k) s.push_back({k, static_cast<std::int64_t>((600 + slope_mib * k) * kMiB)});
  return fit_growth(s);
}

}  // namespace

TEST_CASE("parse_size: binary and SI units fractions junk rejected", "[budgets]") {
  CHECK(parse_size("1024") == 1024u);
  CHECK(parse_size("20GiB") == 20 * kGiB);
  CHECK(parse_size("1.5 GiB") == 3 * kGiB / 2);
  CHECK(parse_size("512MiB") == 512 * kMiB);
  CHECK(parse_size("512m") == 512 * kMiB);
  CHECK(parse_size("24 MB") == 24'000'000u);
  CHECK(parse_size("2 kb") == 2000u);
  CHECK(parse_size("3B") == 3u);
  CHECK_FALSE(parse_size(""));
  CHECK_FALSE(parse_size("-1GiB"));
  CHECK_FALSE(parse_size("GiB"));
  CHECK_FALSE(parse_size("10 parsecs"));
  CHECK_FALSE(parse_size("1.2.3"));
  CHECK_FALSE(parse_size("99999999999 TiB"));
}

TEST_CASE("format_bytes uses binary units", "[budgets]") {
  CHECK(format_bytes(512, ByteStyle::binary) == "512 B");
  CHECK(format_bytes(100.0 * kMiB, ByteStyle::binary) == "100.00 MiB");
  CHECK(format_bytes(1.5 * kGiB, ByteStyle::binary) == "1.50 GiB");
}

TEST_CASE("max-peak-reserved and max-peak-allocated both ways", "[budgets]") {
  Budgets b;
  b.max_peak_reserved = 1 * kGiB;
  auto pass = only(b, measures(1 * kGiB, 512 * kMiB));
  CHECK(pass.verdict == Verdict::pass);
  auto fail = only(b, measures(1 * kGiB + 1, 512 * kMiB));
  CHECK(fail.verdict == Verdict::fail);
  CHECK(fail.budget == "max-peak-reserved");
  CHECK(fail.measured == Approx(1.0 * kGiB + 1));
  CHECK(fail.allowed == Approx(1.0 * kGiB));
  CHECK(fail.message.find("max-peak-reserved") != std::string::npos);
  CHECK(fail.message.find("over the budget of 1.00 GiB") != std::string::npos);

  Budgets a;
  a.max_peak_allocated = 600 * kMiB;
  CHECK(only(a, measures(2 * kGiB, 600 * kMiB)).verdict == Verdict::pass);
  auto af = only(a, measures(2 * kGiB, 700 * kMiB));
  CHECK(af.verdict == Verdict::fail);
  CHECK(af.measured_text == "700.00 MiB");
  CHECK(af.allowed_text == "600.00 MiB");
}

TEST_CASE("max-reserved-ratio both ways and with nothing allocated", "[budgets]") {
  Budgets b;
  b.max_reserved_ratio = 1.25;
  CHECK(only(b, measures(1200 * kMiB, 1000 * kMiB)).verdict == Verdict::pass);
  auto f = only(b, measures(1300 * kMiB, 1000 * kMiB));
  CHECK(f.verdict == Verdict::fail);
  CHECK(f.measured == Approx(1.3));
  CHECK(only(b, measures(0, 0)).verdict == Verdict::pass);
  CHECK(only(b, measures(20 * kMiB, 0)).verdict == Verdict::unknown);
}

TEST_CASE("max-ooms and max-retries both ways - retries unknown when not recorded", "[budgets]") {
  Budgets o;
  o.max_ooms = 0;
  CHECK(only(o, measures(1, 1, 0)).verdict == Verdict::pass);
  auto f = only(o, measures(1, 1, 2));
  CHECK(f.verdict == Verdict::fail);
  CHECK(f.measured_text == "2");
  CHECK(f.allowed_text == "0");

  Budgets r;
  r.max_retries = 1;
  CHECK(only(r, measures(1, 1, 0, 1)).verdict == Verdict::pass);
  CHECK(only(r, measures(1, 1, 0, 5)).verdict == Verdict::fail);
  auto u = only(r, measures(1, 1, 0, std::nullopt));
  CHECK(u.verdict == Verdict::unknown);
  CHECK(u.message.find("does not record") != std::string::npos);
}

TEST_CASE("no-leaks and max-growth both ways - unknown without step boundaries", "[budgets]") {
  Budgets nl;
  nl.no_leaks = true;
  auto leak = measures(1, 1);
  leak.growth = fit_of(2);
  auto r = only(nl, leak);
  CHECK(r.verdict == Verdict::fail);
  CHECK(r.measured == Approx(2.0 * kMiB));
  CHECK(r.message.find("grows by 2.00 MiB per step") != std::string::npos);
  CHECK(r.details["r_squared"].get<double>() == Approx(1.0));

  auto flat = measures(1, 1);
  flat.growth = fit_of(0);
  CHECK(only(nl, flat).verdict == Verdict::pass);

  auto none = measures(1, 1);
  none.growth_note = "no marks in the trace and no repeating step pattern in its allocations";
  auto u = only(nl, none);
  CHECK(u.verdict == Verdict::unknown);
  CHECK(u.message.find("no marks") != std::string::npos);

  Budgets mg;
  mg.max_growth = 3 * kMiB;
  CHECK(only(mg, leak).verdict == Verdict::pass);
  mg.max_growth = 1 * kMiB;
  CHECK(only(mg, leak).verdict == Verdict::fail);
}

TEST_CASE("baseline: increase within percent + noise margin passes beyond fails", "[budgets][baseline]") {
  std::vector<DeviceMeasures> base{measures(1000 * kMiB, 800 * kMiB)};
  Budgets b;
  b.baseline = "base.json";
  b.max_increase = 5;
  // 5 % of 1000 MiB = 50 MiB, plus the 2 MiB default noise margin.
  auto ok = evaluate_budgets(b, {measures(1051 * kMiB, 841 * kMiB)}, &base);
  REQUIRE(ok.size() == 2);
  CHECK(ok[0].budget == "max-increase:allocated");
  CHECK(ok[0].verdict == Verdict::pass);
  CHECK(ok[1].verdict == Verdict::pass);
  CHECK(ok[1].allowed == Approx(1052.0 * kMiB));
  auto bad = evaluate_budgets(b, {measures(1053 * kMiB, 800 * kMiB)}, &base);
  CHECK(bad[0].verdict == Verdict::pass);
  CHECK(bad[1].verdict == Verdict::fail);
  CHECK(bad[1].message.find("+5.3%") != std::string::npos);
  CHECK(check_exit_code(bad) == 1);

  // A 0 % budget tolerates one segment of noise but not two.
  Budgets z;
  z.baseline = "base.json";
  CHECK(evaluate_budgets(z, {measures(1002 * kMiB, 800 * kMiB)}, &base)[1].verdict == Verdict::pass);
  CHECK(evaluate_budgets(z, {measures(1004 * kMiB, 800 * kMiB)}, &base)[1].verdict == Verdict::fail);
  z.noise_margin = 0;
  CHECK(evaluate_budgets(z, {measures(1000 * kMiB + 1, 800 * kMiB)}, &base)[1].verdict == Verdict::fail);
}

TEST_CASE("baseline without the device is unknown - --max-increase without baseline is a usage error", "[budgets]") {
  std::vector<DeviceMeasures> base{measures(1, 1)};
  base[0].device = 3;
  Budgets b;
  b.max_increase = 1;
  b.baseline = "x";
  auto r = evaluate_budgets(b, {measures(1, 1)}, &base);
  CHECK(r[0].verdict == Verdict::unknown);
  CHECK(check_exit_code(r) == 2);
  CHECK_THROWS_AS(evaluate_budgets(b, {measures(1, 1)}, nullptr), BudgetError);
}

TEST_CASE("option --device selects one device - an absent one is an error", "[budgets]") {
  auto d0 = measures(10 * kGiB, 1);
  auto d1 = measures(1 * kGiB, 1);
  d1.device = 1;
  Budgets b;
  b.max_peak_reserved = 2 * kGiB;
  auto all = evaluate_budgets(b, {d0, d1}, nullptr);
  REQUIRE(all.size() == 2);
  CHECK(check_exit_code(all) == 1);
  b.device = 1;
  auto one = evaluate_budgets(b, {d0, d1}, nullptr);
  REQUIRE(one.size() == 1);
  CHECK(one[0].device == 1);
  CHECK(check_exit_code(one) == 0);
  b.device = 7;
  CHECK_THROWS_WITH(evaluate_budgets(b, {d0, d1}, nullptr), Catch::Contains("--device 7"));
}

TEST_CASE("exit codes: fail wins over unknown unknown over pass", "[budgets]") {
  BudgetResult p, f, u;
  p.verdict = Verdict::pass;
  f.verdict = Verdict::fail;
  u.verdict = Verdict::unknown;
  CHECK(check_exit_code({p, p}) == 0);
  CHECK(check_exit_code({p, u}) == 2);
  CHECK(check_exit_code({u, f, p}) == 1);
}

TEST_CASE("budget file: keys comments quotes relative baseline", "[budgets][file]") {
  auto path = write_temp("ok.budget",
                         "# memory budget for the training test\n"
                         "max-peak-reserved = 20GiB\n"
                         "max_peak_allocated = \"18 GiB\"   # quoted\n"
                         "max-reserved-ratio = 1.3\n"
                         "max-ooms = 0\n"
                         "max-retries = 2\n"
                         "no-leaks = true\n"
                         "max-growth = 1MiB\n"
                         "baseline = baselines/train.json\n"
                         "max-increase = 5%\n"
                         "noise-margin = 20MiB\n"
                         "device = 1\n");
  auto b = parse_budget_file(path.string());
  CHECK(b.max_peak_reserved == 20 * kGiB);
  CHECK(b.max_peak_allocated == 18 * kGiB);
  CHECK(b.max_reserved_ratio == Approx(1.3));
  CHECK(b.max_ooms == 0);
  CHECK(b.max_retries == 2);
  CHECK(b.no_leaks);
  CHECK(b.max_growth == kMiB);
  CHECK(b.baseline == (path.parent_path() / "baselines/train.json").string());
  CHECK(b.max_increase == Approx(5));
  CHECK(b.noise_margin == 20 * kMiB);
  CHECK(b.device == 1);

  Budgets cli;
  cli.max_peak_reserved = 10 * kGiB;
  b.merge(cli);
  CHECK(b.max_peak_reserved == 10 * kGiB);
  CHECK(b.max_peak_allocated == 18 * kGiB);
  std::filesystem::remove(path);
}

TEST_CASE("budget file errors name the file and line", "[budgets][file]") {
  auto bad_key = write_temp("k.budget", "max-peak-reserved = 1GiB\n\nmax-peek = 3\n");
  CHECK_THROWS_WITH(parse_budget_file(bad_key.string()), Catch::Contains("line 3") && Catch::Contains("max-peek"));
  auto bad_size = write_temp("s.budget", "max-peak-reserved = lots\n");
  CHECK_THROWS_WITH(parse_budget_file(bad_size.string()), Catch::Contains("line 1") && Catch::Contains("not a size"));
  auto dup = write_temp("d.budget", "max-ooms = 0\nmax_ooms = 1\n");
  CHECK_THROWS_WITH(parse_budget_file(dup.string()), Catch::Contains("line 2") && Catch::Contains("twice"));
  auto noeq = write_temp("e.budget", "no-leaks\n");
  CHECK_THROWS_WITH(parse_budget_file(noeq.string()), Catch::Contains("key = value"));
  CHECK_THROWS_WITH(parse_budget_file("/nonexistent/x.budget"), Catch::Contains("cannot open"));
  for (auto& p : {bad_key, bad_size, dup, noeq}) std::filesystem::remove(p);
}

TEST_CASE("measures_from_summary reads the summary --json shape", "[budgets][summary]") {
  auto j = nlohmann::json::parse(R"({"traces": [{"path": "a.jsonl", "devices": [
      {"device": 0, "stats": {"reserved_bytes.all.peak": 2000, "allocated_bytes.all.peak": 1500,
                              "num_ooms": 1, "num_alloc_retries": null}, "ooms": 1},
      {"device": 1, "stats": {"reserved_bytes.all.peak": 10, "allocated_bytes.all.peak": 5, "num_ooms": 0,
                              "num_alloc_retries": 3}}]}]})");
  auto m = measures_from_summary(j, "x.json");
  REQUIRE(m.size() == 2);
  CHECK(m[0].trace == "a.jsonl");
  CHECK(m[0].peak_reserved == 2000);
  CHECK(m[0].peak_allocated == 1500);
  CHECK(m[0].num_ooms == 1);
  CHECK_FALSE(m[0].num_alloc_retries);
  CHECK(m[1].device == 1);
  CHECK(m[1].num_alloc_retries == 3);
  CHECK_THROWS_WITH(measures_from_summary(nlohmann::json::parse(R"({"x": 1})"), "x.json"),
                    Catch::Contains("x.json") && Catch::Contains("traces"));
  CHECK_THROWS_AS(measures_from_summary(nlohmann::json::parse(R"({"traces": [{"devices": [{"device": "a"}]}]})"), "y"),
                  BudgetError);
}
