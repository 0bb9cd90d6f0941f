#include "analyses/oom/oom_cases.h"

#include <fmt/format.h>

#include "analyses/oom/explain.h"
#include "analyses/oom/segment_level.h"
#include "analyses/oom/verdict_support.h"
#include "vramtrace/size_rules.h"

namespace vramtrace {

namespace {
using u64 = std::uint64_t;
using i64 = std::int64_t;

OomFigures figures_for(const TraceModel& m, std::int32_t device, const StateAt& st, std::optional<u64> request,
                       std::optional<u64> device_free) {
  OomFigures f;
  if (request) {
    f.request = *request;
    f.device_request = allocation_size(*request);
  }
  if (u64 total = m.header.total_bytes_of(device)) f.device_total = total;
  f.device_free = device_free;
  f.allocated = static_cast<u64>(st.stats.allocated_bytes[kStatAll].current);
  f.reserved = static_cast<u64>(st.stats.reserved_bytes[kStatAll].current);
  // Blocks pending on another stream are neither allocated nor free: count only inactive bytes.
  // Blocks in no known segment are active but not reserved (StateAt::outside_segments_bytes).
  i64 cached_free = st.stats.reserved_bytes[kStatAll].current -
                    (st.stats.active_bytes[kStatAll].current - static_cast<i64>(st.outside_segments_bytes));
  f.reserved_unallocated = static_cast<u64>(cached_free > 0 ? cached_free : 0);
  f.largest_free_block = st.largest_free_block;
  f.inactive_split = static_cast<u64>(st.stats.inactive_split_bytes[kStatAll].current);
  return f;
}

// What is known of an OOM without an entry (Note [one OOM per failed request]): the message's
// figures and their diagnosis (as `vramtrace explain` reads it), else the figures PyTorch's OOM
// observer recorded with its statistics at the failure; nothing at all when only num_ooms says it.
OomCase case_without_entry(const TraceModel& m, const DeviceModel& d, const OomWithoutEntry& w) {
  OomCase c;
  c.device = d.device;
  c.without_entry = &w;
  c.event_index = d.at_end.event_index;
  if (!w.recorded) {
    c.diagnosis.headline = "the trace records this OOM only in its statistics (num_ooms): no figure of it is known";
    return c;
  }
  const RecordedOom& r = *w.recorded;
  if (r.time_ns != 0) c.time_ns = r.time_ns - d.first_time_ns;
  if (!r.message.empty()) {
    const Explanation e = explain_message(r.message);
    c.figures = figures_from_message(e.message);
    c.diagnosis = e.diagnosis;
    return c;
  }
  auto stat = [&](std::string_view key) -> std::optional<u64> {
    for (const auto& [k, v] : r.stats)
      if (k == key && v >= 0) return static_cast<u64>(v);
    return std::nullopt;
  };
  c.figures.request = r.alloc_bytes;
  c.figures.device_free = r.device_free_bytes;
  if (u64 total = m.header.total_bytes_of(d.device)) c.figures.device_total = total;
  // The observer's third figure is the device's total, or the cap of a memory fraction below it.
  if (r.allowed_bytes && (!c.figures.device_total || *r.allowed_bytes < *c.figures.device_total))
    c.figures.allowed = r.allowed_bytes;
  if (!c.figures.device_total) c.figures.device_total = r.allowed_bytes;
  c.figures.allocated = stat("allocated_bytes.all.current");
  c.figures.reserved = stat("reserved_bytes.all.current");
  c.figures.inactive_split = stat("inactive_split_bytes.all.current");
  if (c.figures.allocated && c.figures.reserved && *c.figures.reserved >= *c.figures.allocated)
    c.figures.reserved_unallocated = *c.figures.reserved - *c.figures.allocated;
  if (auto retries = stat("num_alloc_retries")) c.retries = retries;
  c.diagnosis = diagnose(c.figures);
  return c;
}

// Every limit known on `device` besides its total: the trace's smallest cap, then --capacity
// when it is smaller. The diagnosis compares reserved memory with it (cap_headroom).
void apply_limits(const TraceModel& m, std::int32_t device, const OomOptions& options, OomFigures& f) {
  if (const TraceHeader::Cap* cap = m.header.cap_of(device)) {
    f.allowed = cap->bytes;
    f.allowed_name = cap->what;
  }
  if (options.capacity_bytes && (!f.allowed || *options.capacity_bytes < *f.allowed)) {
    f.allowed = *options.capacity_bytes;
    f.allowed_name = "--capacity";
  }
}

}  // namespace

std::vector<OomCase> oom_cases(const TraceModel& m, const OomOptions& options) {
  std::vector<OomCase> out;
  const bool counts_retries = m.header.format == "vramtrace";  // Note [one OOM per failed request]
  // Note [an OOM seen from below the allocator]: a trace of a framework allocator's segments.
  const bool below = m.level.level == AllocationLevel::allocator_segments;
  const std::string how = below ? requests_level_advice(m) : std::string();
  for (const auto& d : m.devices) {
    std::uint64_t retried = 0;  // failed allocations the program tried again, so far
    for (const auto& o : d.ooms) {
      if (o.fate != OomFate::oom) {
        ++retried;
        continue;
      }
      OomCase c;
      c.device = d.device;
      c.event_index = o.event_index;
      c.time_ns = o.time_ns - d.first_time_ns;
      c.figures = figures_for(m, d.device, o.state, o.request_bytes, o.device_free_bytes);
      c.attempts = o.attempts;
      apply_limits(m, d.device, options, c.figures);
      if (counts_retries) c.retries = retried;
      c.allocator_retries = o.retries;
      c.request_stack = o.stack;
      c.diagnosis =
          below ? diagnose_below_allocator(c.figures, static_cast<u64>(o.state.stats.allocated_bytes[kStatAll].current),
                                           m.level, how)
                : diagnose(c.figures);
      c.state = &o.state;
      out.push_back(std::move(c));
    }
    for (const auto& w : d.oom_count.without_entry) out.push_back(case_without_entry(m, d, w));
    if (m.incomplete && (d.ooms.empty() || d.ooms.back().event_index + 1 < d.at_end.event_index + 1)) {
      OomCase c;
      c.device = d.device;
      c.last_state = true;
      c.event_index = d.at_end.event_index;
      c.time_ns = d.at_end.time_ns - d.first_time_ns;
      c.figures = figures_for(m, d.device, d.at_end, std::nullopt, std::nullopt);
      apply_limits(m, d.device, options, c.figures);
      c.diagnosis =
          below ? diagnose_below_allocator(
                      c.figures, static_cast<u64>(d.at_end.stats.allocated_bytes[kStatAll].current), m.level, how)
                : diagnose(c.figures);
      c.diagnosis.headline = "the trace ends abruptly; the request that failed (if any) is not in it";
      c.state = &d.at_end;
      out.push_back(std::move(c));
    }
  }
  return out;
}

std::vector<RetriedFailure> retried_failures(const TraceModel& m) {
  std::vector<RetriedFailure> out;
  for (const auto& d : m.devices)
    for (const auto& o : d.ooms)
      if (o.fate != OomFate::oom)
        out.push_back({d.device, o.event_index, o.time_ns - d.first_time_ns, o.request_bytes, o.fate});
  return out;
}

}  // namespace vramtrace
