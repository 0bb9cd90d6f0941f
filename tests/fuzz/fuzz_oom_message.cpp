// Fuzz target: `vramtrace explain` on a pasted message: parse_oom_message, the diagnosis, the text
// and JSON renderings, and parse_printed_size.
//
// Properties checked on every input:
//  - nothing throws (parse_oom_message is documented never to throw on any input);
//  - unwrap_pasted_text only deletes: its result is a subsequence of the input;
//  - every figure read is a size the text contains: its printed text occurs in the input once
//    pasting is undone (unwrap_pasted_text, then compared without spaces and control characters),
//    never an invented number;
//  - the JSON rendering serialises (valid UTF-8 handling) and the text rendering ends in '\n';
//  - parse_printed_size of a figure's printed text gives back its bytes.
#include <string>

#include "analyses/oom/explain.h"
#include "analyses/oom/oom_message.h"
#include "analyses/oom/pasted_text.h"
#include "fuzz_check.h"

using namespace vramtrace;

namespace {

// What the reader treats as white space (normalise in reporter/analyses/oom/oom_message.cpp): spaces
// and every control character, so that a figure split by one (a byte 0x16 between "1.8" and "GiB",
// fuzz finding) compares equal.
std::string without_space(std::string_view s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c != ' ' && u >= 0x20 && u != 0x7f) out.push_back(c);
  }
  return out;
}

void check_figure(const std::optional<PrintedSize>& f, const std::string& input_nospace, const char* name) {
  if (!f) return;
  const std::string printed = without_space(f->text);
  FUZZ_CHECK(input_nospace.find(printed) != std::string::npos, "%s printed as '%s', which is not in the input", name,
             f->text.c_str());
  const auto again = parse_printed_size(f->text);
  FUZZ_CHECK(again.has_value() && *again == f->bytes, "%s: '%s' read as %llu, parse_printed_size gives %s", name,
             f->text.c_str(), static_cast<unsigned long long>(f->bytes),
             again ? std::to_string(*again).c_str() : "nothing");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto text = fuzz::as_text(data, size);
  const std::string unwrapped = unwrap_pasted_text(text);
  std::size_t k = 0;
  for (char c : text)
    if (k < unwrapped.size() && unwrapped[k] == c) ++k;
  FUZZ_CHECK(k == unwrapped.size(), "unwrap_pasted_text added or reordered bytes (%zu of %zu matched)", k,
             unwrapped.size());
  const std::string input_nospace = without_space(unwrapped);
  const Explanation e = explain_message(text);
  const OomMessage& m = e.message;
  check_figure(m.requested, input_nospace, "requested");
  check_figure(m.rounded, input_nospace, "rounded");
  check_figure(m.device_total, input_nospace, "device_total");
  check_figure(m.device_free, input_nospace, "device_free");
  check_figure(m.allocated, input_nospace, "allocated");
  check_figure(m.reserved, input_nospace, "reserved");
  check_figure(m.reserved_unallocated, input_nospace, "reserved_unallocated");
  check_figure(m.allowed, input_nospace, "allowed");
  check_figure(m.process_in_use, input_nospace, "process_in_use");
  check_figure(m.private_pools, input_nospace, "private_pools");
  check_figure(m.bfc_limit, input_nospace, "bfc_limit");
  check_figure(m.bfc_in_use, input_nospace, "bfc_in_use");
  check_figure(m.mps_other, input_nospace, "mps_other");
  check_figure(m.space_used, input_nospace, "space_used");
  check_figure(m.space_limit, input_nospace, "space_limit");
  check_figure(m.space_exceeded_by, input_nospace, "space_exceeded_by");
  check_figure(m.pool_allocated_so_far, input_nospace, "pool_allocated_so_far");
  for (const auto& u : m.unreadable)
    FUZZ_CHECK(input_nospace.find(without_space(u.printed)) != std::string::npos,
               "unreadable %s printed as '%s', which is not in the input", u.key.c_str(), u.printed.c_str());
  for (const auto& p : m.other_processes) check_figure(p.in_use, input_nospace, "other process");
  const std::string rendered = render_explain_text(e);
  FUZZ_CHECK(!rendered.empty() && rendered.back() == '\n', "text rendering does not end in a newline");
  const std::string json = explain_json(e).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  FUZZ_CHECK(!json.empty(), "empty JSON");
  (void)parse_printed_size(text);
  return 0;
}
