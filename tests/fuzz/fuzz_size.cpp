// Fuzz target: parse_size ("14.58GiB", "16GB", "512MiB", "1048576"), used by --capacity, the
// `limit` setting and every size a user types; and format_size over what it accepts.
//
// Properties checked on every input:
//  - a rejected text gives a non-empty message and leaves the output untouched;
//  - an accepted size is at most 2^60 bytes (the documented ceiling);
//  - the decimal digits of an accepted size parse back to the same number of bytes;
//  - format_size names a unit, and what it prints (two decimals of KiB/MiB/GiB) parses back to
//    within 0.6% of the size: the two functions agree on units.
#include <string>

#include "fuzz_check.h"
#include "vramtrace/settings.h"

using namespace vramtrace;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto text = fuzz::as_text(data, size);
  std::uint64_t bytes = 12345;
  std::string error;
  if (!parse_size(text, bytes, error)) {
    FUZZ_CHECK(!error.empty(), "rejected without a message");
    FUZZ_CHECK(bytes == 12345, "a rejected size changed the output");
    return 0;
  }
  FUZZ_CHECK(bytes <= (std::uint64_t{1} << 60), "accepted %llu bytes, above 1 EiB",
             static_cast<unsigned long long>(bytes));
  const std::string digits = std::to_string(bytes);
  std::uint64_t again = 0;
  FUZZ_CHECK(parse_size(digits, again, error) && again == bytes, "'%s' does not parse back to %llu", digits.c_str(),
             static_cast<unsigned long long>(bytes));
  const std::string formatted = format_size(bytes);
  FUZZ_CHECK(formatted.find("bytes") != std::string::npos || formatted.find("iB") != std::string::npos,
             "format_size(%llu) = '%s' names no unit", static_cast<unsigned long long>(bytes), formatted.c_str());
  if (formatted.find("iB") != std::string::npos) {
    std::uint64_t printed = 0;
    FUZZ_CHECK(parse_size(formatted, printed, error), "format_size output '%s' does not parse: %s", formatted.c_str(),
               error.c_str());
    const double diff = printed > bytes ? double(printed - bytes) : double(bytes - printed);
    FUZZ_CHECK(diff <= 0.006 * double(bytes), "format_size(%llu) = '%s' reads back as %llu",
               static_cast<unsigned long long>(bytes), formatted.c_str(), static_cast<unsigned long long>(printed));
  }
  return 0;
}
