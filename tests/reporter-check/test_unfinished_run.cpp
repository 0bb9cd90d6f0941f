// A run that did not finish (Note [a run that did not finish] in reporter/model/unfinished_run.h),
// run as a user runs the commands on small hand-written traces: `check` fails it in every format
// unless --allow-incomplete, and `summary` and `report` say so first. The traces: vramtrace's
// format without its trailer, cut mid-line, killed right after a step boundary, with a trailer that
// counts events the file does not hold; PyTorch's history without its last '\n'; a snapshot whose
// sidecar's last write is not the exit write.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

struct Result {
  int rc = -1;
  std::string out;
};

// Runs a shell command; its stdout comes back (stderr too when `with_stderr`).
Result sh(const std::string& cmd, bool with_stderr = true) {
  Result r;
  FILE* p = ::popen((cmd + (with_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  REQUIRE(p);
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = ::pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

const std::string kVt = VT_VRAMTRACE_EXE;

fs::path dir() {
  static fs::path d = [] {
    auto p = fs::temp_directory_path() / ("vt_unfinished_" + std::to_string(::getpid()));
    fs::create_directories(p);
    return p;
  }();
  return d;
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = (dir() / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

const std::string kHeader =
    R"({"a":"header","format":"vramtrace","version":"1.1","pid":100,"devices":[{"id":0,"name":"GPU",)"
    R"("total_bytes":85899345920}],"allocator_settings":"","settings":{},"entry_points":[""]})"
    "\n";
// Two steps of a training loop: a 2 MiB segment with a 1 MiB allocation in it, a step mark,
// then the second step's allocation. Peak reserved 2 MiB.
const std::string kEvents = R"({"a":"segment_alloc","t":1000,"p":4294967296,"r":2097152})"
                            "\n"
                            R"({"a":"alloc","t":2000,"p":4294967296,"r":1048576})"
                            "\n"
                            R"({"a":"mark","t":3000,"name":"step"})"
                            "\n"
                            R"({"a":"alloc","t":4000,"p":4295491584,"r":524288})"
                            "\n";
const std::string kTrailer =
    R"({"a":"trailer","t":5000,"events":4,"dropped":0,"counts":{"segment_alloc":1,"alloc":2,"mark":1},"devices":[]})"
    "\n";

}  // namespace

TEST_CASE("check fails a run without its trailer or cut mid-line, in every format, unless --allow-incomplete",
          "[cmd][check][unfinished]") {
  const std::string finished = write_file("finished.jsonl", kHeader + kEvents + kTrailer);
  const std::string no_trailer = write_file("no_trailer.jsonl", kHeader + kEvents);
  const std::string cut = write_file("cut.jsonl", kHeader + kEvents + R"({"a":"alloc","t":4500,"p":429)");
  const std::string budget = " --max-peak-reserved 20GiB";

  const Result ok = sh(kVt + " check " + finished + budget);
  INFO(ok.out);
  CHECK(ok.rc == 0);
  CHECK_FALSE(has(ok.out, "did not finish"));

  for (const auto& [trace, reason] :
       {std::pair{no_trailer, std::string("no trailer")}, std::pair{cut, std::string("its last line is cut")}}) {
    INFO(trace);
    // Text: an error line first, a failing result, and the verdict line; exit 1.
    const Result text = sh(kVt + " check " + trace + budget);
    INFO(text.out);
    CHECK(text.rc == 1);
    CHECK(text.out.rfind("error: " + trace + " did not finish (" + reason, 0) == 0);
    CHECK(has(text.out, "PASS  max-peak-reserved"));  // the budget itself holds
    CHECK(has(text.out, "FAIL  complete-trace"));
    CHECK(has(text.out, "vramtrace check: fails: 1 trace did not finish; all 1 budgets hold"));

    // JSON: the verdict and the exit code of the document are the command's.
    const Result json = sh(kVt + " check " + trace + budget + " --format json", false);
    CHECK(json.rc == 1);
    const auto j = nlohmann::json::parse(json.out);
    CHECK(j["verdict"] == "fail");
    CHECK(j["exit_code"] == 1);
    CHECK(j["unfinished_traces_fail"] == true);
    REQUIRE(j["unfinished_traces"].size() == 1);
    CHECK(j["unfinished_traces"][0]["reason"].get<std::string>().rfind(reason, 0) == 0);
    REQUIRE(j["incomplete_traces"].size() == 1);
    bool failing_case = false;
    for (const auto& r : j["results"])
      failing_case =
          failing_case || (r["budget"] == "complete-trace" && r["verdict"] == "fail" && r["device"].is_null());
    CHECK(failing_case);

    // JUnit: a failing test case of its own, and the document is valid.
    const std::string xml = (dir() / "check.xml").string();
    const Result junit = sh(kVt + " check " + trace + budget + " --format junit --force -o " + xml);
    CHECK(junit.rc == 1);
    CHECK(has(junit.out, "FAIL  complete-trace"));  // the verdict still reaches the log
    std::stringstream doc;
    doc << std::ifstream(xml).rdbuf();
    CHECK(has(doc.str(), "failures=\"1\""));
    CHECK(has(doc.str(), "name=\"complete-trace\""));
    CHECK(has(doc.str(), "type=\"run-did-not-finish\""));
    CHECK(sh("xmllint --noout --schema " + std::string(VRAMTRACE_TEST_DATA_DIR) + "/junit-10.xsd " + xml).rc == 0);

    // GitHub: an ::error annotation on the trace.
    const Result github = sh(kVt + " check " + trace + budget + " --format github");
    CHECK(github.rc == 1);
    CHECK(has(github.out,
              "::error file=" + trace + ",title=vramtrace check%3A complete-trace%3A the run did not finish::"));

    // --allow-incomplete judges the budgets on the figures up to the last event, with a warning.
    const Result allowed = sh(kVt + " check " + trace + budget + " --allow-incomplete");
    CHECK(allowed.rc == 0);
    CHECK(has(allowed.out, "warning: " + trace + " did not finish (" + reason));
    CHECK(has(allowed.out, "measured 2.00 MiB"));
    CHECK_FALSE(has(allowed.out, "FAIL"));
    CHECK(sh(kVt + " check " + trace + " --max-peak-reserved 1MiB --allow-incomplete").rc == 1);
    const auto aj =
        nlohmann::json::parse(sh(kVt + " check " + trace + budget + " --allow-incomplete --json", false).out);
    CHECK(aj["verdict"] == "pass");
    CHECK(aj["unfinished_traces_fail"] == false);
  }

  // Several traces: one that did not finish fails the check of all of them.
  CHECK(sh(kVt + " check " + finished + " " + no_trailer + budget).rc == 1);
}

TEST_CASE("a run killed right after a step boundary did not finish", "[cmd][check][unfinished]") {
  // SIGKILL right after a step's mark reached the file: the last line is the mark, whole, and no
  // trailer follows. The mark does not vouch for what came after it (Note [a run that did not
  // finish]): the check fails; --allow-incomplete judges the figures up to the mark.
  const std::string killed =
      write_file("killed_at_mark.jsonl", kHeader + kEvents + R"({"a":"mark","t":4500,"name":"step"})" + "\n");
  const Result fails = sh(kVt + " check " + killed + " --max-peak-reserved 20GiB");
  INFO(fails.out);
  CHECK(fails.rc == 1);
  CHECK(has(fails.out, "FAIL  complete-trace"));
  CHECK(has(fails.out, "did not finish (no trailer"));
  const Result allowed = sh(kVt + " check " + killed + " --max-peak-reserved 20GiB --allow-incomplete");
  CHECK(allowed.rc == 0);
  CHECK(has(allowed.out, "measured 2.00 MiB"));
}

TEST_CASE("a trailer that counts events the file does not hold: lost events, said and failing",
          "[cmd][check][unfinished][lost]") {
  // The header and the trailer alone: the trailer says 999 events were written and 5 dropped.
  const std::string empty = write_file(
      "counted_999.jsonl",
      kHeader + R"({"a":"trailer","t":3,"events":999,"dropped":5,"counts":{"alloc":999},"devices":[]})" + "\n");
  const Result check = sh(kVt + " check " + empty + " --max-peak-reserved 20GiB");
  INFO(check.out);
  CHECK(check.rc == 1);                                          // not "no device" (2), not a pass
  CHECK(has(check.out, "did not finish (it lost 1004 events"));  // 999 written, none held, 5 dropped
  CHECK(has(check.out, "FAIL  complete-trace"));
  const Result summary = sh(kVt + " summary " + empty);
  CHECK(summary.rc == 0);
  CHECK(summary.out.rfind("THE RUN DID NOT FINISH: " + empty + ": it lost 1004 events", 0) == 0);
  CHECK(has(summary.out, "WARNING: the trace lost 1004 events"));
  const auto j = nlohmann::json::parse(sh(kVt + " summary --json " + empty, false).out);
  CHECK(j["traces"][0]["lost_events"] == 1004);
  REQUIRE(j["unfinished_runs"].size() == 1);
  CHECK(j["unfinished_runs"][0]["lost_events"] == 1004);

  // As many lines as the trailer counts in all, but not of the actions it counts: two
  // segment_alloc lines where one was written, and one alloc of the two written.
  const std::string mixed = write_file(
      "counts_per_action.jsonl",
      kHeader + R"({"a":"segment_alloc","t":1000,"p":4294967296,"r":2097152})" + "\n" +
          R"({"a":"segment_alloc","t":1500,"p":8589934592,"r":2097152})" + "\n" +
          R"({"a":"alloc","t":2000,"p":4294967296,"r":1048576})" + "\n" +
          R"({"a":"trailer","t":3000,"events":3,"dropped":0,"counts":{"segment_alloc":1,"alloc":2},"devices":[]})" +
          "\n");
  const Result per_action = sh(kVt + " check " + mixed + " --max-peak-reserved 20GiB");
  INFO(per_action.out);
  CHECK(per_action.rc == 1);
  CHECK(has(per_action.out, "did not finish (it lost 1 event:"));
  CHECK(sh(kVt + " check " + mixed + " --max-peak-reserved 20GiB --allow-incomplete").rc == 0);
}

TEST_CASE("summary and report say first that the run did not finish", "[cmd][summary][report][unfinished]") {
  const std::string finished = write_file("finished_s.jsonl", kHeader + kEvents + kTrailer);
  const std::string no_trailer = write_file("no_trailer_s.jsonl", kHeader + kEvents);
  const std::string line = "THE RUN DID NOT FINISH: " + no_trailer + ": no trailer: the process did not finish tracing";

  // Text: the first line, also before the process x device view of several traces.
  CHECK(sh(kVt + " summary " + no_trailer).out.rfind(line, 0) == 0);
  const Result both = sh(kVt + " summary " + finished + " " + no_trailer);
  CHECK(both.out.rfind(line, 0) == 0);
  CHECK(both.out.find(line) < both.out.find("Processes x devices"));
  CHECK_FALSE(has(sh(kVt + " summary " + finished).out, "DID NOT FINISH"));

  // JSON: a top-level field, empty when every run finished.
  const auto j = nlohmann::json::parse(sh(kVt + " summary --json " + finished + " " + no_trailer, false).out);
  REQUIRE(j["unfinished_runs"].size() == 1);
  CHECK(j["unfinished_runs"][0]["path"] == no_trailer);
  CHECK(j["unfinished_runs"][0]["incomplete"] == true);
  CHECK(j["unfinished_runs"][0]["reason"].get<std::string>().rfind("no trailer", 0) == 0);
  CHECK(nlohmann::json::parse(sh(kVt + " summary --json " + finished, false).out)["unfinished_runs"].empty());

  // The report page: the banner's text in the page's data (tests/reporter-reports/
  // test_report_browser.cpp checks that it is drawn first).
  const std::string html = (dir() / "r.html").string();
  REQUIRE(sh(kVt + " report --force -o " + html + " " + no_trailer).rc == 0);
  std::stringstream page;
  page << std::ifstream(html).rdbuf();
  CHECK(has(page.str(), "\"unfinished\":[\"" + line));
  REQUIRE(sh(kVt + " report --force -o " + html + " " + finished).rc == 0);
  std::stringstream clean;
  clean << std::ifstream(html).rdbuf();
  CHECK_FALSE(has(clean.str(), "\"unfinished\""));
}

TEST_CASE("PyTorch's formats: what says their run did not finish", "[cmd][check][unfinished][torch]") {
  // PyTorch's history as JSON lines is written in one go after the run, every line with its '\n':
  // a last line without it was cut.
  const std::string entries = R"({"kind": "header", "workload": "w", "conf": "", "total": 85899345920})"
                              "\n"
                              R"({"action": "segment_alloc", "addr": 4096, "size": 2097152, "stream": 0, "time_us": 1})"
                              "\n"
                              R"({"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "time_us": 2})";
  const std::string whole = write_file("whole.torchtrace.jsonl", entries + "\n");
  const std::string cut = write_file("cut.torchtrace.jsonl", entries);
  CHECK(sh(kVt + " check " + whole + " --max-peak-reserved 20GiB").rc == 0);
  const Result c = sh(kVt + " check " + cut + " --max-peak-reserved 20GiB");
  INFO(c.out);
  CHECK(c.rc == 1);
  CHECK(has(c.out, "did not finish (cut last line)"));
  CHECK(sh(kVt + " check " + cut + " --max-peak-reserved 20GiB --allow-incomplete").rc == 0);

  // A snapshot with the sidecar of `vramtrace run`: finished when its last write is the exit's.
  const fs::path data = fs::path(VRAMTRACE_TEST_DATA_DIR) / "ledger";
  nlohmann::json sidecar;
  std::ifstream(data / "run.4242.torch.pickle.json") >> sidecar;
  auto snapshot = [&](const std::string& stem, const std::string& reason, bool final) {
    const fs::path pickle = dir() / (stem + ".torch.pickle");
    fs::copy_file(data / "run.4242.torch.pickle", pickle, fs::copy_options::overwrite_existing);
    sidecar["reason"] = reason;
    sidecar["final"] = final;
    sidecar["snapshot"] = pickle.filename().string();
    std::ofstream(pickle.string() + ".json") << sidecar.dump();
    return pickle.string();
  };
  const std::string budget = " --max-peak-reserved 80GiB";
  const Result exit_write = sh(kVt + " check " + snapshot("exited", "exit", true) + budget);
  INFO(exit_write.out);
  CHECK(exit_write.rc == 0);
  // An OOM's write, then nothing: the process was killed after it.
  const Result oom_write = sh(kVt + " check " + snapshot("killed", "oom", false) + budget);
  INFO(oom_write.out);
  CHECK(oom_write.rc == 1);
  CHECK(has(oom_write.out, "did not finish (its sidecar's last write was \"oom\", not the exit write"));
  // The exit write of a signal handler: the process died of SIGTERM.
  const Result term = sh(kVt + " check " + snapshot("termed", "signal SIGTERM", true) + budget);
  CHECK(term.rc == 1);
  CHECK(has(term.out, "did not finish (the process died of SIGTERM"));
  CHECK(sh(kVt + " check " + snapshot("termed", "signal SIGTERM", true) + budget + " --allow-incomplete").rc == 0);
}
