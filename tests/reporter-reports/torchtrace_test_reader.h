// A minimal reader of PyTorch's JSON-lines allocator history (gzip), used only until the shared
// reader (open_trace) is merged; it reads the fields the model needs and nothing else.
#pragma once

#include <zlib.h>

#include <nlohmann/json.hpp>
#include <string>

#include "vramtrace/trace_reader.h"

namespace vramtrace::testing {

class TorchTraceTestReader : public TraceReader {
 public:
  explicit TorchTraceTestReader(const std::string& path) {
    gz_ = gzopen(path.c_str(), "rb");
    if (!gz_) throw TraceError("cannot open " + path);
    header_.path = path;
    header_.format = "torchtrace";
    std::string line;
    if (read_line(line)) {
      auto j = nlohmann::json::parse(line);
      if (j.value("kind", "") == "header") {
        header_.workload = j.value("workload", "");
        header_.settings = j.value("conf", "");
        header_.device_total_bytes = j.value("total", 0ull);
        for (auto& [k, v] : j["stats"].items()) header_.recorded_stats.emplace_back(k, v.get<std::int64_t>());
      } else {
        pending_ = line;
      }
    }
  }
  ~TorchTraceTestReader() override { gzclose(gz_); }
  const TraceHeader& header() const override { return header_; }
  bool next(TraceRecord& out) override {
    std::string line;
    if (!pending_.empty()) {
      line.swap(pending_);
    } else if (!read_line(line)) {
      return false;
    }
    auto j = nlohmann::json::parse(line);
    auto a = parse_action(j.value("action", ""));
    if (!a) throw TraceError("unknown action at line " + std::to_string(line_));
    out = TraceRecord{};
    out.action = *a;
    out.addr = j.value("addr", 0ull);
    out.size = j.value("size", 0ull);
    out.stream = j.value("stream", 0ull);
    out.time_ns = j.value("time_us", 0ll) * 1000;
    out.device_free = j.value("device_free", 0ull);
    return true;
  }
  std::string position() const override { return "line " + std::to_string(line_); }

 private:
  bool read_line(std::string& line) {
    line.clear();
    char buf[4096];
    while (gzgets(gz_, buf, sizeof buf)) {
      line += buf;
      if (!line.empty() && line.back() == '\n') {
        line.pop_back();
        ++line_;
        return true;
      }
    }
    if (!line.empty()) {
      ++line_;
      return true;
    }
    return false;
  }
  gzFile gz_ = nullptr;
  TraceHeader header_;
  std::string pending_;
  std::uint64_t line_ = 0;
};

}  // namespace vramtrace::testing
