// Diagnoses of OOM messages (cases M1-M4, C2-C4, C12 of docs/cases.md) and the arithmetic shown.
#include <catch2/catch.hpp>

#include "analyses/diagnosis.h"
#include "analyses/explain.h"
#include "messages.h"

using namespace vramtrace;
namespace msg = vramtrace::test_messages;

namespace {
constexpr double MiB = 1 << 20;
constexpr double GiB = 1 << 30;
const Derivation* find_derived(const Diagnosis& d, const std::string& name) {
  for (const auto& a : d.arithmetic)
    if (a.name == name) return &a;
  return nullptr;
}
DiagnosisCode code_of(const char* text) { return explain_message(text).diagnosis.code; }
}  // namespace

TEST_CASE("M1: capacity on a 1 GiB card", "[explain][diagnosis][M1]") {
  auto e = explain_message(msg::kM1);
  CHECK(e.diagnosis.code == DiagnosisCode::capacity);
  const auto* reserved = find_derived(e.diagnosis, "reserved");
  REQUIRE(reserved);
  CHECK(reserved->bytes == Approx((435.61 + 26.39) * MiB).epsilon(1e-4));
  const auto* outside = find_derived(e.diagnosis, "outside_allocator");
  REQUIRE(outside);
  CHECK(outside->bytes == Approx((1024 - 24.17 - 462.00) * MiB).epsilon(1e-3));
}

TEST_CASE("M2: free far above the request is unexplained", "[explain][diagnosis][M2]") {
  auto e = explain_message(msg::kM2);
  CHECK(e.diagnosis.code == DiagnosisCode::unexplained);
  CHECK(e.diagnosis.next_step.find("another process") != std::string::npos);
  CHECK(e.diagnosis.next_step.find("CUDA_VISIBLE_DEVICES") != std::string::npos);
}

TEST_CASE("M3: capacity under a per-process cap", "[explain][diagnosis][M3]") {
  for (const char* text : {msg::kM3Quoted, msg::kM3Full}) {
    auto e = explain_message(text);
    CHECK(e.diagnosis.code == DiagnosisCode::capacity);
    const auto* head = find_derived(e.diagnosis, "cap_headroom");
    REQUIRE(head);
    CHECK(head->bytes == Approx(14.58 * GiB - (14.56 * GiB + 12.76 * MiB)).margin(0.01 * GiB));
    CHECK(e.diagnosis.next_step.find("cap") != std::string::npos);
  }
  // In the full message, the device had 124 GiB free: only the cap made it fail, not "unexplained".
  auto full = explain_message(msg::kM3Full);
  const auto* outside = find_derived(full.diagnosis, "outside_allocator_this_process");
  REQUIRE(outside);
  CHECK(outside->bytes == Approx(15.31 * GiB - (14.56 * GiB + 12.76 * MiB)).margin(0.01 * GiB));
}

TEST_CASE("C2: fragmentation with plenty cached (old form)", "[explain][diagnosis][C2]") {
  auto e = explain_message(msg::kC2);
  CHECK(e.diagnosis.code == DiagnosisCode::fragmentation);
  const auto* all = find_derived(e.diagnosis, "free_in_all");
  REQUIRE(all);
  CHECK(all->bytes == Approx(6.36 * GiB).epsilon(1e-3));
}

TEST_CASE("C3: fragmentation inside a step (1.4-2.0 form)", "[explain][diagnosis][C3]") {
  auto e = explain_message(msg::kC3);
  CHECK(e.diagnosis.code == DiagnosisCode::fragmentation);
  const auto* cache = find_derived(e.diagnosis, "reserved_unallocated");
  REQUIRE(cache);
  CHECK(cache->bytes == Approx(5.81 * GiB).epsilon(2e-3));
}

TEST_CASE("C4: headroom, memory outside the allocator 0.95 GiB, fragmentation", "[explain][diagnosis][C4]") {
  auto e = explain_message(msg::kC4);
  CHECK(e.diagnosis.code == DiagnosisCode::fragmentation);
  const auto* outside = find_derived(e.diagnosis, "outside_allocator_this_process");
  REQUIRE(outside);
  CHECK(outside->bytes == Approx(0.95 * GiB).margin(0.006 * GiB));
  CHECK(outside->formula.find("in use - reserved") != std::string::npos);
  const auto* all = find_derived(e.diagnosis, "free_in_all");
  REQUIRE(all);
  CHECK(all->bytes == Approx(2.91 * GiB).epsilon(1e-3));
}

TEST_CASE("M4 edge cases get a verdict only from what they contain", "[explain][diagnosis][M4]") {
  // Cut after "GPU": 3725 GiB is more than any GPU has.
  auto cut = explain_message(msg::kM4Cut);
  CHECK(cut.diagnosis.code == DiagnosisCode::exceeds_device);
  CHECK(cut.message.truncated);
  // The rounded TensorFlow request alone: nothing to decide with.
  CHECK(code_of(msg::kTfRounded) == DiagnosisCode::undetermined);
  // A bare XLA request: nothing to decide with.
  CHECK(code_of(msg::kXla) == DiagnosisCode::undetermined);
  CHECK(code_of(msg::kExabyte) == DiagnosisCode::exceeds_device);
  // Private pools: the clause is reported as a note.
  auto pp = explain_message(msg::kPrivatePools);
  bool noted = false;
  for (const auto& n : pp.diagnosis.notes) noted |= n.find("private pools") != std::string::npos;
  CHECK(noted);
  CHECK(pp.diagnosis.code == DiagnosisCode::fragmentation);  // 1.20 GiB cached + 512 MiB free >= 1.50 GiB
  // Async backend: 1.19 GiB free < 2.50 GiB, no cache figure: undetermined rather than a guess.
  CHECK(code_of(msg::kAsync) == DiagnosisCode::undetermined);
}

TEST_CASE("C12: TensorFlow BFC capacity versus fragmentation", "[explain][diagnosis][C12]") {
  CHECK(code_of(msg::kTfCapacity) == DiagnosisCode::capacity);
  auto f = explain_message(msg::kTfFragmented);
  CHECK(f.diagnosis.code == DiagnosisCode::fragmentation);
  bool largest = false;
  for (const auto& r : f.diagnosis.reasons) largest |= r.find("largest free chunk") != std::string::npos;
  CHECK(largest);
}

TEST_CASE("another process holding memory: outside_allocator", "[explain][diagnosis]") {
  // 14.56 GiB card, 1.01 GiB reserved, 1.31 GiB free: 12.24 GiB is held elsewhere.
  CHECK(code_of("RuntimeError: CUDA out of memory. Tried to allocate 1.69 GiB (GPU 0; 14.56 GiB total capacity; "
                "649.97 MiB already allocated; 1.31 GiB free; 1.01 GiB reserved in total by PyTorch)") ==
        DiagnosisCode::outside_allocator);
  auto e = explain_message(msg::kTypoWithProcesses);
  CHECK(e.diagnosis.code == DiagnosisCode::outside_allocator);
  CHECK(find_derived(e.diagnosis, "outside_allocator") != nullptr);
}

TEST_CASE("request larger than the device", "[explain][diagnosis]") {
  CHECK(code_of("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 30.29 GiB. GPU 0 has a total "
                "capacity of 10.74 GiB of which 3.69 GiB is free. Including non-PyTorch memory, this process has 6.68 "
                "GiB memory in use. Of the allocated memory 6.10 GiB is allocated by PyTorch, and 396.58 MiB is "
                "reserved by PyTorch but unallocated.") == DiagnosisCode::exceeds_device);
}

TEST_CASE("capacity on a full card (old form)", "[explain][diagnosis]") {
  CHECK(code_of("RuntimeError: CUDA out of memory. Tried to allocate 9.80 GiB (GPU 0; 14.76 GiB total capacity; 9.94 "
                "GiB already allocated; 3.89 GiB free; 160.79 MiB cached).") == DiagnosisCode::capacity);
}

TEST_CASE("json carries the diagnosis and every figure in bytes", "[explain][json]") {
  auto j = explain_json(explain_message(msg::kC4));
  CHECK(j["diagnosis"] == "fragmentation");
  CHECK(j["format"] == "pytorch_sentence");
  CHECK(j["figures"]["requested_bytes"].get<std::uint64_t>() == static_cast<std::uint64_t>(1.96 * GiB + 0.5));
  CHECK(j["figures"]["device_total_bytes"].is_number_unsigned());
  CHECK(j["figures"]["device_free_bytes"].is_number_unsigned());
  CHECK(j["figures"]["allocated_bytes"].is_number_unsigned());
  CHECK(j["figures"]["reserved_unallocated_bytes"].is_number_unsigned());
  CHECK(j["figures"]["process_in_use_bytes"].is_number_unsigned());
  CHECK_FALSE(j["figures"].contains("allowed_bytes"));  // not in the message: absent, not zero
  CHECK(j["derived"].contains("outside_allocator_this_process_bytes"));
  auto u = explain_json(explain_message("no message here"));
  CHECK(u["diagnosis"] == "undetermined");
  CHECK(u["figures"].empty());
  CHECK(u["format"] == "unknown");
}
