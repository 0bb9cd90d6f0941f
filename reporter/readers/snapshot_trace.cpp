// Reader of PyTorch snapshot pickles (torch.cuda.memory._dump_snapshot; see
// docs/pytorch-allocator.md, "Snapshots and the allocator history"): yields `device_traces` entries
// of every device as they are unpickled, then `segments` as final_state() and `allocator_settings`
// as the header's settings. The sidecar `vramtrace run` writes beside the pickle (readers/sidecar.h)
// names the process, the devices' totals and PyTorch's own statistics in the header.
#include <algorithm>
#include <deque>
#include <unordered_map>

#include <fmt/format.h>

#include "readers/pickle.h"
#include "readers/readers.h"
#include "readers/sidecar.h"
#include "vramtrace/trace/byte_source.h"

namespace vramtrace {
namespace {

using pickle::Kind;
using pickle::Value;
using pickle::ValuePtr;

std::uint64_t u64_field(const Value& d, std::string_view key, bool* present = nullptr) {
  const Value* v = d.find(key);
  std::uint64_t x = 0;
  bool ok = v && v->to_u64(x);
  if (present) *present = ok;
  return ok ? x : 0;
}

class SnapshotReader final : public TraceReader {
 public:
  explicit SnapshotReader(const std::string& path) : bytes_(ByteSource::open(path)), unpickler_(*bytes_, path) {
    header_.path = path;
    header_.format = "snapshot";
    take_sidecar(read_sidecar(path));
    unpickler_.stream_key("device_traces", [this](std::int32_t device, ValuePtr item) { convert(device, *item); });
  }

  const TraceHeader& header() const override { return header_; }

  bool next(TraceRecord& out) override {
    while (queue_.empty()) {
      if (done_) return false;
      if (!unpickler_.run()) {
        finish();
        read_block_stacks();
        done_ = true;
      }
    }
    out = queue_.front();
    queue_.pop_front();
    ++index_;
    return true;
  }

  std::string position() const override {
    return fmt::format("trace entry {} (near byte offset {})", index_, unpickler_.offset());
  }
  std::uint64_t bytes_read() const override { return bytes_->bytes_read(); }
  std::uint64_t bytes_total() const override { return bytes_->bytes_total(); }
  const Snapshot* final_state() const override { return done_ ? &final_ : nullptr; }
  bool incomplete() const override { return !unfinished_.empty(); }
  std::string incomplete_reason() const override { return unfinished_; }
  std::shared_ptr<const StackTable> stacks() const override { return stacks_; }

 private:
  // What the sidecar says of the process and its devices, before any entry is read (the model
  // takes the header, settings included, when it starts). Without a sidecar nothing changes; a
  // sidecar that cannot be used is a note only.
  void take_sidecar(const SidecarRead& read) {
    if (!read.problem.empty()) header_.notes.push_back(read.problem);
    if (!read.sidecar) return;
    const TorchSidecar& s = *read.sidecar;
    // Note [a run that did not finish] (reporter/model/unfinished_run.h): each write replaces the
    // pickle and its sidecar, and the exit write is the last of a process that exits, so a
    // sidecar whose last write is another one says that the process died after it (or still
    // runs); one made in a signal handler says it died of the signal. Without a sidecar
    // (torch.cuda.memory._dump_snapshot by the program) nothing says how the run ended.
    if (!s.final)
      unfinished_ = fmt::format(
          "its sidecar's last write was \"{}\", not the exit write: the process did not finish (killed, crashed or "
          "still running)",
          s.reason);
    else if (s.reason.rfind("signal ", 0) == 0)
      unfinished_ =
          fmt::format("the process died of {} (its snapshot was written by the signal handler)", s.reason.substr(7));
    header_.pid = s.pid;
    header_.host = s.host;
    header_.rank = s.rank;
    // The pickle's own settings come at its end and replace these when it has them.
    header_.settings = s.allocator_settings;
    const TorchSidecar::Device* lowest = nullptr;
    for (const auto& d : s.devices) {
      if (d.total_bytes) header_.device_totals.emplace_back(d.device, *d.total_bytes);
      if (!d.memory_stats.empty()) header_.recorded_device_stats.emplace_back(d.device, d.memory_stats);
      if (!lowest || d.device < lowest->device) lowest = &d;
    }
    if (lowest) {
      header_.recorded_stats = lowest->memory_stats;
      header_.device_total_bytes = lowest->total_bytes.value_or(0);
    }
    // The OOMs PyTorch's observer saw: the model matches them with the history's entries and
    // counts the rest (Note [one OOM per failed request]), so a snapshot taken before its run
    // died still shows the OOM.
    for (const auto& o : s.ooms) {
      RecordedOom r;
      r.device = o.device;
      r.time_ns = o.time_ns;
      r.alloc_bytes = o.alloc_bytes;
      r.allowed_bytes = o.device_allocated_bytes;
      r.device_free_bytes = o.device_free_bytes;
      r.stats = o.stats;
      header_.recorded_ooms.push_back(std::move(r));
    }
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw TraceError(fmt::format("{}: offset {}: {}", header_.path, unpickler_.offset(), what));
  }

  // A well-formed pickle of something else (a model's state dict, a list of numbers): said as
  // such, so that nobody takes "no events" for an empty snapshot.
  [[noreturn]] void not_a_snapshot(const std::string& what) const {
    throw TraceError(
        fmt::format("{}: a pickle, but not a PyTorch memory snapshot: {} (a snapshot is the dict "
                    "torch.cuda.memory._dump_snapshot() writes, with \"segments\" and/or \"device_traces\", or the "
                    "list of segment dicts torch.cuda.memory_snapshot() returns)",
                    header_.path, what));
  }

  // What the top-level value is: the rules of not_a_snapshot's message.
  void check_is_snapshot(const Value& root) const {
    if (root.kind == Kind::dict) {
      const Value* traces = root.find("device_traces");
      if (!traces && !root.find("segments")) {
        std::string keys;
        std::size_t shown = 0;
        for (const auto& [k, v] : root.entries) {
          if (shown == 5) {
            keys += fmt::format(", ... ({} keys)", root.entries.size());
            break;
          }
          if (shown++) keys += ", ";
          keys += k && k->kind == Kind::string ? fmt::format("'{}'", k->text.substr(0, 40))
                                               : fmt::format("a key of type {}", pickle::kind_name(k->kind));
        }
        not_a_snapshot(
            root.entries.empty()
                ? std::string("its top-level value is an empty dict")
                : fmt::format("its top-level value is a dict of {} without \"segments\" or \"device_traces\"", keys));
      }
      if (traces) {
        if (traces->kind != Kind::list) fail("\"device_traces\" is not a list (one list of entries per device)");
        for (std::size_t i = 0; i < traces->items.size(); ++i)
          if (traces->items[i]->kind != Kind::list) fail(fmt::format("device_traces[{}] is not a list", i));
      }
      return;
    }
    if (root.kind == Kind::list) {
      // torch.cuda.memory_snapshot(): every segment has an address, a size and its blocks.
      for (std::size_t i = 0; i < root.items.size(); ++i) {
        const Value& s = *root.items[i];
        std::uint64_t x = 0;
        bool is_segment = s.kind == Kind::dict && s.find("address") && s.find("address")->to_u64(x) &&
                          s.find("total_size") && s.find("total_size")->to_u64(x) && s.find("blocks") &&
                          s.find("blocks")->kind == Kind::list;
        if (!is_segment)
          not_a_snapshot(fmt::format("its top-level value is a list whose item {} is {}", i,
                                     s.kind == Kind::dict
                                         ? std::string("a dict without an integer \"address\" and \"total_size\" and a "
                                                       "\"blocks\" list, not a segment")
                                         : fmt::format("of type {}, not a segment dict", pickle::kind_name(s.kind))));
      }
      return;
    }
    not_a_snapshot(fmt::format("its top-level value is of type {}, not a dict", pickle::kind_name(root.kind)));
  }

  void convert(std::int32_t device, const Value& e) {
    if (e.kind != Kind::dict) fail(fmt::format("device_traces[{}] holds an entry that is not a dict", device));
    const Value* action = e.find("action");
    if (!action || action->kind != Kind::string) fail("trace entry without a string \"action\"");
    auto a = parse_action(action->text);
    if (!a) {
      // Newer PyTorch versions add actions (e.g. "annotate"); they carry no memory change.
      ++skipped_unknown_;
      return;
    }
    TraceRecord r;
    r.action = *a;
    r.device = device;
    bool has_addr = false, has_size = false;
    r.addr = u64_field(e, "addr", &has_addr);
    r.size = u64_field(e, "size", &has_size);
    r.stream = u64_field(e, "stream");
    std::int64_t t = 0;
    if (const Value* tv = e.find("time_us"); tv && tv->to_i64(t)) r.time_ns = us_to_ns(t);
    r.device_free = u64_field(e, "device_free");
    if (!has_size) fail(fmt::format("\"{}\" trace entry without an integer \"size\"", action->text));
    if (!has_addr && r.action != Action::oom && r.action != Action::snapshot)
      fail(fmt::format("\"{}\" trace entry without an integer \"addr\"", action->text));
    r.stack_id = stack_of(e);
    queue_.push_back(r);
  }

  // The `frames` of an entry or block (innermost first) as a stack id; 0 when absent, empty or
  // malformed. Frames are an aid, never a reason to lose the trace: a bad one drops the stack only.
  // An entry whose frames list it shares with an entry already delivered (the alloc and the frees
  // of one block share one list; the pickle appends entries in batches of 1000) finds the
  // unpickler's empty placeholder and gets 0. Only allocs need a stack, and they come first.
  std::uint32_t stack_of(const Value& holder) {
    const Value* frames = holder.find("frames");
    if (!frames || frames->kind != Kind::list || frames->items.empty()) return 0;
    frame_buf_.clear();
    for (const auto& fp : frames->items) {
      if (!fp || fp->kind != Kind::dict) return 0;
      Frame f;
      if (const Value* v = fp->find("filename"); v && v->kind == Kind::string) f.filename = v->text;
      if (const Value* v = fp->find("name"); v && v->kind == Kind::string) f.name = v->text;
      std::uint64_t line = 0;
      if (const Value* v = fp->find("line"); v && v->to_u64(line))
        f.line = static_cast<std::uint32_t>(std::min<std::uint64_t>(line, UINT32_MAX));
      frame_buf_.push_back(f);
    }
    return stacks_->intern(frame_buf_);
  }

  // The stacks of the end state's blocks (PyTorch records `frames` per block), so that the end
  // state names code even when the history is empty or began after the block was allocated.
  // Addresses follow finish()'s rule; blocks are matched to final_'s by address.
  void read_block_stacks() {
    const ValuePtr& root = unpickler_.result();
    const Value* segments = root->kind == Kind::dict ? root->find("segments") : root.get();
    if (!segments || segments->kind != Kind::list) return;
    std::unordered_map<std::uint64_t, std::uint32_t> by_address;
    for (const auto& sp : segments->items) {
      if (!sp || sp->kind != Kind::dict) continue;
      const Value* blocks = sp->find("blocks");
      if (!blocks || blocks->kind != Kind::list) continue;
      std::uint64_t addr = u64_field(*sp, "address");
      for (const auto& bp : blocks->items) {
        if (!bp || bp->kind != Kind::dict) continue;
        bool has_addr = false;
        std::uint64_t a = u64_field(*bp, "address", &has_addr);
        if (!has_addr) a = addr;
        addr = a + u64_field(*bp, "size");
        if (std::uint32_t id = stack_of(*bp)) by_address[a] = id;
      }
    }
    if (by_address.empty()) return;
    for (auto& seg : final_.segments)
      for (auto& b : seg.blocks)
        if (auto it = by_address.find(b.address); it != by_address.end()) b.stack_id = it->second;
  }

  void finish() {
    const ValuePtr& root = unpickler_.result();
    check_is_snapshot(*root);
    const Value* segments = nullptr;
    if (root->kind == Kind::dict) {
      segments = root->find("segments");
      if (const Value* s = root->find("allocator_settings"); s && s->kind == Kind::dict) {
        if (const Value* conf = s->find("PYTORCH_CUDA_ALLOC_CONF");
            conf && conf->kind == Kind::string && !conf->text.empty())
          header_.settings = conf->text;
      }
    } else {
      segments = root.get();  // torch.cuda.memory_snapshot(): the segments only
    }
    if (!segments) return;
    if (segments->kind != Kind::list) fail("\"segments\" is not a list");
    for (const auto& sp : segments->items) {
      const Value& s = *sp;
      if (s.kind != Kind::dict) fail("a segment that is not a dict");
      SegmentSnapshot seg;
      std::int64_t dev = 0;
      if (const Value* d = s.find("device")) d->to_i64(dev);
      seg.device = static_cast<std::int32_t>(dev);
      seg.address = u64_field(s, "address");
      seg.total_size = u64_field(s, "total_size");
      seg.allocated_size = u64_field(s, "allocated_size");
      seg.active_size = u64_field(s, "active_size");
      seg.requested_size = u64_field(s, "requested_size");
      seg.stream = u64_field(s, "stream");
      if (const Value* t = s.find("segment_type"); t && t->kind == Kind::string) seg.is_large = t->text != "small";
      if (const Value* x = s.find("is_expandable"); x && x->kind == Kind::boolean) seg.is_expandable = x->boolean;
      std::uint64_t addr = seg.address;
      if (const Value* blocks = s.find("blocks"); blocks && blocks->kind == Kind::list) {
        for (const auto& bp : blocks->items) {
          if (bp->kind != Kind::dict) fail("a block that is not a dict");
          BlockSnapshot b;
          bool has_addr = false;
          b.address = u64_field(*bp, "address", &has_addr);
          if (!has_addr) b.address = addr;  // MemoryViz's rule: segment address + cumulative sizes
          b.size = u64_field(*bp, "size");
          b.requested_size = u64_field(*bp, "requested_size");
          if (const Value* st = bp->find("state"); st && st->kind == Kind::string) {
            if (st->text == "active_allocated")
              b.state = BlockState::active_allocated;
            else if (st->text == "active_pending_free" || st->text == "active_awaiting_free")
              b.state = BlockState::active_pending_free;
            else
              b.state = BlockState::inactive;
          }
          addr = b.address + b.size;
          seg.blocks.push_back(b);
        }
      }
      final_.segments.push_back(std::move(seg));
    }
    std::sort(final_.segments.begin(), final_.segments.end(),
              [](const SegmentSnapshot& a, const SegmentSnapshot& b) { return a.address < b.address; });
  }

  std::unique_ptr<ByteSource> bytes_;
  pickle::Unpickler unpickler_;
  TraceHeader header_;
  std::deque<TraceRecord> queue_;
  std::shared_ptr<StackTable> stacks_ = std::make_shared<StackTable>();
  std::vector<Frame> frame_buf_;  // reused: one stack's frames, views into the pickle's strings
  Snapshot final_;
  std::uint64_t index_ = 0;
  std::uint64_t skipped_unknown_ = 0;
  bool done_ = false;
  std::string unfinished_;  // incomplete_reason(); empty when the sidecar says the run ended, or there is none
};

}  // namespace

std::unique_ptr<TraceReader> open_snapshot_trace(const std::string& path) {
  return std::make_unique<SnapshotReader>(path);
}

}  // namespace vramtrace
