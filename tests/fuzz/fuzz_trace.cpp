// Fuzz target: open_trace and every reader behind it, on one input file: format and compression
// detection (plain, gzip, zstd), PyTorch's JSON-lines history (torch_trace.cpp), snapshot pickles
// (snapshot_trace.cpp over pickle.cpp) and vramtrace's own format (trace/src/vramtrace_reader.cpp).
// A trace comes from someone else: no input may crash, hang or exhaust memory.
//
// Properties checked on every input:
//  - malformed input is reported with a TraceError (the commands print it and exit 2); any other
//    exception escaping a reader breaks its documented contract and is a finding;
//  - the message of a TraceError is not empty;
//  - every record has a known action;
//  - position() and the final state can be asked for at any time.
#include <exception>
#include <string>

#include "fuzz_check.h"
#include "readers/open_trace.h"

using namespace vramtrace;

namespace {

// Readers stop after this many records per input (a small input cannot make many more; this
// only bounds pathological but valid inputs such as gzip bombs of repeated lines).
constexpr std::uint64_t kMaxRecords = 1u << 20;

const bool registered = [] {
  register_trace_format("vramtrace", open_vramtrace_trace);
  return true;
}();

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)registered;
  const std::string path = fuzz::as_file(data, size);
  try {
    auto reader = open_trace(path);
    FUZZ_CHECK(reader != nullptr, "open_trace returned null");
    (void)reader->header();
    TraceRecord r;
    std::uint64_t n = 0;
    while (n < kMaxRecords && reader->next(r)) {
      ++n;
      FUZZ_CHECK(static_cast<unsigned>(r.action) <= static_cast<unsigned>(Action::mark), "record with action %u",
                 static_cast<unsigned>(r.action));
      if ((n & 1023) == 0) (void)reader->position();
    }
    (void)reader->position();
    (void)reader->final_state();
    (void)reader->incomplete();
  } catch (const TraceError& e) {
    FUZZ_CHECK(e.what()[0] != '\0', "TraceError without a message");
  }
  return 0;
}
