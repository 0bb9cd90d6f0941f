#include "readers/trace_paths.h"

#include <glob.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <set>

#include "readers/open_trace.h"

namespace vramtrace {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// What makes two arguments the same file: the canonical path (links and "." resolved), or the
// argument as given when it has none (a file that does not exist).
std::string path_key(const std::string& p) {
  std::error_code ec;
  fs::path canon = fs::weakly_canonical(fs::path(p), ec);
  return ec ? p : canon.string();
}

}  // namespace

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
        if (is_trace_file_name(name, options)) found.push_back(entry.path().string());
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
  if (text == "tensors") return TraceLevel::tensors;
  if (text == "device") return TraceLevel::device;
  return std::nullopt;
}

std::string tensor_level_companion(const std::string& trace) {
  std::string stem = trace;
  for (const char* c : {".gz", ".zst"})
    if (ends_with(stem, c)) {
      stem.resize(stem.size() - std::char_traits<char>::length(c));
      break;
    }
  if (!ends_with(stem, ".jsonl")) return {};
  stem.resize(stem.size() - 6);
  // The file names first: only a trace with a snapshot of such a name beside it is opened here
  // (for its format and pid), so that the trace of a program without PyTorch is opened once, by
  // the command that reads it.
  std::error_code ec;
  std::string plain = stem + ".torch.pickle";
  const bool has_plain = fs::is_regular_file(plain, ec);
  bool has_pid_named = false;  // stem.<digits>.torch.pickle
  const fs::path stem_path(stem);
  const std::string prefix = stem_path.filename().string() + ".", suffix = ".torch.pickle";
  const fs::path dir = stem_path.has_parent_path() ? stem_path.parent_path() : fs::path(".");
  for (fs::directory_iterator it(dir, ec), end; !has_pid_named && !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
        !ends_with(name, suffix))
      continue;
    const std::string middle = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    has_pid_named = middle.find_first_not_of("0123456789") == std::string::npos;
  }
  if (!has_plain && !has_pid_named) return {};
  std::int64_t pid = 0;
  try {
    auto reader = open_trace(trace);
    if (reader->header().format != "vramtrace") return {};
    pid = reader->header().pid;
  } catch (const TraceError&) {
    return {};
  }
  if (has_plain) return plain;
  std::string with_pid = stem + "." + std::to_string(pid) + suffix;
  if (pid > 0 && fs::is_regular_file(with_pid, ec)) return with_pid;
  return {};
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
        notes.push_back(p + ": device level (the shim's trace); PyTorch's tensor level is in " + companion[i]);
      add(p);
      continue;
    }
    if (is_companion) {
      add(p);  // read in its trace's place; listed itself too, it is read once
      continue;
    }
    if (!companion[i].empty()) {
      notes.push_back(p + ": tensor level from " + companion[i] + " (PyTorch's own allocator history); --level " +
                      "device for the shim's trace");
      add(companion[i]);
      continue;
    }
    if (level == TraceLevel::tensors && ends_with(p, ".jsonl"))
      notes.push_back(p + ": no tensor level beside it; read as it is");
    add(p);
  }
  return out;
}

}  // namespace vramtrace
