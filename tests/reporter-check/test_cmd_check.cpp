// The `vramtrace check` and `vramtrace diff` commands on generated traces: every exit code, each
// output format, budgets file, baseline, usage errors, and case C11 for diff.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "training_sim.h"

using namespace vramtrace;
using vramtrace::test::training_trace;
using vramtrace::test::TrainingShape;

namespace {

namespace fs = std::filesystem;

struct Result {
  int rc = -1;
  std::string out;
};

// Runs a shell command; stdout (and stderr, appended) comes back.
Result sh(const std::string& cmd) {
  Result r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  REQUIRE(p);
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = ::pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

fs::path dir() {
  static fs::path d = [] {
    auto p = fs::temp_directory_path() / ("vt_cmd_check_" + std::to_string(::getpid()));
    fs::create_directories(p);
    return p;
  }();
  return d;
}

const std::string kVt = VT_VRAMTRACE_EXE;

// PyTorch's JSON-lines history, with a segment per allocation (as without caching) so that the
// model sees reserved memory.
std::string write_trace(const std::string& name, const std::vector<TraceRecord>& records) {
  auto path = dir() / name;
  std::ofstream f(path);
  f << R"({"kind": "header", "workload": ")" << name << R"(", "conf": "", "total": 85899345920})"
    << "\n";
  for (const auto& r : records) {
    auto line = [&](const char* action, std::uint64_t size) {
      f << R"({"action": ")" << action << R"(", "addr": )" << r.addr << R"(, "size": )" << size
        << R"(, "stream": 0, "time_us": )" << r.time_ns / 1000 << "}\n";
    };
    std::uint64_t seg = (r.size + (2 * kMiB - 1)) / (2 * kMiB) * (2 * kMiB);
    switch (r.action) {
      case Action::alloc:
        line("segment_alloc", seg);
        line("alloc", r.size);
        break;
      case Action::free_requested:
        line("free_requested", r.size);
        break;
      case Action::free_completed:
        line("free_completed", r.size);
        line("segment_free", seg);
        break;
      case Action::mark:
        f << R"({"action": "mark", "size": 0, "stream": 0, "time_us": )" << r.time_ns / 1000 << "}\n";
        break;
      default:
        break;
    }
  }
  return path.string();
}

std::string leak_trace(bool marks = true) {
  TrainingShape s;
  s.leak_per_step = 2 * kMiB;
  s.marks = marks;
  return write_trace(marks ? "leak.jsonl" : "leak_nomarks.jsonl", training_trace(s));
}

std::string plateau_trace(bool marks = true) {
  TrainingShape s;
  s.warmup_growth_steps = 3;
  s.marks = marks;
  return write_trace(marks ? "plateau.jsonl" : "plateau_nomarks.jsonl", training_trace(s));
}

std::string flat_trace() { return write_trace("flat.jsonl", training_trace(TrainingShape{})); }

std::string data(const std::string& rel) { return std::string(VRAMTRACE_TEST_DATA_DIR) + "/" + rel; }

}  // namespace

TEST_CASE("check --no-leaks: 2 MiB leaked per step fails warm-up then flat passes (with marks)", "[cmd][check]") {
  auto leak = sh(kVt + " check " + leak_trace() + " --no-leaks");
  CHECK(leak.rc == 1);
  CHECK(leak.out.find("FAIL  no-leaks") != std::string::npos);
  CHECK(leak.out.find("grows by 2.00 MiB per step") != std::string::npos);
  auto plateau = sh(kVt + " check " + plateau_trace() + " --no-leaks");
  CHECK(plateau.rc == 0);
  CHECK(plateau.out.find("PASS  no-leaks") != std::string::npos);
  INFO(plateau.out);
}

TEST_CASE("check --no-leaks without marks finds the steps from the pattern", "[cmd][check]") {
  auto leak = sh(kVt + " check " + leak_trace(false) + " --no-leaks --format json");
  CHECK(leak.rc == 1);
  auto j = nlohmann::json::parse(leak.out);
  CHECK(j["measures"][0]["growth"]["source"] == "pattern");
  CHECK(j["results"][0]["measured"].get<double>() == Approx(2.0 * kMiB).epsilon(0.01));
  CHECK(sh(kVt + " check " + plateau_trace(false) + " --no-leaks").rc == 0);
}

TEST_CASE("check --max-growth both ways", "[cmd][check]") {
  CHECK(sh(kVt + " check " + leak_trace() + " --max-growth 3MiB").rc == 0);
  CHECK(sh(kVt + " check " + leak_trace() + " --max-growth 1MiB").rc == 1);
}

TEST_CASE("check peaks ratio and OOM budgets both ways on a trace", "[cmd][check]") {
  // flat: 500 MiB of parameters + 20 activations of 5 MiB, each in its own 6 MiB segment; the
  // 1 MiB remainder is not split off (PyTorch splits large blocks only above 1 MiB), so the
  // blocks and the peak allocated are 620 MiB.
  auto t = flat_trace();
  CHECK(sh(kVt + " check " + t + " --max-peak-allocated 620MiB").rc == 0);
  auto over = sh(kVt + " check " + t + " --max-peak-allocated 550MiB");
  CHECK(over.rc == 1);
  CHECK(over.out.find("over the budget of 550.00 MiB") != std::string::npos);
  CHECK(sh(kVt + " check " + t + " --max-peak-reserved 1GiB").rc == 0);
  CHECK(sh(kVt + " check " + t + " --max-peak-reserved 500MiB").rc == 1);
  CHECK(sh(kVt + " check " + t + " --max-ooms 0").rc == 0);
  // C11's resumed run: 30 GiB reserved for 21 GiB allocated at most (ratio 1.43).
  auto c11 = data("check/c11_resumed.torchtrace.jsonl");
  CHECK(sh(kVt + " check " + c11 + " --max-reserved-ratio 1.5").rc == 0);
  auto ratio = sh(kVt + " check " + c11 + " --max-reserved-ratio 1.4");
  CHECK(ratio.rc == 1);
  CHECK(ratio.out.find("peak reserved / peak allocated is 1.429") != std::string::npos);
  auto oom = sh(kVt + " check " + c11 + " --max-ooms 0");
  CHECK(oom.rc == 1);
  CHECK(oom.out.find("FAIL  max-ooms") != std::string::npos);
  CHECK(sh(kVt + " check " + c11 + " --max-ooms 1").rc == 0);
}

TEST_CASE("check of the directory `vramtrace run` writes: sidecars and other JSON left out", "[cmd][check][dir]") {
  // A run's directory holds each process's trace, PyTorch's snapshot and its sidecar
  // (*.torch.pickle.json), and often the program's own JSON files; a summary document is read.
  const fs::path run = dir() / "run_dir";
  fs::create_directories(run);
  fs::copy_file(flat_trace(), run / "flat.torchtrace.jsonl", fs::copy_options::overwrite_existing);
  std::ofstream(run / "train.123.torch.pickle.json") << R"({"format": "vramtrace-torch-sidecar", "devices": []})";
  std::ofstream(run / "config.json") << R"({"lr": 0.001})";
  auto r = sh(kVt + " check " + run.string() + " --max-peak-allocated 620MiB");
  CHECK(r.rc == 0);
  CHECK(r.out.find("config.json: not a summary document") != std::string::npos);
  CHECK(r.out.find("torch.pickle.json") == std::string::npos);
  CHECK(sh(kVt + " check " + run.string() + " --max-peak-allocated 550MiB").rc == 1);
  // A summary document in the directory is still read: its figures count (this one is over).
  const auto summary = sh(kVt + " summary --json -q " + data("check/c11_resumed.torchtrace.jsonl"));
  REQUIRE(summary.rc == 0);
  std::ofstream(run / "c11.summary.json") << summary.out;
  auto both = sh(kVt + " check " + run.string() + " --max-peak-allocated 620MiB");
  CHECK(both.rc == 1);
  CHECK(both.out.find("c11_resumed") != std::string::npos);  // the summary names its trace
  // Named on the command line, a JSON file that is not a summary is still an error.
  CHECK(sh(kVt + " check " + (run / "config.json").string() + " --max-peak-allocated 620MiB").rc == 2);
  fs::remove_all(run);
}

TEST_CASE("check --max-retries on PyTorch's history: not recorded exit 2", "[cmd][check]") {
  auto r = sh(kVt + " check " + flat_trace() + " --max-retries 0");
  CHECK(r.rc == 2);
  CHECK(r.out.find("does not record num_alloc_retries") != std::string::npos);
}

TEST_CASE("check of snapshots without a whole history: the end state's figures, a warning", "[cmd][check][history]") {
  // The segment list alone (torch.cuda.memory_snapshot()): device 0 reserves 22 MiB at the end.
  auto r = sh(kVt + " check " + data("pickle/segments_only.pickle") + " --max-peak-reserved 21MiB");
  CHECK(r.rc == 1);
  CHECK(r.out.find("measured 22.00 MiB") != std::string::npos);
  CHECK(r.out.find("device 0 has no allocator history (only its end state): its peaks are lower bounds") !=
        std::string::npos);
  // Half of the real snapshot's history: its peak reserved is still found, with a warning.
  const std::string late = data("pickle/late_start.snapshot.pickle.gz");
  auto j = sh(kVt + " check " + late + " --max-peak-reserved 2000683008 --format json");
  CHECK(j.rc == 0);
  CHECK(j.out.find("has a history that starts late") != std::string::npos);  // on standard error
  auto doc = nlohmann::json::parse(j.out.substr(j.out.find('{')));
  REQUIRE(doc["partial_histories"].size() == 1);
  CHECK(doc["partial_histories"][0]["history"] == "late");
  CHECK(doc["measures"][0]["reserved_bytes.all.peak"] == 2000683008);
  CHECK(sh(kVt + " check " + late + " --max-peak-reserved 2000683007").rc == 1);
}

TEST_CASE("check --baseline --max-increase against an earlier summary --json", "[cmd][check][baseline]") {
  auto base = (dir() / "flat.summary.json").string();
  REQUIRE(sh(kVt + " summary --json " + flat_trace() + " > " + base).rc == 0);
  CHECK(sh(kVt + " check " + flat_trace() + " --baseline " + base + " --max-increase 0").rc == 0);
  // The leak run peaks ~60 MiB (10 %) higher.
  auto r = sh(kVt + " check " + leak_trace() + " --baseline " + base + " --max-increase 5");
  CHECK(r.rc == 1);
  CHECK(r.out.find("FAIL  max-increase:allocated") != std::string::npos);
  CHECK(sh(kVt + " check " + leak_trace() + " --baseline " + base + " --max-increase 15").rc == 0);
  CHECK(sh(kVt + " check " + leak_trace() + " --baseline " + base + " --max-increase 5 --noise-margin 100MiB").rc == 0);
  // A summary document is a valid input too (no growth there).
  CHECK(sh(kVt + " check " + base + " --max-peak-allocated 1GiB").rc == 0);
  CHECK(sh(kVt + " check " + base + " --no-leaks").rc == 2);
}

TEST_CASE("check --budget FILE overridden by options", "[cmd][check][file]") {
  auto budget = dir() / "train.budget";
  std::ofstream(budget) << "# budget for the training test\nmax-peak-allocated = 1GiB\nno-leaks = true\n";
  auto r = sh(kVt + " check " + leak_trace() + " --budget " + budget.string());
  CHECK(r.rc == 1);
  CHECK(sh(kVt + " check " + plateau_trace() + " --budget " + budget.string()).rc == 0);
  CHECK(sh(kVt + " check " + plateau_trace() + " --budget " + budget.string() + " --max-peak-allocated 100MiB").rc ==
        1);
  auto bad = dir() / "bad.budget";
  std::ofstream(bad) << "max-peak-allocated = 1GiB\nmax-leaks = 3\n";
  auto e = sh(kVt + " check " + plateau_trace() + " --budget " + bad.string());
  CHECK(e.rc == 2);
  CHECK(e.out.find("line 2") != std::string::npos);
}

TEST_CASE("check --format junit -o FILE validates against the JUnit schema", "[cmd][check][junit]") {
  auto xml = dir() / "check.xml";
  auto r =
      sh(kVt + " check " + leak_trace() + " --no-leaks --max-peak-allocated 1GiB --format junit -o " + xml.string());
  CHECK(r.rc == 1);
  CHECK(r.out.find("FAIL  no-leaks") != std::string::npos);  // the verdict still reaches the log
  CHECK(sh("xmllint --noout --schema " + data("junit-10.xsd") + " " + xml.string()).rc == 0);
  std::ifstream in(xml);
  std::stringstream ss;
  ss << in.rdbuf();
  CHECK(ss.str().find("<failure message=\"no-leaks") != std::string::npos);
}

TEST_CASE("check --format github writes ::error commands", "[cmd][check][github]") {
  auto r = sh(kVt + " check " + leak_trace() + " --no-leaks --format github");
  CHECK(r.rc == 1);
  CHECK(r.out.find("::error file=") == 0);
  CHECK(r.out.find(",title=vramtrace check%3A no-leaks exceeded on device 0::no-leaks: allocated memory grows by") !=
        std::string::npos);
}

TEST_CASE("check usage and input errors exit 2 with a message", "[cmd][check][errors]") {
  auto t = flat_trace();
  auto none = sh(kVt + " check " + t);
  CHECK(none.rc == 2);
  CHECK(none.out.find("no budget given") != std::string::npos);
  auto size = sh(kVt + " check " + t + " --max-peak-reserved lots");
  CHECK(size.rc == 2);
  CHECK(size.out.find("is neither a size") != std::string::npos);
  CHECK(sh(kVt + " check " + t + " --max-increase 5").rc == 2);
  CHECK(sh(kVt + " check /nonexistent/trace.jsonl --no-leaks").rc == 2);
  CHECK(sh(kVt + " check " + t + " --no-leaks --format xml").rc == 2);
  auto broken = dir() / "broken.jsonl";
  std::ofstream(broken) << "{\"action\": \"alloc\", \"addr\": 1, \"size\": 512}\n{\"action\": \"alloc\", \"addr\": \n";
  auto b = sh(kVt + " check " + broken.string() + " --no-leaks");
  CHECK(b.rc == 2);
  CHECK(b.out.find("line 2") != std::string::npos);
  auto dev = sh(kVt + " check " + t + " --max-ooms 0 --device 3");
  CHECK(dev.rc == 2);
  CHECK(dev.out.find("--device 3") != std::string::npos);
}

TEST_CASE("diff C11: same live bytes the resumed run's largest free block is smaller than the request",
          "[cmd][diff][C11]") {
  auto fresh = data("check/c11_fresh.torchtrace.jsonl");
  auto resumed = data("check/c11_resumed.torchtrace.jsonl");
  auto text = sh(kVt + " diff " + fresh + " " + resumed);
  REQUIRE(text.rc == 0);
  INFO(text.out);
  CHECK(text.out.find("fragmentation from load order") != std::string::npos);
  CHECK(text.out.find("same live bytes as BASE (20.00 GiB vs 20.00 GiB)") != std::string::npos);
  auto r = sh(kVt + " diff --json " + fresh + " " + resumed);
  REQUIRE(r.rc == 0);
  auto j = nlohmann::json::parse(r.out);
  const auto& d = j["devices"][0];
  CHECK(d["explanation"].get<std::string>().find("largest free block was 1.00 GiB, smaller than the request") !=
        std::string::npos);
  // The 3 GiB load buffers are the size whose count changed most.
  CHECK(d["sizes"][0]["size"] == 3 * kGiB);
  CHECK(d["sizes"][0]["base"] == 0);
  CHECK(d["sizes"][0]["new"] == 10);
  bool oom_block = false;
  for (const auto& f : d["largest_free_block"])
    if (f["when"] == "oom") oom_block = f["new"] == kGiB;
  CHECK(oom_block);
}

TEST_CASE("diff names more live memory as the cause when peak allocated grows", "[cmd][diff]") {
  auto r = sh(kVt + " diff " + flat_trace() + " " + leak_trace());
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("NEW needs more memory: peak allocated +") != std::string::npos);
  CHECK(r.out.find("the size whose count changed most is 2.00 MiB (+30 allocations)") != std::string::npos);
  auto same = sh(kVt + " diff " + flat_trace() + " " + flat_trace());
  CHECK(same.out.find("No difference beyond the noise margin") != std::string::npos);
  CHECK(sh(kVt + " diff " + flat_trace() + " /nonexistent").rc == 2);
}

TEST_CASE("diff names the site whose bytes changed most, from traces and from summaries", "[cmd][diff][sites]") {
  // NEW allocates 6 MiB more at train.py:42 and keeps it (tests/data/pickle/make_sites_pickle.py).
  const std::string base = data("pickle/sites.snapshot.pickle"), now = data("pickle/sites_more.snapshot.pickle");
  auto r = sh(kVt + " diff " + base + " " + now);
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(
      r.out.find("allocation site whose bytes changed most (BASE -> NEW)\n"
                 "    at the peak: train.py:42 in step: 4.00 MiB in 1 blocks -> 10.00 MiB in 2 blocks (+6.00 MiB)\n"
                 "    at the end:  train.py:42 in step: 4.00 MiB in 1 blocks -> 10.00 MiB in 2 blocks (+6.00 MiB)\n") !=
      std::string::npos);
  // The sentence that names why names it too, with both runs' bytes.
  const std::string site =
      "the site whose bytes changed most is train.py:42 in step: at the peak 10.00 MiB in NEW vs 4.00 MiB in BASE, "
      "+6.00 MiB, at the end 10.00 MiB in NEW vs 4.00 MiB in BASE, +6.00 MiB.";
  const std::string why =
      "NEW needs more memory: peak allocated +6.00 MiB (25.00 MiB vs 19.00 MiB); the size whose count changed most is "
      "6.00 MiB (+1 allocations); " +
      site;
  CHECK(r.out.find(why) != std::string::npos);

  auto j = sh(kVt + " diff --json " + base + " " + now);
  REQUIRE(j.rc == 0);
  const auto doc = nlohmann::json::parse(j.out);
  const auto& sites = doc["devices"][0]["sites"];
  CHECK(sites["compared"] == true);
  CHECK(sites["at_peak"] == nlohmann::json({{"site", "train.py:42 in step"},
                                            {"base_bytes", 4 * kMiB},
                                            {"new_bytes", 10 * kMiB},
                                            {"change", 6 * kMiB},
                                            {"base_blocks", 1},
                                            {"new_blocks", 2}}));
  CHECK(sites["at_end"]["site"] == "train.py:42 in step");
  CHECK(sites["at_end"]["change"] == 6 * kMiB);
  CHECK(doc["devices"][0]["explanation"] == why);

  // The same from `summary --json` documents, and from one of each (which have no counts by
  // size: the summary has no events).
  const std::string base_json = (dir() / "sites_base.json").string(), new_json = (dir() / "sites_new.json").string();
  REQUIRE(sh(kVt + " summary --json " + base + " > " + base_json).rc == 0);
  REQUIRE(sh(kVt + " summary --json " + now + " > " + new_json).rc == 0);
  for (const auto& [b, n] : {std::pair{base_json, new_json}, std::pair{base, new_json}}) {
    auto s = sh(kVt + " diff --json " + b + " " + n);
    INFO(s.out);
    REQUIRE(s.rc == 0);
    const auto d = nlohmann::json::parse(s.out)["devices"][0];
    CHECK(d["sites"] == sites);
    CHECK(d["sizes"].empty());
    CHECK(d["explanation"] == "NEW needs more memory: peak allocated +6.00 MiB (25.00 MiB vs 19.00 MiB); " + site);
  }

  // The same run on both sides: no site changed.
  auto same = sh(kVt + " diff " + base + " " + base);
  CHECK(same.out.find("at the peak: no site's bytes changed") != std::string::npos);
  CHECK(same.out.find("No difference beyond the noise margin of 2.00 MiB in the peaks.") != std::string::npos);

  // A run without stacks on one side: not compared, and the output says why.
  auto one = sh(kVt + " diff " + base + " " + flat_trace());
  REQUIRE(one.rc == 0);
  CHECK(one.out.find("allocation sites not compared: NEW: the trace records no call stacks") != std::string::npos);
  CHECK(one.out.find("the site whose bytes") == std::string::npos);
  // Neither: nothing in the text (as before), the reason in JSON.
  auto none = sh(kVt + " diff " + flat_trace() + " " + flat_trace());
  CHECK(none.out.find("allocation site") == std::string::npos);
  auto none_json = nlohmann::json::parse(sh(kVt + " diff --json " + flat_trace() + " " + flat_trace()).out);
  CHECK(none_json["devices"][0]["sites"] ==
        nlohmann::json({{"compared", false}, {"reason", "neither run records call stacks"}}));

  // A summary document written before "all_sites": not compared, with the reason.
  auto old_doc = nlohmann::json::parse(std::ifstream(base_json));
  for (auto& d : old_doc["traces"][0]["sites"]["devices"]) {
    d["at_peak"].erase("all_sites");
    d["at_end"].erase("all_sites");
  }
  const std::string old_json = (dir() / "sites_old.json").string();
  std::ofstream(old_json) << old_doc.dump();
  auto o = sh(kVt + " diff " + old_json + " " + now);
  REQUIRE(o.rc == 0);
  CHECK(o.out.find("allocation sites not compared: BASE: the summary document lists only the top sites") !=
        std::string::npos);
  // Sites of the wrong type: a clear error, exit 2.
  old_doc["traces"][0]["sites"]["devices"][0]["at_end"]["all_sites"] = {{{"site", 3}}};
  std::ofstream(old_json) << old_doc.dump();
  auto bad = sh(kVt + " diff " + old_json + " " + now);
  CHECK(bad.rc == 2);
  CHECK(bad.out.find("the summary document's \"sites\" are not usable") != std::string::npos);
}

namespace {
// A vramtrace trace of one rank: one segment holding one allocation of `mib` MiB.
void write_rank_trace(const fs::path& path, int rank, int mib) {
  std::ofstream f(path);
  const std::uint64_t bytes = static_cast<std::uint64_t>(mib) * kMiB;
  f << R"({"a":"header","format":"vramtrace","version":"1.1","pid":)" << 100 + rank << R"(,"rank":")" << rank
    << R"(","devices":[{"id":0,"name":"GPU","total_bytes":85899345920}],"allocator_settings":"","settings":{},"entry_points":[""]})"
    << "\n";
  f << R"({"a":"segment_alloc","t":1,"p":4294967296,"r":)" << bytes << "}\n";
  f << R"({"a":"alloc","t":2,"p":4294967296,"r":)" << bytes << "}\n";
  // A trailer: the process finished tracing, so its peaks are whole (an incomplete trace's are
  // lower bounds, and diff names no need from them).
  f << R"({"a":"trailer","t":3,"events":2,"dropped":0,"counts":{"segment_alloc":1,"alloc":1},"devices":[]})"
    << "\n";
}
}  // namespace

TEST_CASE("diff of two jobs: one trace per process on each side, paired by rank", "[cmd][diff][ranks]") {
  const fs::path base = dir() / "job_base", now = dir() / "job_new";
  fs::create_directories(base);
  fs::create_directories(now);
  write_rank_trace(base / "a.jsonl", 0, 10);
  write_rank_trace(base / "b.jsonl", 1, 10);
  // NEW's file names sort the other way round: pairing must follow the ranks, not the names.
  write_rank_trace(now / "a.jsonl", 1, 40);
  write_rank_trace(now / "b.jsonl", 0, 10);
  auto r = sh(kVt + " diff " + base.string() + " " + now.string());
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("2 processes on each side, paired by rank") != std::string::npos);
  const auto rank0 = r.out.find("=== rank 0 ===");
  const auto rank1 = r.out.find("=== rank 1 ===");
  REQUIRE(rank0 != std::string::npos);
  REQUIRE(rank1 != std::string::npos);
  CHECK(rank0 < rank1);
  CHECK(r.out.find("No difference beyond the noise margin", rank0) < rank1);
  CHECK(r.out.find("NEW needs more memory: peak allocated +30.00 MiB", rank1) != std::string::npos);
  auto j = sh(kVt + " diff --json " + base.string() + " " + now.string());
  REQUIRE(j.rc == 0);
  auto doc = nlohmann::json::parse(j.out);
  CHECK(doc["pairing"] == "rank");
  REQUIRE(doc["pairs"].size() == 2);
  CHECK(doc["pairs"][1]["rank"] == "1");
  CHECK(doc["pairs"][1]["base"].get<std::string>().find("b.jsonl") != std::string::npos);
  CHECK(doc["pairs"][1]["new"].get<std::string>().find("a.jsonl") != std::string::npos);
  // A job against one trace: refused, not compared with the first file.
  auto mismatch = sh(kVt + " diff " + base.string() + " " + (now / "a.jsonl").string());
  CHECK(mismatch.rc == 2);
  CHECK(mismatch.out.find("BASE has 2 trace(s) (processes) and NEW has 1") != std::string::npos);
}
