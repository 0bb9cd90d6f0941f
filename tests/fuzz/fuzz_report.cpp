// Fuzz target: a trace from a stranger turned into the HTML report (open_trace, the trace model,
// render_report_html). The page must never let trace content out of its data element.
//
// Properties checked on every input the readers accept:
//  - the page has exactly one <script type="application/json" id="vt-data"> element and the
//    trace's data inside it contains no '<' at all (so no "</script>", no "<!--");
//  - that data is valid JSON and equals report_data() of the same models;
//  - outside the data element the page is the same for every input (no trace text leaks into it).
#include <string>

#include "fuzz_check.h"
#include "model/trace_model.h"
#include "readers/open_trace.h"
#include "render/report_html.h"

using namespace vramtrace;

namespace {

const bool registered = [] {
  register_trace_format("vramtrace", open_vramtrace_trace);
  return true;
}();

constexpr std::string_view kOpen = "<script type=\"application/json\" id=\"vt-data\">";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)registered;
  const std::string path = fuzz::as_file(data, size);
  std::vector<TraceModel> models;
  try {
    auto reader = open_trace(path);
    ModelOptions o;
    o.timeline_buckets = 64;
    models.push_back(build_trace_model(*reader, o));
  } catch (const TraceError&) {
    return 0;
  }
  const std::string html = render_report_html(models);
  const std::size_t open = html.find(kOpen);
  FUZZ_CHECK(open != std::string::npos, "no data element");
  FUZZ_CHECK(html.find(kOpen, open + 1) == std::string::npos, "two data elements");
  const std::size_t begin = open + kOpen.size();
  const std::size_t close = html.find("</script>", begin);
  FUZZ_CHECK(close != std::string::npos, "data element not closed");
  const std::string_view payload(html.data() + begin, close - begin);
  FUZZ_CHECK(payload.find('<') == std::string_view::npos, "'<' inside the data element");
  const auto parsed = nlohmann::json::parse(payload, nullptr, false);
  FUZZ_CHECK(!parsed.is_discarded(), "the data element is not valid JSON");
  const auto expected = report_data(models);
  FUZZ_CHECK(parsed == nlohmann::json::parse(expected.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)),
             "the data element differs from report_data()");
  // The page around the data is fixed: compare with the first page this process rendered.
  static const std::string frame = html.substr(0, begin) + html.substr(close);
  FUZZ_CHECK(html.substr(0, begin) + html.substr(close) == frame, "trace content leaked outside the data element");
  return 0;
}
