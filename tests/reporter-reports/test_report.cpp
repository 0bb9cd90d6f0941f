// The HTML report: strings from a trace are escaped, the data keeps every peak.
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "analyses/sites.h"
#include "model/load_models.h"
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
  // Note [the timeline in the page]: allocated's maximum of bucket i is the sum of its "al" up to
  // i, plus its "ax".
  std::int64_t mx = 0, last = 0;
  const auto& tl = dev["tl"];
  for (std::size_t i = 0; i < tl["al"].size(); ++i) {
    last += tl["al"][i].get<std::int64_t>();
    mx = std::max(mx, last + tl["ax"][i].get<std::int64_t>());
  }
  CHECK(mx == v[0].devices[0].stats.allocated_bytes[kStatAll].peak);
  CHECK(dev["capacity"].get<std::uint64_t>() == 80ull << 30);
  CHECK(dev["peak"]["segments"].size() == 10);
  CHECK(dev["peak"]["segments_total"] == 50);
  CHECK(tl["b"].size() < 200);
  CHECK(tl["b"].size() == v[0].devices[0].timeline.size());
  // Each bucket's times and values come back exactly.
  std::int64_t end = 0;
  std::array<std::int64_t, 4> lasts{};
  const char* keys[4] = {"a", "c", "r", "q"};
  const std::int64_t t0 = v[0].devices[0].first_time_ns;
  for (std::size_t i = 0; i < v[0].devices[0].timeline.size(); ++i) {
    const TimelineBucket& b = v[0].devices[0].timeline[i];
    const std::int64_t begin = end + tl["b"][i].get<std::int64_t>();
    end = begin + tl["d"][i].get<std::int64_t>();
    CHECK(begin == b.t_begin_ns - t0);
    CHECK(end == b.t_end_ns - t0);
    for (int k = 0; k < 4; ++k) {
      lasts[k] += tl[std::string(keys[k]) + "l"][i].get<std::int64_t>();
      CHECK(lasts[k] == b.last[k]);
      CHECK(lasts[k] - tl[std::string(keys[k]) + "n"][i].get<std::int64_t>() == b.min[k]);
      CHECK(lasts[k] + tl[std::string(keys[k]) + "x"][i].get<std::int64_t>() == b.max[k]);
    }
  }
}

namespace {
// The labels of a page stack (Note [stacks in the page]): frames by index, "-N" for a gap.
std::vector<std::string> page_stack(const nlohmann::json& stacks, const nlohmann::json& ref) {
  std::vector<std::string> out;
  for (const auto& x : stacks["list"][ref.get<std::size_t>()]["f"]) {
    const auto i = x.get<std::int64_t>();
    out.push_back(i < 0 ? std::to_string(i) : stacks["frames"][static_cast<std::size_t>(i)][0].get<std::string>());
  }
  return out;
}
}  // namespace

TEST_CASE("report data: each distinct stack once, sites and allocations refer to it", "[report][data][sites]") {
  auto models = load_models({std::string(VRAMTRACE_TEST_DATA_DIR) + "/pickle/sites.snapshot.pickle"});
  const auto j = report_data(models);
  const auto& tr = j["traces"][0];
  const auto& S = tr["stacks"];
  REQUIRE(S.is_object());
  CHECK(S["stacks_left_out"] == 0);
  const auto& peak = tr["devices"][0]["peak"];

  // The site's stack is its whole largest stack, innermost first, labelled as summary labels
  // frames, the user's line marked.
  const auto sites = trace_sites(models[0]);
  const Site& top = sites.at(0).at_peak.sites.at(0);
  REQUIRE(peak["sites"][0]["site"] == top.label);
  const auto ref = peak["sites"][0]["stack"];
  REQUIRE(ref.is_number_unsigned());
  std::vector<std::string> want;
  for (const auto& f : *models[0].stacks->get(top.stack)) want.push_back(frame_label(f));
  CHECK(page_stack(S, ref) == want);
  CHECK(want.size() == 11);  // callers of the user's line included (runpy)
  const auto& e = S["list"][ref.get<std::size_t>()];
  CHECK(e["n"] == 11);
  CHECK(page_stack(S, ref)[e["u"].get<std::size_t>()] == "train.py:42 in step");
  CHECK(page_stack(S, ref)[e["v"].get<std::size_t>()] == "transformers/models/gpt2/modeling_gpt2.py:200 in forward");
  CHECK(S["frames"][e["f"][0].get<std::size_t>()][1] == "native");
  CHECK(S["frames"][e["f"][e["u"].get<std::size_t>()].get<std::size_t>()][1] == "user");
  CHECK(peak["sites"][0]["stacks"] == 1);

  // The biggest allocation at the peak (4 MiB, train.py:42) names the same stack entry.
  REQUIRE(peak["biggest"][0]["size"] == 4 * MiB);
  CHECK(peak["biggest"][0]["stack"] == ref);
  CHECK(peak["biggest"][0]["site"] == "train.py:42 in step");
  // Blocks without a stack have none.
  bool without = false;
  for (const auto& b : peak["biggest"])
    if (!b.contains("stack")) without = true;
  CHECK(without);

  // Each distinct stack once; each frame label once.
  std::set<std::string> seen;
  for (std::size_t i = 0; i < S["list"].size(); ++i) {
    std::string key;
    for (const auto& l : page_stack(S, nlohmann::json(i))) key += l + "\n";
    CHECK(seen.insert(key).second);
  }
  std::set<std::string> labels;
  for (const auto& f : S["frames"]) CHECK(labels.insert(f[0].get<std::string>() + f[1].get<std::string>()).second);
  // The three native frames are shared by every stack: once each in "frames".
  CHECK(S["list"].size() >= 3);
  std::size_t native = 0;
  for (const auto& f : S["frames"]) native += f[1] == "native";
  CHECK(native == 3);
  // The OOM and the end refer to the stacks already in the list.
  CHECK(tr["devices"][0]["ooms"][0]["sites"][0]["stack"] == ref);
  CHECK(tr["devices"][0]["end"]["sites"][0]["site"] == "preload.py:3 in <module>");
  CHECK(tr["devices"][0]["end"]["sites"][0]["stack"].is_number_unsigned());
}

TEST_CASE("report data: a trace without stacks has none, and the page is as before", "[report][data][sites]") {
  RecordList l;
  l.add(Action::segment_alloc, 0x10000000, 20 * MiB).add(Action::alloc, 0x10000000, 3 * MiB);
  VectorReader r(l.records);
  std::vector<TraceModel> v;
  v.push_back(build_trace_model(r));
  const auto j = report_data(v);
  CHECK_FALSE(j["traces"][0].contains("stacks"));  // absent, not an empty object
  CHECK_FALSE(j["traces"][0]["devices"][0]["peak"]["biggest"][0].contains("stack"));
  CHECK_FALSE(j["traces"][0]["devices"][0]["peak"].contains("sites"));
}

TEST_CASE("report data: stacks are capped, and the page data says where", "[report][data][sites]") {
  // 30 distinct stacks, each 40 frames deep with the user's line at frame 30 (C++ frames inside it,
  // as with stacks="all"), each allocating one block.
  auto table = std::make_shared<StackTable>();
  std::vector<std::string> names;
  for (int i = 0; i < 40; ++i) names.push_back("at::native::op" + std::to_string(i) + "(int)");
  RecordList l;
  l.add(Action::segment_alloc, 0x10000000, 64 * MiB);
  for (int s = 0; s < 30; ++s) {
    std::vector<Frame> st;
    for (int i = 0; i < 30; ++i) st.push_back({"", 0, names[static_cast<std::size_t>(i)]});
    st.push_back({"train.py", static_cast<std::uint32_t>(100 + s), "step"});
    for (int i = 31; i < 40; ++i) st.push_back({"train.py", static_cast<std::uint32_t>(i), "main"});
    l.add(Action::alloc, 0x10000000 + static_cast<std::uint64_t>(s) * MiB, MiB);
    l.records.back().stack_id = table->intern(st);
  }
  VectorReader r(l.records);
  r.stack_table = table;
  std::vector<TraceModel> v;
  v.push_back(build_trace_model(r));
  ReportOptions o;
  o.max_stacks = 4;
  o.max_stack_frames = 16;
  const auto j = report_data(v, o);
  const auto& S = j["traces"][0]["stacks"];
  // The ten biggest allocations at the peak come first (stacks 0 to 9), then the top ten sites
  // (the same ten stacks): four are embedded, six left out.
  CHECK(S["list"].size() == 4);
  CHECK(S["max_stacks"] == 4);
  CHECK(S["max_frames"] == 16);
  CHECK(S["stacks_left_out"] == 6);
  std::size_t with = 0, without = 0;
  for (const auto& x : j["traces"][0]["devices"][0]["peak"]["sites"]) (x["stack"].is_null() ? without : with)++;
  CHECK(with == 4);
  CHECK(without == 6);
  // A cut stack: the innermost frames (4), a gap, three frames inside the user's line, the line
  // and eight of its callers, a gap.
  const auto lines = page_stack(S, nlohmann::json(0));
  const auto& e = S["list"][0];
  CHECK(e["n"] == 40);
  CHECK(lines.size() == 16 + 2);  // 16 frames and two gaps
  CHECK(lines[0] == "?? in at::native::op0");
  CHECK(lines[4] == "-23");  // frames 4..26 left out
  CHECK(lines[5] == "?? in at::native::op27");
  CHECK_THAT(lines[e["u"].get<std::size_t>()], Catch::StartsWith("train.py:1"));
  CHECK(lines.back() == "-1");  // the outermost caller
  std::size_t frames_shown = 0;
  for (const auto& x : lines) frames_shown += x[0] != '-';
  CHECK(frames_shown == 16);

  // A long label is cut, at a character boundary.
  ReportOptions tiny;
  tiny.max_frame_chars = 12;
  const auto k = report_data(v, tiny);
  const auto& f0 = k["traces"][0]["stacks"]["frames"][0][0].get<std::string>();
  CHECK(f0 == "?? in at::na...");
}

TEST_CASE("a hostile stack cannot inject markup into the page", "[report][escape][sites]") {
  auto table = std::make_shared<StackTable>();
  RecordList l;
  l.add(Action::segment_alloc, 0x10000000, 20 * MiB).add(Action::alloc, 0x10000000, 3 * MiB);
  l.records.back().stack_id = table->intern({{kEvil, 7, kEvil}, {"</script>train.py", 3, "<b>x</b>"}});
  VectorReader r(l.records);
  r.stack_table = table;
  std::vector<TraceModel> v;
  v.push_back(build_trace_model(r));
  const std::string page = render_report_html(v);
  CHECK(count(page, "<script") == 2);
  CHECK(count(page, "</script>") == 2);
  CHECK(page.find("<img") == std::string::npos);
  CHECK(page.find("<b>") == std::string::npos);
  CHECK(page.find("\xff\xfe") == std::string::npos);
  CHECK(report_data(v)["traces"][0]["stacks"]["list"].size() == 1);
}

TEST_CASE("report data: the page's marks are shared by its devices, each an equal share", "[report][data][marks]") {
  // 16 processes, each with 5,000 marks on its device: 80,000 marks, the page keeps its 8,000,
  // 500 a device (each device's own cap of 2,000 would keep 32,000).
  const ReportOptions o;
  std::vector<TraceModel> models;
  for (int r = 0; r < 16; ++r) {
    RecordList l;
    l.add(Action::segment_alloc, 0x20000000, 20 * MiB, 0, r);
    l.add(Action::alloc, 0x20000000, 4 * MiB, 0, r);
    for (int i = 0; i < 5000; ++i) l.add(Action::mark, 0, 0, 0, r);
    TraceHeader h;
    h.path = "rank" + std::to_string(r) + ".jsonl";
    VectorReader reader(l.records, h);
    models.push_back(build_trace_model(reader));
  }
  const auto data = report_data(models, o);
  std::size_t all = 0;
  for (const auto& t : data["traces"])
    for (const auto& d : t["devices"]) {
      std::size_t shown = 0;
      for (const auto& m : d["markers"]) shown += m["kind"] == "mark";
      CHECK(shown == o.max_page_marks / 16);
      all += shown;
      REQUIRE(d.contains("notes"));
      CHECK(d["notes"].back() == "5000 marks; one in 10 is drawn (500 in all) to keep the page small");
    }
  CHECK(all == o.max_page_marks);
}

TEST_CASE("report data: marks carry their names, sit on the process's devices, and are bounded",
          "[report][data][marks]") {
  // The shim's small trace: one mark, "step 1".
  auto small = load_models({std::string(VRAMTRACE_REPORTS_TEST_DIR) + "/data/small.vramtrace.jsonl"});
  auto dj = report_data(small)["traces"][0]["devices"][0];
  std::vector<std::string> names;
  for (const auto& m : dj["markers"])
    if (m["kind"] == "mark") names.push_back(m.value("name", "?"));
  CHECK(names == std::vector<std::string>{"step 1"});

  // 100,000 marks on a device-1 process: no device 0, at most 2,000 marks in the page, a note.
  RecordList l;
  l.add(Action::segment_alloc, 0x20000000, 20 * MiB, 0, 1);
  l.add(Action::alloc, 0x20000000, 4 * MiB, 0, 1);
  for (int i = 0; i < 100000; ++i) l.add(Action::mark, 0, 0);
  TraceHeader h;
  VectorReader r(l.records, h);
  std::vector<TraceModel> models;
  models.push_back(build_trace_model(r));
  auto data = report_data(models);
  REQUIRE(data["traces"][0]["devices"].size() == 1);
  const auto& d1 = data["traces"][0]["devices"][0];
  CHECK(d1["device"] == 1);
  std::size_t shown = 0;
  for (const auto& m : d1["markers"]) shown += m["kind"] == "mark";
  CHECK(shown == 2000);
  bool noted = false;
  for (const auto& n : d1["notes"]) noted = noted || n.get<std::string>().find("100000 marks; one in 50") == 0;
  CHECK(noted);
  CHECK(render_report_html(models).size() < 2'000'000);
}

TEST_CASE("checkpoints: none by default; when asked, N to 2N evenly spread in time, each the state after its event",
          "[report][checkpoints]") {
  RecordList l;
  const DevicePtr s = 0x40000000;
  l.add(Action::segment_alloc, s, 512 * MiB);
  for (int i = 0; i < 400; ++i) l.add(Action::alloc, s + i * MiB, MiB);
  for (int i = 0; i < 400; ++i) l.add(Action::free_completed, s + i * MiB, MiB);
  auto build = [&](ModelOptions mo) {
    VectorReader r(l.records, TraceHeader{});
    return build_trace_model(r, mo);
  };
  CHECK(build({}).devices.at(0).checkpoints.empty());  // summary, check, diff: nothing taken
  ModelOptions mo;
  mo.checkpoints = 8;
  const TraceModel m = build(mo);
  const auto& cps = m.devices.at(0).checkpoints;
  REQUIRE(cps.size() >= 8);
  REQUIRE(cps.size() <= 16);
  // Events 1 us apart: the first event of each slot, the slots evenly spread from the first event.
  const std::uint64_t step = cps[1].event_index - cps[0].event_index;
  CHECK(cps[0].event_index == 0);
  for (std::size_t i = 0; i < cps.size(); ++i) {
    INFO("checkpoint " << i << " at event " << cps[i].event_index);
    CHECK(cps[i].event_index == i * step);
    // The state after event e: the segment, then e allocations of 1 MiB, then frees.
    const std::int64_t e = static_cast<std::int64_t>(cps[i].event_index);
    const std::int64_t live = e <= 400 ? e : 800 - e;
    CHECK(cps[i].stats.allocated_bytes[kStatAll].current == live * static_cast<std::int64_t>(MiB));
    CHECK(cps[i].time_ns == l.records[cps[i].event_index].time_ns);
    CHECK(cps[i].layout.segments.size() == 1);
    CHECK(cps[i].stacks.empty());
  }
  // In the page: the model's checkpoints and the end, as states, within the page's budget.
  std::vector<TraceModel> v;
  v.push_back(build(report_model_options()));
  auto j = report_data(v);
  const auto& dev = j["traces"][0]["devices"][0];
  const auto& pc = dev["checkpoints"];
  const auto& model_cps = v[0].devices[0].checkpoints;
  CHECK(pc.size() == model_cps.size() + (model_cps.back().event_index < v[0].devices[0].at_end.event_index));
  CHECK(pc.back()["event"] == v[0].devices[0].at_end.event_index);
  CHECK(pc[0]["allocated"] == v[0].devices[0].checkpoints[0].stats.allocated_bytes[kStatAll].current);
  CHECK(dev["checkpoints_every"] == 1);
  // A budget the checkpoints exceed: one in k, the end kept.
  ReportOptions small;
  small.max_checkpoint_bytes = 6000;
  auto j2 = report_data(v, small);
  const auto& d2 = j2["traces"][0]["devices"][0];
  CHECK(d2["checkpoints_every"].get<std::size_t>() > 1);
  CHECK(d2["checkpoints"].dump().size() <= 6000 + 2 * d2["checkpoints"].size());
  CHECK(d2["checkpoints"].back()["event"] == v[0].devices[0].at_end.event_index);
}

TEST_CASE("checkpoints: a layout is capped as the peak's is drawn", "[report][checkpoints]") {
  RecordList l;
  const DevicePtr s = 0x40000000;
  for (int seg = 0; seg < 30; ++seg) l.add(Action::segment_alloc, s + seg * 64 * MiB, (1 + seg) * MiB);
  for (int i = 0; i < 40; ++i) l.add(Action::alloc, s + 29 * 64 * MiB + i * 512 * 1024 / 2, 512 * 1024 / 2);
  ModelOptions mo;
  mo.checkpoints = 4;
  mo.checkpoint_max_segments = 10;
  mo.checkpoint_max_blocks = 5;
  VectorReader r(l.records, TraceHeader{});
  const TraceModel m = build_trace_model(r, mo);
  const StateAt& last = m.devices.at(0).checkpoints.back();
  REQUIRE(last.layout.segments.size() == 10);
  CHECK(last.segments_left_out == 20);
  CHECK(last.layout.segments.front().total_size == 21 * MiB);  // the largest, in address order
  CHECK(last.layout.segments.back().blocks.size() == 6);       // 5 and the block where the rest begins
  ReportOptions ro;
  ro.max_segments_drawn = 10;
  ro.max_blocks_per_segment = 5;
  std::vector<TraceModel> v;
  VectorReader again(l.records, TraceHeader{});
  v.push_back(build_trace_model(again, mo));
  const auto j = report_data(v, ro);
  // A segment equal to the one at its address in the checkpoint before is written {addr, same}
  // (the page takes the earlier one): resolved here as the page does.
  nlohmann::json cp = j["traces"][0]["devices"][0]["checkpoints"];
  REQUIRE(cp.size() >= 2);
  std::map<std::string, nlohmann::json> prev;
  std::size_t same = 0;
  for (auto& c : cp) {
    std::map<std::string, nlohmann::json> cur;
    for (auto& g : c["segments"]) {
      if (g.contains("same")) {
        ++same;
        g = prev.at(g["addr"].get<std::string>());
      }
      cur[g["addr"].get<std::string>()] = g;
    }
    prev = std::move(cur);
  }
  CHECK(same > 0);  // the segments no allocation touches
  // The end state (full layout) and the last checkpoint draw the same way.
  const auto& end = cp.back();
  const auto& before = cp[cp.size() - 2];
  CHECK(end["segments_total"] == 30);
  CHECK(before["segments_total"] == 30);
  CHECK(before["segments"].back()["blocks"] == end["segments"].back()["blocks"]);
}

TEST_CASE("report data: the icicle at the peak adds up to the bytes with a stack", "[report][icicle]") {
  auto models =
      load_models({std::string(VRAMTRACE_TEST_DATA_DIR) + "/pickle/sites.snapshot.pickle"}, report_model_options());
  const auto j = report_data(models);
  const auto& ic = j["traces"][0]["devices"][0]["peak"]["icicle"];
  REQUIRE(ic.is_object());
  std::uint64_t with_stack = 0;
  for (const StackBytes& sb : models[0].devices[0].at_peak.stacks)
    if (sb.stack && models[0].stacks->get(sb.stack)) with_stack += sb.bytes;
  CHECK(ic["total"] == with_stack);
  std::uint64_t tops = 0;
  for (std::size_t i = 0; i < ic["p"].size(); ++i) {
    const auto p = ic["p"][i].get<std::int64_t>();
    if (p < 0)
      tops += ic["b"][i].get<std::uint64_t>();
    else  // a parent before its children, holding at least their bytes
      CHECK(ic["b"][static_cast<std::size_t>(p)].get<std::uint64_t>() >= ic["b"][i].get<std::uint64_t>());
    if (p >= 0) CHECK(static_cast<std::size_t>(p) < i);
  }
  CHECK(tops == with_stack);
  ReportOptions few;
  few.max_icicle_nodes = 3;
  const auto j2 = report_data(models, few);
  CHECK(j2["traces"][0]["devices"][0]["peak"]["icicle"]["b"].size() <= 3);
}

TEST_CASE("report data: a report's timeline has twice the buckets, in about the room of the old ones",
          "[report][data]") {
  // 100 s of allocations and frees, one every 500 us: 200,000 events.
  std::vector<TraceRecord> records;
  TraceRecord seg;
  seg.action = Action::segment_alloc;
  seg.addr = 0x40000000;
  seg.size = 1ull << 30;
  seg.time_ns = 0;
  records.push_back(seg);
  for (int i = 0; i < 200000; ++i) {
    TraceRecord r;
    r.action = i % 2 ? Action::free_completed : Action::alloc;
    r.addr = 0x40000000;
    r.size = (1 + i / 2 % 64) * MiB;
    r.time_ns = static_cast<std::int64_t>(i + 1) * 500'000;
    records.push_back(r);
  }
  auto page_tl = [&](const ModelOptions& mo, std::size_t* buckets) {
    VectorReader r(records, TraceHeader{});
    std::vector<TraceModel> v;
    v.push_back(build_trace_model(r, mo));
    *buckets = v[0].devices[0].timeline.size();
    return report_data(v)["traces"][0]["devices"][0]["tl"].dump().size();
  };
  std::size_t plain = 0, report = 0;
  const std::size_t plain_bytes = page_tl(ModelOptions{}, &plain);
  const std::size_t report_bytes = page_tl(report_model_options(), &report);
  INFO(plain << " buckets in " << plain_bytes << " bytes; " << report << " in " << report_bytes);
  CHECK(plain >= 4096);
  CHECK(plain < 8192);
  CHECK(report >= 8192);
  CHECK(report < 16384);
  CHECK(report_bytes < 1'000'000);
  CHECK(report_model_options(ReportOptions{}, 9).timeline_buckets == ModelOptions{}.timeline_buckets);
}
