#include "analyses/oom/verdict_support.h"

#include <fmt/format.h>

#include "readers/trace_paths.h"
#include "vramtrace/units.h"

namespace vramtrace {

namespace {

std::string size(std::uint64_t b) { return format_size(b); }

// Rule (1): another allocator's segments.
Withheld segments_withheld(const TraceModel& m) {
  const AllocationLevelFinding& l = m.level;
  return Withheld{
      fmt::format("this trace holds the segments of {} ({}), not the requests it served: a replay would cache those "
                  "segments a second time, and what {} held free inside them is not in the trace, so it says nothing "
                  "about allocator settings",
                  l.allocator, l.evidence, l.pytorch ? "PyTorch" : "it"),
      requests_level_advice(m)};
}

bool recorded_backend_async(const TraceModel& m) {
  std::vector<RejectedSetting> rejected;
  AllocatorSettings::parse_recorded(m.header.settings, &rejected);
  for (const auto& r : rejected)
    if (r.key == "backend" && r.value == "cudaMallocAsync") return true;
  return false;
}

}  // namespace

std::string requests_level_advice(const TraceModel& m) {
  if (!m.level.pytorch)
    return "none: the replay models PyTorch's allocator, and the trace cannot show what " + m.level.allocator +
           " was asked";
  // The tensor level of the same run may lie beside the trace (`--level device` of a default
  // `vramtrace run`): then it is one command away.
  if (const std::string companion = tensor_level_companion(m.header.path); !companion.empty())
    return fmt::format(
        "the tensor level of this run is beside it: `vramtrace oom {}` (or its directory without "
        "--level device)",
        companion);
  if (m.header.workload.empty())
    return "record PyTorch's tensor level: `vramtrace run -- CMD` (without --no-torch), then `vramtrace oom` of the "
           "directory it writes";
  return fmt::format(
      "record PyTorch's tensor level: `vramtrace run -- {}` (without --no-torch), then `vramtrace oom` "
      "of the directory it writes",
      m.header.workload);
}

namespace {

// Rules (1) and (2) of Note [what a verdict needs]: what the trace's history holds. Sets `none`
// (and `replayable` false where a replay would not mean anything) when it cannot be judged.
void history_support(const TraceModel& m, TraceSupport& s) {
  bool any_history = false, late = false;
  for (const DeviceModel& d : m.devices) {
    any_history = any_history || (d.history != DeviceModel::History::none && d.events > 0);
    late = late || d.history == DeviceModel::History::late;
  }
  if (m.level.level == AllocationLevel::allocator_segments) {
    s.none = segments_withheld(m);
    s.replayable = false;
  } else if (!any_history) {
    s.none = Withheld{
        "the trace holds no allocation history (a snapshot taken without PyTorch's history, or no "
        "allocation at all): there is nothing to replay",
        "record the history: `vramtrace run` does, or torch.cuda.memory._record_memory_history() "
        "before the run"};
    s.replayable = false;
  } else if (late) {
    s.none = Withheld{
        "the history begins late (PyTorch keeps only its last max_entries events): memory allocated "
        "before its first event is in no replay, so every replay would run on less than the program held",
        "record the whole run: a larger ring (VRAMTRACE_TORCH_MAX_ENTRIES, or "
        "_record_memory_history(max_entries=N))"};
    s.replayable = false;
  } else if (m.lost_events) {
    s.none = Withheld{fmt::format("the trace lost {} event{}: a lost free leaves memory allocated and a lost "
                                  "allocation hides it, so no replay of it can be vouched for",
                                  m.lost_events, m.lost_events == 1 ? "" : "s"),
                      "record the run again with a larger trace buffer (docs/trace-format.md, the writer's settings)"};
  }
}

// Rule (3): a device to fit, of a size some GPU program could run in.
void capacity_support(const WhatIfCapacity& capacity, TraceSupport& s) {
  if (s.none) return;
  if (capacity.bytes == 0)
    s.none = Withheld{"the trace records neither the device's size nor a cap, so the replays have no device to fit",
                      "give the device's memory with --capacity SIZE (a size, or a card name such as T4)"};
  else if (capacity.kind != WhatIfCapacity::Kind::given && capacity.bytes < kMinPlausibleCapacityBytes)
    s.none =
        Withheld{fmt::format("the capacity the trace gives is {} ({}): no GPU program runs in less than {}, so "
                             "the trace's figures are not a device's",
                             format_size(capacity.bytes), capacity.source, format_size(kMinPlausibleCapacityBytes)),
                 "give the device's memory with --capacity SIZE (a size, or a card name such as T4)"};
}

}  // namespace

TraceSupport trace_support(const TraceModel& m, const WhatIfCapacity& capacity, bool ends_at_failure,
                           const FullTraceFacts* full, bool figures_contradict) {
  TraceSupport s;
  history_support(m, s);
  capacity_support(capacity, s);
  if (!s.none && figures_contradict)
    s.none = Withheld{
        "the figures the trace records at its OOM contradict each other (diagnosis `inconsistent`), "
        "so neither the capacity nor the replays can be trusted",
        "give the device's memory with --capacity SIZE, or a trace whose figures agree"};
  if (!s.none && recorded_backend_async(m))
    s.none = Withheld{
        "the program ran PyTorch's cudaMallocAsync backend (backend:cudaMallocAsync), and the replays "
        "model its native caching allocator: no setting's verdict would be about this program",
        "none for this backend"};
  if (!s.none && full && full->compared > 0 && full->matching * 10 < full->compared * 9)
    s.none = Withheld{fmt::format("the --full trace is not the same program or input: only its first {} of the {} "
                                  "allocations before the failure are the trace's",
                                  full->matching, full->compared),
                      "give a complete trace of the same program with the same input (a run without the cap)"};
  if (full) {
    if (full->ooms > 0 || full->incomplete)
      s.partial = Withheld{
          fmt::format("the --full trace is not a complete run ({}): the replays cover only what it recorded",
                      full->ooms > 0 ? fmt::format("it records {} OOM{}", full->ooms, full->ooms == 1 ? "" : "s")
                                     : std::string("it ends abruptly")),
          "give a trace of a run that finished (without the cap, or on a larger device)"};
  } else if (ends_at_failure) {
    s.partial = Withheld{
        "the trace ends at its OOM (the program died of it): a setting that gets past the failure may still run out "
        "later in the run, which was never recorded",
        "give a complete trace of the same program (a run without the cap, or on a larger device) with --full TRACE, "
        "or run the settings on the real program with `vramtrace tune`"};
  } else if (m.incomplete) {
    s.partial = Withheld{
        fmt::format("the run did not finish ({}): the replays cover it up to its last event", m.incomplete_reason),
        "record a run that finishes, or run the settings on the real program with `vramtrace tune`"};
  }
  return s;
}

std::optional<Withheld> setting_support(const AllocatorSettings& s, const WhatIfCapacity& capacity) {
  using Kind = WhatIfCapacity::Kind;
  const bool capped = s.per_process_memory_fraction < 1.0 || s.limit_bytes != 0;
  const bool device = capacity.kind == Kind::given || capacity.kind == Kind::device_total;
  const std::string total = capacity.device_total_bytes ? std::to_string(capacity.device_total_bytes) : "SIZE";
  if (capped && !device)
    return Withheld{
        fmt::format("the capacity is {} ({}), not the device the program saw, and a memory fraction or limit caps "
                    "that device: replayed here it would be a cap of a cap",
                    size(capacity.bytes), capacity.source),
        fmt::format("give the device's memory with --capacity {}", total)};
  if (s.garbage_collection_threshold > 0.0) {
    if (s.limit_bytes != 0 && s.per_process_memory_fraction >= 1.0)
      return Withheld{
          "garbage_collection_threshold acts in PyTorch only under its memory fraction "
          "(set_per_process_memory_fraction), and `limit` is a cap PyTorch does not see: the replay would collect "
          "cached blocks where PyTorch does not",
          "replay the fraction the program sets: --capacity DEVICE --conf "
          "per_process_memory_fraction:F,garbage_collection_threshold:T"};
    if (s.per_process_memory_fraction >= 1.0 && capacity.pytorch_fraction_cap)
      return Withheld{
          fmt::format(
              "the program ran under PyTorch's memory fraction ({}), against which garbage_collection_threshold "
              "collects; replayed on that cap as a device, without the fraction, the replay would not collect "
              "where PyTorch did",
              size(capacity.bytes)),
          capacity.device_total_bytes
              ? fmt::format("replay on the device with its fraction: --capacity {} --conf "
                            "per_process_memory_fraction:{:.4f},garbage_collection_threshold:{}",
                            capacity.device_total_bytes,
                            static_cast<double>(capacity.bytes) / static_cast<double>(capacity.device_total_bytes),
                            s.garbage_collection_threshold)
              : std::string("replay on the device with its fraction: --capacity DEVICE --conf "
                            "per_process_memory_fraction:F,garbage_collection_threshold:T")};
  }
  return std::nullopt;
}

std::optional<Withheld> reproduction_support(std::uint64_t recorded_ooms, std::uint64_t with_entries,
                                             std::optional<std::uint64_t> own_ooms, std::uint64_t own_spare,
                                             const WhatIfCapacity& capacity, const std::string& trace_path) {
  if (recorded_ooms == 0 || !own_ooms || *own_ooms > 0) return std::nullopt;
  if (with_entries == 0)
    return Withheld{
        fmt::format("the trace records its OOM without an entry in the history (only a message, the statistics or "
                    "PyTorch's OOM observer say it): the history ends before the failed request, so the replay of the "
                    "trace's own settings runs without an OOM ({} spare) and would judge a run that did not die",
                    size(own_spare)),
        "give a trace whose history holds the OOM (PyTorch's history kept to the failure, the shim's trace with "
        "--level device of a program without a caching allocator), or a complete run with --full TRACE"};
  return Withheld{
      fmt::format("the replay of the trace's own settings runs without an OOM ({} spare) on {} ({}), although the "
                  "trace recorded one: that is more than the program could use (a cap the trace does not record, "
                  "memory outside the allocator), or the trace misses allocations",
                  size(own_spare), size(capacity.bytes), capacity.source),
      fmt::format("give the real limit with --capacity SIZE (a size or a card name), e.g. `vramtrace oom {} --capacity "
                  "SIZE`",
                  trace_path)};
}

}  // namespace vramtrace
