// Every command counts the same OOMs and retries (Note [one OOM per failed request],
// reporter/model/oom_count.h), run as a user runs them on the traces of tests/data/oom
// (make_oom_fixtures.py): a run that died without an `oom` entry in its history, the same with the
// entry, its full run without a cap, the shim's trace of PyTorch retrying under a cap, and a plain
// CUDA program's single failure.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

struct Result {
  int rc = -1;
  std::string out;
};

// Runs a shell command; its stdout comes back (stderr is left on the test's stderr).
Result sh(const std::string& cmd) {
  Result r;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p);
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = ::pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

const std::string kVt = VT_VRAMTRACE_EXE;
const std::string kData = std::string(VRAMTRACE_TEST_DATA_DIR) + "/oom/";

std::string data(const char* name) { return kData + name; }

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

nlohmann::json json_of(const std::string& cmd) {
  Result r = sh(cmd);
  REQUIRE(r.rc == 0);
  return nlohmann::json::parse(r.out);
}

fs::path tmp_dir() {
  static fs::path d = [] {
    auto p = fs::temp_directory_path() / ("vt_cmd_oom_count_" + std::to_string(::getpid()));
    fs::create_directories(p);
    return p;
  }();
  return d;
}

// The report's page holds its data as JSON in a script element.
std::string report_of(const std::string& trace) {
  const std::string out = (tmp_dir() / (fs::path(trace).filename().string() + ".html")).string();
  REQUIRE(sh(kVt + " report " + trace + " -o " + out + " --force").rc == 0);
  std::ifstream f(out);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("a run that died without an oom entry is one OOM in every command", "[cmd][oom_count]") {
  const std::string dead = data("dead_run.torchtrace.jsonl");

  const Result summary = sh(kVt + " summary " + dead);
  REQUIRE(summary.rc == 0);
  CHECK(has(summary.out, "CUDA OOMs: 1 "));
  CHECK(has(summary.out, "OOMs 1 (1 without an oom entry in the history, known from the message in the header"));
  CHECK(has(summary.out, "cudaMalloc retries 1 (recorded by PyTorch)"));
  CHECK_FALSE(has(summary.out, "OOMs 0"));
  CHECK_FALSE(has(summary.out, "DIFFERENT"));
  const auto sj = json_of(kVt + " summary --json " + dead);
  const auto& dev = sj["traces"][0]["devices"][0];
  CHECK(dev["ooms"] == 1);
  CHECK(dev["stats"]["num_ooms"] == 1);
  CHECK(dev["stats"]["num_alloc_retries"] == 1);
  CHECK(dev["oom_count"]["oom_entries"] == 0);
  CHECK(dev["oom_count"]["without_entry"][0]["source"] == "the message in the header");
  // The cap PyTorch ran under is what the process could use of the device.
  CHECK(dev["capacity_bytes"] == 14495514624);  // 13.5 GiB

  const Result oom = sh(kVt + " oom --no-replay " + dead);
  REQUIRE(oom.rc == 0);
  CHECK_FALSE(has(oom.out, "No OOM"));
  CHECK(has(oom.out, "Device 0: OOMs 1"));
  CHECK(has(oom.out,
            "OOM 1 on device 0: not in the history (known from the message in the header); its moment "
            "and the allocator's state at it were not recorded"));
  CHECK(has(oom.out, "message: CUDA out of memory. Tried to allocate 768.00 MiB"));
  CHECK(has(oom.out, "cap (allowed)                             13.50 GiB"));  // the message's "allowed"
  const auto oj = json_of(kVt + " oom --json --no-replay " + dead);
  REQUIRE(oj["ooms"].size() == 1);
  CHECK(oj["ooms"][0]["without_entry"]["source"] == "the message in the header");
  CHECK(oj["ooms"][0]["event"].is_null());
  CHECK(oj["ooms"][0]["figures"]["request_bytes"] == 768ll << 20);
  CHECK(oj["oom_counts"][0]["ooms"] == 1);
  // With replays: the failed request has no moment to be put back at, so the trace's own row
  // cannot reproduce the OOM, and no verdict is given, in oom as in replay.
  const auto rj = json_of(kVt + " oom --json " + dead);
  CHECK(rj["whatif"]["reproduces"] == false);
  REQUIRE(rj["whatif"]["withheld"].is_object());
  CHECK(rj["whatif"]["withheld"]["why"].get<std::string>().find("without an entry in the history") !=
        std::string::npos);
  for (const auto& row : rj["replays"]) CHECK(row["verdict"].is_null());
  CHECK(rj["tune_command"].is_null());
  const auto pj = json_of(kVt + " replay --json " + dead);
  CHECK(pj["withheld"]["why"] == rj["whatif"]["withheld"]["why"]);
  CHECK(pj["results"][0]["verdict"].is_null());
  // The text says so at the top of the replays, and names no setting as fitting.
  const Result ot = sh(kVt + " oom " + dead);
  CHECK(has(ot.out, "NO VERDICT on any setting"));
  CHECK_FALSE(has(ot.out, ": fits ("));

  const std::string page = report_of(dead);
  CHECK(has(page, "OOMs 1 (1 without an oom entry in the history"));
  CHECK(has(page, "\"without_entry\":\"the message in the header\""));
  CHECK(has(page, "\"capacity\":14495514624"));  // the cap, not the device's 139.80 GiB
  CHECK(has(page, "CUDA OOMs: 1 "));

  CHECK(sh(kVt + " check --max-ooms 0 " + dead).rc == 1);
  CHECK(sh(kVt + " check --max-ooms 1 " + dead).rc == 0);
  const auto cj = json_of(kVt + " check --format json --max-ooms 1 " + dead);
  CHECK(cj.dump().find("\"num_ooms\":1") != std::string::npos);
  // A summary document of it fails the gate the same way.
  const std::string doc = (tmp_dir() / "dead.summary.json").string();
  REQUIRE(sh(kVt + " summary --json " + dead + " > " + doc).rc == 0);
  CHECK(sh(kVt + " check --max-ooms 0 " + doc).rc == 1);
}

TEST_CASE("a run that died with its oom entry: one OOM, the same in every command", "[cmd][oom_count]") {
  const std::string dead = data("dead_entry.torchtrace.jsonl");
  const Result summary = sh(kVt + " summary " + dead);
  CHECK(has(summary.out, "OOMs 1, cudaMalloc retries 1 (recorded by PyTorch)"));
  CHECK(has(summary.out, "CUDA OOMs: 1 "));
  const Result oom = sh(kVt + " oom --no-replay " + dead);
  CHECK(has(oom.out, "OOM 1 on device 0, +"));
  CHECK_FALSE(has(oom.out, "OOM 2"));
  CHECK(sh(kVt + " check --max-ooms 0 " + dead).rc == 1);
  CHECK(has(report_of(dead), "OOMs 1, cudaMalloc retries 1"));
}

TEST_CASE("shim trace: survived failures are retries, the final double failure one OOM, in every command",
          "[cmd][oom_count]") {
  const std::string t = data("retries.vramtrace.jsonl");
  const std::string line =
      "OOMs 1, cudaMalloc retries 3 (4 failed allocations of the traced allocator: 2 the program "
      "survived (the request then succeeded) and 1 it tried again before the error)";
  const Result summary = sh(kVt + " summary " + t);
  REQUIRE(summary.rc == 0);
  CHECK(has(summary.out, line));
  CHECK(has(summary.out, "CUDA OOMs: 1 "));
  CHECK(has(summary.out, "cudaMalloc retries: 3 "));
  // The trailer's num_ooms is the traced allocator's failures: the entries, not the OOMs.
  CHECK(has(summary.out, "num_ooms"));
  CHECK_FALSE(has(summary.out, "DIFFERENT"));
  // The trailer's num_alloc_retries (the traced allocator's own, 4) beside the program's 3.
  CHECK(has(summary.out, "num_alloc_retries"));
  CHECK(has(summary.out,
            "the traced allocator's releases of its cache before trying again; the program tried "
            "again 3 times (cudaMalloc retries above)"));
  const auto sj = json_of(kVt + " summary --json " + t);
  const auto& dev = sj["traces"][0]["devices"][0];
  CHECK(dev["ooms"] == 1);
  CHECK(dev["stats"]["num_ooms"] == 1);
  CHECK(dev["stats"]["num_alloc_retries"] == 3);
  CHECK(dev["oom_count"]["oom_entries"] == 4);
  CHECK(dev["oom_count"]["survived"] == 2);
  CHECK(dev["oom_count"]["repeated"] == 1);

  const Result oom = sh(kVt + " oom --no-replay " + t);
  CHECK(has(oom.out, "Device 0: " + line));
  CHECK(has(oom.out, "OOM 1 on device 0"));
  CHECK_FALSE(has(oom.out, "OOM 2"));
  CHECK(has(oom.out, "failed attempts of this request"));
  CHECK(has(oom.out, "Failed allocations the program tried again (cudaMalloc retries, not OOMs):"));
  const auto oj = json_of(kVt + " oom --json --no-replay " + t);
  REQUIRE(oj["ooms"].size() == 1);
  CHECK(oj["ooms"][0]["attempts"] == 2);
  CHECK(oj["ooms"][0]["figures"]["num_alloc_retries"] == 3);
  CHECK(oj["retried_failures"].size() == 3);
  // The shim's trace of PyTorch holds PyTorch's segments (a Python program asking for 2 MiB
  // multiples): no replay and no verdict on PyTorch's settings (Note [the level of a trace]).
  const auto rj = json_of(kVt + " oom --json " + t);
  CHECK(rj["whatif"]["withheld"]["why"].get<std::string>().find("segments of PyTorch's caching allocator") !=
        std::string::npos);
  for (const auto& w : rj["replays"]) CHECK(w["verdict"].is_null());
  // The same requests from a program that asks the driver itself: the replay puts back the OOM, not
  // the failed attempts the program retried, so the trace's own settings give the one OOM.
  std::ifstream in(t);
  std::stringstream text;
  text << in.rdbuf();
  std::string plain = text.str();
  const std::string python = R"("command_line":["python3","train.py"])";
  REQUIRE(plain.find(python) != std::string::npos);
  plain.replace(plain.find(python), python.size(), R"("command_line":["./solver"])");
  const std::string solver = (tmp_dir() / "solver.vramtrace.jsonl").string();
  std::ofstream(solver) << plain;
  const auto plain_json = json_of(kVt + " oom --json " + solver);
  bool own = false;
  for (const auto& w : plain_json["replays"])
    if (w["settings"] == "") {
      own = true;
      CHECK(w["ooms"] == 1);
    }
  CHECK(own);

  const std::string page = report_of(t);
  CHECK(has(page, line));
  CHECK(has(page, "\"kind\":\"retry\""));

  CHECK(sh(kVt + " check --max-ooms 0 " + t).rc == 1);
  CHECK(sh(kVt + " check --max-ooms 1 " + t).rc == 0);
  CHECK(sh(kVt + " check --max-retries 2 " + t).rc == 1);
  CHECK(sh(kVt + " check --max-retries 3 " + t).rc == 0);
}

TEST_CASE("shim trace: a plain CUDA program's single failed cudaMalloc is one OOM, no retry", "[cmd][oom_count]") {
  const std::string t = data("plain_oom.vramtrace.jsonl");
  const Result summary = sh(kVt + " summary " + t);
  CHECK(has(summary.out, "OOMs 1, cudaMalloc retries 0\n"));
  const auto oj = json_of(kVt + " oom --json --no-replay " + t);
  CHECK(oj["ooms"].size() == 1);
  CHECK(oj["retried_failures"].empty());
  CHECK(sh(kVt + " check --max-ooms 0 " + t).rc == 1);
  CHECK(sh(kVt + " check --max-ooms 0 --max-retries 0 --format json " + t).rc == 1);
  CHECK(sh(kVt + " check --max-retries 0 " + t).rc == 0);
}

TEST_CASE("a run without any OOM passes the gate", "[cmd][oom_count]") {
  const std::string t = data("full_run.torchtrace.jsonl");
  CHECK(has(sh(kVt + " summary " + t).out, "OOMs 0, cudaMalloc retries 0 (recorded by PyTorch)"));
  CHECK(has(sh(kVt + " oom --no-replay " + t).out, "No OOM in this trace, and it ends normally."));
  CHECK(sh(kVt + " check --max-ooms 0 " + t).rc == 0);
}

TEST_CASE("diff: a run that died is never the one that needs less memory", "[cmd][oom_count][diff]") {
  const std::string full = data("full_run.torchtrace.jsonl");
  const Result r = sh(kVt + " diff " + full + " " + data("dead_run.torchtrace.jsonl"));
  REQUIRE(r.rc == 0);
  CHECK_FALSE(has(r.out, "needs less memory"));
  CHECK(has(r.out,
            "NEW ran out of memory (1 OOM; the trace holds no oom entry for it, so its moment is not known) "
            "after 12 allocations, where BASE made 41: its peaks stop at the failure"));
  // The mirror: BASE died.
  const Result m = sh(kVt + " diff " + data("dead_run.torchtrace.jsonl") + " " + full);
  CHECK_FALSE(has(m.out, "needs more memory"));
  CHECK(has(m.out, "BASE ran out of memory (1 OOM;"));
}

TEST_CASE("diff: a trace that ends abruptly is never the one that needs less memory", "[cmd][oom_count][diff]") {
  // The shim's traces of one program: a whole run (with its trailer) holding 40 MiB at its peak,
  // and a run killed after its first 10 MiB (no trailer).
  auto write = [](const std::string& name, bool whole) {
    const std::string path = (tmp_dir() / name).string();
    std::ofstream f(path);
    f << R"({"a":"header","format":"vramtrace","version":"1.1","pid":7,"devices":[{"id":0,"name":"GPU",)"
      << R"("total_bytes":1073741824}],"allocator_settings":"","settings":{},"entry_points":["","cudaMalloc"]})"
      << "\n";
    f << R"({"a":"segment_alloc","t":1,"p":4294967296,"r":10485760,"e":1})"
      << "\n";
    f << R"({"a":"alloc","t":2,"p":4294967296,"r":10485760,"e":1})"
      << "\n";
    if (whole) {
      f << R"({"a":"segment_alloc","t":3,"p":8589934592,"r":31457280,"e":1})"
        << "\n";
      f << R"({"a":"alloc","t":4,"p":8589934592,"r":31457280,"e":1})"
        << "\n";
      f << R"({"a":"trailer","t":5,"events":4,"dropped":0,"counts":{"segment_alloc":2,"alloc":2},"devices":[]})"
        << "\n";
    }
    return path;
  };
  const std::string whole = write("whole.jsonl", true), killed = write("killed.jsonl", false);
  const Result r = sh(kVt + " diff " + whole + " " + killed);
  REQUIRE(r.rc == 0);
  CHECK_FALSE(has(r.out, "needs less memory"));
  CHECK(has(r.out, "but NEW's trace ends abruptly (no trailer"));
  CHECK(has(r.out, "its peaks stop there, so they are no measure of what the program needs."));
  // Killed BASE, whole NEW: NEW's larger peak is no measure either.
  const Result m = sh(kVt + " diff " + killed + " " + whole);
  CHECK_FALSE(has(m.out, "needs more memory"));
  CHECK(has(m.out, "but BASE's trace ends abruptly"));
}

TEST_CASE("diff: the failed request lined up at the same allocation names the cap, not live bytes",
          "[cmd][oom_count][diff]") {
  const std::string full = data("full_run.torchtrace.jsonl");
  const Result r = sh(kVt + " diff " + full + " " + data("dead_entry.torchtrace.jsonl"));
  REQUIRE(r.rc == 0);
  // BASE's largest request (the 4 GiB workspace) came with 8 GiB live; at the allocation NEW failed,
  // both held 13.25 GiB.
  CHECK(has(r.out,
            "NEW ran out of memory asking for 768.00 MiB (its allocation #12) with the same live bytes as BASE "
            "(13.25 GiB vs 13.25 GiB) at the same allocation (both runs made the same requests up to it): NEW "
            "could use 13.50 GiB of its device, BASE 139.80 GiB, and BASE reserved up to 20.00 GiB"));
  CHECK(has(r.out, "the lower capacity explains it (capacity), not the program."));
  CHECK_FALSE(has(r.out, "live bytes explain it"));
  const auto j = json_of(kVt + " diff --json " + full + " " + data("dead_entry.torchtrace.jsonl"));
  CHECK(j["devices"][0]["explanation"].get<std::string>().find("lower capacity") != std::string::npos);
}

// A real run that died of its OOM on the H200 under `vramtrace run --limit T4` (the Llama-style
// 1.1B training of tests/gpu/torch_train.py, which needs about 20.8 GB; made by
// tests/gpu/oom_runs.sh on 2026-12-01): the shim's trace, PyTorch's snapshot and its sidecar.
TEST_CASE("a real capped run that died of its OOM: every command reports it, no setting is said to fit",
          "[cmd][oom_count]") {
  const std::string trace = data("llama_t4/llama.vramtrace.jsonl.zst");
  for (const std::string level : {"auto", "device"}) {
    INFO("level " << level);
    const std::string lv = " --level " + level + " ";
    const Result summary = sh(kVt + " summary" + lv + trace);
    REQUIRE(summary.rc == 0);
    CHECK(has(summary.out, "OOMs 1, cudaMalloc retries 2"));
    CHECK(sh(kVt + " check --max-ooms 0" + lv + trace).rc == 1);
    const auto oj = json_of(kVt + " oom --json" + lv + trace);
    REQUIRE(oj["ooms"].size() == 1);
    CHECK(oj["ooms"][0]["figures"]["request_bytes"] == 44ll << 20);
    CHECK(oj["ooms"][0]["figures"]["device_total_bytes"] == 15653142528ll);  // the T4's 14.58 GiB
    REQUIRE(oj["replays"].size() == 6);
    CHECK(oj["replays"][0]["settings"] == "");
    CHECK(oj["whatif"]["covers"] == "to_failure");
    for (const auto& r : oj["replays"]) CHECK(r["verdict"] != "fits");  // it needs 6 GB more than a T4
    if (level == "device") {
      // The shim's trace holds PyTorch's segments: no verdict on PyTorch's settings, no diagnosis
      // of its cache, and the way to the tensor level beside it.
      CHECK(oj["whatif"]["withheld"]["why"].get<std::string>().find("segments of PyTorch's caching allocator") !=
            std::string::npos);
      CHECK(oj["whatif"]["withheld"]["how"].get<std::string>().find("llama.470.torch.pickle.gz") != std::string::npos);
      for (const auto& r : oj["replays"]) CHECK(r["verdict"].is_null());
      CHECK(oj["ooms"][0]["diagnosis"] == "undetermined");
      CHECK(oj["tune_command"].is_null());
    } else {
      CHECK(oj["replays"][0]["verdict"] == "does_not_fit");  // the trace's own row reproduces the OOM
      // The tune line runs the program the shim's trace names.
      CHECK(oj["tune_command"].get<std::string>().find(" -- python3 tests/gpu/torch_train.py --model llama") !=
            std::string::npos);
    }
  }
  const std::string page = report_of(trace);
  CHECK(has(page, "CUDA OOMs: 1 "));
  CHECK(has(page, "\"capacity\":15653142528"));
}

// Two real runs of the BERT-base encoder with variable lengths (tests/gpu/bert_varlen.py) that
// died of their OOM on the H200 (2026-12-01): under `vramtrace run --limit 10GiB` (it needs about
// 13.8 GiB allocated: capacity) and under `vramtrace tune --limit 16GiB` (the defaults' run, with
// the shim forwarding PyTorch's segments: fragmentation). On the GPU, tune ran every replayed
// setting under 16 GiB: expandable_segments:True and the three max_split_size_mb settings fitted,
// the defaults and roundup_power2_divisions:4 ran out of memory (docs/compatibility.md).
TEST_CASE("real encoder OOMs: capacity under 10 GiB; fragmentation under 16 GiB with the verdicts tune confirmed",
          "[cmd][oom_count]") {
  const std::string capped = data("encoder_10g/encoder.jsonl.zst");
  for (const std::string level : {"auto", "device"}) {
    INFO("level " << level);
    const std::string lv = " --level " + level + " ";
    CHECK(has(sh(kVt + " summary" + lv + capped).out, "OOMs 1, cudaMalloc retries 1"));
    CHECK(sh(kVt + " check --max-ooms 0" + lv + capped).rc == 1);
    const auto oj = json_of(kVt + " oom --json" + lv + capped);
    REQUIRE(oj["ooms"].size() == 1);
    CHECK(oj["ooms"][0]["figures"]["device_total_bytes"] == 10ll << 30);
    REQUIRE(!oj["replays"].empty());
    for (const auto& r : oj["replays"]) CHECK(r["verdict"] != "fits");
    if (level == "device") {  // PyTorch's segments: neither capacity nor fragmentation can be told
      CHECK(oj["ooms"][0]["diagnosis"] == "undetermined");
      CHECK(oj["replays"][0]["verdict"].is_null());
    } else {
      CHECK(oj["ooms"][0]["diagnosis"] == "capacity");
      CHECK(oj["replays"][0]["verdict"] == "does_not_fit");
    }
  }
  CHECK(has(report_of(capped), "CUDA OOMs: 1 "));

  const std::string frag = data("bert_16g/bert.jsonl.zst");
  const auto oj = json_of(kVt + " oom --json " + frag);
  REQUIRE(oj["ooms"].size() == 1);
  CHECK(oj["ooms"][0]["diagnosis"] == "fragmentation");
  std::map<std::string, nlohmann::json> row;
  for (const auto& r : oj["replays"]) row[r["settings"].get<std::string>()] = r;
  CHECK(row[""]["verdict"] == "does_not_fit");
  CHECK(row["roundup_power2_divisions:4"]["verdict"] == "does_not_fit");  // ran out of memory on the GPU
  // The run died of its OOM: the settings that get past it (all four fitted on the GPU) have no
  // verdict, since the rest of the run was never recorded; they are tune's candidates.
  for (const char* s :
       {"expandable_segments:True", "max_split_size_mb:20", "max_split_size_mb:128", "max_split_size_mb:512"}) {
    INFO(s);
    CHECK(row[s]["verdict"].is_null());
    CHECK(row[s]["partial"] == true);
    CHECK(row[s]["margin_bytes"].is_number());
    CHECK(oj["tune_command"].get<std::string>().find(s) != std::string::npos);
  }
  CHECK(oj["tune_command"].get<std::string>().find("roundup_power2_divisions") == std::string::npos);
  // The device level sees PyTorch's segments as the program's memory, and says why it cannot tell.
  const Result dev = sh(kVt + " oom --no-replay --level device " + frag + " 2>&1");
  CHECK(has(dev.out, "Diagnosis: undetermined"));
  CHECK(has(dev.out, "no fragmentation or capacity verdict"));
}

namespace {
// `src` with its trailer's `from` replaced by `to`, written to the temp directory as `name`.
std::string with_trailer_edit(const std::string& src, const std::string& from, const std::string& to,
                              const std::string& name) {
  std::ifstream in(src);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  const auto at = text.rfind(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
  const std::string out = (tmp_dir() / name).string();
  std::ofstream(out, std::ios::binary) << text;
  return out;
}
}  // namespace

TEST_CASE("lost events are said by every command, and fail the check", "[cmd][lost]") {
  const std::string plain = data("plain_oom.vramtrace.jsonl");
  const std::string dropped = with_trailer_edit(plain, "\"dropped\":0", "\"dropped\":5", "dropped.jsonl");
  const std::string missing = with_trailer_edit(plain, "\"events\":3", "\"events\":999", "missing.jsonl");
  for (const auto& [trace, lost] : {std::pair{dropped, 5}, std::pair{missing, 996}}) {
    INFO(trace);
    const Result summary = sh(kVt + " summary " + trace);
    REQUIRE(summary.rc == 0);
    CHECK(has(summary.out, "WARNING: the trace lost " + std::to_string(lost) + " events"));
    CHECK(json_of(kVt + " summary --json " + trace)["traces"][0]["lost_events"] == lost);
    const Result check = sh(kVt + " check --max-ooms 5 " + trace);
    CHECK(check.rc == 1);  // the budget holds, but the figures cannot be vouched for
    CHECK(has(check.out, "lost " + std::to_string(lost) + " events"));
    CHECK(has(check.out, "vramtrace check: fails: 1 trace did not finish; all 1 budgets hold"));
    // --allow-incomplete judges the budgets; the warning stays.
    const Result allowed = sh(kVt + " check --max-ooms 5 --allow-incomplete " + trace);
    CHECK(allowed.rc == 0);
    CHECK(has(allowed.out, "warning: " + trace + " did not finish (it lost " + std::to_string(lost) + " events"));
    CHECK_FALSE(has(allowed.out, "fails:"));
    CHECK(sh(kVt + " check --max-ooms 0 --allow-incomplete " + trace).rc == 1);  // the budget itself fails
    const Result check_json = sh(kVt + " check --max-ooms 5 --format json " + trace + " 2>/dev/null");
    CHECK(check_json.rc == 1);
    CHECK(nlohmann::json::parse(check_json.out)["lossy_traces_fail"] == true);
    // Every other report says it too.
    const std::string warning = "WARNING: the trace lost " + std::to_string(lost) + " events";
    CHECK(has(sh(kVt + " oom --no-replay " + trace).out, warning));
    CHECK(json_of(kVt + " oom --no-replay --json " + trace)["lost_events"] == lost);
    CHECK(has(sh(kVt + " replay --capacity 8GiB " + trace).out, warning));
    CHECK(has(sh(kVt + " diff " + plain + " " + trace).out, "NEW: " + warning));
    const std::string html = (tmp_dir() / "lost.html").string();
    fs::remove(html);
    REQUIRE(sh(kVt + " report -o " + html + " " + trace + " 2>/dev/null").rc == 0);
    std::ifstream page(html);
    std::stringstream text;
    text << page.rdbuf();
    CHECK(has(text.str(), "\"lost_warning\":\"" + warning));
  }
  // The untouched trace: nothing lost, the same budget passes.
  CHECK(sh(kVt + " check --max-ooms 5 " + plain).rc == 0);
  CHECK_FALSE(has(sh(kVt + " summary " + plain).out, "lost"));
}

TEST_CASE("output lost to a full disk is an error, not a success", "[cmd][output]") {
  if (!fs::exists("/dev/full")) return;
  const std::string plain = data("plain_oom.vramtrace.jsonl");
  for (const std::string cmd : {" summary --json ", " summary ", " oom --no-replay "}) {
    const Result r = sh(kVt + cmd + plain + " 2>&1 >/dev/full");  // stderr to the pipe, stdout to the full disk
    CHECK(r.rc == 2);
    CHECK(has(r.out, "vramtrace: cannot write the output: "));
  }
  // replay --json writes more than stdio's buffer at once.
  for (const std::string& cmd :
       {" replay --capacity 8GiB " + plain, " replay --json --capacity 8GiB " + plain, " diff " + plain + " " + plain,
        std::string(" explain 'CUDA out of memory. Tried to allocate 2.00 GiB'")}) {
    INFO(cmd);
    const Result r = sh(kVt + cmd + " 2>&1 >/dev/full");
    CHECK(r.rc == 2);
    CHECK(has(r.out, "cannot write the output: "));
  }
  // A reader that stops early (`| head`) with SIGPIPE ignored, as in shells and launchers that
  // ignore it: no message, the command's own status (check's failure stays a failure).
  const std::string big = std::string(VRAMTRACE_TEST_DATA_DIR) + "/torch-h200/gpt2_train.torchtrace.jsonl.gz";
  // The reader (`true`) has gone before the command has read its trace: every write meets EPIPE.
  auto into_head = [](const std::string& cmd) {  // the command's stderr and status; its stdout to a closed pipe
    return sh("exec 3>&1; trap '' PIPE; (" + cmd + " 2>&3; echo rc=$? >&3) | true");
  };
  CHECK(into_head(kVt + " summary --json " + big).out == "rc=0\n");
  CHECK(into_head(kVt + " check --max-ooms 0 --format json " + big + " " + plain).out == "rc=1\n");
  // Files given with -o: the reason is said.
  const Result report = sh(kVt + " report --force -o /dev/full " + plain + " 2>&1");
  CHECK(report.rc == 2);
  CHECK(has(report.out, "vramtrace report: cannot write /dev/full: No space left on device"));
  const Result check = sh(kVt + " check --max-ooms 5 --force -o /dev/full " + plain + " 2>&1");
  CHECK(check.rc == 2);
  CHECK(has(check.out, "/dev/full: cannot write the report: No space left on device"));
}

namespace {
// The summary without its first line (which names the file) and without its notes.
std::string figures_of(const std::string& summary) {
  const std::size_t from = summary.find('\n');
  return summary.substr(from, summary.find("\nNotes:") - from);
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = (tmp_dir() / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

const std::string kHeader =
    R"({"a":"header","format":"vramtrace","version":"1.2","tool_version":"0.1.0","pid":1,"ppid":1,"host":"h",)"
    R"("rank":"","command_line":["x"],"start_unix_ns":1796020000000000000,"clock":"CLOCK_MONOTONIC",)"
    R"("origin_monotonic_ns":1000,"cuda_driver_version":13000,"cuda_runtime_version":13000,"devices":[{"id":0,)"
    R"("name":"NVIDIA H200","total_bytes":15655829504}],"allocator_settings":"","settings":{"reuse":"lazy_sync"},)"
    R"("entry_points":["","cudaMalloc","cudaFree"],"trace":{"buffer_events":16384,"on_full":"wait",)"
    R"("flush_interval_ms":100,"compression":"none"}})";
const std::string kTrailer = R"({"a":"trailer","t":9000,"events":4,"dropped":0,"counts":{},"devices":[]})";
}  // namespace

TEST_CASE("a trace from a pipe, a FIFO or standard input reads as the file does", "[cmd][pipe]") {
  const std::string plain = data("plain_oom.vramtrace.jsonl");
  const Result file = sh(kVt + " summary " + plain);
  REQUIRE(file.rc == 0);
  const std::string gz = (tmp_dir() / "plain.jsonl.gz").string();
  REQUIRE(sh("gzip -c " + plain + " > " + gz).rc == 0);
  for (const std::string& cmd :
       {"cat " + plain + " | " + kVt + " summary /dev/stdin", "zcat " + gz + " | " + kVt + " summary /dev/stdin",
        kVt + " summary - < " + plain, "gzip -c " + plain + " | " + kVt + " summary -"}) {
    INFO(cmd);
    const Result piped = sh(cmd);
    CHECK(piped.rc == 0);
    CHECK(figures_of(piped.out) == figures_of(file.out));
  }
  // The report reads its input twice or more (detection, model): the same page data.
  CHECK(sh("cat " + plain + " | " + kVt + " oom --no-replay /dev/stdin").rc == 0);
  // A FIFO given by name, with a writer that comes a little later.
  const std::string fifo = (tmp_dir() / "trace.fifo").string();
  fs::remove(fifo);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const Result by_name = sh("(sleep 0.3; cat " + plain + " > " + fifo + ") & " + kVt + " summary " + fifo);
  CHECK(by_name.rc == 0);
  CHECK(figures_of(by_name.out) == figures_of(file.out));
  // A FIFO nobody writes to: a clear error after the wait, not a hang.
  const Result nobody = sh("VRAMTRACE_FIFO_WAIT_S=1 " + kVt + " check --max-ooms 0 " + fifo + " 2>&1");
  CHECK(nobody.rc == 2);
  CHECK(has(nobody.out, fifo + ": a FIFO that no process opened for writing in 1 s"));
  // A writer that opened it and is slow is waited for, beyond the limit.
  const Result slow =
      sh("(exec 3>" + fifo + "; sleep 2; cat " + plain + " >&3) & VRAMTRACE_FIFO_WAIT_S=1 " + kVt + " summary " + fifo);
  CHECK(slow.rc == 0);
  CHECK(figures_of(slow.out) == figures_of(file.out));
  // A slow anonymous pipe too, and "-" and /dev/stdin of one pipe are one input.
  CHECK(sh("(sleep 2; cat " + plain + ") | VRAMTRACE_FIFO_WAIT_S=1 " + kVt + " summary /dev/stdin").rc == 0);
  CHECK(sh("cat " + plain + " | " + kVt + " diff - /dev/stdin").rc == 0);
  // A regular file on standard input is read in place (no copy: an unusable TMPDIR is no matter).
  CHECK(sh("TMPDIR=/nonexistent " + kVt + " summary - < " + plain).rc == 0);
  fs::remove(fifo);
}

TEST_CASE("text that is not UTF-8 in a trace is replaced and reported, not fatal", "[cmd][utf8]") {
  const std::string trace = write_file(
      "badutf8.jsonl", kHeader + "\n" + R"({"a":"segment_alloc","t":1000,"p":1048576,"r":2097152})" + "\n" +
                           "{\"a\":\"mark\",\"t\":2000,\"name\":\"bad \xff\xfe name\"}\n" +
                           R"({"a":"mark","t":2500,"name":"lone \ud800 surrogate"})" + "\n" +
                           R"({"a":"mark","t":2600,"name":"pair \ud83d\ude00 kept"})" + "\n" +
                           R"({"a":"alloc","t":3000,"p":1048576,"r":1000,"b":1024})" + "\n" + kTrailer + "\n");
  const Result s = sh(kVt + " summary " + trace);
  CHECK(s.rc == 0);
  CHECK(has(s.out, "2 lines held text that is not UTF-8 (first at line 3)"));
  CHECK(has(s.out, "| Allocated memory      |   1024 B   |"));
  const std::string page = report_of(trace);
  CHECK(has(page, "bad \xef\xbf\xbd\xef\xbf\xbd name"));  // each bad byte is U+FFFD
  CHECK(has(page, "pair \xf0\x9f\x98\x80 kept"));         // a valid surrogate pair is kept
  // A line that is broken in another way still names the line and quotes its start.
  const std::string broken =
      write_file("broken.jsonl", kHeader + "\n" + R"({"a":"alloc","t":1000,"p":4096,"r":[}})" + "\n" + kTrailer + "\n");
  const Result b = sh(kVt + " summary " + broken + " 2>&1");
  CHECK(b.rc == 2);
  CHECK(has(b.out, "broken.jsonl:2: malformed event ("));
  CHECK(has(b.out, "'{\"a\":\"alloc\",\"t\":1000,\"p\":4096,\"r\":[}}'"));
}

TEST_CASE("an allocation in no segment is counted as allocated, never as free cache memory", "[cmd][orphan]") {
  // One 2 MiB segment and an allocation outside it: the segment is all free.
  const std::string trace = write_file(
      "outside.jsonl", kHeader + "\n" + R"({"a":"segment_alloc","t":2000,"p":1048576,"r":2097152})" + "\n" +
                           R"({"a":"alloc","t":3000,"p":99048576,"r":1000448,"b":1000448})" + "\n" + kTrailer + "\n");
  const Result s = sh(kVt + " summary " + trace);
  REQUIRE(s.rc == 0);
  CHECK(has(s.out, "reserved but unallocated 2.00 MiB"));
  CHECK(has(s.out, "1 allocations at addresses in no segment of the trace"));
}

TEST_CASE("a DIFFERENT row of the recorded-vs-computed table says why", "[cmd][recorded]") {
  // PyTorch read its statistics after the history ended at the OOM and the exception freed 1 GiB.
  const std::string edited =
      with_trailer_edit(data("dead_entry.torchtrace.jsonl"), "\"allocated_bytes.all.current\": 14227079168",
                        "\"allocated_bytes.all.current\": 13153337344", "freed_after.jsonl");
  const Result s = sh(kVt + " summary " + edited);
  REQUIRE(s.rc == 0);
  CHECK(has(s.out,
            "allocated_bytes.all.current         13153337344      14227079168  DIFFERENT: read after the "
            "history ended at its OOM; memory freed afterwards (the exception unwinding) is not in the events"));
  CHECK(has(s.out, "reserved_bytes.all.current          14227079168      14227079168  same"));
  // More allocations recorded than the events hold: outside the history.
  const std::string more = with_trailer_edit(data("dead_entry.torchtrace.jsonl"), "\"allocation.all.allocated\": 12",
                                             "\"allocation.all.allocated\": 20", "more_allocs.jsonl");
  CHECK(has(sh(kVt + " summary " + more).out, "DIFFERENT: events outside the recorded history"));
}

TEST_CASE("review cases: stack text, lossy JSON and JUnit, -o a device, an OOM before the end", "[cmd][review]") {
  // A string record (a Python file name) with a lone surrogate: repaired, not fatal.
  const std::string str = write_file(
      "str_surrogate.jsonl", kHeader + "\n" + R"({"a":"segment_alloc","t":1000,"p":1048576,"r":2097152})" + "\n" +
                                 R"({"a":"string","id":1,"text":"x\ud800.py"})" + "\n" +
                                 R"({"a":"alloc","t":3000,"p":1048576,"r":1000,"b":1024})" + "\n" + kTrailer + "\n");
  const Result s = sh(kVt + " summary " + str);
  CHECK(s.rc == 0);
  CHECK(has(s.out, "1 lines held text that is not UTF-8 (first at line 3)"));
  // A trace that lost events fails the check in every document, not only in its exit status.
  const std::string lossy =
      with_trailer_edit(data("plain_oom.vramtrace.jsonl"), "\"dropped\":0", "\"dropped\":5", "lossy_review.jsonl");
  const Result j = sh(kVt + " check --max-ooms 5 --format json " + lossy + " 2>/dev/null");
  CHECK(j.rc == 1);
  const auto doc = nlohmann::json::parse(j.out);
  CHECK(doc["exit_code"] == 1);
  CHECK(doc["verdict"] == "fail");
  const Result x = sh(kVt + " check --max-ooms 5 --format junit " + lossy + " 2>/dev/null");
  CHECK(x.rc == 1);
  CHECK(has(x.out, "failures=\"1\""));
  CHECK(has(x.out, "complete-trace"));
  // -o a device is written to, not refused as an existing file.
  CHECK(sh(kVt + " check --max-ooms 5 -o /dev/null " + data("plain_oom.vramtrace.jsonl")).rc == 0);
  // An OOM followed by more events: the history did not end at it, whatever marks came before.
  std::string marks;
  for (int i = 0; i < 10; ++i) marks += R"({"a":"mark","t":)" + std::to_string(100 + i) + R"(,"name":"m"})" + "\n";
  const std::string early =
      write_file("oom_early.jsonl",
                 kHeader + "\n" + marks + R"({"a":"segment_alloc","t":1000,"p":1048576,"r":8388608})" + "\n" +
                     R"({"a":"alloc","t":1100,"p":1048576,"r":1048576})" + "\n" +
                     R"({"a":"oom","t":1200,"r":1073741824,"b":1073741824,"free":0,"retries":1})" + "\n" +
                     R"({"a":"alloc","t":1300,"p":2097152,"r":1048576})" + "\n" +
                     R"({"a":"trailer","t":9000,"events":14,"dropped":0,"counts":{},"devices":[{"device":0,"stats":)"
                     R"({"allocated_bytes.all.current":1048576}}]})" +
                     "\n");
  const Result e = sh(kVt + " summary " + early);
  REQUIRE(e.rc == 0);
  CHECK(has(e.out, "DIFFERENT: read after the history's last event; memory freed afterwards"));
  CHECK_FALSE(has(e.out, "ended at its OOM"));
}
