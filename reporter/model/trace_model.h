// The analysis model behind `summary`, `oom` and `report`: one pass over a trace's events that
// keeps PyTorch's statistics, the segment and block layout, a downsampled timeline, the state at
// the peak and at each OOM.
//
// The trace is the truth. For traces with segment events (PyTorch's own history, our shim's
// traces) the layout follows from the events: a segment_alloc adds a free block covering the
// segment; an alloc at an address takes the free block starting there and splits it by PyTorch's
// rule (Note [block sizes from a trace]); free_completed merges with free neighbours. No policy
// decision (which block, when to release) is re-simulated.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/allocation_level.h"
#include "model/oom_count.h"
#include "model/request_sizes.h"
#include "readers/open_trace.h"
#include "vramtrace/event.h"
#include "vramtrace/snapshot.h"
#include "vramtrace/stats.h"

namespace vramtrace {

struct MemoryLedger;  // model/ledger.h

/// Block-size rules the layout needs from the settings in force (PyTorch names).
struct LayoutRules {
  std::uint64_t max_split_size_bytes = UINT64_MAX;           ///< blocks >= this are not split
  std::array<std::uint32_t, 16> roundup_power2_divisions{};  ///< per [2^(20+i), 2^(21+i)) interval
  /// Reads max_split_size_mb and roundup_power2_divisions from a PYTORCH_CUDA_ALLOC_CONF string
  /// with the allocator's settings grammar (AllocatorSettings::parse_recorded); other keys are
  /// ignored. A value that grammar refuses leaves the default and adds a note to `notes`.
  static LayoutRules from_settings(const std::string& conf, std::vector<std::string>* notes = nullptr);
  /// PyTorch's round_size (vramtrace/size_rules.h) with these divisions: < 512 -> 512; otherwise
  /// up to 512 B, or to the power-of-two division when roundup_power2_divisions applies.
  std::uint64_t round_size(std::uint64_t requested) const noexcept;
};

/// One point of the downsampled timeline: over [t_begin_ns, t_end_ns] the minimum and maximum of
/// each series, and its value after the bucket's last event. Series: allocated, active, reserved,
/// requested (bytes).
struct TimelineBucket {
  std::int64_t t_begin_ns = 0;
  std::int64_t t_end_ns = 0;
  std::array<std::int64_t, 4> min{};
  std::array<std::int64_t, 4> max{};
  std::array<std::int64_t, 4> last{};
};
inline constexpr const char* kSeriesNames[4] = {"allocated", "active", "reserved", "requested"};

/// One exact point of the timeline: the value of each series (kSeriesNames) after the event at
/// `t_ns`, held until the next point (Note [the timeline's exact points around the peak]).
struct TimelinePoint {
  std::int64_t t_ns = 0;
  std::array<std::int64_t, 4> value{};
};

/// A live allocation, for "biggest at the peak" and "still allocated at the end".
struct LiveAllocation {
  DevicePtr address = 0;
  std::uint64_t size = 0;            ///< block bytes
  std::uint64_t requested_size = 0;  ///< bytes asked for
  std::uint64_t stream = 0;
  std::int64_t alloc_time_ns = 0;
  std::uint64_t alloc_event = 0;  ///< 0-based index of its alloc event
  bool pending_free = false;      ///< freed, waiting on another stream
  /// Alive at the end but never allocated in the history (it began later): time and event unknown.
  bool before_trace = false;
  /// The call stack of its allocation (TraceRecord::stack_id, or the end state's block frames
  /// for a block the history never allocated; TraceModel::stacks); 0 when none was recorded.
  std::uint32_t stack = 0;
};

/// Allocated bytes of one call stack at one moment (TraceRecord::stack_id; 0 = blocks whose
/// allocation recorded no stack).
struct StackBytes {
  std::uint32_t stack = 0;
  std::uint64_t bytes = 0;   ///< block bytes, as allocated_bytes counts them
  std::uint64_t blocks = 0;  ///< allocated blocks
};

/// The allocator's state at one moment.
struct StateAt {
  std::uint64_t event_index = 0;  ///< 0-based index of the last event applied
  std::int64_t time_ns = 0;
  DeviceStats stats;  ///< statistics at that moment
  Snapshot layout;    ///< segments and blocks (orphan blocks excluded)
  std::uint64_t largest_free_block = 0;
  /// Block bytes of allocations at addresses in no segment the model knows (a history that began
  /// after their segments were created, or a damaged trace): counted in stats.allocated_bytes and
  /// active_bytes, in no segment of `layout`, and so not in stats.reserved_bytes. The cache's
  /// free memory is reserved - (allocated - outside_segments_bytes) (cache_free_bytes).
  std::uint64_t outside_segments_bytes = 0;
  /// Reserved memory no block holds: free blocks of the known segments, in bytes.
  std::int64_t cache_free_bytes() const noexcept {
    return stats.reserved_bytes[kStatAll].current -
           (stats.allocated_bytes[kStatAll].current - static_cast<std::int64_t>(outside_segments_bytes));
  }
  std::vector<LiveAllocation> biggest;  ///< the largest live allocations, largest first
  /// Allocated (not pending-free) blocks by the stack that allocated them, by stack id; filled
  /// only when the trace records stacks (empty otherwise). Sums to allocated_bytes.
  std::vector<StackBytes> stacks;
  /// Segments of the moment that `layout` does not hold: a checkpoint keeps only the largest
  /// (ModelOptions::checkpoint_max_segments). 0 for the peak, the OOMs and the end.
  std::size_t segments_left_out = 0;
  bool captured = false;
};

/// An `oom` event and the state it left.
struct OomRecord {
  std::uint64_t event_index = 0;
  std::int64_t time_ns = 0;
  std::uint64_t request_bytes = 0;  ///< size the oom event carries (the allocation asked of the device)
  std::uint64_t device_free_bytes = 0;
  std::optional<std::uint64_t> retries;  ///< num_alloc_retries at the failure, when the trace says
  std::uint32_t stack = 0;               ///< the failed request's call stack (TraceRecord::stack_id); 0 = none
  /// Whether this failure reached the program (Note [one OOM per failed request]): only `oom`
  /// entries of fate OomFate::oom are OOMs; the others were retried.
  OomFate fate = OomFate::oom;
  std::uint32_t attempt = 1;   ///< its place among the failed attempts of its request (1-based)
  std::uint32_t attempts = 1;  ///< failed attempts of its request
  StateAt state;
};

/// A segment event of the trace (segment_alloc, segment_free, segment_map, segment_unmap of the
/// allocator's own segments), for matching them with another trace of the same process (the
/// memory ledger, model/ledger.h). Unix-epoch nanoseconds, as TraceRecord::time_ns.
struct SegmentEvent {
  Action action = Action::segment_alloc;
  DevicePtr addr = 0;
  std::uint64_t size = 0;
  std::int64_t time_ns = 0;
};

/// Markers for the timeline (marks written by the program, OOMs).
struct TimelineMarker {
  std::int64_t time_ns = 0;
  std::string kind;  ///< "oom", "retry" (a failed allocation the program retried), "mark", "snapshot"
  std::uint64_t value = 0;
  std::string name;  ///< a mark's name (empty when the format has none)
};

/// Per device: everything a report needs.
struct DeviceModel {
  std::int32_t device = 0;
  DeviceStats stats;  ///< final statistics (current, peak, allocated, freed)
  std::uint64_t events = 0;
  std::int64_t first_time_ns = 0;
  std::int64_t last_time_ns = 0;
  StateAt at_peak;  ///< when allocated_bytes.all reached its peak (first time; Note [the layout at the peak])
  StateAt at_end;   ///< after the last event
  /// Every `oom` entry, retried ones included (OomRecord::fate); at most kMaxOomStates keep a
  /// layout. The count of OOMs is oom_count, not the size of this list.
  std::vector<OomRecord> ooms;
  /// The OOMs and retries of the device (Note [one OOM per failed request]): what every command
  /// reports.
  OomCount oom_count;
  std::vector<TimelineBucket> timeline;
  /// Note [the timeline's exact points around the peak]: consecutive events of the device, each
  /// with every series after it, around the first moment allocated memory reached its peak.
  std::vector<TimelinePoint> exact;
  std::vector<TimelineMarker> markers;
  /// The sizes its allocations asked for (model/request_sizes.h), forwarded device memory included.
  RequestSizes request_sizes;
  std::uint64_t orphan_allocs = 0;  ///< allocs at an address in no known segment
  std::uint64_t unknown_frees = 0;  ///< frees of an address never allocated in the trace
  /// Of those, the blocks that lay in no segment of the trace: memory allocated before the history
  /// began (Note [a history that begins late]).
  std::uint64_t frees_before_history = 0;
  /// segment_free/segment_unmap of a segment never created in the trace (created before it began).
  std::uint64_t segment_frees_before_history = 0;
  /// How much of the run the history covers (Note [a history that begins late]): `complete`; `late`
  /// (memory existed before the first event: figures before lower_bound_until_ns and every peak
  /// are lower bounds); `none` (no events: every figure is the end state the snapshot recorded).
  enum class History { complete, late, none };
  History history = History::complete;
  std::int64_t lower_bound_until_ns = 0;  ///< history `late`: figures before this time are lower bounds
  std::uint64_t layout_conflicts = 0;     ///< events the layout could not place (described in notes)
  /// Events earlier than an event before them (a clock that stepped back; in a vramtrace trace only
  /// steps of a second or more): first_time_ns and last_time_ns do not bound the run then.
  std::uint64_t times_back = 0;
  /// Every segment event of the device, in trace order (a few hundred in a training run: one per
  /// cudaMalloc of the allocator, not per tensor).
  std::vector<SegmentEvent> segment_events;
  /// Note [checkpoints of the state]: the allocator's state at moments spread evenly over the
  /// device's time, in event order; empty unless ModelOptions::checkpoints asks for them.
  std::vector<StateAt> checkpoints;
  std::vector<std::string> notes;
};

/// The model of one trace file (one process).
struct TraceModel {
  TraceHeader header;
  bool incomplete = false;  ///< the trace ended early
  /// Why, in words ("its last line is cut", "no trailer: ..."; "cut last line" when the reader
  /// says no more); empty when complete.
  std::string incomplete_reason;
  /// Events the trace lost (TraceReader::lost_events): every figure computed from the events may
  /// be wrong by them, in either direction (a lost free leaves memory allocated). 0 = none known.
  std::uint64_t lost_events = 0;
  bool has_segment_events = false;
  std::uint64_t events = 0;
  /// Whose requests its allocations are (Note [the level of a trace]), decided when the model is
  /// finished, while the stacks are still there.
  AllocationLevelFinding level;
  std::vector<DeviceModel> devices;  ///< sorted by device id
  std::vector<std::string> notes;
  /// The frames behind StateAt::stacks (the reader's table, kept alive here); null when the trace
  /// records no stacks.
  std::shared_ptr<const StackTable> stacks;
  /// Per device, allocated blocks of the end state the trace recorded (a snapshot's segments)
  /// that the history does not hold allocated at its end (allocated before the history began),
  /// by stack; only blocks with a stack. Empty when the format records no such state.
  std::vector<std::pair<std::int32_t, std::vector<StackBytes>>> recorded_end_stacks;
  /// For a tensor-level snapshot of `vramtrace run`: the memory ledger of both levels (its
  /// sidecar and the shim's trace of the same process; model/ledger.h), filled by load_models.
  /// Null for other traces and for a snapshot with neither beside it.
  std::shared_ptr<const MemoryLedger> ledger;
};

struct ModelOptions {
  std::size_t timeline_buckets = 4096;  ///< the timeline keeps between this and twice this many
  /// Note [the timeline's exact points around the peak]: this many events before the peak and as
  /// many after it (DeviceModel::exact); 0 keeps none.
  std::size_t exact_points = 0;
  std::size_t top_n = 10;           ///< biggest allocations kept per state
  std::size_t max_oom_states = 64;  ///< OOMs beyond this keep figures, not the layout
  /// Settings override (else the trace header's settings are used).
  std::optional<std::string> settings;
  /// load_models: build the memory ledger of snapshots that have their companions (model/ledger.h).
  bool ledger = true;
  /// Note [checkpoints of the state]: per device, keep between this many and twice this many
  /// states (DeviceModel::checkpoints) spread evenly over its time. 0, the default, keeps none
  /// and costs nothing: only `report` asks for them.
  std::size_t checkpoints = 0;
  /// A checkpoint's layout keeps the largest this many segments (address order) ...
  std::size_t checkpoint_max_segments = 400;
  /// ... and of each segment its first this many blocks, plus the block where the rest begins
  /// (what render/report_html.cpp draws of a state, ReportOptions::max_segments_drawn and
  /// max_blocks_per_segment).
  std::size_t checkpoint_max_blocks = 600;
  /// ... and the checkpoints of a device take at most this many bytes of the model's memory
  /// together (checkpoint_bytes): each of the at most 2 * checkpoints kept gets an equal share,
  /// and one over it keeps fewer of its largest segments (StateAt::segments_left_out).
  std::size_t checkpoint_max_bytes = 32u << 20;
};

/// The bytes of the model's memory that `s` holds: the struct, its layout's segments and blocks,
/// its biggest allocations and bytes per stack (the vectors' capacities). What
/// ModelOptions::checkpoint_max_bytes counts. Pure.
std::size_t state_bytes(const StateAt& s) noexcept;

/// Note [checkpoints of the state]
/// The report shows the allocator's state at a clicked moment of its time axis from states taken
/// during the one pass. Keeping a state per event would cost the layout once per event, so a
/// device keeps a bounded set, as the timeline keeps its buckets: time since the device's first
/// event is cut into slots (1 us to start), and the state after the first event of each slot is
/// kept; when 2N are kept, the slots double and each keeps its first checkpoint. The checkpoints
/// are therefore spread evenly over the run's time (where it has events), N to 2N of them for a
/// run long enough, each exactly the state after its event. Each copies at most
/// checkpoint_max_segments segments of at most checkpoint_max_blocks + 1 blocks, and no stacks,
/// within its share of checkpoint_max_bytes (the largest segments first; state_bytes counts):
/// the model holds at most 2N such layouts a device, and the pass copies about
/// N * log2(duration / N us) of them. The peak, the OOMs and the end are states of their own
/// (at_peak, ooms, at_end), which the page adds to the checkpoints.

/// Note [the timeline's exact points around the peak]
/// A bucket of a long run is wide (a run of an hour: 0.22 to 0.44 s), and within it the page can
/// show only the bucket's minimum, maximum and last value. Where a reader zooms in most, at the
/// peak, the model keeps the events themselves: the exact_points events before the first moment
/// allocated memory reached its maximum and as many after it, each with the value of every series
/// after it. The pass keeps the last exact_points events in a ring; at a new maximum it starts a
/// window from the ring, and a new maximum inside the window extends it (its events before the
/// new maximum trimmed to exact_points). Cost: 2 * exact_points + 1 points a device, and one copy
/// of the ring per new maximum that comes more than exact_points events after the last one.

/// Note [a history that begins late]
/// PyTorch keeps only the last max_entries (100,000 by default) of its allocator history, and a
/// snapshot taken without _record_memory_history has none: memory may exist before the first
/// event. What is known of it: blocks freed in the history that lie in no segment of the history
/// (their alloc came before it), segments released without their segment_alloc, and, when the
/// trace records its end state (a snapshot's `segments`), what was alive at the end. The model
/// counts such a free as lowering the figures, so that during the pass each series is the known
/// part minus what the pre-existing memory has lost so far; at the end one constant per series
/// and pool (the end state minus the pass's end value; without an end state, what the frees
/// without their alloc released) is added to every figure, state and timeline point. The end
/// then equals the end state, no figure is negative (clamped at 0 where the rounding of a freed
/// block's size, which the trace does not record, leaves it short), and every figure before the
/// last such free is a lower bound (the freed blocks are counted at their smallest size). A
/// complete history has nothing to add and keeps its figures exactly.

/// Incremental builder: feed records in trace order, then finish(). Not thread-safe.
class TraceModelBuilder {
 public:
  explicit TraceModelBuilder(TraceHeader header, ModelOptions options = {});
  ~TraceModelBuilder();
  TraceModelBuilder(const TraceModelBuilder&) = delete;
  TraceModelBuilder& operator=(const TraceModelBuilder&) = delete;

  /// Applies one record; `mark_name` is a mark's name where the format has one. Never throws on
  /// odd traces: conflicts are counted and noted.
  void add(const TraceRecord& r, std::string_view mark_name = {});
  /// Ends the trace; `incomplete` as the reader says.
  TraceModel finish(bool incomplete);
  /// Ends the trace read through `reader`: incomplete as it says, and what its header learnt while
  /// reading (the trailer's recorded statistics, devices named by later `device` records) taken
  /// now. A compressed trace's trailer is known only once the last line was read, after the
  /// builder copied the header.
  TraceModel finish(const TraceReader& reader);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// The warning every report prints for a trace that lost `lost` events (TraceModel::lost_events:
/// dropped by a writer with a full buffer, or lines lost from the file), one sentence starting
/// "WARNING: "; empty when none was lost. Pure.
std::string lost_events_warning(std::uint64_t lost);

/// Reads a whole trace through `reader` and builds its model. Throws TraceError (from the reader)
/// on malformed input. Memory: the live layout, the timeline and the kept states; never the events.
TraceModel build_trace_model(TraceReader& reader, ModelOptions options = {});

/// Frees what only a trace's own report reads, once it has been rendered: the layouts, biggest
/// allocations and stacks of every kept state (the peak, the end, each OOM's, the checkpoints), the timeline, its
/// markers, the segment events and the stack table. Keeps the header, each device's statistics
/// and figures (its DeviceStats, OOM count, history, notes) and the memory ledger: what the
/// process x device view of many traces reads (analyses/processes.h). A directory of 1,024
/// rank traces otherwise holds every model's layouts until the end. Not thread-safe for `m`.
void drop_detail(TraceModel& m);

}  // namespace vramtrace
