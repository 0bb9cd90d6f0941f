// One verdict rule everywhere (analyses/oom/verdict.h): for every bundled trace with an OOM and a
// set of generated ones (random traces that hit a cap, with and without retries, dead and
// complete, with and without the OOM's entry), the verdict of each setting is the same in
// `vramtrace oom --json`, `vramtrace replay --json --conf`, `vramtrace tune --from --dry-run
// --json` and the report page's data, run as a user runs them; and no firm verdict is given
// where the rule of analyses/oom/verdict_support.h withholds one.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kVt = VT_VRAMTRACE_EXE;
const std::string kData = VRAMTRACE_TEST_DATA_DIR;
constexpr std::uint64_t MiB = 1ull << 20;

struct Result {
  int rc = -1;
  std::string out;
};

Result sh(const std::string& cmd) {
  Result r;
  FILE* p = ::popen((cmd + " 2>/dev/null").c_str(), "r");
  REQUIRE(p);
  char buf[65536];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

json json_of(const std::string& cmd) {
  const Result r = sh(cmd);
  INFO(cmd);
  REQUIRE(r.rc == 0);
  return json::parse(r.out);
}

fs::path tmp_dir() {
  static const fs::path d = [] {
    auto p = fs::temp_directory_path() / ("vt_verdicts_" + std::to_string(::getpid()));
    fs::create_directories(p);
    return p;
  }();
  return d;
}

// The verdict of a row as the JSON gives it: its name, or "none" when withheld or failed.
std::string verdict_of(const json& row) {
  return row["verdict"].is_null() ? "none" : row["verdict"].get<std::string>();
}

// The report page's data: the JSON inside its <script id="vt-data">.
json page_data(const std::string& trace) {
  static int pages = 0;  // report writes no file over another
  const std::string out = (tmp_dir() / ("page" + std::to_string(++pages) + ".html")).string();
  const Result r = sh(kVt + " report -q " + quote(trace) + " -o " + quote(out));
  REQUIRE(r.rc == 0);
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string page = ss.str();
  const std::string open = "<script type=\"application/json\" id=\"vt-data\">";
  const auto a = page.find(open);
  REQUIRE(a != std::string::npos);
  const auto b = page.find("</script>", a);
  return json::parse(page.substr(a + open.size(), b - a - open.size()));
}

// Checks one trace: oom's verdicts, then the same settings in replay, tune's dry run and the page.
// With `capacity` (bytes, 0: none), each command is given it (--capacity; tune's --limit) and the
// page, which takes none, is not compared.
void check_trace(const std::string& trace, const std::string& level = "auto", std::uint64_t capacity = 0) {
  INFO("trace " << trace << " level " << level << " capacity " << capacity);
  const std::string lv = " --level " + level + " ";
  const std::string cap = capacity ? " --capacity " + std::to_string(capacity) : std::string();
  const json oom = json_of(kVt + " oom --json" + lv + quote(trace) + cap);
  const json& rows = oom["replays"];
  if (rows.empty()) return;  // no OOM: nothing replayed
  const json& whatif = oom["whatif"];
  const bool withheld = !whatif["withheld"].is_null();
  std::map<std::string, std::string> by_conf;  // conf -> oom's verdict
  std::vector<std::string> extras;             // the settings oom added to the trace's own
  for (const auto& r : rows) {
    by_conf[r["conf"].get<std::string>()] = verdict_of(r);
    if (!r["settings"].get<std::string>().empty()) extras.push_back(r["settings"].get<std::string>());
    // The rule of verdict_support.h: where the trace supports no verdict, none is given.
    if (withheld) CHECK(r["verdict"].is_null());
    // The JSON never contradicts the verdict.
    CHECK(r["fits"].get<bool>() == (r["verdict"] == "fits"));
    CHECK((r["margin_bytes"].is_null() || r["shortfall_bytes"].is_null()));
    if (r["verdict"] == "does_not_fit") CHECK(r["margin_bytes"].is_null());
    if (!whatif["partial"].is_null() && r["ooms"] == 0) CHECK(r["verdict"].is_null());
    // Nothing replayed: no figure at all (0 would be one).
    if (r["ooms"].is_null()) CHECK((r["peak_reserved_bytes"].is_null() && r["verdict"].is_null()));
  }
  if (withheld) CHECK(oom["tune_command"].is_null());
  // The trace's own row does not fit where the trace ran out of memory and its OOM is reproduced.
  if (whatif["reproduces"] == true && !withheld && rows[0]["own"] == true && rows[0]["ooms"].is_number() &&
      rows[0]["ooms"].get<int>() > 0)
    CHECK(verdict_of(rows[0]) == "does_not_fit");

  // replay, each conf replacing the trace's settings: the same verdicts.
  std::string confs;
  for (const auto& [conf, v] : by_conf) confs += " --conf " + quote(conf);
  const json rep = json_of(kVt + " replay --json" + lv + quote(trace) + confs + cap);
  CHECK(rep["capacity_source"] == whatif["capacity_source"]);
  for (const auto& r : rep["results"]) {
    if (r.contains("device") && r["device"] != 0) continue;
    INFO("replay --conf '" << r["settings"].get<std::string>() << "'");
    CHECK(verdict_of(r) == by_conf[r["settings"].get<std::string>()]);
  }

  // tune --from reads the default level of what it is given (a shim trace's tensor-level companion
  // when there is one), and so does the page.
  if (level != "auto") return;

  // tune --from, dry: the same replays rank the candidates.
  std::string cands;
  for (const auto& e : extras) cands += (cands.empty() ? "" : ";") + e;
  const json tune = json_of(kVt + " tune --from " + quote(trace) + " --dry-run --json --candidates " + quote(cands) +
                            (capacity ? " --limit " + std::to_string(capacity) : std::string()) + " -- true");
  for (const auto& r : tune["whatif"]["rows"]) {
    INFO("tune --from, setting '" << r["settings"].get<std::string>() << "'");
    CHECK(verdict_of(r) == by_conf[r["conf"].get<std::string>()]);
  }
  // What tune would run is what the verdicts offer: never a setting that does not fit.
  for (const auto& c : tune["candidates"])
    for (const auto& r : rows)
      if (r["settings"] == c) CHECK(r["verdict"] != "does_not_fit");

  // The page's first screen.
  if (capacity) return;
  const json page = page_data(trace);
  REQUIRE(page.contains("verdicts"));
  const json& pv = page["verdicts"]["traces"][0]["whatif"];
  CHECK(pv["withheld"].is_null() == whatif["withheld"].is_null());
  for (const auto& r : pv["rows"]) {
    INFO("page, setting '" << r["settings"].get<std::string>() << "'");
    CHECK(verdict_of(r) == by_conf[r["conf"].get<std::string>()]);
  }
}

/// A random PyTorch history (torchtrace JSON lines) that hits a cap. Requests of random sizes,
/// freed at random, are replayed under the trace's settings on the cap (`vramtrace replay`, the
/// allocator that the traces' own must reproduce) to find the first that does not fit; the history
/// is cut there. Then, by `kind`: 0 dies there (the `oom` entry last, a message and num_ooms in the
/// header); 1 dies with the entry missing from the history (the header alone records it); 2
/// catches it, frees, and goes on; 3 fails twice for the same request (a retry) and goes on. Some
/// seeds never hit the cap: their runs are complete.
std::string random_trace(unsigned seed, int kind) {
  std::mt19937_64 rng(seed);
  const std::uint64_t total = 1024 * MiB;
  const std::uint64_t cap = (96 + rng() % 400) * MiB;
  const char* confs[] = {"", "expandable_segments:True", "max_split_size_mb:128", "garbage_collection_threshold:0.6"};
  const std::string conf = confs[rng() % 4];
  std::uint64_t t = 1000000, next = 0x7f0000000000ull;
  std::vector<std::string> lines;  // the history, one entry a line
  std::vector<std::size_t> at;     // for each alloc entry (in order), its line
  std::vector<std::uint64_t> sizes;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> live;  // (addr, size)
  auto entry = [&](const char* action, std::uint64_t a, std::uint64_t size) {
    std::ostringstream l;
    l << R"({"action": ")" << action << R"(", "addr": )" << a << R"(, "size": )" << size
      << R"(, "stream": 0, "time_us": )" << (t += 10) << "}";
    lines.push_back(l.str());
  };
  for (int step = 0; step < 300; ++step) {
    if (!live.empty() && rng() % 3 == 0) {
      const std::size_t i = rng() % live.size();
      const auto [a, size] = live[i];
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      entry("free_requested", a, size);
      entry("free_completed", a, size);
      continue;
    }
    const std::uint64_t size = (rng() % 8 == 0 ? rng() % (1 * MiB) : (1 + rng() % 24) * MiB) + 512;
    at.push_back(lines.size());
    sizes.push_back(size);
    entry("alloc", next, size);
    live.emplace_back(next, size);
    next += 1ull << 30;
  }
  auto write = [&](const std::string& header, std::size_t upto, const std::string& tail) {
    const fs::path p = tmp_dir() / ("random" + std::to_string(seed) + ".torchtrace.jsonl");
    std::ofstream out(p);
    out << header << "\n";
    for (std::size_t i = 0; i < upto; ++i) out << lines[i] << "\n";
    out << tail;
    return p.string();
  };
  std::ostringstream head;
  head << R"({"kind": "header", "workload": "random)" << seed << R"(", "conf": ")" << conf << R"(", "total": )" << total
       << R"(, "cap_gib": )" << static_cast<double>(cap) / (1ull << 30);
  // Where the trace's own settings run out of memory on the cap.
  const std::string probe = write(head.str() + "}", lines.size(), "");
  const json r = json_of(kVt + " replay --json " + quote(probe) + " --capacity " + std::to_string(cap) +
                         (conf.empty() ? std::string() : " --conf " + quote(conf)));
  const json& first = r["results"][0]["first_oom"];
  if (first.is_null()) return probe;  // a complete run that never hit the cap
  const std::uint64_t k = first["alloc_index"].get<std::uint64_t>();
  const std::uint64_t free = total - cap;  // the device had the rest, outside the fraction
  std::string tail;
  auto oom_line = [&] {
    tail += R"({"action": "oom", "size": )" + std::to_string(sizes[k]) + R"(, "stream": 0, "time_us": )" +
            std::to_string(t += 10) + R"(, "device_free": )" + std::to_string(free) + "}\n";
  };
  if (kind != 1) oom_line();
  if (kind == 3) oom_line();
  if (kind >= 2)  // caught: it goes on with smaller requests, each freed
    for (int i = 0; i < 60; ++i) {
      const std::uint64_t a = next + (1ull << 30) * static_cast<std::uint64_t>(i);
      for (const char* action : {"alloc", "free_requested", "free_completed"})
        tail += std::string(R"({"action": ")") + action + R"(", "addr": )" + std::to_string(a) +
                R"(, "size": 524288, "stream": 0, "time_us": )" + std::to_string(t += 10) + "}\n";
    }
  if (kind <= 1)
    head << R"(, "oom": "CUDA out of memory. Tried to allocate )" << sizes[k] / MiB
         << R"(.00 MiB.", "stats": {"num_ooms": 1})";
  return write(head.str() + "}", at[k], tail);
}

}  // namespace

TEST_CASE("verdicts: the same in oom, replay, tune --from and the page, on the bundled traces", "[verdicts]") {
  for (const char* t :
       {"oom/dead_entry.torchtrace.jsonl", "oom/dead_run.torchtrace.jsonl", "oom/dead_run.snapshot.pickle",
        "oom/retries.vramtrace.jsonl", "oom/plain_oom.vramtrace.jsonl", "oom/bert_16g/bert.485.torch.pickle.gz",
        "oom/encoder_10g/encoder.484.torch.pickle.gz", "oom/llama_t4/llama.470.torch.pickle.gz"})
    check_trace(kData + "/" + t);
  // The device level of the same runs: PyTorch's segments, no verdict anywhere.
  for (const char* t : {"oom/bert_16g/bert.jsonl.zst", "oom/llama_t4/llama.vramtrace.jsonl.zst"}) {
    check_trace(kData + "/" + t, "device");
    const json oom = json_of(kVt + " oom --json --level device " + quote(kData + "/" + t));
    CHECK_FALSE(oom["whatif"]["withheld"].is_null());
  }
}

TEST_CASE("verdicts: the same in every command on random traces that hit a cap", "[verdicts]") {
  for (unsigned seed = 1; seed <= 24; ++seed) {
    const int kind = static_cast<int>(seed % 4);
    INFO("seed " << seed << " kind " << kind);
    const std::string t = random_trace(seed, kind);
    check_trace(t);
    // On a device of its own choosing, larger than the cap the run had: the replays decide alone.
    const json oom = json_of(kVt + " oom --json " + quote(t));
    if (!oom["replays"].empty()) check_trace(t, "auto", oom["whatif"]["capacity_bytes"].get<std::uint64_t>() * 5 / 4);
  }
}
