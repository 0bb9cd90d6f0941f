// Note [one OOM per failed request] (oom_count.h): the grouping of a vramtrace trace's failed
// allocations into requests, and the count of one device from every source of its trace.
#include "model/oom_count.h"

#include <algorithm>

#include <fmt/format.h>

#include "vramtrace/event.h"

namespace vramtrace {

namespace {

// A recorded OOM and the entry PyTorch wrote for it: the observer runs right after the entry is
// recorded (c10/cuda/CUDACachingAllocator.cpp, malloc()), and the sidecar stamps the observer's
// call; a few seconds cover the allocator's cudaMemGetInfo and a busy host.
constexpr std::int64_t kEntryBeforeObserverNs = 5'000'000'000;
constexpr std::int64_t kEntryAfterObserverNs = 1'000'000'000;

std::optional<std::int64_t> stat_of(const std::vector<std::pair<std::string, std::int64_t>>& stats,
                                    std::string_view key) {
  for (const auto& [k, v] : stats)
    if (k == key) return v;
  return std::nullopt;
}

}  // namespace

const char* oom_fate_name(OomFate f) noexcept {
  switch (f) {
    case OomFate::oom:
      return "oom";
    case OomFate::repeated:
      return "repeated";
    case OomFate::survived:
      return "survived";
  }
  return "oom";
}

const char* retries_from_text(RetriesFrom f) noexcept {
  switch (f) {
    case RetriesFrom::unknown:
      return "";
    case RetriesFrom::oom_entries:
      return "the oom entries";
    case RetriesFrom::recorded:
      return "recorded by PyTorch";
    case RetriesFrom::recorded_at_oom:
      return "recorded by PyTorch at its last OOM";
  }
  return "";
}

void FailedRequestGrouper::settle(Open& o, bool succeeded, std::vector<OomOutcome>& outcomes) {
  const auto n = static_cast<std::uint32_t>(o.entries.size());
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint64_t at = o.entries[i];
    if (at >= outcomes.size()) outcomes.resize(at + 1);
    const bool last = i + 1 == n;
    outcomes[at] = {succeeded ? OomFate::survived : last ? OomFate::oom : OomFate::repeated, i + 1, n};
  }
  o.entries.clear();
}

void FailedRequestGrouper::add(const TraceRecord& r, std::uint64_t oom_index, std::vector<OomOutcome>& outcomes) {
  switch (r.action) {
    case Action::oom: {
      if (oom_index >= outcomes.size()) outcomes.resize(oom_index + 1);
      Open& o = open_[key(r.device, r.thread_id)];
      // Another request failed on this thread: the earlier one's error reached the program.
      if (!o.entries.empty() && (o.size != r.size || o.entry_point != r.entry_point)) settle(o, false, outcomes);
      o.size = r.size;
      o.entry_point = r.entry_point;
      o.entries.push_back(oom_index);
      return;
    }
    case Action::alloc:
    case Action::segment_alloc: {
      auto it = open_.find(key(r.device, r.thread_id));
      if (it == open_.end()) return;
      if (r.action == Action::segment_alloc) {
        // Note [no spurious OOM]: the exact request forwarded past the cache, as device memory.
        if (is_memory_kind(r.memory_kind, MemoryKind::device) && r.size == it->second.size) {
          settle(it->second, true, outcomes);
          open_.erase(it);
        }
        return;  // the allocator's own segments and other memory settle nothing
      }
      settle(it->second, r.size == it->second.size, outcomes);
      open_.erase(it);
      return;
    }
    default:
      return;  // frees (the program releasing its cache between attempts), marks, maps
  }
}

void FailedRequestGrouper::finish(std::int32_t device, std::vector<OomOutcome>& outcomes) {
  for (auto it = open_.begin(); it != open_.end();) {
    if (static_cast<std::int32_t>(it->first >> 32) == device) {
      settle(it->second, false, outcomes);
      it = open_.erase(it);
    } else {
      ++it;
    }
  }
}

OomCount reconcile_oom_count(const TraceHeader& header, std::int32_t device, const std::vector<OomOutcome>& outcomes,
                             const std::vector<std::int64_t>& entry_times_ns) {
  OomCount c;
  c.entries = outcomes.size();
  const auto* recorded_stats = header.recorded_stats_of(device);
  // -1: not recorded (a plain integer: GCC 12 misreads an optional here as maybe uninitialised).
  const std::int64_t recorded_ooms = recorded_stats ? stat_of(*recorded_stats, "num_ooms").value_or(-1) : -1;

  if (header.format == "vramtrace") {
    for (const OomOutcome& o : outcomes) {
      if (o.fate == OomFate::oom) ++c.ooms;
      if (o.fate == OomFate::survived) ++c.survived;
      if (o.fate == OomFate::repeated) ++c.repeated;
    }
    c.retries = c.survived + c.repeated;
    c.retries_from = RetriesFrom::oom_entries;
    // The trailer's num_ooms is the traced allocator's failures: one entry each. More of them
    // than entries means lines were lost (dropped events, a damaged file).
    if (recorded_ooms > static_cast<std::int64_t>(c.entries))
      c.notes.push_back(fmt::format(
          "the trailer counts {} failed allocations but the trace holds {} oom entries: the count of OOMs is "
          "a lower bound",
          recorded_ooms, c.entries));
    return c;
  }

  // PyTorch's history: every entry is an OOM; the recorded ones without an entry are OOMs too.
  std::vector<const RecordedOom*> mine;
  for (const auto& o : header.recorded_ooms)
    if (o.device == device) mine.push_back(&o);
  std::vector<bool> used(entry_times_ns.size(), false);
  std::vector<const RecordedOom*> unmatched;
  for (const RecordedOom* o : mine) {
    std::optional<std::size_t> hit;
    if (o->time_ns != 0) {
      for (std::size_t i = 0; i < entry_times_ns.size() && !hit; ++i)
        if (!used[i] && entry_times_ns[i] >= o->time_ns - kEntryBeforeObserverNs &&
            entry_times_ns[i] <= o->time_ns + kEntryAfterObserverNs)
          hit = i;
    } else {
      // No time (a message): the last failure the history holds is the one that raised it.
      for (std::size_t i = entry_times_ns.size(); i-- > 0 && !hit;)
        if (!used[i]) hit = i;
    }
    if (hit)
      used[*hit] = true;
    else
      unmatched.push_back(o);
  }
  c.ooms = c.entries + unmatched.size();
  if (recorded_ooms > static_cast<std::int64_t>(c.ooms)) c.ooms = static_cast<std::uint64_t>(recorded_ooms);
  for (const RecordedOom* o : unmatched)
    c.without_entry.push_back(
        {o->message.empty() ? "PyTorch's OOM observer (the sidecar)" : "the message in the header", *o});
  while (c.entries + c.without_entry.size() < c.ooms)
    c.without_entry.push_back({"num_ooms in the recorded statistics", std::nullopt});

  // PyTorch's num_alloc_retries: at the end of the run, else at its last recorded OOM.
  if (auto r = recorded_stats ? stat_of(*recorded_stats, "num_alloc_retries") : std::nullopt; r && *r >= 0) {
    c.retries = static_cast<std::uint64_t>(*r);
    c.retries_from = RetriesFrom::recorded;
  } else {
    for (auto it = mine.rbegin(); it != mine.rend(); ++it)
      if (auto rr = stat_of((*it)->stats, "num_alloc_retries"); rr && *rr >= 0) {
        c.retries = static_cast<std::uint64_t>(*rr);
        c.retries_from = RetriesFrom::recorded_at_oom;
        break;
      }
  }
  return c;
}

}  // namespace vramtrace
