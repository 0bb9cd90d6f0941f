// Fuzz target: AllocatorSettings::parse (PYTORCH_CUDA_ALLOC_CONF syntax; VRAMTRACE_CONF in the
// shim, --conf in replay). The string comes from the user's environment inside their program, so
// no input may crash or hang it.
//
// Properties checked on every input:
//  - a rejected string leaves the output untouched and gives a non-empty message;
//  - an accepted string obeys the documented ranges (max_split_size_mb >= 20, fractions in range,
//    divisions powers of two);
//  - to_string() of an accepted setting parses again to the same policy (doubles to %g precision).
#include <cmath>
#include <string>

#include "fuzz_check.h"
#include "vramtrace/settings.h"

using namespace vramtrace;

namespace {

bool close(double a, double b) { return a == b || std::fabs(a - b) <= 1e-5 * std::fabs(a); }

void check_same_policy(const AllocatorSettings& a, const AllocatorSettings& b, const std::string& text) {
  FUZZ_CHECK(a.max_split_size_bytes == b.max_split_size_bytes, "max_split_size differs after round trip of '%s'",
             text.c_str());
  FUZZ_CHECK(a.max_non_split_rounding_bytes == b.max_non_split_rounding_bytes,
             "max_non_split_rounding differs after round trip of '%s'", text.c_str());
  FUZZ_CHECK(a.roundup_power2_divisions == b.roundup_power2_divisions,
             "roundup_power2_divisions differs after round trip of '%s'", text.c_str());
  FUZZ_CHECK(close(a.garbage_collection_threshold, b.garbage_collection_threshold),
             "garbage_collection_threshold differs after round trip of '%s'", text.c_str());
  FUZZ_CHECK(close(a.per_process_memory_fraction, b.per_process_memory_fraction),
             "per_process_memory_fraction differs after round trip of '%s'", text.c_str());
  FUZZ_CHECK(a.expandable_segments == b.expandable_segments, "expandable_segments differs: '%s'", text.c_str());
  FUZZ_CHECK(a.limit_bytes == b.limit_bytes, "limit differs after round trip of '%s'", text.c_str());
  FUZZ_CHECK(a.reuse == b.reuse, "reuse differs after round trip of '%s'", text.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto text = fuzz::as_text(data, size);
  AllocatorSettings s;
  s.text = "untouched";
  std::string error;
  if (!AllocatorSettings::parse(text, s, error)) {
    FUZZ_CHECK(!error.empty(), "rejected without a message");
    FUZZ_CHECK(s.text == "untouched" && s.max_split_size_bytes == AllocatorSettings{}.max_split_size_bytes,
               "a rejected string changed the output");
    return 0;
  }
  const AllocatorSettings d;
  FUZZ_CHECK(s.max_split_size_bytes == d.max_split_size_bytes || s.max_split_size_bytes >= 20 * kMiB,
             "max_split_size below 20 MiB accepted");
  FUZZ_CHECK(s.max_non_split_rounding_bytes >= 20 * kMiB, "max_non_split_rounding below 20 MiB accepted");
  FUZZ_CHECK(s.garbage_collection_threshold >= 0.0 && s.garbage_collection_threshold < 1.0,
             "garbage_collection_threshold out of range");
  FUZZ_CHECK(s.per_process_memory_fraction > 0.0 && s.per_process_memory_fraction <= 1.0,
             "per_process_memory_fraction out of range");
  for (auto div : s.roundup_power2_divisions)
    FUZZ_CHECK(div == 0 || (div & (div - 1)) == 0, "roundup_power2_divisions %u is not a power of two", div);
  // Every size class must get a well-defined division count.
  for (int shift = 0; shift < 64; ++shift) (void)s.divisions_for(std::uint64_t{1} << shift);

  const std::string canonical = s.to_string();
  AllocatorSettings again;
  std::string error2;
  FUZZ_CHECK(AllocatorSettings::parse(canonical, again, error2), "canonical text '%s' does not parse: %s",
             canonical.c_str(), error2.c_str());
  check_same_policy(s, again, canonical);
  FUZZ_CHECK(again.to_string() == canonical, "to_string is not stable: '%s' then '%s'", canonical.c_str(),
             again.to_string().c_str());
  return 0;
}
