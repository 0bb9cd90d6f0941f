// Reading OOM messages of every generation: each figure as printed and in bytes, nothing invented.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "analyses/oom/oom_message.h"
#include "analyses/oom/pasted_text.h"
#include "analyses/oom/tensor_request.h"
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
  for (const auto* p :
       {&m.requested, &m.rounded, &m.device_total, &m.device_free, &m.allocated, &m.reserved, &m.reserved_unallocated,
        &m.allowed, &m.process_in_use, &m.private_pools, &m.mps_other, &m.bfc_limit, &m.bfc_in_use, &m.bfc_max_in_use,
        &m.bfc_region_bytes, &m.space_used, &m.space_limit, &m.space_exceeded_by, &m.pool_allocated_so_far}) {
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
                       msg::kHip,
                       msg::kAsyncNoFraction,
                       msg::kTfTensor,
                       msg::kTfRootErrors,
                       msg::kXlaTpu,
                       msg::kCupy,
                       msg::kCupyLimit,
                       msg::kCublas,
                       msg::kCudnn};
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

// --- pasted text: wraps, colour codes, line prefixes -----------------------------------------

namespace {
/// `text` as a terminal or a log viewer shows it `width` characters wide: each of its lines cut
/// every `width` characters with a line break (no space added), each new piece starting with
/// `indent`; a `prefix` (a launcher's) before every line of the text.
std::string wrap(const std::string& text, std::size_t width, const std::string& indent = "",
                 const std::string& prefix = "") {
  std::string out;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    out += prefix;
    for (std::size_t i = 0; i < line.size(); i += width)
      out += (i ? "\n" + indent + prefix : "") + line.substr(i, width);
    if (end == text.size()) break;
    out += "\n";
    begin = end + 1;
  }
  return out;
}

/// Every figure of `a` equals the same figure of `b` (both read, or both not).
void check_same_figures(const OomMessage& a, const OomMessage& b) {
  CHECK(a.format == b.format);
  for (auto f :
       {&OomMessage::requested, &OomMessage::rounded, &OomMessage::device_total, &OomMessage::device_free,
        &OomMessage::allocated, &OomMessage::reserved, &OomMessage::reserved_unallocated, &OomMessage::allowed,
        &OomMessage::process_in_use, &OomMessage::private_pools, &OomMessage::mps_other, &OomMessage::bfc_limit,
        &OomMessage::bfc_in_use, &OomMessage::bfc_largest_free_chunk, &OomMessage::space_used, &OomMessage::space_limit,
        &OomMessage::space_exceeded_by, &OomMessage::pool_allocated_so_far}) {
    REQUIRE((a.*f).has_value() == (b.*f).has_value());
    if ((a.*f)) CHECK((a.*f)->bytes == (b.*f)->bytes);
  }
  CHECK(a.device == b.device);
  CHECK(a.other_processes.size() == b.other_processes.size());
  CHECK(a.tensor_shape == b.tensor_shape);
  CHECK(a.dtype == b.dtype);
  CHECK(a.library_status == b.library_status);
  CHECK(a.exceeds_1eb == b.exceeds_1eb);
  CHECK(a.no_memory_fraction == b.no_memory_fraction);
  CHECK(a.missing == b.missing);
}
}  // namespace

TEST_CASE("a figure wrapped inside its number is read whole", "[explain][parse][wrapped]") {
  // "of which 1" over ".23 GiB is free": 1.23 GiB free, not 1 byte.
  auto a = parse_oom_message(
      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 "
      "GiB of which 1\n.23 GiB is free. Including non-PyTorch memory, this process has 22.40 GiB memory in use. Of the "
      "allocated memory 18.10 GiB is allocated by PyTorch, and 3.80 GiB is reserved by PyTorch but unallocated.");
  REQUIRE(a.device_free);
  CHECK(a.device_free->bytes == approx(1.23, GiB));
  CHECK(a.missing.empty());
  // "and 1" over "50.47 MiB": 150.47 MiB, not 50.47 MiB.
  auto b = parse_oom_message(
      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 7.79 GiB "
      "of which 3.12 MiB is free. Including non-PyTorch memory, this process has 7.78 GiB memory in use. Of the "
      "allocated memory 7.45 GiB is allocated by PyTorch, and 1\n50.47 MiB is reserved by PyTorch but unallocated.");
  REQUIRE(b.reserved_unallocated);
  CHECK(b.reserved_unallocated->bytes == approx(150.47, MiB));
  // A keyword wrapped in two ("total capa" over "city"), and a unit ("Gi" over "B").
  auto c = parse_oom_message(
      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capa\ncity of 23.65 "
      "Gi\nB of which 1.23 GiB is free. Of the allocated memory 18.10 GiB is allocated by PyTorch, and 3.80 GiB is "
      "reserved by PyTorch but unallocated.");
  REQUIRE(c.device_total);
  CHECK(c.device_total->bytes == approx(23.65, GiB));
  // The shape's list and a thousands-separated CuPy size.
  auto d = parse_oom_message("OOM when allocating tensor with shape[32,512,\n512,64] and type float");
  CHECK(d.tensor_shape == std::vector<std::uint64_t>{32, 512, 512, 64});
  auto e = parse_oom_message("Out of memory allocating 1,073,\n741,824 bytes (allocated so far: 0 bytes).");
  CHECK(e.requested->bytes == 1073741824u);
}

TEST_CASE("a message wrapped at any width, with or without indentation and prefixes, reads as unwrapped",
          "[explain][parse][wrapped]") {
  for (const char* text : {msg::kC4,
                           msg::kM1,
                           msg::kC3,
                           msg::kTypoWithProcesses,
                           msg::kPrivatePools,
                           msg::kM3Full,
                           msg::kAsync,
                           msg::kAsyncNoFraction,
                           msg::kExabyte,
                           msg::kMps,
                           msg::kHip,
                           msg::kTfRounded,
                           msg::kTfCapacity,
                           msg::kTfFragmented,
                           msg::kTfTensor,
                           msg::kXla,
                           msg::kXlaAttempting,
                           msg::kXlaTpu,
                           msg::kCupy,
                           msg::kCupyLimit,
                           msg::kCublas,
                           msg::kCudnn}) {
    const OomMessage whole = parse_oom_message(text);
    for (std::size_t width = 9; width <= 130; ++width) {
      for (const auto& [indent, prefix] : std::vector<std::pair<std::string, std::string>>{
               {"", ""}, {"    ", ""}, {"", "[rank0]: "}, {"", "[default0]:[rank0]: "}}) {
        INFO(text << "\nwidth " << width << ", indent '" << indent << "', prefix '" << prefix << "'");
        check_same_figures(parse_oom_message(wrap(text, width, indent, prefix)), whole);
      }
    }
  }
}

TEST_CASE("hard line breaks stay: lines that end in a number or a word are not glued to the next",
          "[explain][parse][wrapped]") {
  // A traceback line that ends in a line number, then the message.
  for (const char* hard : {"  File \"train.py\", line 42\n2024-05-01 12:00:01 ERROR step failed",
                           "Limit:                  1073741824\nInUse:                   800624256",
                           "I bfc_allocator.cc:1033] InUse at 7f2b30000000 of size 48758784 next 18446744073709551615\n"
                           "2023-05-02 10:00:00.000000: I bfc_allocator.cc:1041] Stats:",
                           "this process has 15.31 GiB memory in use. 14.58 GiB allowed; Of the allocated\nmemory",
                           "Currently allocated     : 21.52 GiB\nRequested               : 2.50 GiB",
                           "GPU 0\n1 frames were skipped", "epoch 3\n12 batches done"}) {
    INFO(hard);
    CHECK(unwrap_pasted_text(hard) == hard);
  }
  // The message after a traceback line ending in a number keeps its own figures.
  auto m = parse_oom_message(std::string("  File \"train.py\", line 12\n") + msg::kC4);
  CHECK(m.requested->bytes == approx(1.96, GiB));
  // The BFC dump's lines after timestamps still read as chunks.
  auto f = parse_oom_message(msg::kTfFragmented);
  CHECK(f.bfc_free_chunks == 2);
}

TEST_CASE("colour codes and launcher prefixes are removed before reading", "[explain][parse][wrapped]") {
  auto a = parse_oom_message(
      "\x1b[31mtorch.OutOfMemoryError\x1b[0m: CUDA out of memory. Tried to allocate \x1b[1m2.00 GiB\x1b[0m. GPU 0 has "
      "a total capacity of 23.65 GiB of which \x1b[1;33m1.23\x1b[0m GiB is free. Of the allocated memory 18.10 GiB is "
      "allocated by PyTorch, and 3.80 GiB is reserved by PyTorch but unallocated.");
  REQUIRE(a.requested);
  CHECK(a.requested->bytes == 2 * GiB);
  REQUIRE(a.device_free);
  CHECK(a.device_free->bytes == approx(1.23, GiB));
  // The same codes with the escape byte lost by a log viewer.
  auto b = parse_oom_message(
      "Tried to allocate [1m2.00 GiB[0m (GPU 0; 4.00 GiB total capacity; 1.00 GiB already "
      "allocated; [33m1.00[0m GiB free; 1.50 GiB reserved in total by PyTorch)");
  REQUIRE(b.device_free);
  CHECK(b.device_free->bytes == GiB);
  // PyTorch's distributed launcher puts "[rank0]: " before every line of the message.
  auto c = parse_oom_message(
      "[rank0]: torch.OutOfMemoryError: CUDA out of memory.\n[rank0]: Tried to allocate 16.00 MiB.\n[rank0]: GPU 0 has "
      "a total capacity of 23.56 GiB of which 34.81 MiB is free.\n[rank0]: Process 26463 has 23.07 GiB memory in "
      "use.\n[rank0]: Of the allocated memory 22.70 GiB is allocated by PyTorch,\n[rank0]: and 58.17 MiB is reserved "
      "by PyTorch but unallocated.");
  CHECK(c.format == OomMessageFormat::pytorch_sentence);
  REQUIRE(c.other_processes.size() == 1);
  CHECK(c.other_processes[0].pid == 26463);
  CHECK(c.reserved_unallocated->bytes == approx(58.17, MiB));
  CHECK(unwrap_pasted_text("[1,0]<stderr>:x\n(RayWorker pid=4242, ip=10.0.0.1) y\n[default0]:[rank3]: z") == "x\ny\nz");
  // A line that starts like a prefix but is none stays.
  for (const char* kept : {"[[{{node model/dense/MatMul}}]]", "[W CUDAAllocatorConfig.h:28] Warning: x",
                           "(GPU 0; 10.92 GiB total capacity)"}) {
    CHECK(unwrap_pasted_text(kept) == kept);
  }
}

TEST_CASE("a figure without its unit is unreadable and missing, never bytes", "[explain][parse][wrapped]") {
  // A wrap after a space cut "1.23 GiB" into "1 " and ".23 GiB": nothing joins it back.
  auto a = parse_oom_message(
      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 "
      "GiB of which 1 \n.23 GiB is free. Of the allocated memory 18.10 GiB is allocated by PyTorch, and 3.80 GiB is "
      "reserved by PyTorch but unallocated.");
  CHECK_FALSE(a.device_free.has_value());
  CHECK(std::find(a.missing.begin(), a.missing.end(), "device_free_bytes") != a.missing.end());
  REQUIRE(a.unreadable.size() == 1);
  CHECK(a.unreadable[0].key == "device_free_bytes");
  CHECK(a.unreadable[0].printed == "1");
  CHECK_FALSE(a.truncated);
  // The old form: a request and a free figure without units.
  auto b = parse_oom_message(
      "RuntimeError: CUDA out of memory. Tried to allocate 20 (GPU 0; 7.79 GiB total capacity; 3.53 GiB already "
      "allocated; 5 free; 3.60 GiB reserved in total by PyTorch)");
  CHECK_FALSE(b.requested.has_value());
  CHECK(b.unreadable_requested == "20");
  CHECK_FALSE(b.device_free.has_value());
  CHECK(b.missing == std::vector<std::string>{"requested_bytes", "device_free_bytes"});
  // A keyword that stayed split is listed missing, not dropped silently.
  auto c = parse_oom_message(
      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capa city of 23.65 "
      "GiB of which 1.23 GiB is free. Of the allocated memory 18.10 GiB is allocated by PyTorch, and 3.80 GiB is "
      "reserved by PyTorch but unallocated.");
  CHECK(c.missing == std::vector<std::string>{"device_total_bytes"});
}

TEST_CASE("printed sizes with thousands separators, and no partial numbers", "[explain][parse]") {
  CHECK(parse_printed_size("1,073,741,824 bytes") == 1073741824u);
  CHECK(parse_printed_size("15,032,385,536") == 15032385536u);
  CHECK_FALSE(parse_printed_size("1.2.3 GiB").has_value());
  CHECK_FALSE(parse_printed_size("1,07 bytes").has_value());
  CHECK_FALSE(parse_printed_size("1.5,000 GiB").has_value());
}

// --- other frameworks' and libraries' wording ------------------------------------------------

TEST_CASE("TensorFlow's op kernel: shape and type, TF1 and TF2 wordings", "[explain][parse][tensorflow]") {
  auto a = parse_oom_message(msg::kTfTensor);
  CHECK(a.format == OomMessageFormat::tensorflow_tensor);
  CHECK(a.tensor_shape == std::vector<std::uint64_t>{32, 512, 512, 64});
  CHECK(a.tensor_shape_text == "[32,512,512,64]");
  CHECK(a.dtype == "float");
  CHECK(*a.device == 0);
  CHECK(a.allocator_name == "GPU_0_bfc");
  CHECK_FALSE(a.requested.has_value());  // printed as a shape: the size is diagnosis's arithmetic
  auto b = parse_oom_message(
      "Resource exhausted: OOM when allocating tensor of shape [32256512,512] and type float\n"
      "\t [[Node: block_output_fc1/kernel/Adam/Initializer/zeros = Const[dtype=DT_FLOAT]()]]");
  CHECK(b.format == OomMessageFormat::tensorflow_tensor);
  CHECK(b.tensor_shape == std::vector<std::uint64_t>{32256512, 512});
  auto c = parse_oom_message("ResourceExhaustedError: OOM when allocating tensor with shape[28000,6,29,29]");
  CHECK(c.tensor_shape.size() == 4);
  CHECK(c.dtype.empty());
  CHECK(std::find(c.missing.begin(), c.missing.end(), "dtype") != c.missing.end());
  auto d = parse_oom_message("OOM when allocating tensor with shape[32,?,64] and type float");
  CHECK(d.tensor_shape.empty());
  CHECK(d.unreadable.size() == 1);
}

TEST_CASE("TF2's root errors: each is its own message", "[explain][parse][tensorflow]") {
  auto all = parse_oom_messages(msg::kTfRootErrors);
  REQUIRE(all.size() == 2);
  CHECK(all[0].tensor_shape == std::vector<std::uint64_t>{8, 16, 1024, 1024});
  CHECK(all[0].dtype == "half");
  CHECK(all[0].root_errors == 2);
  CHECK(all[1].tensor_shape == std::vector<std::uint64_t>{64, 50257});
  CHECK(all[1].dtype == "float");
}

TEST_CASE("TensorFlow's BFC lines with the op kernel's line: the BFC request, the tensor recorded",
          "[explain][parse][tensorflow]") {
  auto m = parse_oom_message(std::string(msg::kTfFragmented) + msg::kTfTensor);
  CHECK(m.format == OomMessageFormat::tensorflow_bfc);
  CHECK(m.rounded->bytes == 200000000u);
  CHECK(m.tensor_shape.size() == 4);
}

TEST_CASE("TensorFlow's type names and sizes", "[explain][parse][tensorflow]") {
  const std::pair<const char*, std::uint64_t> sizes[] = {
      {"float", 4},  {"float32", 4},   {"half", 2},        {"float16", 2}, {"bfloat16", 2}, {"double", 8},
      {"int8", 1},   {"uint8", 1},     {"bool", 1},        {"int16", 2},   {"int32", 4},    {"int64", 8},
      {"uint64", 8}, {"complex64", 8}, {"complex128", 16}, {"qint8", 1},   {"float_ref", 4}};
  for (const auto& [name, bytes] : sizes) {
    INFO(name);
    CHECK(tf_dtype_bytes(name) == bytes);
  }
  for (const char* none : {"string", "resource", "variant", "", "floaty"}) CHECK_FALSE(tf_dtype_bytes(none));
  CHECK(tensor_bytes({32, 512, 512, 64}, 4) == 2 * GiB);
  CHECK(tensor_bytes({}, 8) == 8u);
  CHECK_FALSE(tensor_bytes({1ull << 32, 1ull << 32}, 1).has_value());
}

TEST_CASE("XLA's compile-time plan on TPU, and the TPU runtime's allocation", "[explain][parse][xla]") {
  auto a = parse_oom_message(msg::kXlaTpu);
  CHECK(a.format == OomMessageFormat::xla_memory_space);
  CHECK(a.memory_space == "hbm");
  CHECK(a.space_used->bytes == approx(17.73, GiB));
  CHECK(a.space_limit->bytes == approx(15.48, GiB));
  CHECK(a.space_exceeded_by->bytes == approx(2.25, GiB));
  auto b = parse_oom_message(
      "ValueError: Allocation (size=21474836480) would exceed memory (size=17179869184) :: #allocation14167 [shape = "
      "'f32[320,4096,4096]{1,2,0:T(8,128)}', space=hbm]");
  CHECK(b.format == OomMessageFormat::xla);
  CHECK(b.requested->bytes == 21474836480ull);
  CHECK(b.device_total->bytes == 17179869184ull);
  // Both are a TPU's, not CUDA's: --json's "platform" says so; XLA on a GPU stays cuda.
  CHECK(a.platform == GpuPlatform::tpu);
  CHECK(b.platform == GpuPlatform::tpu);
  CHECK(std::string(gpu_platform_name(b.platform)) == "tpu");
  CHECK(parse_oom_message("Out of memory while trying to allocate 4.00GiB.").platform == GpuPlatform::cuda);
}

TEST_CASE("CuPy's pool: request, allocated so far, limit", "[explain][parse][cupy]") {
  auto a = parse_oom_message(msg::kCupy);
  CHECK(a.format == OomMessageFormat::cupy);
  CHECK(a.requested->bytes == 1073741824u);
  CHECK(a.requested->text == "1,073,741,824 bytes");
  CHECK(a.pool_allocated_so_far->bytes == 15032385536ull);
  CHECK_FALSE(a.allowed.has_value());
  auto b = parse_oom_message(msg::kCupyLimit);
  CHECK(b.allowed->bytes == 4294967296ull);
  auto c = parse_oom_message("cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 2,048 bytes");
  CHECK(c.requested->bytes == 2048u);
  CHECK_FALSE(c.pool_allocated_so_far.has_value());
  CHECK(c.missing.empty());
}

TEST_CASE("CUDA libraries' statuses and the stream executor's request", "[explain][parse][library]") {
  auto a = parse_oom_message(msg::kCublas);
  CHECK(a.format == OomMessageFormat::cuda_library);
  CHECK(a.library == "cuBLAS");
  CHECK(a.library_status == "CUBLAS_STATUS_ALLOC_FAILED");
  CHECK(a.library_call == "cublasCreate(handle)");
  auto b = parse_oom_message(msg::kCudnn);
  CHECK(b.library == "cuDNN");
  CHECK(b.library_status == "CUDNN_STATUS_NOT_INITIALIZED");
  auto c = parse_oom_message(
      "E tensorflow/stream_executor/cuda/cuda_dnn.cc:329] Could not create cudnn handle: "
      "CUDNN_STATUS_INTERNAL_ERROR");
  CHECK(c.library_status == "CUDNN_STATUS_INTERNAL_ERROR");
  auto d = parse_oom_message("misc/nvmlwrap.cc:95 NCCL WARN Cuda failure 'out of memory'");
  CHECK(d.library == "NCCL");
  auto e = parse_oom_message(
      "I tensorflow/stream_executor/cuda/cuda_driver.cc:775] failed to allocate 3.71GiB (3984588800 bytes) from "
      "device: CUDA_ERROR_OUT_OF_MEMORY: out of memory");
  CHECK(e.format == OomMessageFormat::cuda_error);
  CHECK(e.requested->bytes == 3984588800ull);
}

TEST_CASE("cudaMallocAsync without a memory fraction: the 2^64 limit means none", "[explain][parse][M4]") {
  auto m = parse_oom_message(msg::kAsyncNoFraction);
  CHECK(m.format == OomMessageFormat::pytorch_async);
  CHECK(m.no_memory_fraction);
  CHECK_FALSE(m.allowed.has_value());
  CHECK(m.missing.empty());
  CHECK(m.unreadable.empty());
}
