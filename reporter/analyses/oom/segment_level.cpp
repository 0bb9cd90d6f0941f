#include "analyses/oom/segment_level.h"

#include <fmt/format.h>

#include "vramtrace/units.h"

namespace vramtrace {

Diagnosis diagnose_below_allocator(OomFigures& f, std::uint64_t framework_segments_bytes,
                                   const AllocationLevelFinding& level, const std::string& how) {
  f.reserved = framework_segments_bytes;
  f.allocated.reset();
  f.reserved_unallocated.reset();
  f.largest_free_block.reset();
  f.inactive_split.reset();
  Diagnosis d = diagnose(f);
  if (d.code != DiagnosisCode::fragmentation && d.code != DiagnosisCode::capacity &&
      d.code != DiagnosisCode::undetermined)
    return d;
  // Whatever the rules could conclude without the cache figures, the split between scattered
  // free memory and too little of it is in the framework's cache, which this trace does not see.
  d.code = DiagnosisCode::undetermined;
  d.headline = fmt::format(
      "{} held {} in segments when it asked for {} more; whether it held free memory inside them (fragmentation) "
      "or not (capacity) is not in this trace of its segments",
      level.allocator, format_bytes(static_cast<std::int64_t>(framework_segments_bytes), ByteStyle::pytorch),
      f.device_request ? format_bytes(static_cast<std::int64_t>(*f.device_request), ByteStyle::pytorch)
                       : std::string("a new segment"));
  d.reasons.push_back(
      fmt::format("the trace is {}'s segments ({}), not the requests it served", level.allocator, level.evidence));
  d.next_step = how.empty() ? std::string("Record the requests the allocator served to tell the two apart.")
                            : "To tell fragmentation from capacity, " + how + ".";
  return d;
}

}  // namespace vramtrace
