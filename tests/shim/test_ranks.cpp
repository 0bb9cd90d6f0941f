// Several processes on several (fake) devices, end to end: road_ranks runs as the ranks of a job
// under libvramtrace.so, each writes its own trace named by rank, and `vramtrace summary`/`report`
// merge them: the process x device table, the imbalance, and exactly the process that put memory
// on another rank's device flagged. Also `vramtrace run` over a launcher whose children set RANK.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "spawn_util.h"

namespace fs = std::filesystem;

namespace {

constexpr long long MiB = 1ll << 20;

namespace test = vramtrace::test;
using test::slurp;

struct Dir : test::TempDir {
  Dir() : test::TempDir("vt-ranks") {}
};

/// The environment of the tests, without anything that would change what the shim or the fake
/// driver does, plus `extra`.
std::vector<std::string> clean_env(const std::vector<std::string>& extra) {
  std::vector<std::string> env = {"FAKECUDA_DEVICES=3"};
  env.insert(env.end(), extra.begin(), extra.end());
  return test::clean_environment(env, VT_FAKELIB_DIR,
                                 {"RANK=", "LOCAL_RANK=", "OMPI_", "PMI_", "SLURM_", "CUDA_VISIBLE_DEVICES="});
}

/// Starts argv (stdout/stderr to files in `dir`, named after `tag`) in `cwd`; returns its pid.
pid_t spawn(std::vector<std::string> argv, const std::vector<std::string>& env, const std::string& dir,
            const std::string& tag, const std::string& cwd = "") {
  if (!cwd.empty()) argv.insert(argv.begin(), {"/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", cwd});
  return test::spawn_captured(argv, env, dir + "/" + tag + ".out", dir + "/" + tag + ".err");
}

int wait_for(pid_t pid, const std::string& dir, const std::string& tag) {
  const int code = test::wait_exit_code(pid);
  if (code != 0)
    UNSCOPED_INFO(tag << " exit " << code << "\nstdout:\n"
                      << slurp(dir + "/" + tag + ".out") << "\nstderr:\n"
                      << slurp(dir + "/" + tag + ".err"));
  return code;
}

int run(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& dir,
        const std::string& tag, const std::string& cwd = "") {
  return wait_for(spawn(argv, env, dir, tag, cwd), dir, tag);
}

std::vector<std::string> files_matching(const std::string& dir, const std::string& re) {
  std::vector<std::string> out;
  std::regex m(re);
  for (const auto& e : fs::directory_iterator(dir))
    if (std::regex_match(e.path().filename().string(), m)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

const nlohmann::json* cell(const nlohmann::json& p, int process, int device) {
  for (const auto& c : p["cells"])
    if (c["process"] == process && c["device"] == device) return &c;
  return nullptr;
}

int process_index(const nlohmann::json& p, const std::string& label) {
  for (std::size_t i = 0; i < p["processes"].size(); ++i)
    if (p["processes"][i]["label"] == label) return static_cast<int>(i);
  return -1;
}

}  // namespace

TEST_CASE("three ranks on three fake devices: one trace each, merged, the cross-device rank flagged", "[ranks]") {
  Dir traces, logs;
  std::vector<pid_t> pids;
  for (int r = 0; r < 3; ++r) {
    std::vector<std::string> extra = {std::string("LD_PRELOAD=") + VT_SHIM_PATH,
                                      "VRAMTRACE_OUTPUT=" + traces.path + "/job.%R%p.jsonl",
                                      "RANK=" + std::to_string(r), "LOCAL_RANK=" + std::to_string(r), "ROAD_OWN_MB=64"};
    if (r == 2) extra.insert(extra.end(), {"ROAD_CROSS_DEVICE=0", "ROAD_CROSS_MB=16"});
    pids.push_back(spawn({VT_ROAD_DIR "/road_ranks"}, clean_env(extra), logs.path, "rank" + std::to_string(r)));
  }
  for (int r = 0; r < 3; ++r)
    REQUIRE(wait_for(pids[static_cast<std::size_t>(r)], logs.path, "rank" + std::to_string(r)) == 0);

  // One trace per process, named by rank (%R) and pid.
  for (int r = 0; r < 3; ++r)
    CHECK(files_matching(traces.path, "job\\.rank" + std::to_string(r) + "\\.[0-9]+\\.jsonl").size() == 1);

  // The header records rank and local rank.
  for (const auto& f : files_matching(traces.path, ".*\\.jsonl")) {
    std::ifstream in(traces.path + "/" + f);
    std::string first;
    std::getline(in, first);
    auto h = nlohmann::json::parse(first);
    CHECK(h["local_rank"] == h["rank"]);
  }

  // The merged summary, from the directory.
  const std::vector<std::string> env = clean_env({});
  REQUIRE(run({VT_VRAMTRACE_EXE, "summary", "--json", traces.path}, env, logs.path, "summary") == 0);
  auto j = nlohmann::json::parse(slurp(logs.path + "/summary.out"));
  REQUIRE(j.contains("processes"));
  const auto& p = j["processes"];
  REQUIRE(p["processes"].size() == 3);
  // Exactly rank 2 is flagged, for device 0.
  CHECK(p["cross_device"] == nlohmann::json::array({"rank 2"}));
  const int r0 = process_index(p, "rank 0"), r1 = process_index(p, "rank 1"), r2 = process_index(p, "rank 2");
  REQUIRE((r0 >= 0 && r1 >= 0 && r2 >= 0));
  CHECK(p["processes"][r2]["own_device"] == 2);
  CHECK(p["processes"][r2]["own_device_rule"] == "LOCAL_RANK");
  CHECK(p["processes"][r2]["foreign_devices"] == nlohmann::json::array({0}));
  // The table: allocated peaks are block bytes (64 MiB own; rank 2: + 1 MiB own, 16 + 4 MiB on
  // device 0); reserved follows the caching allocator's segment sizes (a 4 MiB request gets a
  // 20 MiB segment, a 1 MiB one a 2 MiB small segment).
  REQUIRE(cell(p, r0, 0));
  CHECK((*cell(p, r0, 0))["allocated_bytes.all.peak"] == 64 * MiB);
  CHECK((*cell(p, r0, 0))["reserved_bytes.all.peak"] == 64 * MiB);
  CHECK(cell(p, r0, 1) == nullptr);
  REQUIRE(cell(p, r1, 1));
  CHECK((*cell(p, r1, 1))["reserved_bytes.all.peak"] == 64 * MiB);
  REQUIRE(cell(p, r2, 0));
  CHECK((*cell(p, r2, 0))["allocated_bytes.all.peak"] == 20 * MiB);
  CHECK((*cell(p, r2, 0))["reserved_bytes.all.peak"] == 36 * MiB);
  REQUIRE(cell(p, r2, 2));
  CHECK((*cell(p, r2, 2))["allocated_bytes.all.peak"] == 65 * MiB);
  CHECK((*cell(p, r2, 2))["reserved_bytes.all.peak"] == 66 * MiB);
  // Imbalance: device 0 holds 64 + 36 MiB, device 1 64 MiB (the least).
  REQUIRE(p["imbalance"].is_object());
  CHECK(p["imbalance"]["most_loaded"] == 0);
  CHECK(p["imbalance"]["least_loaded"] == 1);
  CHECK(p["imbalance"]["ratio"].get<double>() == Approx(100.0 / 64.0));

  // Text: the same figures, and the flag line for rank 2 only.
  REQUIRE(run({VT_VRAMTRACE_EXE, "summary", traces.path + "/job.rank*.jsonl"}, env, logs.path, "summary_text") == 0);
  std::string text = slurp(logs.path + "/summary_text.out");
  CHECK(text.find("1 of 3 processes holds memory on a device other than its own:") != std::string::npos);
  CHECK(text.find("rank 2: 36.00 MiB reserved on device 0 (its own device is device 2, from LOCAL_RANK=2)") !=
        std::string::npos);
  CHECK(text.find("Imbalance: device 0 holds 1.6x device 1") != std::string::npos);

  // The HTML report with the stacked per-device timelines.
  REQUIRE(run({VT_VRAMTRACE_EXE, "report", "-o", logs.path + "/r.html", traces.path}, env, logs.path, "report") == 0);
  std::string html = slurp(logs.path + "/r.html");
  const std::string tag = "id=\"vt-data\">";
  const std::size_t from = html.find(tag);
  REQUIRE(from != std::string::npos);
  const auto page =
      nlohmann::json::parse(html.substr(from + tag.size(), html.find("</script>", from) - from - tag.size()));
  const auto& pp = page["processes"];
  CHECK(pp["timelines"].size() == 3);
  // The page names a process by its index: the flagged one is rank 2.
  REQUIRE(pp["cross"].size() == 1);
  CHECK(pp["labels"][pp["cross"][0].get<std::size_t>()] == "rank 2");
}

TEST_CASE("peer access passes through: the shim defines no peer-access entry point", "[ranks]") {
  // cudaDeviceEnablePeerAccess / cuCtxEnablePeerAccess and friends reach the real libraries
  // untouched: the shim neither exports nor substitutes them (hooks.def is the one list).
  Dir logs;
  REQUIRE(run({"/bin/sh", "-c", std::string("nm -D --defined-only ") + VT_SHIM_PATH}, clean_env({}), logs.path, "nm") ==
          0);
  std::string syms = slurp(logs.path + "/nm.out");
  REQUIRE(syms.find("cuMemAlloc_v2") != std::string::npos);  // the listing works
  CHECK(syms.find("PeerAccess") == std::string::npos);
  CHECK(syms.find("cuCtxSetCurrent") == std::string::npos);
  CHECK(syms.find("cudaSetDevice") == std::string::npos);
}

TEST_CASE("vramtrace run over a launcher: each child traced, named by its rank", "[ranks][run]") {
  Dir work, logs;
  // A launcher in the manner of torchrun: it sets RANK/LOCAL_RANK for each child; the children
  // inherit LD_PRELOAD from `vramtrace run`. The shell itself never allocates: no trace.
  const std::string road = VT_ROAD_DIR "/road_ranks";
  const std::string launcher =
      "RANK=0 LOCAL_RANK=0 " + road + " & RANK=1 LOCAL_RANK=1 ROAD_CROSS_DEVICE=0 " + road + " & wait %1 && wait %2";
  std::vector<std::string> env = clean_env({std::string("VRAMTRACE_LIB=") + VT_SHIM_PATH});
  REQUIRE(run({VT_VRAMTRACE_EXE, "run", "--", "/bin/sh", "-c", launcher}, env, logs.path, "run", work.path) == 0);
  auto all = files_matching(work.path, "vramtrace\\..*\\.jsonl");
  INFO(slurp(logs.path + "/run.err"));
  CHECK(all.size() == 2);
  CHECK(files_matching(work.path, "vramtrace\\.[0-9]{8}-[0-9]{6}\\.rank0\\.[0-9]+\\.jsonl").size() == 1);
  CHECK(files_matching(work.path, "vramtrace\\.[0-9]{8}-[0-9]{6}\\.rank1\\.[0-9]+\\.jsonl").size() == 1);
  REQUIRE(run({VT_VRAMTRACE_EXE, "summary", "--json", work.path}, clean_env({}), logs.path, "summary") == 0);
  auto j = nlohmann::json::parse(slurp(logs.path + "/summary.out"));
  CHECK(j["processes"]["cross_device"] == nlohmann::json::array({"rank 1"}));
}
