// The one size grammar (card names included) and the one byte formatter (vramtrace/units.h).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

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
  CHECK(size_of("tesla t4") == cli::gpu_card_bytes("T4"));
  CHECK(size_of("a100-40gb") == cli::gpu_card_bytes("A100-40GB"));
  CHECK(size_of("A100 80GB") == cli::gpu_card_bytes("A100-80GB"));
  CHECK(size_of("RTX4090") == cli::gpu_card_bytes("RTX4090"));
  CHECK(size_of("GeForce RTX 3090") == cli::gpu_card_bytes("RTX3090"));
  CHECK(size_of("3090") == 3090);  // a number first: the card is RTX3090
  CHECK(size_of("4090") == 4090);
  CHECK(size_names_card("T4"));
  CHECK(size_names_card("v100 16gb"));
  CHECK_FALSE(size_names_card("v100"));  // 16 or 32 GB: neither (see the suggestions below)
  CHECK_FALSE(size_names_card("3090"));
  CHECK_FALSE(size_names_card("16GB"));
  CHECK_FALSE(size_names_card("T5"));
  CHECK_FALSE(size_names_card(""));
  for (const auto& c : cli::kGpuCards) {
    INFO(c.name);
    CHECK(size_of(c.name) == cli::gpu_card_bytes(c.name));
    // Each figure is what its source printed (docs/configuration.md, "Card names").
    CHECK(format_size(c.bytes) == c.printed);
  }
  // Budgets take them too.
  CHECK(size_of("L4", kBudget) == cli::gpu_card_bytes("L4"));
}

TEST_CASE("units: card figures are PyTorch's total_memory on the card", "[units]") {
  // torch.cuda.get_device_properties(0).total_memory on an H200 (driver 580), as every trace in
  // tests/data/torch-h200 records it ("total"); nvidia-smi's 143771 MiB (140.40 GiB) is more.
  CHECK(size_of("H200") == 150109880320ull);
  // deviceQuery's "Total amount of global memory" (= totalGlobalMem) on these cards.
  CHECK(size_of("V100-16GB") == 16945512448ull);
  CHECK(size_of("A10") == 23609475072ull);
  CHECK(size_of("A100-40GB") == 42405855232ull);
}

TEST_CASE("units: an unknown card is refused with the nearest names and every name", "[units]") {
  const std::string all = "known cards: " + cli::gpu_card_names();
  struct Case {
    const char* text;
    const char* near;  // "" when no name is near
  };
  for (const Case& c : std::vector<Case>{
           {"H100", "did you mean H100-80GB or H100-NVL? "},  // ambiguous: every card it begins
           {"a100", "did you mean A100-40GB or A100-80GB? "},
           {"V100", "did you mean V100-16GB or V100-32GB? "},
           {"RTX", "did you mean RTX3090, RTX4090 or RTX5090? "},
           {"A100-80GB-SXM9", "did you mean A100-80GB? "},  // the card it begins with
           {"T5", "did you mean T4? "},                     // typos: the nearest
           {"RTX4080", "did you mean RTX4090? "},
           {"A10-24GB", "did you mean A10? "},
           {"lots", ""},
           {"GiB", ""},
       }) {
    INFO(c.text);
    const std::string error = size_error(c.text);
    CHECK_THAT(error, Catch::StartsWith("'" + std::string(c.text) + "' is neither a size (such as "));
    CHECK_THAT(error, Catch::EndsWith("nor a known card; " + std::string(c.near) + all));
  }
  CHECK(cli::gpu_card_suggestions("T4").empty());  // a known name needs none
  CHECK(cli::gpu_card_suggestions("").empty());
}

TEST_CASE("units: how a number size is spelled", "[units]") {
  const auto gb = size_spelling(" 16 GB");
  REQUIRE(gb);
  CHECK(gb->number == "16");
  CHECK(gb->unit == "GB");
  CHECK(gb->decimal_exponent == 9);
  CHECK(size_spelling("1.5kb")->decimal_exponent == 3);
  CHECK(size_spelling("24 MB")->decimal_exponent == 6);
  CHECK(size_spelling("2TB")->decimal_exponent == 12);
  for (const char* binary : {"16GiB", "16G", "512m", "1048576", "3B"}) {
    INFO(binary);
    REQUIRE(size_spelling(binary));
    CHECK(size_spelling(binary)->decimal_exponent == 0);
  }
  CHECK(size_spelling("3090")->unit.empty());
  CHECK(size_spelling("3090")->number == "3090");
  CHECK_FALSE(size_spelling("T4"));  // a card, not a number
  CHECK_FALSE(size_spelling("12 parsecs"));
  CHECK_FALSE(size_spelling(""));
}

TEST_CASE("units: what is refused, and the messages say why", "[units]") {
  CHECK(size_error("") == "empty size");
  CHECK_THAT(size_error("lots"), Catch::Contains("is neither a size") && Catch::Contains("known card"));
  CHECK_THAT(size_error("T5"), Catch::Contains("is neither a size"));
  CHECK_THAT(size_error("GiB"), Catch::Contains("is neither a size"));
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

TEST_CASE("units: a card as PyTorch and nvidia-smi name it", "[units][cards]") {
  // torch.cuda.get_device_name() on the GPU machines and in public logs.
  const std::vector<std::pair<const char*, const char*>> names = {{"NVIDIA H100 80GB HBM3", "H100-80GB"},
                                                                  {"NVIDIA H200", "H200"},
                                                                  {"NVIDIA A100-SXM4-40GB", "A100-40GB"},
                                                                  {"NVIDIA A100-SXM4-80GB", "A100-80GB"},
                                                                  {"NVIDIA A10G", "A10G"},
                                                                  {"NVIDIA GeForce RTX 4090", "RTX4090"},
                                                                  {"Tesla T4", "T4"},
                                                                  {"NVIDIA H100 NVL", "H100-NVL"},
                                                                  {"NVIDIA L40", "L40"}};
  for (const auto& [printed, card] : names) {
    INFO(printed);
    std::uint64_t bytes = 0;
    std::string err;
    REQUIRE(parse_size(printed, bytes, err));
    CHECK(bytes == cli::gpu_card_bytes(card));
  }
  // "NVIDIA" alone names nothing.
  std::uint64_t bytes = 0;
  std::string err;
  CHECK_FALSE(parse_size("NVIDIA", bytes, err));
}
