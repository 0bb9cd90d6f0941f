// The command line of every `vramtrace` command, run as a user would: --json everywhere, the list
// of commands, the form of usage errors, options refused before any work, output files kept,
// diff --exit-code, the replay table's width, and the progress line (its logic, with the
// terminal injected).
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "commands/progress.h"

namespace {

namespace fs = std::filesystem;

struct Result {
  int rc = -1;
  std::string out;  // standard output
  std::string err;  // standard error
};

fs::path dir() {
  static fs::path d = [] {
    auto p = fs::temp_directory_path() / ("vt_cmd_cli_" + std::to_string(::getpid()));
    fs::create_directories(p);
    return p;
  }();
  return d;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs `vramtrace ARGS` through the shell; standard output and error come back apart.
Result vt(const std::string& args, const std::string& env = "") {
  static int n = 0;
  const fs::path out = dir() / ("out" + std::to_string(++n)), err = dir() / ("err" + std::to_string(n));
  const std::string cmd = env + " " + VT_VRAMTRACE_EXE + " " + args + " >" + out.string() + " 2>" + err.string();
  const int st = std::system(cmd.c_str());
  Result r;
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

std::string data(const std::string& rel) { return std::string(VRAMTRACE_TEST_DATA_DIR) + "/" + rel; }

const std::string kGpt2 = data("torch-h200/gpt2_train.torchtrace.jsonl.gz");
const std::string kResnet = data("torch-h200/resnet50_train.torchtrace.jsonl.gz");

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::size_t count_of(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

const std::vector<std::string> kCommands = {"replay", "run",   "explain", "summary", "oom",
                                            "report", "check", "diff",    "tune",    "export"};

}  // namespace

TEST_CASE("check --json prints what --format json prints, and refuses another --format beside it", "[cli]") {
  const Result json = vt("check " + kGpt2 + " --max-ooms 0 --json");
  const Result format = vt("check " + kGpt2 + " --max-ooms 0 --format json");
  REQUIRE(json.rc == 0);
  REQUIRE(format.rc == 0);
  CHECK(nlohmann::json::parse(json.out) == nlohmann::json::parse(format.out));
  const Result both = vt("check " + kGpt2 + " --max-ooms 0 --json --format junit");
  CHECK(both.rc == 2);
  CHECK(has(both.err, "vramtrace check: "));
}

TEST_CASE("every command with a result has --json", "[cli]") {
  for (const std::string& c :
       std::vector<std::string>{"summary", "oom", "replay", "diff", "explain", "tune", "check"}) {
    INFO(c);
    const Result help = vt(c + " --help");
    CHECK(help.rc == 0);
    CHECK(has(help.out, "--json"));
  }
}

TEST_CASE("vramtrace alone, or with an unknown command, lists the commands and exits 2", "[cli]") {
  const Result none = vt("");
  CHECK(none.rc == 2);
  CHECK(has(none.err, "vramtrace: give a command"));
  const Result foo = vt("foo");
  CHECK(foo.rc == 2);
  CHECK(has(foo.err, "vramtrace: unknown command \"foo\""));
  for (const Result* r : {&none, &foo}) {
    CHECK_FALSE(has(r->err, "A subcommand is required"));
    for (const std::string& c : kCommands) {
      INFO(c);
      CHECK(has(r->err, "\n  " + c + " "));  // a line of its own, with its purpose after the name
    }
    CHECK(has(r->err, "Replay a trace through the caching allocator"));
  }
  // --help and --version are still CLI11's, exit 0.
  CHECK(vt("--help").rc == 0);
  CHECK(vt("--version").rc == 0);
}

TEST_CASE("CLI11's parse errors say `vramtrace COMMAND: ...`, point to --help and exit 2", "[cli]") {
  struct Case {
    std::string args, command;
  };
  for (const Case& c : std::vector<Case>{{"summary --bogus " + kGpt2, "summary"},
                                         {"check " + kGpt2 + " --max-ooms x", "check"},
                                         {"replay", "replay"},
                                         {"oom " + kGpt2 + " --capacity 12XB", "oom"},
                                         {"diff " + kGpt2, "diff"},
                                         {"check " + kGpt2 + " --format yaml", "check"}}) {
    INFO(c.args);
    const Result r = vt(c.args);
    CHECK(r.rc == 2);
    CHECK(r.err.rfind("vramtrace " + c.command + ": ", 0) == 0);
    CHECK(has(r.err, "vramtrace " + c.command + " --help"));
  }
  const Result top = vt("--bogus");
  CHECK(top.rc == 2);
  CHECK(top.err.rfind("vramtrace: unknown option \"--bogus\"", 0) == 0);
  CHECK(has(top.err, "\n  summary "));
}

TEST_CASE("a size option that takes cards refuses a word with one hint, the same in every command", "[cli]") {
  const std::string hint =
      "'lots' is neither a size (such as 512MiB, 16GB, 14.58GiB, 1048576) nor a known card; "
      "known cards: T4, ";
  for (const std::string& args : std::vector<std::string>{
           "oom " + kGpt2 + " --capacity lots", "replay " + kGpt2 + " --capacity lots", "tune --limit lots -- true",
           "run --limit lots -- true", "check " + kGpt2 + " --max-peak-reserved lots"}) {
    INFO(args);
    const Result r = vt(args);
    CHECK(r.rc == 2);
    CHECK(count_of(r.err, hint) == 1);
    CHECK(count_of(r.err, "e.g.") + count_of(r.err, "examples:") == 0);
  }
}

TEST_CASE("a size in a decimal unit is kept, with one note on stderr of what it is", "[cli][sizes]") {
  const std::string note =
      "vramtrace: note: 16GB = 16 x 10^9 bytes = 14.90 GiB; for a card, give its name (T4, V100-16GB), whose "
      "figure is what PyTorch reports on it\n";
  const Result replay = vt("replay " + kGpt2 + " --capacity 16GB --json");
  REQUIRE(replay.rc == 0);
  CHECK(count_of(replay.err, note) == 1);
  const auto j = nlohmann::json::parse(replay.out);  // stdout stays JSON
  CHECK(j["results"][0]["capacity_bytes"] == 16'000'000'000ull);
  const Result oom = vt("oom " + kGpt2 + " --capacity 16GB --json");
  CHECK(count_of(oom.err, note) == 1);
  CHECK_NOTHROW(nlohmann::json::parse(oom.out));
  // Once a value, whichever options give it; budgets and amounts too.
  const Result check =
      vt("check " + kGpt2 + " --max-peak-reserved 20GB --max-peak-allocated 20GB --noise-margin '2 MB'");
  CHECK(check.rc == 0);
  CHECK(count_of(check.err, "vramtrace: note: 20GB = 20 x 10^9 bytes = 18.63 GiB;") == 1);
  CHECK(count_of(check.err, "vramtrace: note: 2 MB = 2 x 10^6 bytes = 1.91 MiB;") == 1);
  CHECK(has(vt("diff " + kGpt2 + " " + kGpt2 + " --noise-margin 1.5KB").err,
            "vramtrace: note: 1.5KB = 1.5 x 10^3 bytes = 1.46 KiB;"));
  CHECK(has(vt("run --limit 16GB -- true", "VRAMTRACE_LIB=/nonexistent/libvramtrace.so").err, note));
  // Binary units and card names need no note.
  for (const std::string& args :
       std::vector<std::string>{"replay " + kGpt2 + " --capacity 16GiB", "replay " + kGpt2 + " --capacity T4",
                                "check " + kGpt2 + " --max-peak-reserved 20G"}) {
    INFO(args);
    CHECK_FALSE(has(vt(args).err, "note:"));
  }
}

TEST_CASE("a capacity or cap without a unit under 64 MiB is refused, not read as a few bytes", "[cli][sizes]") {
  struct Case {
    std::string args, refusal;
  };
  const std::string cap = "surely not meant as a capacity under 64 MiB: ";
  for (const Case& c : std::vector<Case>{
           {"replay " + kGpt2 + " --capacity 3090",
            "--capacity: '3090' is 3090 bytes (a bare number is bytes), " + cap +
                "for the card, give its name with the maker's letters (RTX3090); for a size, a unit (3090MiB; "
                "3090B for bytes)"},
           {"oom " + kGpt2 + " --capacity 16",
            "--capacity: '16' is 16 bytes (a bare number is bytes), " + cap +
                "give a unit (16GiB; 16B for bytes), or a card by its name with the maker's letters (RTX3090, "
                "\"rtx 3090\")"},
           {"run --limit 4090 -- true", "--limit: '4090' is 4090 bytes (a bare number is bytes), " + cap},
           {"tune --limit 200 -- true", "for the card, give its name with the maker's letters (H200)"},
           {"check " + kGpt2 + " --max-peak-reserved 20",
            "--max-peak-reserved: '20' is 20 bytes (a bare number is bytes), surely not meant as a peak budget under "
            "1 MiB"},
           {"check " + kGpt2 + " --max-peak-allocated 1.5", "'1.5' is 1.5 bytes"},
           {"oom " + kGpt2 + " --capacity 67108863",  // no unit turns it into a device's size
            "give a unit (67108863B for bytes), or a card"},
           {"check " + kGpt2 + " --max-peak-reserved 512", "give a unit (512GiB; 512MiB; 512B for bytes)"},
       }) {
    INFO(c.args);
    const Result r = vt(c.args, "VRAMTRACE_LIB=/nonexistent/libvramtrace.so");
    CHECK(r.rc == 2);
    CHECK(has(r.err, c.refusal));
  }
  // With a unit, or large enough, or where small byte counts are real amounts: accepted.
  for (const std::string& args :
       std::vector<std::string>{"replay " + kGpt2 + " --capacity 32MiB", "replay " + kGpt2 + " --capacity 1048576B",
                                "replay " + kGpt2 + " --capacity 67108864", "check " + kGpt2 + " --max-peak-reserved 0",
                                "check " + kGpt2 + " --max-peak-reserved 1MiB --max-growth 4096 --noise-margin 0",
                                "diff " + kGpt2 + " " + kGpt2 + " --noise-margin 512"}) {
    INFO(args);
    const Result r = vt(args);
    CHECK(r.rc != 2);
    CHECK_FALSE(has(r.err, "bare number"));
  }
}

TEST_CASE("an unknown card name gets the nearest names and every name, in every size option", "[cli][sizes]") {
  for (const std::string& args : std::vector<std::string>{
           "replay " + kGpt2 + " --capacity H100", "oom " + kGpt2 + " --capacity H100", "run --limit H100 -- true",
           "tune --limit H100 -- true", "check " + kGpt2 + " --max-peak-reserved H100"}) {
    INFO(args);
    const Result r = vt(args, "VRAMTRACE_LIB=/nonexistent/libvramtrace.so");
    CHECK(r.rc == 2);
    CHECK(count_of(r.err,
                   "'H100' is neither a size (such as 512MiB, 16GB, 14.58GiB, 1048576) nor a known card; did "
                   "you mean H100-80GB or H100-NVL? known cards: T4, ") == 1);
  }
  const Result typo = vt("replay " + kGpt2 + " --capacity RTX4080");
  CHECK(typo.rc == 2);
  CHECK(has(typo.err, "did you mean RTX4090? known cards: "));
}

TEST_CASE("explain --file names a directory as such, and a file it cannot open with the system's reason", "[cli]") {
  const Result d = vt("explain --file " + dir().string());
  CHECK(d.rc == 2);
  CHECK(has(d.err, "is a directory"));
  CHECK_FALSE(has(d.err, "give the message as an argument"));
  const Result missing = vt("explain --file " + (dir() / "absent.txt").string());
  CHECK(missing.rc == 2);
  CHECK(has(missing.err, "No such file or directory"));
}

TEST_CASE("floating-point options refuse NaN, infinities and values out of their range", "[cli]") {
  for (const std::string& bad : std::vector<std::string>{"nan", "inf", "-inf", "0.5", "0", "-1", "1e999", "0x1p1"}) {
    INFO(bad);
    const Result r = vt("check " + kGpt2 + " --max-reserved-ratio " + bad);
    CHECK(r.rc == 2);
    CHECK(r.err.rfind("vramtrace check: --max-reserved-ratio", 0) == 0);
  }
  CHECK(vt("check " + kGpt2 + " --max-reserved-ratio 1.5").rc == 0);
  CHECK(vt("check " + kGpt2 + " --max-reserved-ratio 1").rc != 2);
  for (const std::string& bad : std::vector<std::string>{"nan", "inf", "nan%", "-5"}) {
    INFO(bad);
    const Result r = vt("check " + kGpt2 + " --baseline " + kGpt2 + " --max-increase " + bad);
    CHECK(r.rc == 2);
    CHECK(has(r.err, "--max-increase"));
  }
  CHECK(vt("check " + kGpt2 + " --baseline " + kGpt2 + " --max-increase 5%").rc == 0);
  for (const std::string& bad : std::vector<std::string>{"nan", "inf", "-1"}) {
    INFO(bad);
    const Result r = vt("tune --timeout " + bad + " -- true");
    CHECK(r.rc == 2);
    CHECK(r.err.rfind("vramtrace tune: --timeout", 0) == 0);
  }
  const fs::path budget = dir() / "ratio.budget";
  std::ofstream(budget) << "max-reserved-ratio = 0.5\n";
  const Result file = vt("check " + kGpt2 + " --budget " + budget.string());
  CHECK(file.rc == 2);
  CHECK(has(file.err, "max-reserved-ratio"));
}

TEST_CASE("report and check -o keep an existing file unless --force", "[cli]") {
  const fs::path html = dir() / "twice.html";
  REQUIRE(vt("report " + kGpt2 + " -o " + html.string()).rc == 0);
  std::ofstream(html, std::ios::binary) << "mine";
  const Result again = vt("report " + kGpt2 + " -o " + html.string());
  CHECK(again.rc == 2);
  CHECK(has(again.err, "vramtrace report: output file " + html.string() + " already exists"));
  CHECK(has(again.err, "--force"));
  CHECK(slurp(html) == "mine");
  CHECK(vt("report " + kGpt2 + " -o " + html.string() + " --force").rc == 0);
  CHECK(slurp(html).size() > 1000);
  // The default name too, in the directory the command runs in.
  const fs::path cwd = dir() / "cwd";
  fs::create_directories(cwd);
  std::ofstream(cwd / "report.html") << "mine";
  const Result dflt = vt("report " + kGpt2, "cd " + cwd.string() + " &&");
  CHECK(dflt.rc == 2);
  CHECK(slurp(cwd / "report.html") == "mine");
  // "-" is standard output, as for check and export: no file named "-".
  const Result to_stdout = vt("report " + kGpt2 + " -o -", "cd " + cwd.string() + " &&");
  CHECK(to_stdout.rc == 0);
  CHECK(to_stdout.out.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK_FALSE(fs::exists(cwd / "-"));

  const fs::path xml = dir() / "twice.xml";
  REQUIRE(vt("check " + kGpt2 + " --max-ooms 0 --format junit -o " + xml.string()).rc == 0);
  const Result check_again = vt("check " + kGpt2 + " --max-ooms 0 --format junit -o " + xml.string());
  CHECK(check_again.rc == 2);
  CHECK(has(check_again.err, "vramtrace check: output file " + xml.string() + " already exists"));
  CHECK(vt("check " + kGpt2 + " --max-ooms 0 --format junit -o " + xml.string() + " --force").rc == 0);
}

TEST_CASE("run --limit with an unknown card says so, with the known cards, before anything else", "[cli]") {
  const Result r = vt("run --limit T5 -- true", "VRAMTRACE_LIB=/nonexistent/libvramtrace.so");
  CHECK(r.rc == 2);
  CHECK(has(r.err, "vramtrace run: --limit: 'T5' is neither a size"));
  CHECK(has(r.err, "known cards: "));
  CHECK(has(r.err, "A100-80GB"));
  CHECK_FALSE(has(r.err, "libvramtrace.so"));
}

TEST_CASE("replay: several settings with OOMs keep every column narrow, details in notes below", "[cli]") {
  const Result r = vt("replay " + kGpt2 +
                      " --capacity 4GiB --conf '' --conf expandable_segments:True --conf max_split_size_mb:128 "
                      "--conf garbage_collection_threshold:0.6,max_split_size_mb:200");
  REQUIRE(r.rc == 0);
  std::istringstream lines(r.out);
  bool in_table = false;
  std::size_t rows = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("settings ", 0) == 0) in_table = true;
    if (in_table && line.empty()) break;
    if (!in_table) continue;
    ++rows;
    // A label column of 32, then four columns of at most 32, each after " | ".
    INFO(line);
    CHECK(line.size() <= 32 + 4 * (3 + 32));
  }
  CHECK(rows > 10);
  CHECK(has(r.out, "\n[1] "));
  CHECK(has(r.out, "first: alloc #"));  // the OOM's details, in a note
}

TEST_CASE("replay: garbage_collection_threshold without a memory limit says it does not act", "[cli]") {
  const Result alone = vt("replay " + kGpt2 + " --conf garbage_collection_threshold:0.6");
  REQUIRE(alone.rc == 0);
  CHECK(has(alone.out, "note      garbage_collection_threshold acts only under PyTorch's memory fraction"));
  const Result side = vt("replay " + kGpt2 + " --conf '' --conf garbage_collection_threshold:0.6");
  REQUIRE(side.rc == 0);
  CHECK(has(side.out, "| garbage_collection_threshold:0.6"));
  CHECK(has(side.out, "[1] garbage_collection_threshold:0.6: garbage_collection_threshold acts only under"));
  const Result json = vt("replay " + kGpt2 + " --conf '' --conf garbage_collection_threshold:0.6 --json");
  REQUIRE(json.rc == 0);
  const auto j = nlohmann::json::parse(json.out);
  CHECK(j["results"][0]["notes"].empty());
  REQUIRE(j["results"][1]["notes"].size() == 1);
  // Under a limit it acts: no note.
  const Result capped =
      vt("replay " + kGpt2 + " --conf garbage_collection_threshold:0.6,per_process_memory_fraction:0.5");
  REQUIRE(capped.rc == 0);
  CHECK_FALSE(has(capped.out, "acts only under PyTorch's memory fraction"));
  // With `limit`, a cap PyTorch does not see, garbage collection would act in the replay and not
  // in PyTorch: no verdict, and why.
  const Result limited = vt("replay " + kGpt2 + " --conf garbage_collection_threshold:0.6,limit:15GiB --json");
  REQUIRE(limited.rc == 0);
  const auto lj = nlohmann::json::parse(limited.out);
  CHECK(lj["results"][0]["verdict"].is_null());
  CHECK(has(lj["results"][0]["withheld"].get<std::string>(), "`limit` is a cap PyTorch does not see"));
}

TEST_CASE("diff --exit-code: 0 when nothing changed, 1 when something did, 2 on error", "[cli]") {
  CHECK(vt("diff " + kGpt2 + " " + kGpt2 + " --exit-code").rc == 0);
  CHECK(vt("diff " + kGpt2 + " " + kResnet + " --exit-code").rc == 1);
  CHECK(vt("diff " + kGpt2 + " " + kResnet).rc == 0);  // without it: a report, whatever it says
  CHECK(vt("diff " + kGpt2 + " " + (dir() / "absent.jsonl").string() + " --exit-code").rc == 2);
  const Result j = vt("diff " + kGpt2 + " " + kResnet + " --json");
  REQUIRE(j.rc == 0);
  const auto doc = nlohmann::json::parse(j.out);
  CHECK(doc["changed"] == true);
  CHECK(nlohmann::json::parse(vt("diff " + kGpt2 + " " + kGpt2 + " --json").out)["changed"] == false);
}

TEST_CASE("every command takes --quiet, and no progress reaches a standard error that is not a terminal",
          "[cli][progress]") {
  for (const std::string& c : kCommands) {
    INFO(c);
    CHECK(has(vt(c + " --help").out, "--quiet"));
  }
  for (const std::string& args :
       std::vector<std::string>{"summary -q " + kGpt2, "summary " + kGpt2, "check --quiet --max-ooms 0 " + kGpt2,
                                "diff -q " + kGpt2 + " " + kGpt2}) {
    INFO(args);
    const Result r = vt(args);
    CHECK(r.rc == 0);
    CHECK_FALSE(has(r.err, "\r"));
  }
}

TEST_CASE("progress line: only on a terminal, after the delay, rewritten in place and erased at the end",
          "[progress]") {
  using vramtrace::cli::ProgressLine;
  auto text_of = [](std::FILE* f) {
    std::fflush(f);
    std::rewind(f);
    std::string s;
    char buf[512];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
    return s;
  };
  SECTION("a terminal") {
    std::FILE* f = std::tmpfile();
    REQUIRE(f);
    {
      ProgressLine line("vramtrace check: reading", f, /*terminal=*/true, /*silenced=*/false);
      line.update(0.5, 10, 100);  // short work stays silent
      CHECK(text_of(f).empty());
      CHECK_FALSE(line.shown());
      std::fseek(f, 0, SEEK_END);
      line.update(1.2, 50, 100);
      CHECK(line.shown());
      line.update(1.3, 60, 100);  // too soon after the last one
      line.update(2.0, 100, 100);
      line.finish();
      CHECK_FALSE(line.shown());
      line.finish();  // idempotent
    }
    const std::string s = text_of(f);
    CHECK(s ==
          "\rvramtrace check: reading  50% (50 bytes of 100 bytes)\033[K"
          "\rvramtrace check: reading 100% (100 bytes of 100 bytes)\033[K"
          "\r\033[K");
    std::fclose(f);
  }
  SECTION("not a terminal, or --quiet: nothing at all") {
    for (const bool terminal : {false, true}) {
      std::FILE* f = std::tmpfile();
      REQUIRE(f);
      {
        ProgressLine line("x", f, terminal, /*silenced=*/terminal);
        line.update(5, 1, 2);
        line.update(10, 2, 2);
        CHECK_FALSE(line.shown());
      }
      CHECK(text_of(f).empty());
      std::fclose(f);
    }
  }
  SECTION("an unknown total: bytes read, no percentage; the destructor erases") {
    std::FILE* f = std::tmpfile();
    REQUIRE(f);
    {
      ProgressLine line("r", f, true, false);
      line.update(1.5, 2048, 0);
    }
    CHECK(text_of(f) == "\rr 2.00 KiB\033[K\r\033[K");
    std::fclose(f);
  }
}

TEST_CASE("tune without a trace from any run says nothing was measured, never that the program needs less memory",
          "[cli][tune]") {
  // `true` makes no CUDA call: the runs leave no trace, as a program that never reaches the GPU.
  const std::string out = " -o " + (dir() / "tune").string();
  const Result r = vt("tune --candidates expandable_segments:True" + out + " -- true");
  CHECK(r.rc == 2);
  CHECK(has(r.out, "No run left a trace"));
  CHECK_FALSE(has(r.out, "needs less memory"));
  CHECK_FALSE(has(r.out, "No setting tried fits"));
  const Result j = vt("tune --json --candidates expandable_segments:True" + out + " -- true");
  CHECK(j.rc == 2);
  CHECK(has(j.err, "no run left a trace"));
  CHECK(nlohmann::json::parse(j.out)["runs"].size() == 2);
}

TEST_CASE("tune blames bad settings in the environment on the environment, not on a candidate", "[cli][tune]") {
  const Result r = vt("tune --candidates expandable_segments:True -o " + (dir() / "tune-env").string() + " -- true",
                      "PYTORCH_CUDA_ALLOC_CONF=garbage");
  CHECK(r.rc == 2);
  CHECK(has(r.err, "PYTORCH_CUDA_ALLOC_CONF in the environment ('garbage')"));
  CHECK_FALSE(has(r.err, "candidate"));
}

TEST_CASE("settings joined by semicolons are refused with the hint that commas separate them", "[cli]") {
  const Result r = vt("replay --conf 'expandable_segments:True;max_split_size_mb:128' " + kGpt2);
  CHECK(r.rc == 2);
  CHECK(has(r.err, "expected True or False"));
  CHECK(has(r.err, "settings are separated by ','"));
}

TEST_CASE("explain quotes a request size it found but could not read", "[cli]") {
  for (const std::string size : {"99999999999999999999.00 GiB", "-5.00 MiB"}) {
    INFO(size);
    const Result r =
        vt("explain 'CUDA out of memory. Tried to allocate " + size + " (GPU 0; 15.00 GiB total capacity)'");
    CHECK(r.rc == 0);  // a recognised message whose verdict is undetermined, as a cut one
    CHECK(has(r.out, "the request size \"" + size + "\" is in the input but could not be read"));
    CHECK_FALSE(has(r.out, "not in the input"));
  }
}

TEST_CASE("explain reads a piped message from standard input, and on a terminal asks for one", "[cli]") {
  const fs::path file = dir() / "piped_message.txt";
  std::ofstream(file, std::ios::binary) << "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling\n"
                                           "`cublasCreate(handle)`\n";
  const Result text = vt("explain < " + file.string());
  CHECK(text.rc == 0);
  CHECK(has(text.out, "CUBLAS_STATUS_ALLOC_FAILED"));
  const Result json = vt("explain --json < " + file.string());
  REQUIRE(json.rc == 0);
  CHECK(nlohmann::json::parse(json.out)["format"] == "cuda_library");
  const Result empty = vt("explain < /dev/null");
  CHECK(empty.rc == 2);
  CHECK(has(empty.err, "standard input is empty"));
  // A terminal (script(1) gives the command one) is not read: the usage error comes at once.
  if (std::system("command -v script >/dev/null 2>&1") == 0) {
    const fs::path out = dir() / "tty_out";
    const std::string cmd = "timeout 20 script -qec '" + std::string(VT_VRAMTRACE_EXE) +
                            " explain' /dev/null "
                            "</dev/null >" +
                            out.string() + " 2>&1";
    const int st = std::system(cmd.c_str());
    CHECK((WIFEXITED(st) ? WEXITSTATUS(st) : -1) == 2);
    CHECK(has(slurp(out), "give the message as an argument"));
  }
}

TEST_CASE("text reports print a trace's control characters escaped", "[cli]") {
  // Frame names (a snapshot's sites) and a torchtrace header's workload.
  const fs::path trace = dir() / "esc.torchtrace.jsonl";
  std::ofstream(trace, std::ios::binary)
      << R"({"kind":"header","workload":"w\u001b[31m\r\nFAKE W\u0007","total":17179869184})"
         "\n"
      << R"({"action":"segment_alloc","addr":4194304,"size":2097152,"stream":0})"
         "\n"
      << R"({"action":"alloc","addr":4194304,"size":1048576,"stream":0})"
         "\n";
  const std::string pickle = data("pickle/esc.snapshot.pickle");
  for (const std::string& args : std::vector<std::string>{"summary " + pickle, "summary " + trace.string(),
                                                          "oom " + trace.string(), "replay " + trace.string()}) {
    INFO(args);
    const Result r = vt(args);
    CHECK(r.rc == 0);
    CHECK(has(r.out, "\\x1b[31m"));
    for (const std::string raw : {"\x1b", "\r", "\x07", "\nFAKE", "\xc2\x9b"}) CHECK_FALSE(has(r.out, raw));
  }
  CHECK(has(vt("summary " + pickle).out, "evil\\x1b[31mRED\\x1b]0;title\\x07\\r\\nFAKE LINE.py:7 in f\\u009b2J"));
}

TEST_CASE("error messages print a command line's control characters and stray bytes escaped", "[cli]") {
  const Result r =
      vt("summary '/nonexistent\x9b"
         "2J\nvramtrace: FAKE.jsonl'");
  CHECK(r.rc == 2);
  CHECK(has(r.err, "/nonexistent\\x9b2J\\nvramtrace: FAKE.jsonl"));
  CHECK_FALSE(has(r.err, "\x9b"));
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

TEST_CASE("error messages print a trace's control characters escaped", "[cli]") {
  // An action name the reader refuses is quoted in the message on standard error.
  const fs::path trace = dir() / "esc-action.torchtrace.jsonl";
  std::ofstream(trace, std::ios::binary)
      << R"({"kind":"header","total":17179869184})"
         "\n"
      << R"({"action":"\u001b[31mRED\u001b]0;title\u0007\r\nvramtrace: FAKE\u009b","addr":1,"size":2,"stream":0})"
         "\n";
  const std::string page = (dir() / "esc-action.html").string();
  for (const std::string& cmd :
       std::vector<std::string>{"summary", "oom", "replay", "check --max-ooms 0", "report -o " + page}) {
    INFO(cmd);
    const Result r = vt(cmd + " " + trace.string());
    CHECK(r.rc == 2);
    CHECK(has(r.err, "unknown action"));
    CHECK(has(r.err, "\\x1b[31mRED\\x1b]0;title\\x07\\r\\nvramtrace: FAKE\\u009b"));
    for (const std::string raw : {"\x1b", "\r", "\x07", "\nvramtrace: FAKE", "\xc2\x9b"}) CHECK_FALSE(has(r.err, raw));
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);  // one message, one line
  }
}
