#include "readers/trace_paths.h"

#include <glob.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "readers/open_trace.h"
#include "readers/sidecar.h"
#include "vramtrace/trace/vramtrace_reader.h"

namespace vramtrace {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// `name` without a trailing ".gz" or ".zst".
std::string without_compression(std::string name) {
  for (const char* c : {".gz", ".zst"})
    if (ends_with(name, c)) {
      name.resize(name.size() - std::char_traits<char>::length(c));
      break;
    }
  return name;
}

/// What a vramtrace trace's header says of its process; pid 0 when `trace` is not one.
struct TraceProcess {
  std::int64_t pid = 0;
  std::string host;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;  ///< 0 = unknown (no trailer known at open)
};

TraceProcess trace_process(const std::string& trace) {
  TraceProcess p;
  try {
    auto reader = open_trace(trace);  // through the registry, as the commands open it
    if (reader->header().format != "vramtrace") return p;
    p.pid = reader->header().pid;
    p.host = reader->header().host;
    if (const auto* v = dynamic_cast<const VramtraceTraceReader*>(reader.get())) {
      p.start_ns = v->details().start_unix_ns;
      if (v->trailer().present) p.end_ns = p.start_ns + v->trailer().time_ns;
    }
  } catch (const TraceError&) {
    p.pid = 0;
  }
  return p;
}

std::string path_key(const std::string& p) {
  std::error_code ec;
  fs::path canon = fs::weakly_canonical(fs::path(p), ec);
  return ec ? p : canon.string();
}

/// The regular files of `path`'s directory whose name `pick` accepts, sorted.
template <class Pick>
std::vector<std::string> files_beside(const std::string& path, Pick pick) {
  std::vector<std::string> out;
  std::error_code ec;
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_regular_file(ec)) continue;
    if (pick(entry.path().filename().string())) out.push_back(entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// Whether the directory of `stem` (a path without its extension) holds "<stem's name>.<digits>"
/// + `suffix`, compressed (.gz, .zst) or not: the per-process name `vramtrace run` gives its
/// companions when the trace's name has no %p. Stops at the first; false if the directory cannot
/// be read.
bool pid_named_beside(const std::string& stem, const std::string& suffix) {
  const fs::path stem_path(stem);
  const std::string prefix = stem_path.filename().string() + ".";
  const fs::path dir = stem_path.has_parent_path() ? stem_path.parent_path() : fs::path(".");
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = without_compression(it->path().filename().string());
    if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
        !ends_with(name, suffix))
      continue;
    const std::string middle = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    if (middle.find_first_not_of("0123456789") == std::string::npos) return true;
  }
  return false;
}

}  // namespace

bool same_process(std::int64_t pid, const std::string& host, std::int64_t start_ns, std::int64_t end_ns,
                  std::int64_t sidecar_pid, const std::string& sidecar_host, std::int64_t written_ns) {
  constexpr std::int64_t kSlackNs = 1'000'000'000;
  if (pid <= 0 || pid != sidecar_pid || host != sidecar_host) return false;
  if (written_ns + kSlackNs < start_ns) return false;
  return end_ns == 0 || written_ns <= end_ns + kSlackNs;
}

bool is_trace_file_name(const std::string& name, const TracePathOptions& options) {
  std::string base = name;
  for (const char* c : {".gz", ".zst"}) {
    if (ends_with(base, c)) {
      base.resize(base.size() - std::char_traits<char>::length(c));
      break;
    }
  }
  if (ends_with(base, ".jsonl") || ends_with(base, ".pickle") || ends_with(base, ".pkl")) return true;
  return options.include_summary_json && ends_with(base, ".json");
}

std::vector<std::string> expand_trace_paths(const std::vector<std::string>& args, const TracePathOptions& options) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  auto add = [&](const std::string& p) {
    if (p == "-" || seen.insert(path_key(p)).second) out.push_back(p);
  };
  for (const auto& a : args) {
    std::error_code ec;
    if (a == "-") {
      add(a);
      continue;
    }
    if (fs::is_directory(a, ec)) {
      std::vector<std::string> found;
      for (const auto& entry : fs::directory_iterator(a, ec)) {
        if (!entry.is_regular_file(ec)) continue;
        std::string name = entry.path().filename().string();
        if (!is_trace_file_name(name, options)) continue;
        if (!ends_with(without_compression(name), ".json")) {
          found.push_back(entry.path().string());
          continue;
        }
        // A summary document, not the sidecar of a snapshot (read beside it) or another program's
        // JSON: `vramtrace run` writes sidecars into the same directory as the traces.
        if (ends_with(without_compression(name), ".torch.pickle.json")) continue;
        if (options.is_summary && !options.is_summary(entry.path().string())) {
          if (options.skipped)
            options.skipped->push_back(entry.path().string() +
                                       ": not a summary document (`vramtrace summary --json`): left out");
          continue;
        }
        found.push_back(entry.path().string());
      }
      if (ec) throw TraceError(a + ": cannot list the directory: " + ec.message());
      if (found.empty())
        throw TraceError(
            a + ": the directory holds no trace (files ending in .jsonl, .jsonl.gz, .jsonl.zst, .pickle, .pkl" +
            std::string(options.include_summary_json ? ", .json" : "") + ")");
      std::sort(found.begin(), found.end());
      for (const auto& f : found) add(f);
      continue;
    }
    if (fs::exists(a, ec) || a.find_first_of("*?[") == std::string::npos) {
      add(a);
      continue;
    }
    glob_t g{};
    int rc = ::glob(a.c_str(), 0, nullptr, &g);
    std::vector<std::string> matches;
    if (rc == 0)
      for (std::size_t i = 0; i < g.gl_pathc; ++i) matches.emplace_back(g.gl_pathv[i]);
    globfree(&g);
    if (matches.empty()) throw TraceError(a + ": no file matches this pattern");
    std::sort(matches.begin(), matches.end());
    for (const auto& m : matches) {
      if (fs::is_directory(m, ec)) continue;  // a pattern names files; `dir/*` skips subdirectories
      add(m);
    }
  }
  return out;
}

std::optional<TraceLevel> parse_trace_level(const std::string& text) {
  if (text == "auto") return TraceLevel::automatic;
  // "torch": the name `export` took first, kept so that scripts written for it still run.
  if (text == "tensors" || text == "torch") return TraceLevel::tensors;
  if (text == "device") return TraceLevel::device;
  return std::nullopt;
}

std::string tensor_level_companion(const std::string& trace) {
  std::string stem = without_compression(trace);
  if (!ends_with(stem, ".jsonl")) return {};
  stem.resize(stem.size() - 6);
  // The file names first: only a trace with a snapshot beside it is opened here (for its format
  // and pid), so that the trace of a program without PyTorch is opened once, by the command that
  // reads it.
  std::error_code ec;
  // A snapshot may have been compressed since (.gz, .zst): the readers take it either way.
  auto existing = [&ec](const std::string& path) -> std::string {
    for (const char* ext : {"", ".gz", ".zst"})
      if (fs::is_regular_file(path + ext, ec)) return path + ext;
    return {};
  };
  std::string plain = existing(stem + ".torch.pickle");
  const bool has_plain = !plain.empty();
  const std::string suffix = ".torch.pickle";
  const bool has_pid_named = pid_named_beside(stem, suffix);  // stem.<digits>.torch.pickle[.gz|.zst]
  // Failing those names (a %t of another second), the snapshots of the directory whose sidecars
  // name their process; the trace is opened only when there is one.
  auto with_sidecars = [&] {
    std::vector<std::pair<std::string, TorchSidecar>> out;
    for (const std::string& snapshot :
         files_beside(trace, [&suffix](const std::string& n) { return ends_with(without_compression(n), suffix); }))
      if (SidecarRead read = read_sidecar(snapshot); read.sidecar) out.emplace_back(snapshot, std::move(*read.sidecar));
    return out;
  };
  std::vector<std::pair<std::string, TorchSidecar>> others;
  if (!has_plain && !has_pid_named) {
    others = with_sidecars();
    if (others.empty()) return {};
  }
  const TraceProcess proc = trace_process(trace);
  if (proc.pid == 0) return {};
  if (has_plain) return plain;
  if (has_pid_named) {
    std::string with_pid = existing(stem + "." + std::to_string(proc.pid) + suffix);
    if (!with_pid.empty()) return with_pid;
    others = with_sidecars();
  }
  std::string found;
  for (const auto& [snapshot, s] : others) {
    if (!same_process(proc.pid, proc.host, proc.start_ns, proc.end_ns, s.pid, s.host, s.written_at_ns)) continue;
    if (!found.empty()) return {};  // two: neither is known to be this one
    found = snapshot;
  }
  return found;
}

std::string device_level_companion(const std::string& snapshot) {
  std::string stem = without_compression(snapshot);
  if (!ends_with(stem, ".torch.pickle")) return {};
  stem.resize(stem.size() - std::char_traits<char>::length(".torch.pickle"));
  const std::string key = path_key(snapshot);
  std::vector<std::string> stems = {stem};
  // Names without %p get ".<pid>" before ".torch.pickle".
  if (auto dot = stem.find_last_of('.'); dot != std::string::npos && dot + 1 < stem.size() &&
                                         stem.find_first_not_of("0123456789", dot + 1) == std::string::npos)
    stems.push_back(stem.substr(0, dot));
  std::error_code ec;
  for (const std::string& s : stems)
    for (const char* ext : {".jsonl", ".jsonl.zst", ".jsonl.gz"}) {
      std::string trace = s + ext;
      if (!fs::is_regular_file(trace, ec)) continue;
      const std::string back = tensor_level_companion(trace);
      if (!back.empty() && path_key(back) == key) return trace;
    }
  // The names differ: the trace of the process the sidecar names.
  const SidecarRead read = read_sidecar(snapshot);
  if (!read.sidecar) return {};
  const TorchSidecar& sc = *read.sidecar;
  std::string found;
  for (const std::string& trace :
       files_beside(snapshot, [](const std::string& n) { return ends_with(without_compression(n), ".jsonl"); })) {
    const TraceProcess proc = trace_process(trace);
    if (!same_process(proc.pid, proc.host, proc.start_ns, proc.end_ns, sc.pid, sc.host, sc.written_at_ns)) continue;
    if (!found.empty()) return {};
    found = trace;
  }
  return found;
}

std::string tensor_level_gap(const std::string& trace, const std::string& companion) {
  if (trace == "-") return {};
  auto seconds_into = [](const TraceProcess& proc, std::int64_t at_ns) {
    return proc.start_ns > 0 && at_ns >= proc.start_ns
               ? fmt::format(" at {:.3f} s into the trace", static_cast<double>(at_ns - proc.start_ns) / 1e9)
               : std::string();
  };
  if (!companion.empty()) {
    const SidecarRead read = read_sidecar(companion);
    if (!read.sidecar || read.sidecar->final) return {};
    const TorchSidecar& s = *read.sidecar;
    const TraceProcess proc = trace_process(trace);
    const std::string rest =
        proc.end_ns > 0
            ? fmt::format("the trace goes on to {:.3f} s", static_cast<double>(proc.end_ns - proc.start_ns) / 1e9)
            : std::string("the trace has no trailer either (the process was killed, crashed or is still running)");
    return fmt::format(
        "{}: PyTorch's tensor level ends at its last write (\"{}\"{}), not at the process's end: no exit write "
        "came after it, and {}. Figures after that write are the device level's only (--level device)",
        companion, s.reason, seconds_into(proc, s.written_at_ns), rest);
  }
  std::string stem = without_compression(trace);
  if (!ends_with(stem, ".jsonl")) return {};
  stem.resize(stem.size() - 6);
  // The sidecar is written when recording starts (`reason` "started", naming the pickle to come),
  // then replaced at each write: alone, it says the tensor level was on and none of it was written.
  std::error_code ec;
  std::string snapshot = stem + ".torch.pickle";
  std::optional<TraceProcess> opened;  // the header is read only where a sidecar may be this trace's
  if (!fs::is_regular_file(snapshot + ".json", ec)) {
    // Names without %p: "<stem>.<pid>.torch.pickle.json". The header is opened only when such a
    // file is there, so a trace without PyTorch is opened once, by the command that reads it.
    if (!pid_named_beside(stem, ".torch.pickle.json")) return {};
    opened = trace_process(trace);
    if (opened->pid == 0) return {};
    snapshot = stem + "." + std::to_string(opened->pid) + ".torch.pickle";
    if (!fs::is_regular_file(snapshot + ".json", ec)) return {};
  }
  const SidecarRead read = read_sidecar(snapshot);
  if (!read.sidecar) return {};
  const TorchSidecar& s = *read.sidecar;
  const TraceProcess proc = opened ? *opened : trace_process(trace);
  if (!same_process(proc.pid, proc.host, proc.start_ns, proc.end_ns, s.pid, s.host, s.written_at_ns)) return {};
  if (s.reason == "started")
    return fmt::format(
        "{}: PyTorch's tensor level was being recorded (its sidecar {} was written when recording started{}) but "
        "no snapshot was ever written: the process ended without its exit write (SIGKILL, a crash or os.exec*), so "
        "all of the tensor level is missing. Read at the device level: PyTorch's segments, not its tensors",
        trace, s.path, seconds_into(proc, s.written_at_ns));
  return fmt::format(
      "{}: the sidecar {} names the snapshot {}, which is not there (moved or deleted?); read at the "
      "device level",
      trace, s.path, snapshot);
}

std::vector<std::string> choose_trace_level(const std::vector<std::string>& paths, TraceLevel level,
                                            std::vector<std::string>& notes) {
  std::vector<std::string> companion(paths.size());
  std::set<std::string> companions;
  for (std::size_t i = 0; i < paths.size(); ++i) {
    if (paths[i] == "-") continue;
    companion[i] = tensor_level_companion(paths[i]);
    if (!companion[i].empty()) companions.insert(path_key(companion[i]));
  }
  std::vector<std::string> out;
  std::set<std::string> taken;
  auto add = [&](const std::string& p) {
    if (taken.insert(path_key(p)).second) out.push_back(p);
  };
  for (std::size_t i = 0; i < paths.size(); ++i) {
    const std::string& p = paths[i];
    const bool is_companion = p != "-" && companions.count(path_key(p)) > 0;
    if (level == TraceLevel::device) {
      if (is_companion) continue;  // its trace is listed: the device level of the same process
      if (!companion[i].empty())
        notes.push_back(p + ": device level (the shim's trace); PyTorch's tensor level is in " + companion[i] +
                        ". Here PyTorch's segments are memory the program holds: the free blocks of its cache "
                        "inside them are not seen, so no fragmentation or capacity verdict and no verdict on an "
                        "allocator setting is given at this level");
      add(p);
      continue;
    }
    if (is_companion) {
      add(p);  // read in its trace's place; listed itself too, it is read once
      continue;
    }
    if (!companion[i].empty()) {
      notes.push_back(p + ": tensor level from " + companion[i] +
                      " (PyTorch's own allocator history), with this trace's device level for the memory ledger; "
                      "--level device for the shim's trace alone");
      if (std::string gap = tensor_level_gap(p, companion[i]); !gap.empty()) notes.push_back(std::move(gap));
      add(companion[i]);
      continue;
    }
    if (std::string gap = tensor_level_gap(p, {}); !gap.empty()) notes.push_back(std::move(gap));
    if (level == TraceLevel::tensors && ends_with(p, ".jsonl"))
      notes.push_back(p + ": no tensor level beside it; read as it is");
    if (p != "-" && ends_with(without_compression(p), ".torch.pickle"))
      if (const std::string trace = device_level_companion(p); !trace.empty())
        notes.push_back(p + ": tensor level, with the device level of " + trace + " (the shim's trace of the " +
                        "same process) for the memory ledger");
    add(p);
  }
  return out;
}

}  // namespace vramtrace
