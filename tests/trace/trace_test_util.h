// Helpers shared by the trace tests: scratch directories, random events, reading a trace back.
#pragma once

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "vramtrace/trace/vramtrace_reader.h"
#include "vramtrace/trace/writer.h"

namespace vramtrace::test {

/// A fresh directory under $TMPDIR (or /tmp), removed with its contents at scope exit.
class ScratchDir {
 public:
  ScratchDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/vramtrace-test-XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    char* p = mkdtemp(buf.data());
    path_ = p ? p : "";
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

/// A random event as the allocator produces them (any action but snapshot/oom/mark).
inline Event random_event(std::mt19937_64& rng, std::uint64_t base_time_ns) {
  static constexpr Action kActions[] = {Action::alloc,         Action::free_requested, Action::free_completed,
                                        Action::segment_alloc, Action::segment_free,   Action::segment_map,
                                        Action::segment_unmap};
  Event e{};
  e.action = kActions[rng() % 7];
  e.time_ns = base_time_ns + rng() % 1'000'000'000;
  e.addr = 0x7f0000000000ull + (rng() % (1ull << 40)) * 512;
  e.size_bytes = rng() % 5 == 0 ? (rng() % (1ull << 34)) : rng() % 4096;
  e.block_bytes = rng() % 2 ? e.size_bytes : (e.size_bytes + 511) / 512 * 512;
  e.stream = rng() % 3 == 0 ? 0 : rng();
  e.device = static_cast<std::int32_t>(rng() % 3);
  e.thread_id = static_cast<std::uint32_t>(rng() % 4 == 0 ? 0 : rng() % 4'000'000);
  e.entry_point = static_cast<std::uint16_t>(rng() % 5);
  e.pool = e.block_bytes <= (1u << 20) ? PoolKind::small : PoolKind::large;
  const bool segment = e.action == Action::segment_alloc || e.action == Action::segment_free ||
                       e.action == Action::segment_map || e.action == Action::segment_unmap;
  if (segment && rng() % 3 == 0) e.aux = 1 + rng() % 7;  // the shim's pass-through memory kinds
  return e;
}

/// Every record of a trace, with the reader's extras.
struct ReadBack {
  std::vector<TraceRecord> records;
  std::vector<std::uint64_t> block_bytes;
  std::vector<std::uint32_t> threads;
  std::vector<std::uint32_t> entry_points;
  std::vector<std::uint32_t> memory_kinds;
  std::vector<std::string> mark_names;
  std::vector<Snapshot> snapshots;  // one per oom record with a snapshot
  VramtraceHeaderDetails details;
  VramtraceTrailer trailer;
  TraceHeader header;
  bool incomplete = false;
};

inline ReadBack read_all(const std::string& path) {
  ReadBack rb;
  auto reader = open_vramtrace_trace_details(path);
  TraceRecord r;
  while (reader->next(r)) {
    rb.records.push_back(r);
    rb.block_bytes.push_back(reader->block_bytes());
    rb.threads.push_back(reader->thread_id());
    rb.entry_points.push_back(reader->entry_point());
    rb.memory_kinds.push_back(reader->memory_kind());
    rb.mark_names.push_back(reader->mark_name());
    if (const Snapshot* s = reader->oom_snapshot()) rb.snapshots.push_back(*s);
  }
  rb.details = reader->details();
  rb.trailer = reader->trailer();
  rb.header = reader->header();
  rb.incomplete = reader->incomplete();
  return rb;
}

}  // namespace vramtrace::test
