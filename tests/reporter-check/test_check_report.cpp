// Output formats of `vramtrace check`: JUnit validated against tests/data/junit-10.xsd with
// xmllint, GitHub workflow command syntax and escaping, JSON, text.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "analyses/budgets.h"
#include "analyses/check_verdict.h"
#include "render/check_report.h"
#include "vramtrace/types.h"

using namespace vramtrace;

namespace {

std::vector<BudgetResult> sample_results() {
  DeviceMeasures m;
  m.trace = "runs/train, \"rank 0\" <a&b>.jsonl";  // characters every format must escape
  m.peak_reserved = 3 * kGiB;
  m.peak_allocated = 2 * kGiB;
  m.num_ooms = 0;
  m.num_alloc_retries = 0;
  DeviceMeasures m1 = m;
  m1.device = 1;
  m1.num_alloc_retries.reset();
  Budgets b;
  b.max_peak_reserved = 2 * kGiB + 512 * kMiB;  // fails
  b.max_ooms = 0;                               // passes
  b.max_retries = 0;                            // unknown on device 1
  return evaluate_budgets(b, {m, m1}, nullptr);
}

int run(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::filesystem::path temp(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("vt_report_" + std::to_string(::getpid()) + "_" + name);
}

const std::string kXsd = std::string(VRAMTRACE_TEST_DATA_DIR) + "/junit-10.xsd";

}  // namespace

TEST_CASE("junit report validates against the JUnit schema - a broken one does not", "[report][junit]") {
  REQUIRE(run("command -v xmllint >/dev/null") == 0);  // scripts/setup-deps.sh installs libxml2-utils
  auto results = sample_results();
  auto xml = render_check_junit(results);
  auto path = temp("junit.xml");
  std::ofstream(path) << xml;
  CHECK(run("xmllint --noout --schema '" + kXsd + "' '" + path.string() + "' 2>/dev/null") == 0);
  CHECK(xml.find("<failure message=\"max-peak-reserved") != std::string::npos);
  CHECK(xml.find("<error message=\"max-retries") != std::string::npos);
  CHECK(xml.find("tests=\"6\" failures=\"2\" errors=\"1\"") != std::string::npos);
  CHECK(xml.find("&quot;rank 0&quot; &lt;a&amp;b&gt;") != std::string::npos);

  // The schema really constrains: a testcase without a name is rejected.
  std::string broken = std::regex_replace(xml, std::regex(" name=\"max-ooms\""), "");
  auto bad = temp("junit-bad.xml");
  std::ofstream(bad) << broken;
  CHECK(run("xmllint --noout --schema '" + kXsd + "' '" + bad.string() + "' 2>/dev/null") != 0);
  std::filesystem::remove(path);
  std::filesystem::remove(bad);
}

TEST_CASE("github format: ::error per exceeded budget, ::warning per unjudged one", "[report][github]") {
  auto out = render_check_github(sample_results(), "tests/memory.budget");
  std::istringstream in(out);
  std::string line;
  int errors = 0, warnings = 0;
  // GitHub's syntax: ::error file={name},title={title}::{message}; properties escaped (no raw
  // ':' ',' '%' CR LF), message escaped (no raw '%' CR LF).
  std::regex command(
      R"(^::(error|warning) file=([^:,%\r\n]|%25|%3A|%2C|%0D|%0A)*,title=([^:,%\r\n]|%25|%3A|%2C|%0D|%0A)*::([^%\r\n]|%25|%0D|%0A)*$)");
  while (std::getline(in, line)) {
    if (line.rfind("::", 0) == 0) {
      errors += line.rfind("::error", 0) == 0;
      warnings += line.rfind("::warning", 0) == 0;
      CHECK(std::regex_match(line, command));
    }
  }
  CHECK(errors == 2);
  CHECK(warnings == 1);
  CHECK(
      out.find("::error file=tests/memory.budget,title=vramtrace check%3A max-peak-reserved exceeded on device 0::") !=
      std::string::npos);
  CHECK(out.find("%0Ameasured%3A") == std::string::npos);  // data escaping leaves ':' alone
  CHECK(out.find("%0Ameasured: 3.00 GiB, allowed: 2.50 GiB") != std::string::npos);
  CHECK(out.find("vramtrace check: 2 of 6 budgets exceeded") != std::string::npos);
}

TEST_CASE("github format without a budget file: each annotation names its own trace", "[report][github]") {
  auto results = sample_results();
  REQUIRE(results.size() >= 2);
  results[0].trace = "rank0.jsonl";
  for (std::size_t i = 1; i < results.size(); ++i) results[i].trace = "rank1.jsonl";
  const auto out = render_check_github(results, "");
  std::istringstream in(out);
  std::string line;
  int own = 0;
  for (std::size_t i = 0; std::getline(in, line);) {
    if (line.rfind("::", 0) != 0) continue;
    // Results are rendered in order, passes skipped: find which result this line is.
    while (i < results.size() && results[i].verdict == Verdict::pass) ++i;
    REQUIRE(i < results.size());
    CHECK(line.find(" file=" + results[i].trace + ",") != std::string::npos);
    own += 1;
    ++i;
  }
  CHECK(own == 3);
}

TEST_CASE("github escaping follows actions/toolkit", "[report][github]") {
  CHECK(github_escape_data("50% a:b,c\r\nd") == "50%25 a:b,c%0D%0Ad");
  CHECK(github_escape_property("50% a:b,c\r\nd") == "50%25 a%3Ab%2Cc%0D%0Ad");
}

TEST_CASE("json carries every result its verdict and the exit code", "[report][json]") {
  auto results = sample_results();
  auto j = check_json(results, {});
  CHECK(j["exit_code"] == 1);
  CHECK(j["verdict"] == "fail");
  REQUIRE(j["results"].size() == 6);
  CHECK(j["results"][0]["budget"] == "max-peak-reserved");
  CHECK(j["results"][0]["verdict"] == "fail");
  CHECK(j["results"][0]["measured"].get<double>() == Approx(3.0 * kGiB));
  CHECK(j["results"][0]["allowed"].get<double>() == Approx(2.5 * kGiB));
  CHECK(j["results"][5]["verdict"] == "unknown");
  CHECK(j["results"][5]["measured"].is_null());
}

TEST_CASE("text names each budget its measured value and the allowed one", "[report][text]") {
  auto t = render_check_text(sample_results());
  CHECK(t.find("FAIL  max-peak-reserved") != std::string::npos);
  CHECK(t.find("measured 3.00 GiB") != std::string::npos);
  CHECK(t.find("allowed 2.50 GiB") != std::string::npos);
  CHECK(t.find("PASS  max-ooms") != std::string::npos);
  CHECK(t.find("????  max-retries") != std::string::npos);
}

TEST_CASE("one verdict for every format: a run that did not finish fails each of them", "[report][unfinished]") {
  // Budgets that hold, on a trace that has no trailer and another that lost events.
  DeviceMeasures m;
  m.trace = "killed.jsonl";
  m.peak_reserved = kGiB;
  m.peak_allocated = kGiB;
  Budgets b;
  b.max_peak_reserved = 2 * kGiB;
  const auto budgets = evaluate_budgets(b, {m}, nullptr);
  REQUIRE(check_exit_code(budgets) == 0);
  TraceFigures killed, lossy, fine;
  killed.path = "killed.jsonl";
  killed.incomplete = true;
  killed.incomplete_reason = "no trailer: the process did not finish tracing; killed, crashed or still running";
  lossy.path = "lossy.jsonl";
  lossy.lost_events = 7;
  fine.path = "fine.jsonl";
  const auto unfinished = unfinished_traces({killed, fine, lossy}, "input");
  REQUIRE(unfinished.size() == 2);
  CHECK(unfinished[0].reason == killed.incomplete_reason);
  CHECK(unfinished[1].reason == "it lost 7 events: its writer dropped them, or the file lost lines");

  const CheckVerdict v = decide_check(budgets, unfinished, false);
  CHECK(v.exit_code == 1);
  CHECK(v.unfinished_fail);
  REQUIRE(v.results.size() == 3);
  const auto j = check_json(v.results, {m});
  CHECK(j["exit_code"] == v.exit_code);
  CHECK(j["verdict"] == "fail");
  CHECK(j["results"][1]["budget"] == kCompleteTraceRule);
  CHECK(j["results"][1]["device"].is_null());
  CHECK(j["results"][1]["measured"].is_null());  // no figure: the rule is about the trace
  CHECK(j["results"][2]["measured_text"] == "7 events lost");
  const std::string junit = render_check_junit(v.results);
  CHECK(junit.find("failures=\"2\"") != std::string::npos);
  CHECK(junit.find("classname=\"vramtrace.check.killed.jsonl\" name=\"complete-trace\"") != std::string::npos);
  const std::string github = render_check_github(v.results, "memory.budget");
  // The trace, not the budget file: no budget file set this rule.
  CHECK(github.find("::error file=killed.jsonl,title=vramtrace check%3A complete-trace%3A the run did not finish::") !=
        std::string::npos);
  CHECK(github.find("::error file=lossy.jsonl,") != std::string::npos);
  const std::string text = render_check_text(v.results);
  CHECK(text.find("FAIL  complete-trace           trace      measured ended early") != std::string::npos);
  CHECK(text.find("vramtrace check: fails: 2 traces did not finish; all 1 budgets hold\n") != std::string::npos);

  // --allow-incomplete: the budgets alone decide.
  const CheckVerdict allowed = decide_check(budgets, unfinished, true);
  CHECK(allowed.exit_code == 0);
  CHECK_FALSE(allowed.unfinished_fail);
  CHECK(allowed.results.size() == 1);
  CHECK(check_json(allowed.results, {m})["verdict"] == "pass");
  // A failure wins over a budget that could not be judged, as with budgets alone.
  std::vector<BudgetResult> unjudged = budgets;
  unjudged[0].verdict = Verdict::unknown;
  CHECK(decide_check(unjudged, unfinished, false).exit_code == 1);
  CHECK(decide_check(unjudged, unfinished, true).exit_code == 2);
}
