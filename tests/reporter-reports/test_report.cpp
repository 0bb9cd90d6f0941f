// The HTML report: strings from a trace are escaped, the data keeps every peak.
#include <catch2/catch.hpp>

#include "render/report_html.h"
#include "vector_reader.h"

using namespace vramtrace;
using vramtrace::testing::RecordList;
using vramtrace::testing::VectorReader;

namespace {
constexpr std::uint64_t MiB = 1ull << 20;
std::size_t count(const std::string& hay, const std::string& needle) {
  std::size_t n = 0;
  for (auto p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}
const char* kEvil =
    "</script><script>document.body.setAttribute('data-pwned','1')</script><!-- \xff\xfe\xe2\x80\xa8 <img src=x "
    "onerror=alert(1)>";
}  // namespace

TEST_CASE("json_for_script escapes everything that could end the script element", "[report][escape]") {
  nlohmann::json j = {{"s", "</script><!--&\xe2\x80\xa8\xe2\x80\xa9"}};
  std::string out = json_for_script(j);
  CHECK(out.find('<') == std::string::npos);
  CHECK(out.find('>') == std::string::npos);
  CHECK(out.find('&') == std::string::npos);
  CHECK(out.find("\xe2\x80\xa8") == std::string::npos);
  CHECK(out.find("\\u003c/script\\u003e") != std::string::npos);
  CHECK(nlohmann::json::parse(out)["s"] == "</script><!--&\xe2\x80\xa8\xe2\x80\xa9");
  // invalid UTF-8 does not throw, it is replaced
  nlohmann::json bad = {{"s", std::string("a\xff\xfe"
                                          "b")}};
  CHECK_NOTHROW(json_for_script(bad));
}

TEST_CASE("a hostile trace cannot inject markup into the page", "[report][escape]") {
  RecordList l;
  l.add(Action::segment_alloc, 0x10000000, 20 * MiB).add(Action::alloc, 0x10000000, 3 * MiB);
  TraceHeader h;
  h.path = kEvil;
  h.workload = kEvil;
  h.settings = kEvil;
  h.format = "torchtrace";
  VectorReader r(l.records, h);
  std::vector<TraceModel> v;
  v.push_back(build_trace_model(r));
  std::string page = render_report_html(v);
  CHECK(count(page, "<script") == 2);  // ours: the data element and the program
  CHECK(count(page, "</script>") == 2);
  CHECK(page.find("<img") == std::string::npos);
  CHECK(page.find("<!--") == std::string::npos);
  CHECK(page.find("data-pwned") != std::string::npos);  // present, but only inside the escaped JSON
  CHECK(page.find("\xff\xfe") == std::string::npos);
}

TEST_CASE("report data: the timeline's maxima hold the peak; layouts are bounded", "[report][data]") {
  RecordList l;
  const DevicePtr s = 0x40000000;
  for (int seg = 0; seg < 50; ++seg) l.add(Action::segment_alloc, s + seg * 64 * MiB, 64 * MiB);
  for (int i = 0; i < 3000; ++i) {
    DevicePtr a = s + (i % 50) * 64 * MiB;
    std::uint64_t sz = (1 + i % 40) * MiB;
    l.add(Action::alloc, a, sz).add(Action::free_requested, a, sz).add(Action::free_completed, a, sz);
  }
  TraceHeader h;
  h.device_total_bytes = 80ull << 30;
  VectorReader r(l.records, h);
  ModelOptions mo;
  mo.timeline_buckets = 100;
  std::vector<TraceModel> v;
  v.push_back(build_trace_model(r, mo));
  ReportOptions ro;
  ro.max_segments_drawn = 10;
  auto j = report_data(v, ro);
  const auto& dev = j["traces"][0]["devices"][0];
  std::int64_t mx = 0;
  for (const auto& x : dev["tl"]["amax"]) mx = std::max(mx, x.get<std::int64_t>());
  CHECK(mx == v[0].devices[0].stats.allocated_bytes[kStatAll].peak);
  CHECK(dev["capacity"].get<std::uint64_t>() == 80ull << 30);
  CHECK(dev["peak"]["segments"].size() == 10);
  CHECK(dev["peak"]["segments_total"] == 50);
  CHECK(dev["tl"]["t"].size() < 200);
}
