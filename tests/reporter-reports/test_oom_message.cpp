// Reading OOM messages of every generation: each figure as printed and in bytes, nothing invented.
#include <catch2/catch.hpp>

#include <random>
#include <string>

#include "analyses/oom/oom_message.h"
#include "messages.h"

using namespace vramtrace;
namespace msg = vramtrace::test_messages;

namespace {
constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t GiB = 1ull << 30;
std::uint64_t approx(double v, std::uint64_t unit) {
  return static_cast<std::uint64_t>(v * static_cast<double>(unit) + 0.5);
}
}  // namespace

TEST_CASE("printed sizes", "[explain][parse]") {
  CHECK(parse_printed_size("26.39 MiB") == approx(26.39, MiB));
  CHECK(parse_printed_size("0 bytes") == 0u);
  CHECK(parse_printed_size("512 bytes") == 512u);
  CHECK(parse_printed_size("765.00MiB") == 765 * MiB);
  CHECK(parse_printed_size("1.54G") == approx(1.54, GiB));
  CHECK(parse_printed_size("802160640") == 802160640u);
  CHECK(parse_printed_size("1024.00 KiB") == MiB);
  CHECK_FALSE(parse_printed_size("lots").has_value());
  CHECK_FALSE(parse_printed_size("12 parsecs").has_value());
  CHECK_FALSE(parse_printed_size("").has_value());
}

TEST_CASE("M1: PyTorch <= 1.3 form, cached = reserved - allocated", "[explain][parse][M1]") {
  auto m = parse_oom_message(msg::kM1);
  CHECK(m.format == OomMessageFormat::pytorch_cached);
  REQUIRE(m.device);
  CHECK(*m.device == 0);
  CHECK(m.requested->bytes == 26 * MiB);
  CHECK(m.device_total->bytes == 1024 * MiB);
  CHECK(m.allocated->bytes == approx(435.61, MiB));
  CHECK(m.device_free->bytes == approx(24.17, MiB));
  CHECK(m.reserved_unallocated->bytes == approx(26.39, MiB));
  CHECK_FALSE(m.reserved.has_value());  // the old form never prints total reserved
  CHECK_FALSE(m.truncated);
}

TEST_CASE("C3: PyTorch 1.4-2.0 form, reserved in total", "[explain][parse][C3]") {
  auto m = parse_oom_message(msg::kC3);
  CHECK(m.format == OomMessageFormat::pytorch_reserved);
  CHECK(m.requested->bytes == 152 * MiB);
  CHECK(m.reserved->bytes == approx(30.70, GiB));
  CHECK(m.device_free->bytes == approx(6.12, MiB));
  CHECK_FALSE(m.reserved_unallocated.has_value());
  CHECK_FALSE(m.allowed.has_value());
}

TEST_CASE("1.4-2.0 form with an allowed cap and 0 bytes free", "[explain][parse]") {
  auto m = parse_oom_message(
      "RuntimeError: CUDA out of memory. Tried to allocate 72.00 MiB (GPU 1; 7.79 GiB total capacity; 3.53 GiB already "
      "allocated; 0 bytes free; 4.00 GiB allowed; 3.60 GiB reserved in total by PyTorch) If reserved memory is >> "
      "allocated memory try setting max_split_size_mb to avoid fragmentation.");
  CHECK(m.format == OomMessageFormat::pytorch_reserved);
  CHECK(*m.device == 1);
  CHECK(m.device_free->bytes == 0);
  CHECK(m.allowed->bytes == 4 * GiB);
  CHECK(m.reserved->bytes == approx(3.60, GiB));
  CHECK(m.max_split_hint);
}

TEST_CASE("M3: the H200 message under a cap, quoted and in full", "[explain][parse][M3]") {
  for (const char* text : {msg::kM3Quoted, msg::kM3Full}) {
    auto m = parse_oom_message(text);
    CHECK(m.format == OomMessageFormat::pytorch_sentence);
    CHECK(m.requested->bytes == 44 * MiB);
    CHECK(m.process_in_use->bytes == approx(15.31, GiB));
    CHECK(m.allowed->bytes == approx(14.58, GiB));
    CHECK(m.allocated->bytes == approx(14.56, GiB));
    CHECK(m.reserved_unallocated->bytes == approx(12.76, MiB));
    CHECK_FALSE(m.truncated);
  }
  auto q = parse_oom_message(msg::kM3Quoted);
  CHECK_FALSE(q.device_total.has_value());  // elided in the quote: not invented
  CHECK_FALSE(q.device_free.has_value());
  auto f = parse_oom_message(msg::kM3Full);
  CHECK(f.device_total->bytes == approx(140.40, GiB));
  CHECK(f.device_free->bytes == approx(124.21, GiB));
  CHECK(f.expandable_hint);
}

TEST_CASE("2.1 typo form with another process", "[explain][parse][M4]") {
  auto m = parse_oom_message(msg::kTypoWithProcesses);
  CHECK(m.format == OomMessageFormat::pytorch_sentence);
  CHECK(m.capacity_typo);
  CHECK(m.device_total->bytes == approx(23.65, GiB));
  REQUIRE(m.other_processes.size() == 1);
  CHECK(m.other_processes[0].pid == 4242);
  CHECK(m.other_processes[0].in_use.bytes == 12 * GiB);
  CHECK(m.process_in_use->bytes == approx(10.57, GiB));
}

TEST_CASE("M4: private pools clause", "[explain][parse][M4]") {
  auto m = parse_oom_message(msg::kPrivatePools);
  CHECK(m.private_pools->bytes == approx(5.50, GiB));
  CHECK(m.allocated->bytes == approx(36.90, GiB));
  CHECK(m.reserved_unallocated->bytes == approx(1.20, GiB));
}

TEST_CASE("M4: message cut after GPU", "[explain][parse][M4]") {
  auto m = parse_oom_message(msg::kM4Cut);
  CHECK(m.truncated);
  CHECK(m.requested->bytes == approx(3725.29, GiB));
  CHECK_FALSE(m.device_total.has_value());
  CHECK_FALSE(m.device_free.has_value());
  CHECK_FALSE(m.allocated.has_value());
  CHECK(m.truncated_after.find("GPU") != std::string::npos);
}

TEST_CASE("M4: cudaMallocAsync multi-line form", "[explain][parse][M4]") {
  auto m = parse_oom_message(msg::kAsync);
  CHECK(m.format == OomMessageFormat::pytorch_async);
  CHECK(*m.device == 0);
  CHECK(m.allocated->bytes == approx(21.52, GiB));
  CHECK(m.requested->bytes == approx(2.50, GiB));
  CHECK(m.device_total->bytes == approx(23.65, GiB));
  CHECK(m.device_free->bytes == approx(1.19, GiB));
  CHECK(m.allowed->bytes == approx(23.65, GiB));
}

TEST_CASE("M4: TensorFlow rounded request", "[explain][parse][M4][C12]") {
  auto m = parse_oom_message(msg::kTfRounded);
  CHECK(m.format == OomMessageFormat::tensorflow_bfc);
  CHECK(m.allocator_name == "GPU_0_bfc");
  CHECK(*m.device == 0);
  CHECK(m.requested->bytes == 765 * MiB);
  CHECK(m.rounded->bytes == 802160640u);
  CHECK_FALSE(m.bfc_limit.has_value());
}

TEST_CASE("TensorFlow BFC dump: Limit, InUse and free chunks", "[explain][parse][C12]") {
  auto c = parse_oom_message(msg::kTfCapacity);
  CHECK(c.format == OomMessageFormat::tensorflow_bfc);
  CHECK(c.bfc_limit->bytes == 503270604u);
  CHECK(c.bfc_in_use->bytes == 503061248u);
  CHECK(c.bfc_max_in_use->bytes == 503270400u);
  auto f = parse_oom_message(msg::kTfFragmented);
  CHECK(f.bfc_free_chunks == 2);
  CHECK(f.bfc_largest_free_chunk->bytes == 175600000u);
  CHECK(f.bfc_free_chunks_bytes->bytes == 97517568u + 175600000u);
  CHECK(f.rounded->bytes == 200000000u);
}

TEST_CASE("XLA / JAX forms", "[explain][parse]") {
  auto a = parse_oom_message(msg::kXla);
  CHECK(a.format == OomMessageFormat::xla);
  CHECK(a.requested->bytes == 17179869184ull);
  auto b = parse_oom_message(msg::kXlaAttempting);
  CHECK(b.format == OomMessageFormat::xla);
  CHECK(b.requested->bytes == approx(1.54, GiB));
  CHECK(b.device_free->bytes == approx(1.12, GiB));
  auto c = parse_oom_message(
      "XlaRuntimeError: RESOURCE_EXHAUSTED: Failed to allocate request for 4.00GiB (4294967296B) on device ordinal 0");
  CHECK(c.requested->bytes == 4294967296ull);
  CHECK(*c.device == 0);
}

TEST_CASE("more than 1EB and bare CUDA errors carry no figures", "[explain][parse]") {
  auto e = parse_oom_message(msg::kExabyte);
  CHECK(e.format == OomMessageFormat::pytorch_exabyte);
  CHECK(e.exceeds_1eb);
  CHECK_FALSE(e.requested.has_value());
  auto c =
      parse_oom_message("RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported");
  CHECK(c.format == OomMessageFormat::cuda_error);
  CHECK_FALSE(c.requested.has_value());
}

TEST_CASE("unknown text: a statement of what was found, no numbers", "[explain][parse]") {
  for (const char* text : {"", "   \n\t", "Segmentation fault (core dumped)", "Killed", "allocated 5 GiB"}) {
    auto m = parse_oom_message(text);
    CHECK(m.format == OomMessageFormat::unknown);
    CHECK_FALSE(m.requested.has_value());
    CHECK_FALSE(m.allocated.has_value());
    CHECK_FALSE(m.findings.empty());
  }
}

namespace {
/// Every figure read must appear in the text as printed: the reader never invents a number.
void check_figures_are_in_text(const OomMessage& m, const std::string& norm_text) {
  for (const auto* p : {&m.requested, &m.rounded, &m.device_total, &m.device_free, &m.allocated, &m.reserved,
                        &m.reserved_unallocated, &m.allowed, &m.process_in_use, &m.private_pools, &m.mps_other,
                        &m.bfc_limit, &m.bfc_in_use, &m.bfc_max_in_use, &m.bfc_region_bytes}) {
    if (*p) {
      INFO((*p)->text);
      CHECK(norm_text.find((*p)->text) != std::string::npos);
    }
  }
}
std::string squeeze(const std::string& s) {
  std::string o;
  bool sp = false;
  for (char c : s) {
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      sp = true;
      continue;
    }
    if (sp && !o.empty()) o.push_back(' ');
    sp = false;
    o.push_back(c);
  }
  return o;
}
}  // namespace

TEST_CASE("every prefix of every message is read without a crash or an invented number", "[explain][parse][M4]") {
  const char* all[] = {msg::kM1,
                       msg::kM2,
                       msg::kM3Quoted,
                       msg::kM3Full,
                       msg::kC2,
                       msg::kC3,
                       msg::kC4,
                       msg::kM4Cut,
                       msg::kTypoWithProcesses,
                       msg::kPrivatePools,
                       msg::kAsync,
                       msg::kTfRounded,
                       msg::kTfCapacity,
                       msg::kTfFragmented,
                       msg::kXla,
                       msg::kXlaAttempting,
                       msg::kExabyte,
                       msg::kMps,
                       msg::kThc,
                       msg::kHip};
  for (const char* text : all) {
    std::string full(text);
    for (std::size_t n = 0; n <= full.size(); ++n) {
      std::string prefix = full.substr(0, n);
      auto m = parse_oom_message(prefix);
      check_figures_are_in_text(m, squeeze(prefix));
    }
  }
}

TEST_CASE("MPS, PyTorch 0.4 and ROCm forms", "[explain][parse]") {
  auto mps = parse_oom_message(msg::kMps);
  CHECK(mps.format == OomMessageFormat::mps);
  CHECK(mps.platform == GpuPlatform::mps);
  CHECK(mps.mps_other->bytes == approx(2.55, MiB));
  CHECK(mps.allowed->text == "18.13 GB");
  CHECK_FALSE(mps.truncated);
  // Cut before "max allowed": cut off, not read as a CUDA message.
  auto cut = parse_oom_message("RuntimeError: MPS backend out of memory (MPS allocated: 18.04 GB, other allo");
  CHECK(cut.format == OomMessageFormat::mps);
  CHECK(cut.truncated);
  auto thc = parse_oom_message(msg::kThc);
  CHECK(thc.format == OomMessageFormat::pytorch_thc);
  CHECK_FALSE(thc.requested.has_value());
  auto hip = parse_oom_message(msg::kHip);
  CHECK(hip.format == OomMessageFormat::pytorch_sentence);
  CHECK(hip.platform == GpuPlatform::rocm);
  CHECK(hip.requested->bytes == approx(1.96, GiB));
  CHECK(parse_oom_message("RuntimeError: HIP error: out of memory").format == OomMessageFormat::cuda_error);
  CHECK(parse_oom_message("RuntimeError: HIP error: out of memory").platform == GpuPlatform::rocm);
}

TEST_CASE("several messages: each piece is one message, and no figure is shared", "[explain][parse]") {
  const std::string log = std::string(msg::kC3) + "\nthen\n" + msg::kM2 + "\nand\n" + msg::kMps;
  auto all = parse_oom_messages(log);
  REQUIRE(all.size() == 3);
  CHECK(all[0].format == OomMessageFormat::pytorch_reserved);
  CHECK(all[0].reserved.has_value());
  CHECK(all[1].format == OomMessageFormat::pytorch_cached);
  CHECK_FALSE(all[1].reserved.has_value());  // "reserved in total" is the first message's
  CHECK(all[2].format == OomMessageFormat::mps);
  for (const auto& m : all) CHECK_FALSE(m.truncated);
  // A text with one message, or none: one result, as parse_oom_message gives it.
  CHECK(parse_oom_messages(msg::kTfFragmented).size() == 1);
  CHECK(parse_oom_messages("").size() == 1);
  CHECK(parse_oom_messages("Killed").front().format == OomMessageFormat::unknown);
}

TEST_CASE("random bytes do not crash the reader", "[explain][parse]") {
  std::mt19937 rng(12345);
  for (int i = 0; i < 200; ++i) {
    std::string s(rng() % 400, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    if (i % 2) s = std::string("Tried to allocate ") + s;
    auto m = parse_oom_message(s);
    (void)m;
    auto all = parse_oom_messages(s + " Tried to allocate " + s);
    CHECK_FALSE(all.empty());
  }
  SUCCEED();
}
