// Diagnoses of OOM messages (cases M1-M4, C2-C4, C12 of docs/cases.md) and the arithmetic shown.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "analyses/oom/diagnosis.h"
#include "analyses/oom/explain.h"
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
    CHECK(e.diagnosis.next_step.find("set_per_process_memory_fraction") != std::string::npos);
  }
  // In the full message, the device had 124 GiB free: only the cap made it fail, not "unexplained".
  auto full = explain_message(msg::kM3Full);
  const auto* outside = find_derived(full.diagnosis, "outside_allocator_this_process");
  REQUIRE(outside);
  CHECK(outside->bytes == Approx(15.31 * GiB - (14.56 * GiB + 12.76 * MiB)).margin(0.01 * GiB));
}

TEST_CASE("the next step names whoever set the cap that binds", "[explain][diagnosis][cap]") {
  // A trace of a plain CUDA program under the shim's limit: PyTorch's fraction is not the way out.
  OomFigures f;
  f.request = 2ull << 30;
  f.device_total = 80ull << 30;
  f.device_free = 60ull << 30;
  f.allowed = 8ull << 30;
  f.reserved = 7ull << 30;
  f.allocated = 7ull << 30;
  f.reserved_unallocated = 0;
  for (const auto& [who, words] : std::vector<std::pair<std::string, std::string>>{
           {"the cap of vramtrace run --limit", "Raise the cap (vramtrace run --limit)"},
           {"--capacity", "larger --capacity"},
           {"PyTorch's memory fraction", "torch.cuda.set_per_process_memory_fraction"}}) {
    f.allowed_name = who;
    const Diagnosis d = diagnose(f);
    INFO(who << ": " << d.next_step);
    CHECK(d.code == DiagnosisCode::capacity);
    CHECK(d.next_step.find(words) != std::string::npos);
    if (who != "PyTorch's memory fraction") CHECK(d.next_step.find("torch.cuda") == std::string::npos);
  }
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
  // Async backend: 21.52 GiB allocated + 2.50 GiB passes its 23.65 GiB limit, which the backend
  // checks before it asks CUDA: capacity of the limit (more in the cudaMallocAsync case below).
  CHECK(code_of(msg::kAsync) == DiagnosisCode::capacity);
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

// --- The rule order, the printed comparisons, platforms, several messages ------------------

namespace {
std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }
bool any_contains(const std::vector<std::string>& v, const std::string& what) {
  for (const auto& s : v)
    if (contains(s, what)) return true;
  return false;
}
}  // namespace

TEST_CASE("docs/reports.md lists the diagnosis rules in the order the code tests them", "[diagnosis][docs]") {
  const std::string doc = read_text(std::string(VRAMTRACE_REPORTS_TEST_DIR) + "/../../docs/reports.md");
  const auto at = doc.find("## Diagnosis codes");
  REQUIRE(at != std::string::npos);
  // The table rows of that section: "| `code` | ...".
  std::vector<std::string> listed;
  std::istringstream lines(doc.substr(at));
  std::string line;
  bool in_table = false;
  while (std::getline(lines, line)) {
    if (line.rfind("| `", 0) == 0) {
      in_table = true;
      listed.push_back(line.substr(3, line.find('`', 3) - 3));
    } else if (in_table) {
      break;
    }
  }
  std::vector<std::string> code;
  for (DiagnosisCode c : diagnosis_rule_order()) code.emplace_back(diagnosis_code_name(c));
  code.emplace_back("undetermined");  // not a rule: what any rule gives without its figures
  CHECK(listed == code);
}

TEST_CASE("figures that contradict each other are flagged, not diagnosed", "[explain][diagnosis]") {
  // Reserved 20.61 GiB on a 10.92 GiB card: no moment of one device looks like this.
  auto e = explain_message(
      "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.92 GiB total capacity; 19.80 GiB "
      "already allocated; 0 bytes free; 20.61 GiB reserved in total by PyTorch)");
  CHECK(e.diagnosis.code == DiagnosisCode::inconsistent);
  CHECK(any_contains(e.diagnosis.reasons, "reserved 20.61 GiB > device total 10.92 GiB"));
  CHECK(contains(e.diagnosis.next_step, "one whole message"));
  // Allocated above reserved (sentence form cannot say it; the 1.4-2.0 form can).
  CHECK(code_of("RuntimeError: CUDA out of memory. Tried to allocate 2.00 MiB (GPU 0; 15.78 GiB total capacity; "
                "9.00 GiB already allocated; 1.00 GiB free; 4.00 GiB reserved in total by PyTorch)") ==
        DiagnosisCode::inconsistent);
  // Rounding of printed figures is not a contradiction: 14.58 GiB reserved on a "14.58 GiB" card.
  CHECK(code_of("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 14.58 GiB total capacity; "
                "14.50 GiB already allocated; 0 bytes free; 14.58 GiB reserved in total by PyTorch)") !=
        DiagnosisCode::inconsistent);
  // Every case message of the tests is consistent.
  for (const char* m : {msg::kM1, msg::kM2, msg::kM3Full, msg::kC2, msg::kC3, msg::kC4, msg::kTypoWithProcesses,
                        msg::kPrivatePools, msg::kAsync})
    CHECK(code_of(m) != DiagnosisCode::inconsistent);
}

TEST_CASE("a reason prints what it compared: the 2 MiB segment and the slack", "[explain][diagnosis]") {
  auto e = explain_message(
      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 KiB. GPU 0 has a total capacity of 7.79 "
      "GiB of which 1.06 MiB is free. Including non-PyTorch memory, this process has 7.78 GiB memory in use. Of the "
      "allocated memory 7.50 GiB is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated.");
  CHECK(e.diagnosis.code == DiagnosisCode::fragmentation);
  CHECK_FALSE(any_contains(e.diagnosis.reasons, "1.06 MiB < 512.00 KiB"));
  CHECK(any_contains(e.diagnosis.reasons,
                     "free on the device 1.06 MiB < new segment 2.00 MiB + 2.00 MiB slack = 4.00 MiB"));
}

TEST_CASE("ROCm messages name PYTORCH_HIP_ALLOC_CONF", "[explain][diagnosis]") {
  auto e = explain_message(
      "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity of 63.98 GiB "
      "of which 1.08 GiB is free. Of the allocated memory 58.31 GiB is allocated by PyTorch, and 3.83 GiB is reserved "
      "by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
      "PYTORCH_HIP_ALLOC_CONF=expandable_segments:True to avoid fragmentation.");
  CHECK(e.message.platform == GpuPlatform::rocm);
  CHECK(e.diagnosis.code == DiagnosisCode::fragmentation);
  CHECK(contains(e.diagnosis.next_step, "PYTORCH_HIP_ALLOC_CONF=expandable_segments:True"));
  CHECK_FALSE(contains(e.diagnosis.next_step, "PYTORCH_CUDA_ALLOC_CONF"));
  CHECK(explain_json(e)["platform"] == "rocm");
  CHECK(contains(render_explain_text(e), "Platform: ROCm"));
  // A CUDA message stays CUDA.
  CHECK(explain_message(msg::kC4).message.platform == GpuPlatform::cuda);
}

TEST_CASE("MPS messages are MPS, with their own limit and variable", "[explain][diagnosis]") {
  auto e = explain_message(
      "RuntimeError: MPS backend out of memory (MPS allocated: 18.04 GB, other allocations: 2.55 MB, max allowed: "
      "18.13 GB). Tried to allocate 256.00 MB on private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable "
      "upper limit for memory allocations (may cause system failure).");
  CHECK(e.message.format == OomMessageFormat::mps);
  CHECK(e.message.platform == GpuPlatform::mps);
  CHECK_FALSE(e.message.truncated);  // not a cut-off CUDA message
  CHECK(e.message.allocated->bytes == static_cast<std::uint64_t>(18.04 * GiB + 0.5));
  CHECK(e.message.allowed->bytes == static_cast<std::uint64_t>(18.13 * GiB + 0.5));
  CHECK(e.message.requested->bytes == 256ull << 20);
  CHECK(e.diagnosis.code == DiagnosisCode::capacity);
  CHECK(contains(e.diagnosis.next_step, "PYTORCH_MPS_HIGH_WATERMARK_RATIO"));
  CHECK_FALSE(contains(e.diagnosis.next_step, "PYTORCH_CUDA_ALLOC_CONF"));
  CHECK(find_derived(e.diagnosis, "limit_headroom") != nullptr);
  // Room under the watermark: the limit does not explain it.
  auto room = explain_message(
      "RuntimeError: MPS backend out of memory (MPS allocated: 2.00 GB, other allocations: 1.00 GB, max allowed: "
      "18.13 GB). Tried to allocate 1.00 GB on private pool.");
  CHECK(room.diagnosis.code == DiagnosisCode::unexplained);
  // Larger than the limit.
  CHECK(code_of("RuntimeError: MPS backend out of memory (MPS allocated: 0 bytes, other allocations: 0 bytes, max "
                "allowed: 9.07 GB). Tried to allocate 12.00 GB on private pool.") == DiagnosisCode::exceeds_device);
  CHECK(explain_json(e)["format"] == "mps");
}

TEST_CASE("PyTorch 0.4's cuda runtime error (2) is known, and has no figures", "[explain][diagnosis]") {
  auto e = explain_message(
      "THCudaCheck FAIL file=/pytorch/aten/src/THC/generic/THCStorage.cu line=58 error=2 : out of memory\n"
      "Traceback (most recent call last):\n  File \"train.py\", line 88, in <module>\n"
      "RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/generic/THCStorage.cu:58");
  CHECK(e.message.format == OomMessageFormat::pytorch_thc);
  CHECK(e.diagnosis.code == DiagnosisCode::undetermined);
  CHECK(contains(e.diagnosis.next_step, "newer PyTorch"));
  CHECK(contains(render_explain_text(e), "PyTorch <= 0.4"));
}

TEST_CASE("two messages in one log are explained one by one", "[explain][diagnosis]") {
  // A fragmentation OOM, then (after a retry with a cap) a capacity OOM with "allowed".
  const std::string log =
      std::string("step 10 ...\n") + msg::kC4 + "\nretrying with a memory fraction\n" + msg::kM3Full + "\n";
  auto all = explain_messages(log);
  REQUIRE(all.size() == 2);
  CHECK(all[0].diagnosis.code == DiagnosisCode::fragmentation);
  CHECK_FALSE(all[0].message.allowed.has_value());  // the second message's cap is not the first's
  CHECK(all[0].message.requested->bytes == static_cast<std::uint64_t>(1.96 * GiB + 0.5));
  CHECK(all[1].diagnosis.code == DiagnosisCode::capacity);
  CHECK(all[1].message.allowed.has_value());
  CHECK(all[1].message.requested->bytes == 44ull << 20);
  const std::string text = render_explain_text(all);
  CHECK(contains(text, "2 out-of-memory messages"));
  CHECK(contains(text, "=== Message 2 of 2 ==="));
  auto j = explain_json(all);
  REQUIRE(j["messages"].size() == 2);
  CHECK(j["messages"][1]["diagnosis"] == "capacity");
  // One message: the same object as before, no "messages" wrapper.
  CHECK(explain_json(explain_messages(msg::kC4)).contains("diagnosis"));
  CHECK(explain_messages(msg::kC4).size() == 1);
  // An MPS message has "Tried to allocate" once: one message, not two.
  CHECK(explain_messages("RuntimeError: MPS backend out of memory (MPS allocated: 1.00 GB, other allocations: 1.00 "
                         "MB, max allowed: 9.07 GB). Tried to allocate 8.00 GB on private pool.")
            .size() == 1);
}

namespace {
// ReplayOutcome by its fields: settings that got past the failure, the shortfalls of the marginal
// ones, how many were tried, whether the own settings reproduce the OOM, whether expandable
// segments were among them, whether one had room above the bound.
ReplayOutcome outcome(std::vector<std::string> passing, std::vector<std::uint64_t> short_by, std::size_t tried,
                      bool reproduces, bool layout_tried, bool any_room) {
  ReplayOutcome r;
  r.passing = std::move(passing);
  r.short_by = std::move(short_by);
  r.tried = tried;
  r.reproduces = reproduces;
  r.layout_tried = layout_tried;
  r.any_room = any_room;
  return r;
}
}  // namespace

TEST_CASE("capacity never says settings cannot help, and takes the replays in", "[diagnosis]") {
  for (const char* m : {msg::kM1, msg::kM3Full, msg::kTfCapacity}) {
    auto e = explain_message(m);
    CHECK_FALSE(contains(e.diagnosis.next_step, "cannot fix"));
  }
  auto e = explain_message(msg::kM3Full);
  REQUIRE(e.diagnosis.code == DiagnosisCode::capacity);
  Diagnosis d = e.diagnosis;
  note_replays_in_diagnosis(d, outcome({"expandable_segments:True (fits, 1.83 GiB spare)"}, {}, 5, true, true, true));
  CHECK(contains(d.next_step, "get past the failure under: expandable_segments:True (fits, 1.83 GiB spare)"));
  d = e.diagnosis;
  note_replays_in_diagnosis(d, outcome({}, {}, 5, true, true, false));
  CHECK(contains(d.next_step, "None of the 5 replayed settings gets past it either"));
  // The words follow the table: settings the table calls marginal (out of memory on the capacity,
  // not with the bound) are named as such, never "none gets past it" alone.
  d = e.diagnosis;
  note_replays_in_diagnosis(d, outcome({}, {276ull << 20, 294ull << 20, 280ull << 20}, 5, true, true, false));
  CHECK_FALSE(contains(d.next_step, "gets past it either"));
  CHECK(contains(d.next_step, "3 are marginal: out of memory on this capacity, short by 276.00 MiB to 294.00 MiB"));
  d = e.diagnosis;
  note_replays_in_diagnosis(d, outcome({"x"}, {}, 5, false, true, false));
  CHECK(contains(d.next_step, "do not reproduce this OOM"));
  // No verdict at all (the wrong level, say): the diagnosis says so and nothing else.
  d = e.diagnosis;
  ReplayOutcome none = outcome({"x"}, {}, 5, true, true, true);
  none.withheld = true;
  note_replays_in_diagnosis(d, none);
  CHECK(contains(d.next_step, "give no verdict"));
  CHECK_FALSE(contains(d.next_step, "get past the failure under"));
  // Fragmentation that no replayed layout rescues is capacity: with expandable segments replayed
  // and nothing getting past it with room above the bound, the promise "a setting fixes it" is
  // not kept.
  auto c4 = explain_message(msg::kC4);
  REQUIRE(c4.diagnosis.code == DiagnosisCode::fragmentation);
  Diagnosis k = c4.diagnosis;
  note_replays_in_diagnosis(
      k, outcome({"expandable_segments:True (marginal, 10.00 MiB spare)"}, {}, 5, true, true, false));
  CHECK(k.code == DiagnosisCode::capacity);
  CHECK(contains(k.reasons.back(),
                 "none gets past the failure with room above the error bound; within it: "
                 "expandable_segments:True (marginal"));
  CHECK(contains(k.next_step, "vramtrace tune"));
  k = c4.diagnosis;
  note_replays_in_diagnosis(k, outcome({}, {}, 5, true, true, false));
  CHECK(k.code == DiagnosisCode::capacity);
  CHECK(contains(k.reasons.back(), "of the 5 replayed settings"));
  // ... but not when the replays cannot tell: they do not reproduce the OOM, no setting that
  // packs free memory was replayed, or they give no verdict at all.
  ReplayOutcome withheld = outcome({}, {}, 5, true, true, false);
  withheld.withheld = true;
  for (const ReplayOutcome& r :
       {outcome({}, {}, 5, false, true, false), outcome({}, {}, 3, true, false, false), withheld}) {
    k = c4.diagnosis;
    note_replays_in_diagnosis(k, r);
    CHECK(k.code == DiagnosisCode::fragmentation);
  }
  // Other codes are left alone.
  auto f = explain_message(msg::kC4);
  Diagnosis g = f.diagnosis;
  note_replays_in_diagnosis(g, outcome({"x"}, {}, 5, true, true, true));
  CHECK(g.next_step == f.diagnosis.next_step);
}

// --- wrapped pastes, other frameworks, library errors ---------------------------------------

namespace {
bool mentions(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("a wrapped free figure reads as what it is: fragmentation, not capacity", "[explain][diagnosis][wrapped]") {
  // 1.23 GiB free + 0.90 GiB cached >= 2 GiB, and the device lacks a 2 GiB segment: fragmentation.
  // Read as "1" byte free, 0.90 GiB < 2 GiB made it capacity.
  auto e = explain_message(
      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 "
      "GiB of which 1\n.23 GiB is free. Including non-PyTorch memory, this process has 22.40 GiB memory in use. Of the "
      "allocated memory 21.40 GiB is allocated by PyTorch, and 921.60 MiB is reserved by PyTorch but unallocated.");
  CHECK(e.diagnosis.code == DiagnosisCode::fragmentation);
  // Cut so that the unit is lost: no verdict from a number that is not a size.
  auto cut = explain_message(
      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 "
      "GiB of which 1 \n.23 GiB is free. Of the allocated memory 18.10 GiB is allocated by PyTorch, and 3.80 GiB is "
      "reserved by PyTorch but unallocated.");
  CHECK(cut.diagnosis.code == DiagnosisCode::undetermined);
  const auto j = explain_json(cut);
  CHECK(j["missing"] == nlohmann::json::array({"device_free_bytes"}));
  CHECK(j["unreadable"]["device_free_bytes"] == "1");
  CHECK_FALSE(j["figures"].contains("device_free_bytes"));
  const std::string text = render_explain_text(cut);
  CHECK(mentions(text, "device free"));
  CHECK(mentions(text, "printed as \"1\""));
}

TEST_CASE("TensorFlow's tensor: the request from shape and type", "[explain][diagnosis][tensorflow]") {
  auto e = explain_message(msg::kTfTensor);
  const auto* request = find_derived(e.diagnosis, "request");
  REQUIRE(request);
  CHECK(request->bytes == 32LL * 512 * 512 * 64 * 4);
  CHECK(mentions(request->formula, "[32,512,512,64]"));
  CHECK(mentions(request->formula, "4 bytes (float)"));
  // Without the allocator's dump the limit and use are unknown: the next step asks for them.
  CHECK(e.diagnosis.code == DiagnosisCode::undetermined);
  CHECK(mentions(e.diagnosis.next_step, "Limit:"));
  // With the dump's figures: a 1 GiB limit, and a 2 GiB tensor: larger than the limit.
  auto with_dump = explain_message(std::string("Limit: 1073741824\nInUse: 800624256\n") + msg::kTfTensor);
  CHECK(with_dump.diagnosis.code == DiagnosisCode::exceeds_device);
  auto half = explain_message(
      "OOM when allocating tensor with shape[1024,1024] and type half on "
      "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n"
      "Limit: 1073741824\nInUse: 1072693248\n");
  CHECK(half.diagnosis.code == DiagnosisCode::capacity);
  CHECK(find_derived(half.diagnosis, "request")->bytes == 2 * 1024 * 1024);
  auto string_type = explain_message("OOM when allocating tensor with shape[64] and type string");
  CHECK(string_type.diagnosis.code == DiagnosisCode::undetermined);
  CHECK(mentions(string_type.diagnosis.headline, "\"string\""));
  auto no_type = explain_message("OOM when allocating tensor with shape[28000,6,29,29]");
  CHECK(mentions(no_type.diagnosis.headline, "not its type"));
}

TEST_CASE("XLA's compile-time plan: capacity, over by used - capacity", "[explain][diagnosis][xla]") {
  auto e = explain_message(msg::kXlaTpu);
  CHECK(e.diagnosis.code == DiagnosisCode::capacity);
  const auto* over = find_derived(e.diagnosis, "exceeded_by");
  REQUIRE(over);
  CHECK(over->bytes == Approx((17.73 - 15.48) * GiB).margin(0.011 * GiB));
  CHECK(mentions(e.diagnosis.next_step, "sharding"));
  CHECK(e.diagnosis.notes.size() == 1);  // the printed overshoot agrees: only the rounding note
  // A printed overshoot that is not used - capacity: the figures contradict each other.
  auto off = explain_message(
      "Ran out of memory in memory space hbm. Used 17.73G of 15.48G hbm. Exceeded hbm capacity "
      "by 5.00G.");
  CHECK(off.diagnosis.code == DiagnosisCode::inconsistent);
}

TEST_CASE("CuPy: the pool's limit decides; without one the device's size is unknown", "[explain][diagnosis][cupy]") {
  auto limit = explain_message(msg::kCupyLimit);
  CHECK(limit.diagnosis.code == DiagnosisCode::capacity);
  CHECK(mentions(limit.diagnosis.next_step, "free_all_blocks"));
  const auto* with = find_derived(limit.diagnosis, "pool_with_request");
  REQUIRE(with);
  CHECK(with->bytes == 3865470566LL + 536870912LL);
  auto device = explain_message(msg::kCupy);
  CHECK(device.diagnosis.code == DiagnosisCode::undetermined);
  CHECK(mentions(device.diagnosis.headline, "1024.00 MiB"));
  CHECK(find_derived(device.diagnosis, "pool_with_request")->bytes == 15032385536LL + 1073741824LL);
  CHECK(code_of("Out of memory allocating 8,589,934,592 bytes (allocated so far: 0 bytes, limit set to: 4,294,967,296 "
                "bytes).") == DiagnosisCode::exceeds_device);
}

TEST_CASE("cuBLAS and cuDNN statuses: memory outside PyTorch's allocator, with what to check",
          "[explain][diagnosis][library]") {
  auto cublas = explain_message(msg::kCublas);
  CHECK(cublas.diagnosis.code == DiagnosisCode::outside_allocator);
  for (const char* part : {"nvidia-smi", "torch.cuda.empty_cache()", "CUBLAS_WORKSPACE_CONFIG", "cublasCreate(handle)",
                           "CUDA_LAUNCH_BLOCKING=1"})
    CHECK(mentions(cublas.diagnosis.headline + " " + cublas.diagnosis.next_step, part));
  auto cudnn = explain_message(msg::kCudnn);
  CHECK(cudnn.diagnosis.code == DiagnosisCode::outside_allocator);
  CHECK(mentions(cudnn.diagnosis.headline, "mismatch"));  // both causes are said
  CHECK(mentions(cudnn.diagnosis.next_step, "torch.backends.cudnn.version()"));
  CHECK(code_of("NCCL WARN Cuda failure 'out of memory'") == DiagnosisCode::outside_allocator);
}

TEST_CASE("a bare CUDA error gets its real causes, not a request to paste figures it never had",
          "[explain][diagnosis]") {
  auto e = explain_message(
      "RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other API "
      "call, so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1.");
  CHECK(e.diagnosis.code == DiagnosisCode::undetermined);
  CHECK_FALSE(mentions(e.diagnosis.next_step, "Tried to allocate"));
  for (const char* part : {"CUDA_LAUNCH_BLOCKING=1", "nvidia-smi", "cuBLAS", "context", "asynchronous"})
    CHECK(mentions(e.diagnosis.next_step, part));
  auto hip = explain_message("RuntimeError: HIP error: out of memory");
  CHECK(mentions(hip.diagnosis.next_step, "rocm-smi"));
  auto tf = explain_message("failed to allocate 3.71GiB (3984588800 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY");
  CHECK(mentions(tf.diagnosis.headline, "3.71 GiB"));
  CHECK(mentions(tf.diagnosis.next_step, "set_memory_growth"));
}

TEST_CASE("cudaMallocAsync: capacity of what the device had left, the fraction's limit, or room",
          "[explain][diagnosis][M4]") {
  // No fraction: request 2.50 GiB > free 1.19 GiB.
  auto e = explain_message(msg::kAsyncNoFraction);
  CHECK(e.diagnosis.code == DiagnosisCode::capacity);
  CHECK(mentions(e.diagnosis.reasons.front(), "free on the device"));
  const auto* other = find_derived(e.diagnosis, "not_free_not_allocated");
  REQUIRE(other);
  CHECK(other->bytes == Approx((23.65 - 1.19 - 21.52) * GiB).margin(0.02 * GiB));
  // A fraction's limit: 21.52 GiB allocated + 2.50 GiB > 23.65 GiB.
  auto limited = explain_message(msg::kAsync);
  CHECK(limited.diagnosis.code == DiagnosisCode::capacity);
  REQUIRE(find_derived(limited.diagnosis, "limit_headroom"));
  // More allocated than the device has (a real report on a 16 GiB card): capacity, and the reason.
  auto over = explain_message(
      "torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)\n"
      "Currently allocated     : 22.43 GiB\nRequested               : 4.07 GiB\nDevice limit            : 16.00 GiB\n"
      "Free (according to CUDA): 0 bytes\nPyTorch limit (set by user-supplied memory fraction)\n"
      "                        : 17179869184.00 GiB");
  CHECK(over.diagnosis.code == DiagnosisCode::capacity);
  bool said = false;
  for (const auto& r : over.diagnosis.reasons) said = said || mentions(r, "not in the device's memory");
  CHECK(said);
  // Room on the device: the figures do not explain it.
  auto room = explain_message(
      "Allocation on device 1 would exceed allowed memory. (out of memory)\nCurrently allocated     : 2.00 GiB\n"
      "Requested               : 1.00 GiB\nDevice limit            : 23.65 GiB\nFree (according to CUDA): 20.00 GiB\n"
      "PyTorch limit (set by user-supplied memory fraction)\n                        : 17179869184.00 GiB");
  CHECK(room.diagnosis.code == DiagnosisCode::unexplained);
}

TEST_CASE("json of the new forms: tensor, memory space, library, missing and unreadable", "[explain][json]") {
  auto tf = explain_json(explain_message(msg::kTfTensor));
  CHECK(tf["format"] == "tensorflow_tensor");
  CHECK(tf["tensor"]["shape"] == nlohmann::json::array({32, 512, 512, 64}));
  CHECK(tf["tensor"]["dtype"] == "float");
  CHECK(tf["derived"]["request_bytes"] == 2147483648LL);
  auto lib = explain_json(explain_message(msg::kCublas));
  CHECK(lib["library"]["status"] == "CUBLAS_STATUS_ALLOC_FAILED");
  CHECK(lib["library"]["call"] == "cublasCreate(handle)");
  auto xla = explain_json(explain_message(msg::kXlaTpu));
  CHECK(xla["memory_space"] == "hbm");
  CHECK(xla["figures"].contains("space_used_bytes"));
  auto cupy = explain_json(explain_message(msg::kCupy));
  CHECK(cupy["figures"]["allocated_so_far_bytes"] == 15032385536LL);
  CHECK(cupy["printed"]["requested_bytes"] == "1,073,741,824 bytes");
  auto whole = explain_json(explain_message(msg::kC4));
  CHECK(whole["missing"].empty());
  CHECK(whole["unreadable"].empty());
}

TEST_CASE("an XLA message whose printed overshoot is not used - capacity is inconsistent", "[diagnosis][xla]") {
  const auto agree = explain_message(
      "RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used 17.73G of "
      "15.48G hbm. Exceeded hbm capacity by 2.25G.");
  CHECK(agree.diagnosis.code == DiagnosisCode::capacity);
  const auto contradict = explain_message(
      "RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used 17.73G of "
      "15.48G hbm. Exceeded hbm capacity by 5.25G.");
  CHECK(contradict.diagnosis.code == DiagnosisCode::inconsistent);
  CHECK(contradict.diagnosis.headline.find("5.25G") != std::string::npos);
}
