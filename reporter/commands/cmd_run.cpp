// `vramtrace run`: runs a command with libvramtrace.so preloaded and prints one screen about the
// traces it left: peaks per device, OOMs, and the commands to paste next.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "analyses/summary.h"
#include "commands/commands.h"
#include "commands/log.h"
#include "model/oom_count.h"
#include "vramtrace/device_limits.h"
#include "vramtrace/gpu_cards.h"
#include "vramtrace/settings.h"
#include "vramtrace/stats.h"
#include "vramtrace/trace/vramtrace_reader.h"
#include "vramtrace/units.h"

namespace vramtrace::cli {

namespace {

namespace fs = std::filesystem;

struct RunOptions {
  std::string output;
  std::string conf;
  std::string limit;
  bool tensors = false;
  bool no_torch = false;
  std::vector<std::string> command;
};

volatile sig_atomic_t g_child = 0;
volatile sig_atomic_t g_pending = 0;  // a signal to forward that came before the command's pid was known

// Forwards a signal sent by another process (kill, a job scheduler) to the command. Signals from
// the terminal (Ctrl-C: si_code SI_KERNEL) already reach the command, which shares our process
// group; forwarding those would deliver them twice. One that comes between the handler's
// installation and the fork's return (a fork of a large process takes a while) is kept in
// g_pending and forwarded by launch() once the pid is known.
void forward_signal(int sig, siginfo_t* info, void*) {
  if (info != nullptr && info->si_code > 0) return;
  if (g_child > 0)
    kill(static_cast<pid_t>(g_child), sig);
  else
    g_pending = sig;
}

std::string with_commas(std::uint64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<std::size_t>(i), ",");
  return s;
}

std::string self_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

// libvramtrace.so: VRAMTRACE_LIB, else beside the command (../lib, same directory, or the build
// tree's ../shim). Empty with `looked` filled when not found.
std::string find_library(std::string& looked) {
  if (const char* v = std::getenv("VRAMTRACE_LIB"); v != nullptr && *v != '\0') {
    looked = std::string(v) + " (VRAMTRACE_LIB)";
    return access(v, R_OK) == 0 ? fs::absolute(v).string() : std::string();
  }
  std::string dir = self_dir();
  for (const char* rel : {"/../lib/libvramtrace.so", "/libvramtrace.so", "/../shim/libvramtrace.so"}) {
    fs::path p = fs::path(dir + rel).lexically_normal();
    if (!looked.empty()) looked += ", ";
    looked += p.string();
    if (access(p.c_str(), R_OK) == 0) return p.string();
  }
  return {};
}

// The directory holding vramtrace's Python start-up hook (vramtrace/_boot/sitecustomize.py):
// VRAMTRACE_PYTHON_DIR, else ../share/vramtrace/python beside the command (the install layout,
// which the build tree copies). Empty with `looked` filled when not found.
std::string find_python_boot(std::string& looked) {
  std::string dir;
  if (const char* v = std::getenv("VRAMTRACE_PYTHON_DIR"); v != nullptr && *v != '\0') {
    dir = v;
    looked = dir + " (VRAMTRACE_PYTHON_DIR)";
  } else {
    dir = (fs::path(self_dir()) / "../share/vramtrace/python").lexically_normal().string();
    looked = dir;
  }
  fs::path boot = fs::absolute(fs::path(dir) / "vramtrace" / "_boot");
  return access((boot / "sitecustomize.py").c_str(), R_OK) == 0 ? boot.lexically_normal().string() : std::string();
}

// Whether the output pattern uses %`key` (pid 'p', start time 't', ...).
bool pattern_has(const std::string& pattern, char key) {
  for (std::size_t i = 0; i + 1 < pattern.size(); ++i) {
    if (pattern[i] != '%') continue;
    if (pattern[i + 1] == key) return true;
    ++i;  // "%%" and other keys
  }
  return false;
}

// The name of PyTorch's tensor-level snapshot beside a trace: the trace's name without
// .jsonl[.zst], then ".torch.pickle" (its JSON sidecar adds ".json"). A pattern without %p gets
// ".%p" so that every process of the run writes its own file.
std::string torch_pattern(const std::string& pattern) {
  std::string stem = pattern;
  for (const char* ext : {".zst", ".jsonl"})
    if (stem.size() > std::strlen(ext) && stem.compare(stem.size() - std::strlen(ext), std::string::npos, ext) == 0)
      stem.resize(stem.size() - std::strlen(ext));
  return stem + (pattern_has(stem, 'p') ? "" : ".%p") + ".torch.pickle";
}

std::string utc_stamp(std::time_t t) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
  return buf;
}

// The default trace name: one file per process. %R is "rank<N>." in a process that a launcher
// (torchrun, mpirun, srun) gave a rank and empty otherwise, so that the traces of a distributed
// job sort by rank; %p keeps every process's name unique whatever the launcher sets.
constexpr const char* kDefaultOutput = "vramtrace.%t.%R%p.jsonl";

// The output name with %t fixed now (so that every process of the run shares it) and the rest
// (%p %h %r) left for each process.
std::string fix_start_time(const std::string& pattern, std::time_t start) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      if (pattern[i + 1] == 't') {
        out += utc_stamp(start);
        ++i;
        continue;
      }
      out += pattern.substr(i, 2);
      ++i;
      continue;
    }
    out.push_back(pattern[i]);
  }
  return out;
}

// Trace files the run may have written: the names the pattern can expand to (any pid, host,
// rank), plus a fork child's "-<pid>" before the extension, modified since the run started and
// not among `existing` (files that were there before the run: the shim never writes into an
// existing file, so none of them is this run's, however recent).
std::vector<std::string> find_traces(const std::string& pattern, std::time_t start,
                                     const std::set<std::pair<dev_t, ino_t>>& existing = {},
                                     std::set<std::pair<dev_t, ino_t>>* found_ids = nullptr) {
  fs::path p(pattern);
  fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::string name = p.filename().string();
  std::string re;
  for (std::size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (c == '%' && i + 1 < name.size()) {
      char k = name[++i];
      if (k == 'p') {
        re += "[0-9]+";
      } else if (k == 'h' || k == 'r' || k == 'R') {
        re += "[^/]*";
      } else if (k == '%') {
        re += "%";
      } else {
        re += "%";
        re += std::string(1, k);
      }
      continue;
    }
    if (std::strchr(".^$|()[]{}*+?\\", c) != nullptr) re += '\\';
    re.push_back(c);
  }
  // A fork child of a pattern without %p adds "-<pid>" before the first dot of the name.
  std::size_t dot = re.find("\\.", 1);
  std::string with_child =
      dot == std::string::npos ? re + "(-[0-9]+)?" : re.substr(0, dot) + "(-[0-9]+)?" + re.substr(dot);
  std::regex matcher(with_child);
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_regular_file(ec)) continue;
    if (!std::regex_match(entry.path().filename().string(), matcher)) continue;
    struct stat st {};
    if (stat(entry.path().c_str(), &st) != 0 || st.st_mtime + 1 < start) continue;
    if (existing.count({st.st_dev, st.st_ino})) continue;
    if (found_ids) found_ids->insert({st.st_dev, st.st_ino});
    out.push_back((dir == "." && !p.has_parent_path()) ? entry.path().filename().string() : entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct DevicePeaks {
  Stat allocated, reserved;  // current and peak, as the allocator counts them
};

// The counters a trailer gives: events, `oom` entries and each device's peaks.
void read_trailer(const VramtraceTrailer& trailer, std::map<std::int32_t, DevicePeaks>& peaks, std::uint64_t& events,
                  std::uint64_t& ooms) {
  events = trailer.events;
  for (const auto& [name, count] : trailer.counts)
    if (name == "oom") ooms = count;
  for (const auto& [device, stats] : trailer.device_stats) {
    DevicePeaks& d = peaks[device];
    for (const auto& [key, value] : stats) {
      if (key == "allocated_bytes.all.peak") d.allocated.peak = value;
      if (key == "reserved_bytes.all.peak") d.reserved.peak = value;
    }
  }
}

// A device reached after the header is named by a `device` record that precedes its first
// event: read on only until every device of the trailer is named (usually near the start).
void read_device_names(VramtraceTraceReader& reader, const std::map<std::int32_t, DevicePeaks>& peaks) {
  const VramtraceHeaderDetails& h = reader.details();
  auto named = [&](std::int32_t device) {
    for (const auto& dev : h.devices)
      if (dev.id == device) return true;
    return false;
  };
  auto all_named = [&] {
    for (const auto& entry : peaks)
      if (!named(entry.first)) return false;
    return true;
  };
  try {
    TraceRecord r;
    while (!all_named() && reader.next(r)) {
    }
  } catch (const TraceError&) {
    // the names are a courtesy: the figures above come from the trailer
  }
}

// The OOMs and retries of a trace's `oom` entries, summed over its devices, as the reports count
// them (Note [one OOM per failed request], reporter/model/oom_count.h).
class OomTally {
 public:
  void add(const TraceRecord& r) {
    if (r.action == Action::oom) ++entries_[r.device];
    grouper_.add(r, r.action == Action::oom ? entries_[r.device] - 1 : 0, outcomes_[r.device]);
  }
  OomCount finish(const TraceHeader& header) {
    OomCount total;
    total.retries = 0;
    for (auto& [device, outcomes] : outcomes_) {
      grouper_.finish(device, outcomes);
      outcomes.resize(entries_[device]);
      const OomCount c = reconcile_oom_count(header, device, outcomes, std::vector<std::int64_t>(outcomes.size(), 0));
      total.ooms += c.ooms;
      total.entries += c.entries;
      total.survived += c.survived;
      total.repeated += c.repeated;
      *total.retries += c.retries.value_or(0);
    }
    total.retries_from = RetriesFrom::oom_entries;
    return total;
  }

 private:
  FailedRequestGrouper grouper_;
  std::map<std::int32_t, std::uint64_t> entries_;
  std::map<std::int32_t, std::vector<OomOutcome>> outcomes_;
};

// A trace's devices with their peaks, then its OOMs.
void print_devices(const VramtraceHeaderDetails& h, const std::map<std::int32_t, DevicePeaks>& peaks,
                   const OomCount& ooms, std::uint64_t oom_lines, const std::string& path) {
  if (peaks.empty()) std::fprintf(stderr, "    no device memory was allocated\n");
  for (const auto& [device, d] : peaks) {
    std::string name;
    for (const auto& dev : h.devices)
      if (dev.id == device) name = dev.name;
    std::fprintf(stderr, "    cuda:%d %-22s peak allocated %-12s peak reserved %s\n", device, name.c_str(),
                 format_size(static_cast<std::uint64_t>(std::max<std::int64_t>(0, d.allocated.peak))).c_str(),
                 format_size(static_cast<std::uint64_t>(std::max<std::int64_t>(0, d.reserved.peak))).c_str());
  }
  if (ooms.entries == 0 && oom_lines == 0) {
    std::fprintf(stderr, "    OOMs: none\n");
  } else if (ooms.entries < oom_lines) {
    // The trailer counts entries the events did not give (the second read failed).
    std::fprintf(stderr, "    OOMs: %s failed allocations, not told apart from retries  (vramtrace oom %s)\n",
                 with_commas(oom_lines).c_str(), path.c_str());
  } else {
    std::fprintf(stderr, "    %s\n      (vramtrace oom %s)\n", oom_count_text(ooms).c_str(), path.c_str());
  }
}

// One trace's part of the end screen. False when the file cannot be read as a trace.
bool describe_trace(const std::string& path, bool tensors) {
  std::unique_ptr<VramtraceTraceReader> reader;
  try {
    reader = open_vramtrace_trace_details(path);
  } catch (const TraceError& e) {
    std::fprintf(stderr, "  %s: unreadable: %s\n", path.c_str(), e.what());
    return false;
  }
  std::map<std::int32_t, DevicePeaks> peaks;
  std::uint64_t events = 0, ooms = 0;
  OomTally tally;
  const VramtraceTrailer& trailer = reader->trailer();
  bool scanned = false;
  if (!trailer.present) {
    // No trailer known up front (killed, or compressed): replay the counters from the events.
    scanned = true;
    TraceRecord r;
    try {
      while (reader->next(r)) {
        ++events;
        tally.add(r);
        DevicePeaks& d = peaks[r.device];
        switch (r.action) {
          case Action::alloc:
            d.allocated.increase(static_cast<std::int64_t>(reader->block_bytes()));
            break;
          case Action::free_completed:
            d.allocated.decrease(static_cast<std::int64_t>(reader->block_bytes()));
            break;
          // Pinned host memory (memory kind 5) is traced too but is not device memory.
          case Action::segment_alloc:
          case Action::segment_map:
            if (!is_memory_kind(reader->memory_kind(), MemoryKind::pinned_host))
              d.reserved.increase(static_cast<std::int64_t>(r.size));
            break;
          case Action::segment_free:
          case Action::segment_unmap:
            if (!is_memory_kind(reader->memory_kind(), MemoryKind::pinned_host))
              d.reserved.decrease(static_cast<std::int64_t>(r.size));
            break;
          case Action::oom:
            ++ooms;
            break;
          default:
            break;
        }
      }
    } catch (const TraceError& e) {
      std::fprintf(stderr, "  %s: stopped reading: %s\n", path.c_str(), e.what());
    }
  }
  const VramtraceHeaderDetails& h = reader->details();
  if (trailer.present) read_trailer(trailer, peaks, events, ooms);
  if (!scanned && ooms > 0) {
    // The trailer says allocations failed: which of them reached the program takes the events.
    try {
      auto again = open_vramtrace_trace_details(path);
      TraceRecord r;
      while (again->next(r)) tally.add(r);
    } catch (const TraceError& e) {
      std::fprintf(stderr, "  %s: stopped reading: %s\n", path.c_str(), e.what());
    }
  }
  const OomCount oom_count = tally.finish(reader->header());
  std::fprintf(stderr, "  trace  %s  (pid %lld, %s events%s%s)\n", path.c_str(), static_cast<long long>(h.pid),
               with_commas(events).c_str(),
               reader->incomplete() || (scanned && !reader->trailer().present)
                   ? ", incomplete: the process did not finish tracing"
                   : "",
               trailer.dropped ? (", " + with_commas(trailer.dropped) + " dropped").c_str() : "");
  if (!scanned) read_device_names(*reader, peaks);
  print_devices(h, peaks, oom_count, ooms, path);
  (void)tensors;
  return true;
}

// --- the option checks ---------------------------------------------------------------------

// libvramtrace.so, or a message and false.
bool find_shim(std::string& lib) {
  std::string looked;
  lib = find_library(looked);
  if (lib.empty()) {
    logger().error("vramtrace run: cannot find libvramtrace.so (looked at {}); set VRAMTRACE_LIB to its path", looked);
    return false;
  }
  // The dynamic loader splits LD_PRELOAD at spaces and colons and has no escape for them, and it
  // only warns (the program then runs untraced) for a file that is not a shared object.
  if (lib.find_first_of(" :\t") != std::string::npos) {
    logger().error(
        "vramtrace run: the path of libvramtrace.so, {}, holds a space or ':', which LD_PRELOAD cannot carry; "
        "install vramtrace under a path without them, or set VRAMTRACE_LIB to a link to it that has none",
        lib);
    return false;
  }
  struct stat st {};
  unsigned char magic[4] = {};
  FILE* f = stat(lib.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? std::fopen(lib.c_str(), "rb") : nullptr;
  const bool elf = f != nullptr && std::fread(magic, 1, 4, f) == 4 &&
                   std::memcmp(magic,
                               "\x7f"
                               "ELF",
                               4) == 0;
  if (f != nullptr) std::fclose(f);
  if (!elf) {
    const char* from_env = std::getenv("VRAMTRACE_LIB");
    logger().error("vramtrace run: {}{} is not a shared library; set VRAMTRACE_LIB to libvramtrace.so itself", lib,
                   from_env != nullptr && *from_env != '\0' ? " (VRAMTRACE_LIB)" : "");
    return false;
  }
  return true;
}

// --limit as "limit:BYTES" appended to `conf`; false (after a message) for a bad or second limit.
bool add_limit(const std::string& option, std::string& conf) {
  DeviceLimits in_conf;
  std::string conf_rest, conf_error;
  if (split_device_limits(conf, conf_rest, in_conf, conf_error) && in_conf.any()) {
    logger().error(
        "vramtrace run: --limit {} and a limit in --conf '{}': give the cap once (per device: "
        "--conf limit:[0:14GiB,1:20GiB,*:16GiB])",
        option, conf);
    return false;
  }
  // A size, or the name of a card (units.h, gpu_cards.h): its usable total as CUDA reports it.
  std::uint64_t bytes = 0;
  std::string error;
  std::string limit = option;
  if (!parse_size(option, bytes, error)) {  // size_check() has refused it already
    logger().error("vramtrace run: --limit {}: {}", option, error);
    return false;
  }
  if (size_names_card(option)) {
    limit = std::to_string(bytes);
    logger().info("vramtrace run: --limit {} = {} ({} bytes, the card's total as CUDA reports it)", option,
                  format_size(bytes), with_commas(bytes));
  } else if (bytes == 0) {
    logger().error("vramtrace run: --limit must be greater than 0");
    return false;
  }
  conf += (conf.empty() ? "" : ",") + std::string("limit:") + limit;
  return true;
}

// The shim reads the same string from VRAMTRACE_CONF; refuse a bad one here, before the run.
// `limit` may be per device there (vramtrace/device_limits.h), which AllocatorSettings does not read.
bool check_conf(const std::string& conf) {
  AllocatorSettings settings;
  DeviceLimits limits;
  std::string error;
  if (!parse_settings_with_limits(conf, settings, limits, error)) {
    logger().error("vramtrace run: --conf '{}': {}", conf, error);
    return false;
  }
  return true;
}

// -o names a file: not a directory, not .gz (the shim writes plain or zstd).
bool check_output_name(const std::string& out) {
  if (out.empty()) return true;
  std::error_code ec;
  if (out.back() == '/' || fs::is_directory(out, ec)) {
    logger().error("vramtrace run: -o '{}' is a directory; give a file name in it, e.g. -o {}{}vramtrace.%p.jsonl", out,
                   out, out.back() == '/' ? "" : "/");
    return false;
  }
  if (out.size() > 3 && out.compare(out.size() - 3, 3, ".gz") == 0) {
    logger().error(
        "vramtrace run: -o '{}': traces are written plain or zstd-compressed; end the name in .jsonl or "
        ".jsonl.zst (gzip a finished trace if you need .gz: the reports read it)",
        out);
    return false;
  }
  return true;
}

bool check_output_dir(const std::string& pattern) {
  fs::path dir = fs::path(pattern).parent_path();
  if (!dir.empty() && !fs::is_directory(dir)) {
    logger().error("vramtrace run: the output directory '{}' does not exist", dir.string());
    return false;
  }
  return true;
}

// --- the environment and the launch ----------------------------------------------------------

// The variables the command starts with, in the order they are set.
// `boot` (may be empty: no tensor level) is the Python start-up hook's directory, put first on
// PYTHONPATH; `torch_out` the tensor-level snapshot's name pattern.
std::vector<std::pair<std::string, std::string>> child_environment(const std::string& lib, const std::string& pattern,
                                                                   const std::string& conf, bool tensors,
                                                                   const std::string& boot,
                                                                   const std::string& torch_out) {
  std::string preload = lib;
  if (const char* old = std::getenv("LD_PRELOAD"); old != nullptr && *old != '\0') preload += std::string(":") + old;
  std::vector<std::pair<std::string, std::string>> env;
  env.emplace_back("LD_PRELOAD", preload);
  // Absolute: the program may change its working directory before its first allocation, and its
  // trace must still land where this process looks for it.
  env.emplace_back("VRAMTRACE_OUTPUT", fs::absolute(pattern).lexically_normal().string());
  if (!conf.empty()) env.emplace_back("VRAMTRACE_CONF", conf);
  if (tensors) env.emplace_back("PYTORCH_NO_CUDA_MEMORY_CACHING", "1");
  if (!boot.empty()) {
    std::string path = boot;
    if (const char* old = std::getenv("PYTHONPATH"); old != nullptr && *old != '\0') path += std::string(":") + old;
    env.emplace_back("PYTHONPATH", path);
    env.emplace_back("VRAMTRACE_TORCH_OUT", fs::absolute(torch_out).lexically_normal().string());
  }
  return env;
}

// Runs the command with `env` added and waits for it, forwarding signals meanwhile. `status` is
// waitpid's, `seconds` the time it ran. False (after a message) when it cannot be started.
bool launch(const std::vector<std::string>& command, const std::vector<std::pair<std::string, std::string>>& env,
            int& status, double& seconds) {
  struct timespec t0 {};
  clock_gettime(CLOCK_MONOTONIC, &t0);

  // Install forwarding before the fork, so that no signal slips between fork and handler.
  struct sigaction sa {};
  sa.sa_sigaction = forward_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {
  }, old_term{}, old_hup{};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGHUP, &sa, &old_hup);

  pid_t child = fork();
  if (child < 0) {
    const int err = errno;
    logger().error("vramtrace run: cannot start the command: {}", std::strerror(err));
    return false;
  }
  if (child == 0) {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    sigaction(SIGHUP, &old_hup, nullptr);
    for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
    std::vector<char*> argv;
    for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    const int err = errno;  // before logger(), which may allocate on first use
    logger().error("vramtrace run: cannot run '{}': {}", argv[0], std::strerror(err));
    _exit(err == ENOENT ? 127 : 126);
  }
  g_child = child;
  // A signal before this point was kept, not forwarded (forward_signal); one after it is forwarded.
  if (const int pending = g_pending; pending != 0) kill(child, pending);
  status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  g_pending = 0;
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  struct timespec t1 {};
  clock_gettime(CLOCK_MONOTONIC, &t1);
  seconds = static_cast<double>(t1.tv_sec - t0.tv_sec) + static_cast<double>(t1.tv_nsec - t0.tv_nsec) / 1e9;
  return true;
}

// vramtrace run's exit code for the command's waitpid status (a shell's: 128 + signal), and how
// the command ended, in words.
int exit_code(int status, std::string& how) {
  int rc;
  if (WIFEXITED(status)) {
    rc = WEXITSTATUS(status);
    how = "exited with code " + std::to_string(rc);
  } else if (WIFSIGNALED(status)) {
    rc = 128 + WTERMSIG(status);
    how = std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) +
          ")";
  } else {
    rc = 1;
    how = "ended";
  }
  return rc;
}

// --- the end screen ---------------------------------------------------------------------------

// The trace names a pattern stands for, in words: the placeholders the shim fills in are named
// (<pid>), since the user never sees them filled when no trace was written.
std::string pattern_in_words(const std::string& pattern) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    switch (const char k = pattern[++i]) {
      case 'p':
        out += "<pid>";
        break;
      case 'h':
        out += "<host>";
        break;
      case 'r':
        out += "<rank>";
        break;
      case 'R':
        out += "[rank<N>.]";
        break;
      case '%':
        out += '%';
        break;
      default:
        out += std::string("%") + k;
    }
  }
  return out;
}

void explain_no_trace(const RunOptions& o, const std::string& pattern, std::size_t existing_count) {
  std::fprintf(stderr,
               "  no trace was written: the program made no CUDA allocation through libvramtrace.so, or tracing\n"
               "  failed (the shim then says why, above). Expected files named like %s\n",
               pattern_in_words(pattern).c_str());
  if (existing_count > 0) {
    const bool has_p = pattern_has(o.output.empty() ? kDefaultOutput : o.output, 'p');
    const bool has_t = pattern_has(o.output.empty() ? kDefaultOutput : o.output, 't');
    std::fprintf(stderr,
                 "  (%zu file(s) of that name were there before the run; an existing file is never overwritten:\n"
                 "  %s, or remove them)\n",
                 existing_count, has_t && !has_p ? "%t has one-second resolution, add %p to -o" : "use %p or %t in -o");
  }
}

// The traces as the suggested commands name them: up to four by name, more by a glob of the pattern.
std::string trace_arguments(const std::vector<std::string>& traces, const std::string& pattern) {
  std::string args = traces.front();
  if (traces.size() > 1 && traces.size() <= 4) {
    for (std::size_t i = 1; i < traces.size(); ++i) args += " " + traces[i];
  } else if (traces.size() > 4) {
    std::string glob;
    for (std::size_t i = 0; i < pattern.size(); ++i) {
      if (pattern[i] == '%' && i + 1 < pattern.size()) {
        glob += pattern[i + 1] == '%' ? "%" : "*";  // may also match earlier runs' files
        ++i;
      } else {
        glob += pattern[i];
      }
    }
    args = "'" + glob + "'";
  }
  return args;
}

// The tensor-level snapshots the run left (Python programs that used PyTorch), and the command
// that reads them.
void show_torch_files(const std::vector<std::string>& files, const std::string& torch_out) {
  if (files.empty()) return;
  std::fprintf(stderr, "\nPyTorch's tensor level (its own allocator history with Python stacks, PyTorch in charge):\n");
  for (const std::string& t : files) std::fprintf(stderr, "  %s\n", t.c_str());
  std::fprintf(stderr, "  vramtrace summary %s\n", trace_arguments(files, torch_out).c_str());
}

// Each trace the run left, then the commands to paste next.
void show_traces(const RunOptions& o, const std::string& pattern, const std::string& torch_out, std::time_t start,
                 const std::set<std::pair<dev_t, ino_t>>& existing, std::size_t existing_count) {
  std::vector<std::string> torch_files;
  if (!torch_out.empty()) torch_files = find_traces(torch_out, start, existing);
  std::vector<std::string> traces = find_traces(pattern, start, existing);
  if (traces.empty()) {
    explain_no_trace(o, pattern, existing_count);
    show_torch_files(torch_files, torch_out);
    return;
  }
  {
    // Files that are not readable traces (a file the program itself wrote under a matching
    // name) are shown as such and left out of the suggested commands.
    std::vector<std::string> readable;
    for (const std::string& t : traces)
      if (describe_trace(t, o.tensors)) readable.push_back(t);
    traces = std::move(readable);
    if (traces.empty()) return;
  }
  std::fprintf(stderr, "  level  %s\n",
               o.tensors ? "tensors (PYTORCH_NO_CUDA_MEMORY_CACHING=1): allocated = PyTorch's tensors; see "
                           "docs/tensor-mode.md"
               : torch_files.empty()
                   ? "device allocations as the program makes them (for PyTorch: its segments)"
                   : "device allocations (for PyTorch: its segments); the reports read PyTorch's tensor level "
                     "beside each trace, with the trace itself for the memory ledger (--level device for the "
                     "shim's alone)");
  // Several processes (a launcher's ranks, fork children): the reports merge them when given all.
  std::string args = trace_arguments(traces, pattern);
  std::fprintf(stderr, "\nNext:\n  vramtrace summary %s\n  vramtrace report %s -o report.html\n  vramtrace oom %s\n",
               args.c_str(), args.c_str(), args.c_str());
  show_torch_files(torch_files, torch_out);
}

// The option checks, the launch, the end screen. The exit code is the command's as a shell gives
// it (128 + signal when killed; 127 not found, 126 not executable); 2 when vramtrace refuses the
// options or cannot start the command.
int run_command(const RunOptions& o) {
  // The options first: a mistyped --limit or --conf is the user's to fix, whatever else is
  // missing (libvramtrace.so) here.
  std::string conf = o.conf;
  if (!o.limit.empty() && !add_limit(o.limit, conf)) return 2;
  if (!check_conf(conf) || !check_output_name(o.output)) return 2;
  std::string lib;
  if (!find_shim(lib)) return 2;
  const std::time_t start = std::time(nullptr);
  const std::string pattern = fix_start_time(o.output.empty() ? kDefaultOutput : o.output, start);
  if (!check_output_dir(pattern)) return 2;

  // Files already matching the pattern (earlier runs) are never this run's traces.
  std::set<std::pair<dev_t, ino_t>> existing;
  const std::size_t existing_count = find_traces(pattern, 0, {}, &existing).size();

  // PyTorch's tensor level, recorded from inside Python programs (docs/tensor-level.md); not with
  // --tensors, where PyTorch's allocator is off and the shim sees every tensor itself.
  std::string boot, torch_out;
  if (!o.tensors && !o.no_torch) {
    std::string looked;
    boot = find_python_boot(looked);
    if (boot.find(':') != std::string::npos) {
      // PYTHONPATH is split at colons: such a directory would never be found.
      logger().warn(
          "vramtrace run: the Python start-up hook's directory {} holds a ':', which PYTHONPATH cannot "
          "carry; PyTorch programs get the device level only",
          boot);
      boot.clear();
    } else if (boot.empty()) {
      logger().warn("vramtrace run: no Python start-up hook at {}; PyTorch programs get the device level only", looked);
    } else {
      torch_out = torch_pattern(pattern);
      find_traces(torch_out, 0, {}, &existing);
    }
  }

  int status = 0;
  double seconds = 0;
  if (!launch(o.command, child_environment(lib, pattern, conf, o.tensors, boot, torch_out), status, seconds)) return 2;
  std::string how;
  const int rc = exit_code(status, how);
  if (rc == 127 && WIFEXITED(status)) return rc;  // exec failed: the message is printed already

  std::fprintf(stderr, "\nvramtrace: '%s' %s after %.1f s\n", o.command.front().c_str(), how.c_str(), seconds);
  show_traces(o, pattern, torch_out, start, existing, existing_count);
  return rc;
}

}  // namespace

void register_run(CLI::App& app) {
  auto opts = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Run a command with vramtrace preloaded and trace its GPU memory");
  cmd->add_option("-o,--output", opts->output,
                  "Trace file name; %p pid, %h host, %r rank, %R \"rank<N>.\" when a launcher set a rank, %t start "
                  "time (default vramtrace.%t.%R%p.jsonl; .zst compresses)");
  cmd->add_option("--conf", opts->conf, "Allocator settings, PYTORCH_CUDA_ALLOC_CONF syntax (sets VRAMTRACE_CONF)");
  cmd->add_flag(
      "--tensors", opts->tensors,
      "Set PYTORCH_NO_CUDA_MEMORY_CACHING=1 so that every PyTorch tensor reaches vramtrace (docs/tensor-mode.md)");
  cmd->add_flag("--no-torch", opts->no_torch,
                "Do not record PyTorch's tensor level (its allocator history, from inside Python programs)");
  auto* limit = cmd->add_option(
      "--limit", opts->limit,
      "Cap on the GPU memory the program can use, every device: a size (14.58GiB) or a card name (T4, "
      "V100-16GB, A10G, L4, A100-40GB, A100-80GB, H100-80GB, RTX4090, ...; docs/configuration.md). Adds "
      "limit:SIZE to the settings; per device: --conf limit:[0:14GiB,1:20GiB]");
  limit->check(size_check());  // refused while parsing, before anything is looked for or started
  cmd->add_option("command", opts->command, "The command to run, after --")->required();
  cmd->positionals_at_end();
  cmd->callback([opts] { set_exit_code(run_command(*opts)); });
}

}  // namespace vramtrace::cli
