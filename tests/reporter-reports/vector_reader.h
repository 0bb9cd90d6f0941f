// A TraceReader over records held in memory, for tests.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "readers/open_trace.h"

namespace vramtrace::testing {

class VectorReader : public TraceReader {
 public:
  explicit VectorReader(std::vector<TraceRecord> records, TraceHeader header = {}, bool incomplete = false)
      : records_(std::move(records)), header_(std::move(header)), incomplete_(incomplete) {}
  const TraceHeader& header() const override { return header_; }
  bool next(TraceRecord& out) override {
    if (pos_ >= records_.size()) return false;
    out = records_[pos_++];
    return true;
  }
  std::string position() const override { return "record " + std::to_string(pos_); }
  bool incomplete() const override { return incomplete_; }
  const Snapshot* final_state() const override { return end_state ? &*end_state : nullptr; }
  std::shared_ptr<const StackTable> stacks() const override { return stack_table; }
  /// The end state the trace records (a snapshot's `segments`), if any.
  std::optional<Snapshot> end_state;
  /// The frames behind the records' stack_id, if the trace records stacks.
  std::shared_ptr<const StackTable> stack_table;

 private:
  std::vector<TraceRecord> records_;
  TraceHeader header_;
  bool incomplete_ = false;
  std::size_t pos_ = 0;
};

/// Builds records with increasing times (1 us apart).
class RecordList {
 public:
  RecordList& add(Action a, DevicePtr addr, std::uint64_t size, std::uint64_t stream = 0, std::int32_t device = 0) {
    TraceRecord r;
    r.action = a;
    r.addr = addr;
    r.size = size;
    r.stream = stream;
    r.device = device;
    r.time_ns = static_cast<std::int64_t>(records.size() + 1) * 1000;
    records.push_back(r);
    return *this;
  }
  RecordList& oom(std::uint64_t size, std::uint64_t device_free) {
    add(Action::oom, 0, size);
    records.back().device_free = device_free;
    return *this;
  }
  std::vector<TraceRecord> records;
};

}  // namespace vramtrace::testing
