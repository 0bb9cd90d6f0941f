// Settings in PYTORCH_CUDA_ALLOC_CONF syntax, sizes and size formatting.
#include "test_support.h"

#include "vramtrace/device_limits.h"
#include "vramtrace/gpu_cards.h"

using namespace vramtrace;
using namespace vramtrace::test;

namespace {
std::string parse_error(const std::string& conf) {
  AllocatorSettings s;
  s.max_split_size_bytes = 42;  // must stay untouched on error
  std::string error;
  CHECK_FALSE(AllocatorSettings::parse(conf, s, error));
  CHECK(s.max_split_size_bytes == 42);
  return error;
}
}  // namespace

TEST_CASE("settings parse PyTorch's keys") {
  auto s = settings_from(" max_split_size_mb:128 , expandable_segments:True,garbage_collection_threshold:0.6");
  CHECK(s.max_split_size_bytes == 128 * kMiB);
  CHECK(s.expandable_segments);
  CHECK(s.garbage_collection_threshold == Approx(0.6));
  CHECK(s.to_string() == "max_split_size_mb:128,garbage_collection_threshold:0.6,expandable_segments:True");

  auto d = settings_from("");
  CHECK(d.max_split_size_bytes == std::numeric_limits<std::uint64_t>::max());
  CHECK(d.max_non_split_rounding_bytes == 20 * kMiB);
  CHECK(d.to_string().empty());
  CHECK(settings_from("max_split_size_mb:20").max_split_size_bytes == 20 * kMiB);
  CHECK(settings_from("backend:native,release_lock_on_cudamalloc:True,pinned_num_register_threads:8")
            .to_string()
            .empty());
  CHECK(settings_from("limit:14.58GiB").limit_bytes == static_cast<std::uint64_t>(14.58 * kGiB));
  CHECK(settings_from("reuse:stream_ordered").reuse == ReusePolicy::stream_ordered);
  CHECK(settings_from("reuse:device_sync").reuse == ReusePolicy::device_sync);
  CHECK(settings_from("reuse:device_sync").to_string().find("reuse:device_sync") != std::string::npos);
  CHECK(settings_from("per_process_memory_fraction:0.5").per_process_memory_fraction == Approx(0.5));
}

TEST_CASE("roundup_power2_divisions lists follow PyTorch's AllocatorConfigTest") {
  auto s = settings_from("roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1]");
  CHECK(s.divisions_for(32 * kMiB) == 8);  // below the first key: the first key's value
  CHECK(s.divisions_for(64 * kMiB) == 8);
  CHECK(s.divisions_for(128 * kMiB) == 2);
  CHECK(s.divisions_for(256 * kMiB) == 4);
  CHECK(s.divisions_for(512 * kMiB) == 2);
  CHECK(s.divisions_for(1024 * kMiB) == 4);
  CHECK(s.divisions_for(2048 * kMiB) == 1);
  CHECK(s.divisions_for(64 * kGiB) == 1);
  auto t = settings_from("roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]");
  CHECK(t.divisions_for(1024 * kMiB) == 0);  // not mentioned
  CHECK(t.divisions_for(2048 * kMiB) == 8);
  CHECK(t.divisions_for(4096 * kMiB) == 2);
  CHECK(settings_from("roundup_power2_divisions:4").divisions_for(kGiB) == 4);
}

TEST_CASE("bad settings are refused with a message naming the key and what it accepts") {
  CHECK_THAT(parse_error("max_split_size_mb:10"), Catch::Contains("max_split_size_mb") && Catch::Contains(">= 20"));
  CHECK_THAT(parse_error("max_split_size_mb:abc"), Catch::Contains("max_split_size_mb"));
  CHECK_THAT(parse_error("expandable_segments:true"), Catch::Contains("True or False"));
  CHECK_THAT(parse_error("garbage_collection_threshold:1.5"), Catch::Contains("between 0 and 1"));
  CHECK_THAT(parse_error("roundup_power2_divisions:3"), Catch::Contains("power of two"));
  CHECK_THAT(parse_error("roundup_power2_divisions:[100:4]"), Catch::Contains("power of two"));
  CHECK_THAT(parse_error("roundup_power2_divisions:[64:4"), Catch::Contains("]"));
  CHECK_THAT(parse_error("no_such_key:1"),
             Catch::Contains("unknown setting 'no_such_key'") && Catch::Contains("max_split_size_mb"));
  CHECK_THAT(parse_error("max_split_size_mb"), Catch::Contains("KEY:VALUE"));
  CHECK_THAT(parse_error("backend:cudaMallocAsync"), Catch::Contains("native"));
  CHECK_THAT(parse_error("limit:lots"), Catch::Contains("limit"));
  CHECK_THAT(parse_error("reuse:sometimes"), Catch::Contains("lazy_sync"));
}

TEST_CASE("sizes parse with binary and decimal units") {
  auto size = [](const std::string& text) {
    std::uint64_t v = 0;
    std::string error;
    INFO(text << ": " << error);
    REQUIRE(parse_size(text, v, error));
    return v;
  };
  CHECK(size("1048576") == 1048576);
  CHECK(size("512MiB") == 512 * kMiB);
  CHECK(size("16GB") == 16000000000ull);
  CHECK(size("14.58GiB") == static_cast<std::uint64_t>(14.58 * kGiB));
  CHECK(size("1.5 kib") == 1536);
  CHECK(size("2T") == 2 * 1024 * kGiB);
  for (std::string bad : {"", "GiB", "-1", "1.2.3GiB", "12 parsecs", "1.5", "99999999999EiB", "2000000TiB"}) {
    std::uint64_t v = 0;
    std::string error;
    INFO(bad);
    CHECK_FALSE(parse_size(bad, v, error));
    CHECK_FALSE(error.empty());
  }
}

TEST_CASE("sizes format as PyTorch's OOM message does") {
  CHECK(format_size(512) == "512 bytes");
  CHECK(format_size(1024) == "1024 bytes");
  CHECK(format_size(1536) == "1.50 KiB");
  CHECK(format_size(kMiB) == "1024.00 KiB");
  CHECK(format_size(20 * kMiB) == "20.00 MiB");
  CHECK(format_size(static_cast<std::uint64_t>(14.58 * kGiB)) == "14.58 GiB");
}

TEST_CASE("recorded settings are read item by item with parse's rules") {
  std::vector<RejectedSetting> rejected;
  const AllocatorSettings s = AllocatorSettings::parse_recorded(
      "backend:cudaMallocAsync, max_split_size_mb:128, future_key:1, roundup_power2_divisions:3, expandable_segments",
      &rejected);
  CHECK(s.max_split_size_bytes == 128 * kMiB);
  CHECK(s.roundup_power2_divisions == AllocatorSettings{}.roundup_power2_divisions);
  REQUIRE(rejected.size() == 4);
  CHECK(rejected[0].key == "backend");
  CHECK(rejected[1].key == "future_key");
  CHECK(rejected[2].key == "roundup_power2_divisions");
  CHECK(rejected[2].value == "3");
  CHECK_THAT(rejected[2].error, Catch::Contains("power of two"));
  CHECK(rejected[3].key == "expandable_segments");
  CHECK_FALSE(rejected[3].has_value);
  // A later bad item leaves the earlier good one of the same key in force.
  CHECK(AllocatorSettings::parse_recorded("limit:1GiB,limit:0").limit_bytes == kGiB);
  CHECK(AllocatorSettings::parse_recorded("roundup_power2_divisions:[64:8,>:2]").divisions_for(kGiB) == 2);
}

TEST_CASE("the limit setting takes card names, alone and per device") {
  CHECK(settings_from("limit:T4").limit_bytes == cli::gpu_card_bytes("T4"));
  AllocatorSettings s;
  DeviceLimits limits;
  std::string error;
  REQUIRE(parse_settings_with_limits("expandable_segments:True, limit:[0:A100-40GB,*:16GiB]", s, limits, error));
  CHECK(s.expandable_segments);
  CHECK(s.limit_bytes == 0);  // the cap is the shim's, per device
  CHECK(limits.for_device(0) == cli::gpu_card_bytes("A100-40GB"));
  CHECK(limits.for_device(3) == 16 * kGiB);
  // Errors of either half; the outputs stay as they were.
  limits = DeviceLimits{};
  s.max_split_size_bytes = 42;
  CHECK_FALSE(parse_settings_with_limits("limit:[0:1GiB", s, limits, error));
  CHECK_THAT(error, Catch::Contains("missing ']'"));
  CHECK_FALSE(parse_settings_with_limits("limit:1GiB,max_split_size_mb:128,nope:1", s, limits, error));
  CHECK_THAT(error, Catch::Contains("unknown setting 'nope'"));
  CHECK(s.max_split_size_bytes == 42);
  CHECK_FALSE(limits.any());
  CHECK_FALSE(parse_settings_with_limits("limit:[0:1GiB *:2GiB]", s, limits, error));
  CHECK_THAT(error, Catch::Contains("a ',' missing between list items?"));
}
