// The one size grammar (card names included) and the one byte formatter (vramtrace/units.h).
#include <catch2/catch.hpp>

#include <string>

#include "vramtrace/gpu_cards.h"
#include "vramtrace/types.h"
#include "vramtrace/units.h"

using namespace vramtrace;

namespace {
std::uint64_t size_of(const std::string& text, const SizeBounds& bounds = {}) {
  std::uint64_t v = 0;
  std::string error;
  INFO(text << ": " << error);
  REQUIRE(parse_size(text, v, error, bounds));
  return v;
}
std::string size_error(const std::string& text, const SizeBounds& bounds = {}) {
  std::uint64_t v = 7;
  std::string error;
  INFO(text);
  CHECK_FALSE(parse_size(text, v, error, bounds));
  CHECK(v == 7);  // untouched on a refusal
  CHECK_FALSE(error.empty());
  return error;
}
constexpr SizeBounds kBudget{(std::uint64_t{1} << 63) - 1, true, true};
}  // namespace

TEST_CASE("units: numbers with binary and decimal units, whitespace anywhere", "[units]") {
  CHECK(size_of("1048576") == 1048576);
  CHECK(size_of("512MiB") == 512 * kMiB);
  CHECK(size_of("512 m") == 512 * kMiB);
  CHECK(size_of("2T") == 2 * 1024 * kGiB);
  CHECK(size_of("16GB") == 16'000'000'000ull);
  CHECK(size_of("24 MB") == 24'000'000ull);
  CHECK(size_of("3B") == 3);
  CHECK(size_of(" 1 4 GiB ") == 14 * kGiB);
  CHECK(size_of("\t1.5\tKiB\n") == 1536);
  CHECK(size_of(".5GiB") == kGiB / 2);
  CHECK(size_of("14.58GiB") == static_cast<std::uint64_t>(14.58 * kGiB));
  CHECK(size_of("1048576TiB") == kMaxSizeBytes);  // the ceiling itself is accepted
}

TEST_CASE("units: card names are sizes, and numbers stay numbers", "[units]") {
  CHECK(size_of("T4") == cli::gpu_card_bytes("T4"));
  CHECK(size_of("a100-40gb") == cli::gpu_card_bytes("A100-40GB"));
  CHECK(size_of("A100 80GB") == cli::gpu_card_bytes("A100-80GB"));
  CHECK(size_of("RTX4090") == cli::gpu_card_bytes("RTX4090"));
  CHECK(size_of("H200") > 140 * kGiB);
  CHECK(size_of("3090") == 3090);  // a number first: the card is RTX3090
  CHECK(size_of("4090") == 4090);
  CHECK(size_names_card("T4"));
  CHECK(size_names_card("v100"));
  CHECK_FALSE(size_names_card("3090"));
  CHECK_FALSE(size_names_card("16GB"));
  CHECK_FALSE(size_names_card("T5"));
  CHECK_FALSE(size_names_card(""));
  for (const auto& c : cli::kGpuCards) {
    INFO(c.name);
    CHECK(size_of(c.name) == cli::gpu_card_bytes(c.name));
    CHECK(size_of(c.name) % (2 * kMiB) == 0);
  }
  // Budgets take them too.
  CHECK(size_of("L4", kBudget) == cli::gpu_card_bytes("L4"));
}

TEST_CASE("units: what is refused, and the messages say why", "[units]") {
  CHECK(size_error("") == "empty size");
  CHECK_THAT(size_error("lots"), Catch::Contains("is not a size") && Catch::Contains("card name"));
  CHECK_THAT(size_error("T5"), Catch::Contains("is not a size"));
  CHECK_THAT(size_error("GiB"), Catch::Contains("is not a size"));
  CHECK_THAT(size_error("-1GiB"), Catch::Contains("is not a size"));
  CHECK_THAT(size_error("1.2.3GiB"), Catch::Contains("is not a size"));
  CHECK_THAT(size_error("12 parsecs"), Catch::Contains("unknown unit 'parsecs'"));
  CHECK_THAT(size_error("12XB"), Catch::Contains("unknown unit 'xb'"));
  CHECK_THAT(size_error("1.5"), Catch::Contains("whole number"));
  CHECK_THAT(size_error("2000000TiB"), Catch::Contains("absurdly large (more than 1 EiB)"));
  CHECK_THAT(size_error("1152921504606846977"), Catch::Contains("absurdly large"));  // 2^60 + 1, exact
  CHECK_THAT(size_error("99999999999999999999999"), Catch::Contains("absurdly large"));
}

TEST_CASE("units: a caller's bounds change the range and the rounding, not the grammar", "[units]") {
  // Default (settings, capacities): fractions of a byte round down; budgets: to the nearest.
  CHECK(size_of("1.7KiB") == 1740);
  CHECK(size_of("1.7KiB", kBudget) == 1741);
  CHECK(size_of("1.5", kBudget) == 2);
  CHECK(size_of("2000000TiB", kBudget) == 2000000 * 1024 * kGiB);
  CHECK(size_of("9223372036854775807", kBudget) == 9223372036854775807ull);  // exact, 2^63 - 1
  CHECK_THAT(size_error("9223372036854775808", kBudget), Catch::Contains("absurdly large (more than 8 EiB)"));
  CHECK_THAT(size_error("99999999999 TiB", kBudget), Catch::Contains("absurdly large"));
  CHECK_THAT(size_error("1.5GiB", SizeBounds{kGiB}), Catch::Contains("larger than 1073741824 bytes"));
  CHECK(size_of("1GiB", SizeBounds{kGiB}) == kGiB);
}

TEST_CASE("units: PyTorch's format_size and the binary style", "[units]") {
  CHECK(format_bytes(512, ByteStyle::pytorch) == "512 bytes");
  CHECK(format_bytes(1024, ByteStyle::pytorch) == "1024 bytes");
  CHECK(format_bytes(1536, ByteStyle::pytorch) == "1.50 KiB");
  CHECK(format_bytes(static_cast<double>(kMiB), ByteStyle::pytorch) == "1024.00 KiB");
  CHECK(format_bytes(static_cast<double>(20 * kMiB), ByteStyle::pytorch) == "20.00 MiB");
  CHECK(format_bytes(static_cast<double>(kGiB), ByteStyle::pytorch) == "1024.00 MiB");
  CHECK(format_bytes(static_cast<double>(2048 * kGiB), ByteStyle::pytorch) == "2048.00 GiB");
  CHECK(format_bytes(-1536, ByteStyle::pytorch) == "-1.50 KiB");
  CHECK(format_bytes(-512, ByteStyle::pytorch) == "-512 bytes");
  CHECK(format_bytes(static_cast<double>(INT64_MIN), ByteStyle::pytorch) == "-8589934592.00 GiB");
  CHECK(format_size(static_cast<std::uint64_t>(14.58 * kGiB)) == "14.58 GiB");
  CHECK(format_size(0) == "0 bytes");

  CHECK(format_bytes(0, ByteStyle::binary) == "0 B");
  CHECK(format_bytes(512, ByteStyle::binary) == "512 B");
  CHECK(format_bytes(1023.6, ByteStyle::binary) == "1024 B");  // below 1 KiB: whole bytes
  CHECK(format_bytes(1024, ByteStyle::binary) == "1.00 KiB");
  CHECK(format_bytes(static_cast<double>(kMiB), ByteStyle::binary) == "1.00 MiB");
  CHECK(format_bytes(1.5 * kGiB, ByteStyle::binary) == "1.50 GiB");
  CHECK(format_bytes(3.0 * 1024 * kGiB, ByteStyle::binary) == "3.00 TiB");
  CHECK(format_bytes(5.0 * 1024 * 1024 * 1024 * kGiB, ByteStyle::binary) == "5120.00 PiB");
  CHECK(format_bytes(-2.5 * kMiB, ByteStyle::binary) == "-2.50 MiB");
  CHECK(format_bytes(1e300, ByteStyle::binary).size() > 280);  // never cut off
}

TEST_CASE("units: what format_size prints parses back", "[units]") {
  for (std::uint64_t b : {std::uint64_t{1536}, 20 * kMiB, 3 * kGiB + 12345, std::uint64_t{14} * kGiB}) {
    INFO(b);
    const std::uint64_t back = size_of(format_size(b));
    const double diff = back > b ? double(back - b) : double(b - back);
    CHECK(diff <= 0.006 * double(b));
  }
}
