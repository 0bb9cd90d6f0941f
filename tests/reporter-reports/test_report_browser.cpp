// The HTML report in a real browser (Debian's chromium, headless): no console error, the plot is
// drawn (the screenshot is not blank), the values read at the peak's time equal the summary's, a
// site's call stack appears under the mouse, on keyboard focus and on a click, and a hostile
// trace's strings do not run. Exits with 77 (ctest: skipped) when chromium is absent.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "analyses/oom/oom_report.h"
#include "analyses/oom/oom_whatif.h"
#include "analyses/sites.h"
#include "analyses/summary.h"
#include "browser.h"
#include "model/load_models.h"
#include "render/report_html.h"
#include "vector_reader.h"

using namespace vramtrace;
using namespace vramtrace::testing;
namespace fs = std::filesystem;

namespace {

/// Runs chromium headless on `html`; returns stdout; stderr goes to `err_file`.
std::string run_chromium(const fs::path& html, const std::string& extra, const fs::path& err_file) {
  fs::path profile =
      fs::temp_directory_path() / ("vt-chromium-" + std::to_string(::getpid()) + "-" + std::to_string(std::rand()));
  fs::create_directories(profile);
  std::string cmd =
      "timeout 90 " + chromium_path() +
      " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking"
      " --disable-component-update --disable-sync --hide-scrollbars --user-data-dir=" +
      profile.string() + " --virtual-time-budget=5000 --window-size=1400,900 " + extra + " 'file://" + html.string() +
      "' 2>'" + err_file.string() + "'";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::array<char, 65536> buf;
  std::size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  pclose(p);
  std::error_code ec;
  fs::remove_all(profile, ec);
  return out;
}

std::string probe_of(const std::string& dom) {
  auto b = dom.find("id=\"vt-probe\"");
  REQUIRE(b != std::string::npos);
  b = dom.find('>', b) + 1;
  auto e = dom.find("</pre>", b);
  REQUIRE(e != std::string::npos);
  std::string s = dom.substr(b, e - b);
  // --dump-dom serialises text with HTML entities
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s.compare(i, 6, "&quot;") == 0) {
      out += '"';
      i += 5;
    } else if (s.compare(i, 5, "&amp;") == 0) {
      out += '&';
      i += 4;
    } else if (s.compare(i, 4, "&lt;") == 0) {
      out += '<';
      i += 3;
    } else if (s.compare(i, 4, "&gt;") == 0) {
      out += '>';
      i += 3;
    } else
      out += s[i];
  }
  return out;
}

// The stack box as the page shows it: visible or not, its heading and its lines, each with the
// user's-line mark.
nlohmann::json read_stack_box(Browser& b) {
  return b.eval(
      "(function(){var t=document.getElementById('vt-stack');if(!t)return {shown:false};"
      "return {shown:getComputedStyle(t).display!=='none',head:t.firstChild?t.firstChild.textContent:'',"
      "lines:[].map.call(t.querySelectorAll('.fr'),function(e){return {text:e.textContent,"
      "user:e.classList.contains('user'),gap:e.classList.contains('gap')};})};})()");
}

// Scrolls the first element matching `selector` into the middle of the window and names it
// window.vtTarget; returns its centre in window coordinates and its first cell's text.
nlohmann::json target(Browser& b, const std::string& selector) {
  return b.eval("(function(){var r=document.querySelector('" + selector +
                "');if(!r)return null;window.vtTarget=r;r.scrollIntoView({block:'center'});"
                "var q=r.getBoundingClientRect();return {x:q.left+q.width/2,y:q.top+q.height/2,"
                "text:r.cells[0].textContent};})()");
}

// The lines the box must show for stack `id`: each frame as `summary` labels it, innermost first,
// the user's line marked.
std::vector<std::string> expected_lines(const StackTable& table, std::uint32_t id) {
  const std::vector<Frame>& st = *table.get(id);
  const SiteFrames where = site_frames(st);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < st.size(); ++i) out.push_back((i == where.user ? "\u25B6 " : "  ") + frame_label(st[i]));
  return out;
}

std::vector<std::string> shown_lines(const nlohmann::json& box) {
  std::vector<std::string> out;
  for (const auto& l : box["lines"]) out.push_back(l["text"].get<std::string>());
  return out;
}

}  // namespace

TEST_CASE("browser: a site's call stack shows on hover, keyboard focus and click", "[browser][sites]") {
  skip_without_chromium();
  // The default `vramtrace run` of GPT-2 training on the H200 (tests/data/torch-h200/README.md).
  auto models = load_models({std::string(VRAMTRACE_TEST_DATA_DIR) + "/torch-h200/gpt2_run.snapshot.pickle.zst"});
  REQUIRE(models.at(0).stacks != nullptr);
  const StackTable& table = *models[0].stacks;
  const auto sites = trace_sites(models[0]);
  const Site& top = sites.at(0).at_peak.sites.at(0);
  REQUIRE(table.get(top.stack)->size() <= ReportOptions{}.max_stack_frames);  // shown whole
  auto report = open_report(models, "stacks");
  Browser& b = report.b();

  // Hover: the first site at the peak.
  const auto row = target(b, "table.sites tr.hasstack");
  REQUIRE(row.is_object());
  CHECK(row["text"] == top.label);
  CHECK_FALSE(read_stack_box(b)["shown"].get<bool>());
  b.move_mouse(row["x"].get<double>(), row["y"].get<double>());
  auto box = read_stack_box(b);
  INFO(box.dump(1));
  REQUIRE(box["shown"].get<bool>());
  CHECK_THAT(box["head"].get<std::string>(), Catch::StartsWith(top.label + ": "));
  screenshot(b, "site-stack-on-hover");
  const std::vector<std::string> want = expected_lines(table, top.stack);
  CHECK(shown_lines(box) == want);
  std::size_t marked = 0;
  for (const auto& l : box["lines"]) marked += l["user"].get<bool>();
  CHECK(marked == 1);
  CHECK_THAT(want.back(), !Catch::StartsWith("\u25B6"));  // its callers are there too
  // Away from the row, the box goes.
  b.move_mouse(3, 3);
  CHECK_FALSE(read_stack_box(b)["shown"].get<bool>());

  // Keyboard: Tab until the row has the focus; the box shows the same stack; Escape hides it.
  bool focused = false;
  for (int i = 0; i < 400 && !focused; ++i) {
    b.key("Tab", 9);
    focused = b.eval("document.activeElement===window.vtTarget").get<bool>();
  }
  REQUIRE(focused);
  box = read_stack_box(b);
  REQUIRE(box["shown"].get<bool>());
  CHECK(shown_lines(box) == want);
  b.key("Escape", 27);
  CHECK_FALSE(read_stack_box(b)["shown"].get<bool>());

  // A click (a tap on a touch screen) on the biggest allocation at the peak pins its stack: the
  // box stays when the mouse leaves, until a click elsewhere.
  // (the first of the biggest allocations whose stack is known: the table's first row with one)
  const auto& biggest = models[0].devices.at(0).at_peak.biggest;
  const auto big_it =
      std::find_if(biggest.begin(), biggest.end(), [](const LiveAllocation& l) { return l.stack != 0; });
  REQUIRE(big_it != biggest.end());
  const LiveAllocation& big = *big_it;
  const auto brow = target(b, "table.biggest tr.hasstack");
  REQUIRE(brow.is_object());
  b.click(brow["x"].get<double>(), brow["y"].get<double>());
  b.move_mouse(3, 3);
  box = read_stack_box(b);
  REQUIRE(box["shown"].get<bool>());
  CHECK(shown_lines(box) == expected_lines(table, big.stack));
  b.click(3, 3);
  CHECK_FALSE(read_stack_box(b)["shown"].get<bool>());
  CHECK(b.eval("JSON.parse(document.getElementById('vt-probe').textContent).errors") == nlohmann::json::array());
}

TEST_CASE("browser: the gpt2 report draws, reads back the summary's figures, logs no error", "[browser]") {
  skip_without_chromium();
  auto models = load_models({std::string(VRAMTRACE_TEST_DATA_DIR) + "/torch-h200/gpt2_train.torchtrace.jsonl.gz"});
  auto summary = summary_json(models);
  fs::path dir = fs::temp_directory_path() / ("vt-report-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path html = dir / "report.html";
  std::ofstream(html, std::ios::binary) << render_report_html(models);

  std::string dom = run_chromium(html, "--enable-logging=stderr --v=0 --dump-dom", dir / "dom.err");
  std::string log = read_file(dir / "dom.err");
  INFO(log.substr(0, 4000));
  CHECK(log.find("CONSOLE") == std::string::npos);  // no console message at all (errors included)
  CHECK(log.find("Uncaught") == std::string::npos);
  auto probe = nlohmann::json::parse(probe_of(dom));
  CHECK(probe["errors"].empty());
  REQUIRE(probe["devices"].size() == 1);
  const auto& p = probe["devices"][0];
  const auto& sd = summary["traces"][0]["devices"][0];
  // The values under the cursor at the peak's time are the summary's peak figures.
  CHECK(p["at_peak"]["allocated"]["max"].get<std::int64_t>() ==
        sd["stats"]["allocated_bytes.all.peak"].get<std::int64_t>());
  CHECK(p["at_peak"]["allocated"]["max"].get<std::int64_t>() == sd["peak"]["allocated_bytes"].get<std::int64_t>());
  CHECK(p["at_peak"]["reserved"]["last"].get<std::int64_t>() == sd["peak"]["reserved_bytes"].get<std::int64_t>());
  CHECK(p["max_allocated"].get<std::int64_t>() == sd["stats"]["allocated_bytes.all.peak"].get<std::int64_t>());
  CHECK(p["end_reserved"].get<std::int64_t>() == sd["stats"]["reserved_bytes.all.current"].get<std::int64_t>());
  REQUIRE(probe["drawn_pixels"].size() == 1);
  CHECK(probe["drawn_pixels"][0].get<int>() > 5000);

  run_chromium(html, "--screenshot=" + (dir / "shot.png").string(), dir / "shot.err");
  std::string png = read_file(dir / "shot.png");
  REQUIRE(png.size() > 1000);
  CHECK(png_variety(png) > 0.005);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST_CASE("browser: the memory ledger of a PyTorch run's two levels renders its rows", "[browser][ledger]") {
  skip_without_chromium();
  // The pair of tests/data/ledger (make_ledger_pair.py): at the end, 600 MiB of rest of which the
  // context's 500 MiB, 26 MiB outside PyTorch's allocator.
  auto models = load_models({std::string(VRAMTRACE_TEST_DATA_DIR) + "/ledger/run.4242.torch.pickle"});
  REQUIRE(models.at(0).ledger);
  fs::path dir = fs::temp_directory_path() / ("vt-report-ledger-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path html = dir / "ledger.html";
  std::ofstream(html, std::ios::binary) << render_report_html(models);
  std::string dom = run_chromium(html, "--enable-logging=stderr --v=0 --dump-dom", dir / "dom.err");
  std::string log = read_file(dir / "dom.err");
  INFO(log.substr(0, 4000));
  CHECK(log.find("Uncaught") == std::string::npos);
  auto probe = nlohmann::json::parse(probe_of(dom));
  CHECK(probe["errors"].empty());
  CHECK(dom.find("Memory ledger: tensor level") != std::string::npos);
  for (const char* cell : {"+ rest: CUDA context, driver, other processes", "600.00 MiB", "500.00 MiB", "26.00 MiB",
                           "729.00 MiB", "OOM 1"})
    CHECK(dom.find(cell) != std::string::npos);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST_CASE("browser: a hostile trace's strings do not run", "[browser][escape]") {
  skip_without_chromium();
  testing::RecordList l;
  l.add(Action::segment_alloc, 0x10000000, 20u << 20).add(Action::alloc, 0x10000000, 3u << 20);
  TraceHeader h;
  h.path = "</script><script>document.body.setAttribute('data-pwned','1')</script>";
  h.workload = "<img src=x onerror=\"document.body.setAttribute('data-pwned','2')\">";
  h.settings = "\xff\xfe<b>bold</b>";
  // A frame whose file and function names are markup, shown on hover.
  auto table = std::make_shared<StackTable>();
  l.records.back().stack_id =
      table->intern({{"<img src=x onerror=\"document.body.setAttribute('data-pwned','3')\">", 1,
                      "</script><script>document.body.setAttribute('data-pwned','4')</script>"}});
  testing::VectorReader r(l.records, h);
  r.stack_table = table;
  std::vector<TraceModel> v;
  v.push_back(build_trace_model(r));
  fs::path dir = fs::temp_directory_path() / ("vt-report-evil-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path html = dir / "evil.html";
  std::ofstream(html, std::ios::binary) << render_report_html(v);
  std::string dom = run_chromium(html, "--dump-dom", dir / "err");
  REQUIRE(dom.find("vt-probe") != std::string::npos);
  CHECK(dom.find("data-pwned=") == std::string::npos);
  CHECK(dom.find("<b>bold</b>") == std::string::npos);
  auto probe = nlohmann::json::parse(probe_of(dom));
  CHECK(probe["errors"].empty());
  {
    // Under the mouse, the stack's text is shown as text.
    Browser b(html, dir / "cdp.err");
    wait_for_page(b);
    const auto row = target(b, "table.sites tr.hasstack");
    REQUIRE(row.is_object());
    b.move_mouse(row["x"].get<double>(), row["y"].get<double>());
    const auto box = read_stack_box(b);
    REQUIRE(box["shown"].get<bool>());
    CHECK_THAT(shown_lines(box).at(0), Catch::Contains("onerror=") && Catch::Contains("</script><script>"));
    CHECK(b.eval("document.body.hasAttribute('data-pwned')") == false);
    CHECK(b.eval("document.querySelectorAll('img').length") == 0);
    // The icicle's tooltip shows the frame's markup as text too.
    const auto fr = b.eval(
        "(function(){var I=vtPage.icicles[0],r=I.rects.filter(function(r){return r.node>=0;})[0];"
        "I.canvas.scrollIntoView({block:'center'});var q=I.canvas.getBoundingClientRect();"
        "return {x:q.left+r.x+Math.min(r.w/2,200),y:q.top+r.y+8};})()");
    b.move_mouse(fr["x"].get<double>(), fr["y"].get<double>());
    const auto itip = b.eval("vtPage.icicles[0].canvas.parentNode.querySelector('.tip').textContent");
    CHECK_THAT(itip.get<std::string>(), Catch::Contains("onerror=") || Catch::Contains("</script><script>"));
    CHECK(b.eval("document.body.hasAttribute('data-pwned')") == false);
    CHECK(b.eval("document.querySelectorAll('img').length") == 0);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST_CASE("browser: idle stretches hold their values at every zoom, the OOM and the peak are marked",
          "[browser][marks]") {
  skip_without_chromium();
  // A BERT-style encoder that ran out of memory under a 10 GiB cap on the H200
  // (tests/data/oom/encoder_10g): PyTorch's history with its OOM, and idle stretches between steps.
  auto models = load_models({std::string(VRAMTRACE_TEST_DATA_DIR) + "/oom/encoder_10g/encoder.484.torch.pickle.gz"});
  const std::string page = render_report_html(models);
  // Without JavaScript the page says so, and which commands give the figures as text.
  auto ns = page.find("<noscript>");
  REQUIRE(ns != std::string::npos);
  CHECK(page.find("vramtrace summary TRACE", ns) < page.find("</noscript>", ns));

  auto report = open_page(page, "marks");
  Browser& b = report.b();
  // The whole run: one OOM marker, the peak's dot.
  auto shown = b.eval("JSON.parse(document.getElementById('vt-probe').textContent).marks[0]");
  CHECK(shown["oom"] == 1);
  CHECK(shown["peak"] == true);
  screenshot(b, "oom-and-peak-marked");

  // The longest idle stretch: zoomed into its middle half, every series is still drawn, flat at
  // the last values before it, and the tooltip's values are exactly those.
  auto gap = b.eval(
      "(function(){var d=vtPage.data.traces[0].devices[0],tl=d.tl,best=-1,len=0;"
      "for(var i=0;i+1<tl.t.length;i++)if(tl.t[i+1]-tl.te[i]>len){len=tl.t[i+1]-tl.te[i];best=i;}"
      "if(best<0)return null;var a=tl.te[best],z=tl.t[best+1],t0=a+len/4,t1=z-len/4,v=vtPage.valuesAt(d,(t0+t1)/2);"
      "var tln=vtPage.timelines[0];tln.zoom(t0,t1);var c=tln.canvas,g=c.getContext('2d'),w=c.width,h=c.height,"
      "y=Math.round(tln.yOf(tl.alast[best])),px=g.getImageData(90,0,w-110,h).data,drawn=0;"
      "for(var k=0;k<px.length;k+=4)if(px[k]<240||px[k+1]<240||px[k+2]<240)drawn++;"
      "var row=g.getImageData(90,Math.max(0,y-2),w-110,5).data,blue=0;"
      "for(var k=0;k<row.length;k+=4)if(row[k+2]>row[k]+40)blue++;"
      "return {len:len,last:tl.alast[best],v:v,drawn:drawn,blue:blue,cols:w-110};})()");
  INFO(gap.dump(1));
  REQUIRE(gap.is_object());
  screenshot(b, "idle-stretch-zoomed");
  CHECK(gap["len"].get<double>() > 1.0);  // a stretch of more than a millisecond without an event
  CHECK(gap["v"]["gap"] == true);
  CHECK(gap["v"]["allocated"]["min"] == gap["last"]);
  CHECK(gap["v"]["allocated"]["max"] == gap["last"]);
  CHECK(gap["blue"].get<int>() > gap["cols"].get<int>() / 2);  // the allocated line runs across the view

  // Zoomed into the first 100 ms, where less than a tenth of the peak is allocated, the y axis fits
  // the view: its highest value is drawn near the top, not at the bottom of the whole run's scale.
  auto fit = b.eval(
      "(function(){var tln=vtPage.timelines[0],d=vtPage.data.traces[0].devices[0],tl=d.tl,mx=0;"
      "for(var i=0;i<tl.t.length&&tl.t[i]<=100;i++)mx=Math.max(mx,tl.rmax[i],tl.amax[i],tl.cmax[i]);"
      "tln.zoom(0,100);var c=tln.canvas;return {max:mx,y:tln.yOf(mx),h:parseFloat(c.style.height),"
      "dpr_ok:c.width===Math.round(parseFloat(c.style.width)*(window.devicePixelRatio||1))};})()");
  INFO(fit.dump());
  CHECK(fit["y"].get<double>() < 0.2 * fit["h"].get<double>());
  CHECK(fit["dpr_ok"] == true);

  // Back to the whole run: hovering the OOM marker gives its diagnosis; clicking it goes to its section.
  auto at = b.eval(
      "(function(){var tln=vtPage.timelines[0],d=vtPage.data.traces[0].devices[0];tln.zoom(0,1e18);"
      "var m=d.markers.filter(function(m){return m.kind==='oom';})[0];var r=tln.canvas.getBoundingClientRect();"
      "tln.canvas.scrollIntoView({block:'center'});r=tln.canvas.getBoundingClientRect();"
      "return {x:r.left+tln.xOf(m.t),y:r.top+60,anchor:d.ooms.filter(function(o){return o.anchor;})[0].anchor};})()");
  INFO(at.dump());
  b.move_mouse(at["x"].get<double>(), at["y"].get<double>());
  auto tip = b.eval(
      "(function(){var t=document.querySelector('.plot .tip'),r=t.getBoundingClientRect(),"
      "p=t.parentNode.getBoundingClientRect();return {shown:t.style.display,text:t.textContent,"
      "left:r.left,right:r.right,box_left:p.left,box_right:p.right};})()");
  INFO(tip.dump());
  CHECK(tip["shown"] == "block");
  // The OOM sits near the right end: its text is moved to the cursor's left, not cut off.
  CHECK(tip["right"].get<double>() <= tip["box_right"].get<double>() + 1);
  CHECK(tip["left"].get<double>() >= tip["box_left"].get<double>() - 1);
  CHECK_THAT(tip["text"].get<std::string>(), Catch::StartsWith("OOM at "));
  CHECK_THAT(tip["text"].get<std::string>(), Catch::Contains("Diagnosis: capacity"));
  CHECK_THAT(tip["text"].get<std::string>(), Catch::Contains("(click: the state at this OOM"));
  screenshot(b, "oom-hover");
  // A click on it shows the allocator's state at that OOM under the chart, as the model has it.
  b.click(at["x"].get<double>(), at["y"].get<double>());
  const auto& oom = models[0].devices.at(0).ooms.at(0);
  REQUIRE(oom.state.captured);
  const auto state = b.eval(
      "(function(){var v=vtPage.stateViews[0],s=v.shown;if(!s)return null;var "
      "body=document.querySelectorAll('.stateview')[0],"
      "a=body.querySelector('a');return {what:s.what,event:s.event,allocated:s.allocated,reserved:s.reserved,"
      "head:body.querySelector('.statehead').textContent,link:a?a.textContent:null,"
      "link_shown:a?getComputedStyle(a.parentNode).display!=='none':false};})()");
  INFO(state.dump(1));
  REQUIRE(state.is_object());
  CHECK(state["what"] == "OOM 1");
  CHECK(state["event"].get<std::uint64_t>() == oom.state.event_index);
  CHECK(state["allocated"].get<std::int64_t>() == oom.state.stats.allocated_bytes[kStatAll].current);
  CHECK(state["reserved"].get<std::int64_t>() == oom.state.stats.reserved_bytes[kStatAll].current);
  CHECK_THAT(state["head"].get<std::string>(), Catch::EndsWith("OOM 1), the OOM clicked on the chart"));
  CHECK(state["link_shown"] == true);
  b.eval("(function(){document.querySelector('.stateview').scrollIntoView({block:'start'});return 0;})()");
  screenshot(b, "state-at-oom-click");
  // Its section stays a click away: the link in the state view.
  const auto link = b.eval(
      "(function(){var a=document.querySelector('.stateview a');a.scrollIntoView({block:'center'});"
      "var r=a.getBoundingClientRect();return {x:r.left+r.width/2,y:r.top+r.height/2};})()");
  b.click(link["x"].get<double>(), link["y"].get<double>());
  auto top = b.eval("document.getElementById('" + at["anchor"].get<std::string>() + "').getBoundingClientRect().top");
  CHECK(std::abs(top.get<double>()) < 40);
  CHECK(b.eval("JSON.parse(document.getElementById('vt-probe').textContent).errors") == nlohmann::json::array());
  CHECK(b.eval("window.__vtErrors||[]") == nlohmann::json::array());
}

namespace {

// CIELAB (D65) of an sRGB colour "#rrggbb" after the colour-vision-deficiency matrix `m` (Machado,
// Oliveira and Fernandes 2009, severity 1) applied in linear RGB.
std::array<double, 3> simulated_lab(const std::string& hex, const std::array<std::array<double, 3>, 3>& m) {
  std::array<double, 3> c{};
  for (int i = 0; i < 3; ++i) {
    double v = std::stoi(hex.substr(1 + 2 * i, 2), nullptr, 16) / 255.0;
    c[i] = v <= 0.04045 ? v / 12.92 : std::pow((v + 0.055) / 1.055, 2.4);
  }
  std::array<double, 3> o{};
  for (int i = 0; i < 3; ++i) o[i] = std::clamp(m[i][0] * c[0] + m[i][1] * c[1] + m[i][2] * c[2], 0.0, 1.0);
  const double x = (0.4124 * o[0] + 0.3576 * o[1] + 0.1805 * o[2]) / 0.95047;
  const double y = 0.2126 * o[0] + 0.7152 * o[1] + 0.0722 * o[2];
  const double z = (0.0193 * o[0] + 0.1192 * o[1] + 0.9505 * o[2]) / 1.08883;
  auto f = [](double t) { return t > 0.008856 ? std::cbrt(t) : 7.787 * t + 16.0 / 116.0; };
  return {116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))};
}

// The smallest CIELAB distance between two of `colours` under normal vision and the three
// simulated deficiencies, with the pair and the vision that give it.
std::pair<double, std::string> closest_pair(const std::map<std::string, std::string>& colours) {
  using M = std::array<std::array<double, 3>, 3>;
  const std::pair<const char*, M> visions[] = {
      {"normal", M{{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}}},
      {"protanopia",
       M{{{0.152286, 1.052583, -0.204868}, {0.114503, 0.786281, 0.099216}, {-0.003882, -0.048116, 1.051998}}}},
      {"deuteranopia",
       M{{{0.367322, 0.860646, -0.227968}, {0.280085, 0.672501, 0.047413}, {-0.011820, 0.042940, 0.968881}}}},
      {"tritanopia",
       M{{{1.255528, -0.076749, -0.178779}, {-0.078411, 0.930809, 0.147602}, {0.004733, 0.691367, 0.303900}}}}};
  double best = 1e9;
  std::string what;
  for (const auto& [vision, m] : visions)
    for (auto a = colours.begin(); a != colours.end(); ++a)
      for (auto b = std::next(a); b != colours.end(); ++b) {
        const auto la = simulated_lab(a->second, m), lb = simulated_lab(b->second, m);
        const double d = std::hypot(la[0] - lb[0], la[1] - lb[1], la[2] - lb[2]);
        if (d < best) {
          best = d;
          what = a->first + " / " + b->first + " (" + vision + ")";
        }
      }
  return {best, what};
}

}  // namespace

TEST_CASE("browser: colours stay apart under colour-vision deficiency, segment maps have bounded canvases",
          "[browser][colours]") {
  skip_without_chromium();
  // A fragmentation OOM (tests/data/oom/bert_16g): states with many segments.
  auto models = load_models({std::string(VRAMTRACE_TEST_DATA_DIR) + "/oom/bert_16g/bert.485.torch.pickle.gz"});
  auto report = open_report(models, "colours");
  Browser& b = report.b();

  const auto c = b.eval("vtPage.colors");
  std::map<std::string, std::string> series, blocks, processes;
  for (const char* k : {"allocated", "active", "reserved", "requested", "cap"}) series[k] = c[k].get<std::string>();
  for (const char* k : {"allocated", "pending", "waste", "free", "many"}) blocks[k] = c[k].get<std::string>();
  int i = 0;
  for (const auto& p : b.eval("vtPage.process_colors"))
    processes["process " + std::to_string(i++)] = p.get<std::string>();
  for (const auto* set : {&series, &blocks, &processes}) {
    const auto [d, pair] = closest_pair(*set);
    INFO(pair << ": " << d);
    CHECK(d >= 15.0);
  }

  // Every segment map's canvas is at most the visible window (420 CSS pixels), however many
  // segments it holds; scrolled to its end it still draws rows.
  const auto probe =
      nlohmann::json::parse(b.eval("document.getElementById('vt-probe').textContent").get<std::string>());
  const double dpr = b.eval("window.devicePixelRatio||1").get<double>();
  REQUIRE_FALSE(probe["segment_canvases"].empty());
  for (const auto& wh : probe["segment_canvases"]) CHECK(wh[1].get<double>() <= 420 * dpr + 1);
  auto scrolled = b.eval(
      "(function(){var best=null;[].forEach.call(document.querySelectorAll('canvas.segmap'),function(c){"
      "var w=c.parentNode.parentNode;if(!best||w.scrollHeight>best.scrollHeight)best=w;});"
      "best.scrollTop=best.scrollHeight;best.dispatchEvent(new Event('scroll'));var c=best.querySelector('canvas'),"
      "d=c.getContext('2d').getImageData(0,0,c.width,c.height).data,k=0;"
      "for(var i=0;i<d.length;i+=4)if(d[i+3]>0&&(d[i]<200||d[i+1]<200||d[i+2]<200))k++;"
      "return {rows_height:best.scrollHeight,top:parseFloat(c.style.top),drawn:k};})()");
  INFO(scrolled.dump());
  CHECK(scrolled["rows_height"].get<double>() > 420);  // the test needs a map taller than its window
  CHECK(scrolled["top"].get<double>() > 0);
  CHECK(scrolled["drawn"].get<int>() > 1000);
  screenshot(b, "segment-map-scrolled");
}

TEST_CASE("browser: 2 M marks over 8 ranks give a bounded page that loads and draws", "[browser][bounded]") {
  skip_without_chromium();
  // Eight ranks, each on its own device (LOCAL_RANK), each with 250,000 marks (a step mark per
  // microbatch of a long job) between allocations: 2,000,000 marks in all.
  constexpr int kRanks = 8, kMarks = 250'000;
  constexpr std::uint64_t MiB = 1ull << 20;
  std::vector<TraceModel> models;
  for (int r = 0; r < kRanks; ++r) {
    testing::RecordList l;
    l.add(Action::segment_alloc, 0x20000000, 64 * MiB, 0, r);
    for (int i = 0; i < kMarks; ++i) {
      if (i % 1000 == 0) l.add(Action::alloc, 0x20000000, (1 + i / 1000 % 8) * MiB, 0, r);
      l.add(Action::mark, 0, 0, 0, r);
      if (i % 1000 == 999) l.add(Action::free_completed, 0x20000000, (1 + i / 1000 % 8) * MiB, 0, r);
    }
    TraceHeader h;
    h.pid = 100 + r;
    h.host = "node";
    h.rank = std::to_string(r);
    h.local_rank = std::to_string(r);
    testing::VectorReader reader(l.records, h);
    models.push_back(build_trace_model(reader));
  }
  const std::string page = render_report_html(models);
  INFO("page bytes " << page.size());
  CHECK(page.size() < 2'000'000);  // docs/reports.md: about 2 MB whatever the number of marks and ranks
  auto report = open_page(page, "bounded");
  Browser& b = report.b();
  // Each rank's device has its own chart, with its marks thinned to the page's bound.
  const auto per = b.eval(
      "(function(){var out=[];vtPage.data.traces.forEach(function(t){t.devices.forEach(function(d){"
      "var m=0;(d.markers||[]).forEach(function(x){if(x.kind==='mark')m++;});out.push([d.device,m]);});});"
      "return out;})()");
  INFO(per.dump());
  REQUIRE(per.size() == kRanks);
  for (int r = 0; r < kRanks; ++r) {
    CHECK(per[r][0].get<int>() == r);
    CHECK(per[r][1].get<int>() > 0);
    CHECK(per[r][1].get<int>() <= 2000);
  }
  screenshot(b, "bounded-8-ranks-2M-marks");
  CHECK(b.eval("window.__vtErrors||[]") == nlohmann::json::array());
}

namespace {

// The moment whose state the page must show for a click at `clicked` ms: the last of the
// device's checkpoints, peak, OOM states and end at or before it (the first when it comes before
// them all), computed from the model.
// `in_page`: the events of the checkpoints the page kept (all of them, or one in k of them and the
// end, for its size).
const StateAt& expected_moment(const DeviceModel& d, double clicked, const std::set<std::uint64_t>& in_page) {
  std::vector<const StateAt*> all;
  for (const auto& c : d.checkpoints)
    if (in_page.count(c.event_index)) all.push_back(&c);
  all.push_back(&d.at_end);
  if (d.at_peak.captured) all.push_back(&d.at_peak);
  for (const auto& o : d.ooms)
    if (o.state.captured) all.push_back(&o.state);
  std::stable_sort(all.begin(), all.end(), [](const StateAt* a, const StateAt* b) {
    return a->time_ns != b->time_ns ? a->time_ns < b->time_ns : a->event_index < b->event_index;
  });
  const StateAt* best = all.front();
  for (const StateAt* s : all)
    if (ms_since(s->time_ns, d.first_time_ns) <= clicked) best = s;
  return *best;
}

// Clicks the device chart at `fraction` of its plot's width and reads back what the state view
// shows: the page's clicked time, the shown state's time and event, its heading, the figures
// table's rows and the drawn pixels of its segment map.
nlohmann::json click_chart(Browser& b, double fraction) {
  const auto at = b.eval(
      "(function(){var tln=vtPage.timelines[0];tln.canvas.scrollIntoView({block:'center'});"
      "var "
      "r=tln.canvas.getBoundingClientRect(),x0=tln.xOf(0),x1=tln.xOf(vtPage.data.traces[0].devices[0].tl.te.slice(-1)["
      "0]);"
      "return {x:r.left+x0+(x1-x0)*" +
      std::to_string(fraction) + ",y:r.top+150};})()");
  b.click(at["x"].get<double>(), at["y"].get<double>());
  return b.eval(
      "(function(){var v=vtPage.stateViews[0],s=v.shown;if(!s)return null;var "
      "body=document.querySelector('.stateview');"
      "var rows=[].map.call(body.querySelector('table').rows,function(r){return "
      "[r.cells[0].textContent,r.cells[1].textContent];});"
      "var c=body.querySelector('canvas.segmap'),drawn=0;if(c){var "
      "d=c.getContext('2d').getImageData(0,0,c.width,c.height).data;"
      "for(var i=0;i<d.length;i+=4)if(d[i+3]>0&&(d[i]<200||d[i+1]<200||d[i+2]<200))drawn++;}"
      "return {clicked:s.clicked,t:s.t,event:s.event,what:s.what,head:body.querySelector('.statehead').textContent,"
      "rows:rows,drawn:drawn,moments:v.moments.length};})()");
}

}  // namespace

namespace {
// A job of `ranks` ranks, each on its own device: a few allocations, and an OOM on every 97th rank
// (rank 5, 102, ...), whose peak is the lowest of the job so that only the OOM puts it first.
// With `per_host` the ranks are on hosts of that many each (node-0, node-1, ...), as a launcher
// places them: each host one physical device in the process view; else all on one host "node".
std::vector<TraceModel> many_ranks(int ranks, int steps = 20, int per_host = 0, bool cut = false) {
  constexpr std::uint64_t MiB = 1ull << 20;
  std::vector<TraceModel> models;
  for (int r = 0; r < ranks; ++r) {
    testing::RecordList l;
    const bool oom = r % 97 == 5;
    const std::uint64_t seg = oom ? 8 * MiB : (64 + r % 32) * MiB;
    l.add(Action::segment_alloc, 0x20000000, seg, 0, r);
    for (int i = 0; i < steps; ++i) {
      const std::uint64_t a = 0x20000000 + i % 20 * MiB;
      l.add(Action::alloc, a, MiB, 0, r);
      if (i % 2 || i >= 20) l.add(Action::free_completed, a, MiB, 0, r);
    }
    if (oom) l.add(Action::oom, 0, 64 * MiB, 0, r);
    TraceHeader h;
    h.pid = 100 + r;
    h.host = per_host ? "node-" + std::to_string(r / per_host) : "node";
    h.rank = std::to_string(r);
    h.local_rank = std::to_string(per_host ? r % per_host : r);
    h.path = "rank" + std::to_string(r) + ".jsonl";
    testing::VectorReader reader(l.records, h, cut);
    models.push_back(build_trace_model(reader));
  }
  return models;
}

TEST_CASE("report: the devices of traces that end abruptly do not pass for devices with an OOM", "[bounded]") {
  // Every trace cut (each device's last state is a case of the report, not a failure): the devices
  // drawn are still those with an OOM (ranks 5, 102, 199, 296, the lowest peaks), then the highest
  // peak reserved.
  ReportOptions o;
  o.max_device_sections = 20;
  const auto models = many_ranks(300, 20, 0, /*cut=*/true);
  const nlohmann::json data = report_data(models, o);
  std::set<std::string> drawn;
  std::int64_t lowest_drawn = std::numeric_limits<std::int64_t>::max();
  for (const auto& t : data["traces"])
    for (const auto& d : t["devices"]) {
      drawn.insert(t["path"].get<std::string>());
      if (d["oom_count"].get<std::string>().rfind("OOMs 0", 0) == 0)
        lowest_drawn = std::min(lowest_drawn, d["peak_reserved"].get<std::int64_t>());
    }
  CHECK(drawn.size() == 20);
  for (int r : {5, 102, 199, 296}) CHECK(drawn.count("rank" + std::to_string(r) + ".jsonl"));
  for (const auto& v : data["other_devices"]["peak_reserved"]) CHECK(v.get<std::int64_t>() <= lowest_drawn);
}

// The page's bound on a job of many ranks (docs/reports.md, "The page's bound"), checked on its
// data against the models: at most o.max_device_sections devices drawn, every device with an OOM
// among them with its detail, the others rows of "other_devices" with the model's figures, at
// most o.max_process_rows rows in each table with the rest counted, and the top note's counts
// equal to what the data holds. Returns the number of devices that are rows.
std::size_t check_ranks_page(const std::vector<TraceModel>& models, const ReportOptions& o,
                             const nlohmann::json& data) {
  std::size_t all = 0;
  std::map<std::string, const TraceModel*> by_path;
  for (const auto& m : models) {
    all += m.devices.size();
    by_path[m.header.path] = &m;
  }
  // The model's figures of each device: path -> (peak allocated, peak reserved, OOMs).
  struct Figures {
    std::int64_t allocated, reserved;
    std::size_t ooms;
  };
  auto figures = [&](const std::string& path) {
    const DeviceModel& d = by_path.at(path)->devices.at(0);
    return Figures{d.stats.allocated_bytes[kStatAll].peak, d.stats.reserved_bytes[kStatAll].peak, d.oom_count.ooms};
  };
  std::size_t drawn = 0, without_detail = 0, detail = 0;
  std::set<std::string> seen;
  for (const auto& t : data["traces"]) {
    bool any = false;
    for (const auto& d : t["devices"]) {
      ++drawn;
      const bool has = !d.contains("detail");
      without_detail += !has;
      any = any || has;
      for (const char* k : {"peak", "summary_table", "end", "ooms", "checkpoints"})
        if (has && d.contains(k)) detail += d[k].dump().size();
      const Figures f = figures(t["path"]);
      CHECK(d["peak_allocated"] == f.allocated);
      CHECK(d["peak_reserved"] == f.reserved);
      // Every device with an OOM is drawn with its detail, whatever its peak.
      if (f.ooms) {
        CHECK(has);
        CHECK(d["ooms"].size() == f.ooms);
      }
    }
    if (any && t.contains("stacks")) detail += t["stacks"].dump().size();
    // No empty objects or lists for each rank.
    CHECK_FALSE(t.contains("notes"));
    CHECK(seen.insert(t["path"].get<std::string>()).second);
  }
  CHECK(detail <= o.max_detail_bytes);
  CHECK(drawn == std::min(all, o.max_device_sections));
  // The devices not drawn: rows with the model's figures, by peak reserved, the rest counted.
  std::size_t rows = 0, more = 0;
  if (data.contains("other_devices")) {
    const auto& od = data["other_devices"];
    rows = od["device"].size();
    CHECK(rows <= o.max_process_rows);
    for (const char* k : {"p", "peak_allocated", "peak_reserved", "capacity", "ooms", "duration_ms"})
      CHECK(od[k].size() == rows);
    for (std::size_t i = 0; i < rows; ++i) {
      // Its process by index: the page names it.
      const std::string path = data["processes"]["paths"][od["p"][i].get<std::size_t>()];
      const Figures f = figures(path);
      CHECK(od["peak_allocated"][i] == f.allocated);
      CHECK(od["peak_reserved"][i] == f.reserved);
      CHECK(od["ooms"][i] == f.ooms);
      CHECK(seen.insert(path).second);  // not drawn as well
      if (i) CHECK(od["peak_reserved"][i - 1].get<std::int64_t>() >= od["peak_reserved"][i].get<std::int64_t>());
    }
    if (od.contains("more")) {
      more = od["more"]["count"].get<std::size_t>();
      // The range of the devices in neither a section nor a row: the model's own.
      std::vector<std::int64_t> rest;
      for (const auto& m : models)
        if (!seen.count(m.header.path)) rest.push_back(figures(m.header.path).reserved);
      REQUIRE(rest.size() == more);
      std::sort(rest.begin(), rest.end());
      CHECK(od["more"]["min"] == rest.front());
      CHECK(od["more"]["median"] == rest[(rest.size() - 1) / 2]);
      CHECK(od["more"]["max"] == rest.back());
      // No row left out holds more than a row kept.
      CHECK(rest.back() <= od["peak_reserved"][rows - 1].get<std::int64_t>());
    }
  }
  CHECK(drawn + rows + more == all);
  if (drawn < all || without_detail) {
    const auto& lo = data["devices_left_out"];
    CHECK(lo["of"] == all);
    CHECK(lo["drawn"] == drawn);
    CHECK(lo["rows"] == rows + more);
    CHECK(lo["count"] == without_detail + rows + more);
  } else {
    CHECK_FALSE(data.contains("devices_left_out"));
  }
  // The process table: at most max_process_rows rows, those with an OOM among them.
  const auto& p = data["processes"];
  CHECK(p["labels"].size() == models.size());
  const std::size_t process_rows = p["rows"]["i"].size();
  CHECK(process_rows == std::min(models.size(), o.max_process_rows));
  std::set<std::size_t> kept;
  for (const auto& i : p["rows"]["i"]) kept.insert(i.get<std::size_t>());
  for (std::size_t i = 0; i < models.size(); ++i)
    if (figures(models[i].header.path).ooms) CHECK(kept.count(i) == 1);
  if (process_rows < models.size()) CHECK(p["more"]["count"] == models.size() - process_rows);
  for (const auto& c : p["cells"]["p"]) CHECK(kept.count(c.get<std::size_t>()) == 1);
  // The stacked chart: a band for each process with a device drawn or a row (each process here
  // has one device), its values within the budget, plus each process's first and last moment;
  // each band names its process by index.
  std::size_t values = 0, bands = 0, devices = 0;
  for (const auto& dt : p["timelines"]) {
    ++devices;
    values += dt["t"].size();
    for (const auto& b : dt["bands"]) {
      values += b["r"].size() + b["a"].size(), ++bands;
      CHECK(b["p"].get<std::size_t>() < models.size());
      CHECK_FALSE(b.contains("label"));
    }
  }
  CHECK(bands == drawn + rows);
  CHECK(values <= std::max<std::size_t>(o.max_process_values, 4 * (devices + 2 * bands)) + 6 * bands);
  return rows + more;
}
}  // namespace

TEST_CASE("report: 64 to 1,024 ranks give a page under 2 MB: 256 devices drawn, the others rows", "[bounded]") {
  const ReportOptions o;
  for (int ranks : {64, 256, 1024}) {
    const auto models = many_ranks(ranks);
    const nlohmann::json data = report_data(models, o);
    const std::size_t page = render_report_html(models, o).size();
    INFO(ranks << " ranks: page bytes " << page);
    // docs/reports.md: about 2 MB whatever the number of ranks.
    CHECK(page < 2'000'000);
    const std::size_t rows = check_ranks_page(models, o, data);
    CHECK(rows == (ranks > 256 ? static_cast<std::size_t>(ranks) - 256 : 0));
  }
}

TEST_CASE("report: 4,096 ranks' caps, lowered to 300 ranks: sections, rows and the rest counted", "[bounded]") {
  // The caps of a job of 4,096 ranks (256 devices drawn, 2,048 rows a table), scaled down: 300
  // ranks with 20 devices drawn and 100 rows a table, so that every cap applies.
  ReportOptions o;
  o.max_device_sections = 20;
  o.max_process_rows = 100;
  const auto models = many_ranks(300, 20, 8);
  const nlohmann::json data = report_data(models, o);
  CHECK(check_ranks_page(models, o, data) == 280);
  CHECK(data["other_devices"]["device"].size() == 100);
  CHECK(data["other_devices"]["more"]["count"] == 180);
  CHECK(data["processes"]["more"]["count"] == 200);
  // Each rank on a device of its own: a stacked chart for each of the 120 drawn or in a row.
  CHECK(data["processes"]["timelines"].size() == 120);
  // The page of 300 ranks under these caps is no larger than the default page of 64 ranks plus
  // the rows: what grows with the ranks is bounded by the caps.
  const std::size_t page = render_report_html(models, o).size();
  INFO("page bytes " << page);
  CHECK(page < 1'000'000);
}

TEST_CASE("report: past 256 devices the drawn ones keep their share of the page's buckets", "[bounded]") {
  // 1,024 ranks of 400 events each: 256 devices drawn, each with 64 buckets of the page's 16,384.
  const ReportOptions o;
  const auto models = many_ranks(1024, 200);
  const nlohmann::json data = report_data(models, o);
  std::map<std::string, std::size_t> native;  // each device's buckets in the model
  for (const auto& m : models) native[m.header.path] = m.devices.at(0).timeline.size();
  std::size_t bytes = 0, most = 0, drawn = 0;
  for (const auto& t : data["traces"])
    for (const auto& d : t["devices"]) {
      ++drawn;
      bytes += d["tl"].dump().size();
      most = std::max(most, d["tl"]["b"].size());
      // All of its own when it has no more than its share; else merged two by two until it fits,
      // so more than half the share.
      const std::size_t n = d["tl"]["b"].size(), own = native.at(t["path"]);
      CHECK((n == own || 2 * n > o.max_page_buckets / o.max_device_sections));
    }
  INFO("timeline bytes " << bytes << ", most buckets of a device " << most);
  CHECK(drawn == o.max_device_sections);
  CHECK(most <= o.max_page_buckets / o.max_device_sections);
  CHECK(bytes <= o.max_timeline_bytes);
}

TEST_CASE("browser: a page of 256 ranks loads and says how many devices' details it left out", "[browser][bounded]") {
  skip_without_chromium();
  const std::string page = render_report_html(many_ranks(256));
  auto report = open_page(page, "ranks-256");
  Browser& b = report.b();
  const auto line = b.eval(
      "(function(){var e=document.getElementById('devices-left-out');"
      "return e&&e.offsetParent!==null?e.textContent:'';})()");
  INFO(line.dump());
  CHECK(line.get<std::string>().find("devices are shown by their figures and timeline only") != std::string::npos);
  CHECK(line.get<std::string>().find("vramtrace summary") != std::string::npos);
  screenshot(b, "bounded-256-ranks");
  CHECK(b.eval("window.__vtErrors||[]") == nlohmann::json::array());
}

TEST_CASE("browser: past its caps a job's page shows the other devices as rows and the processes as a list",
          "[browser][bounded]") {
  skip_without_chromium();
  // The caps of a job of thousands of ranks, lowered so that the page loads fast: 300 ranks, each
  // on a device of its own, 24 drawn, 100 rows a table.
  ReportOptions o;
  o.max_device_sections = 24;
  o.max_process_rows = 100;
  const auto models = many_ranks(300, 20, 8);
  const nlohmann::json data = report_data(models, o);
  const auto& od = data["other_devices"];
  const auto& lo = data["devices_left_out"];
  REQUIRE(od["device"].size() == 100);
  auto report = open_page(render_report_html(models, o), "ranks-rows");
  Browser& b = report.b();
  // The note: how many devices are drawn, how many are rows, that their marks are not in the
  // page, and the commands that give the rest.
  const std::string line = b.eval(
                                "(function(){var e=document.getElementById('devices-left-out');"
                                "return e&&e.offsetParent!==null?e.textContent:'';})()")
                               .get<std::string>();
  INFO(line);
  CHECK(lo["drawn"] == 24);
  CHECK(lo["rows"] == 276);
  CHECK_THAT(line, Catch::StartsWith("24 of 300 devices are drawn with a section of their own"));
  CHECK_THAT(line, Catch::Contains("the other 276 are rows of the table \u201cOther devices\u201d only"));
  CHECK_THAT(line, Catch::Contains("their marks are not in this page"));
  CHECK_THAT(line, Catch::Contains("vramtrace summary TRACE and vramtrace oom TRACE"));
  // The other devices' table: a row each, its figures the data's, and the line for the rest.
  const auto table = b.eval(
      "(function(){var t=document.getElementById('other-devices-table');if(!t)return null;"
      "return {rows:t.rows.length,first:[].map.call(t.rows[1].cells,function(c){return c.textContent;}),"
      "more:(document.getElementById('other-devices-more')||{}).textContent||''};})()");
  INFO(table.dump());
  REQUIRE(table.is_object());
  CHECK(table["rows"] == 101);  // a head and 100 rows
  const std::size_t first = od["p"][0];
  CHECK(table["first"][0] == data["processes"]["labels"][first].get<std::string>() + " (" +
                                 data["processes"]["paths"][first].get<std::string>() + ")");
  CHECK(table["first"][2] == fmt_b(od["peak_allocated"][0].get<double>()));
  CHECK(table["first"][3] == fmt_b(od["peak_reserved"][0].get<double>()));
  CHECK_THAT(table["more"].get<std::string>(),
             Catch::StartsWith("176 more devices are not in this table (peak reserved " +
                               fmt_b(od["more"]["min"].get<double>()) + " min"));
  // The processes: one row each (not a matrix of 300 device columns), 100 of them, and the rest.
  const auto list = b.eval(
      "(function(){var l=document.getElementById('process-list');"
      "return {list:l?l.rows.length:0,matrix:!!document.getElementById('process-matrix'),"
      "head:l?[].map.call(l.rows[0].cells,function(c){return c.textContent;}):[],"
      "more:(document.getElementById('processes-more')||{}).textContent||''};})()");
  INFO(list.dump());
  CHECK(list["list"] == 101);
  CHECK(list["matrix"] == false);
  CHECK(list["head"] == nlohmann::json::array({"process", "own device", "on its own device", "on other devices"}));
  CHECK_THAT(list["more"].get<std::string>(), Catch::StartsWith("200 more processes are not in this table"));
  // 124 stacked charts (a device each of the 24 drawn and the 100 rows): each is drawn when it
  // comes near the window, so the page holds few canvases; the last one is drawn once scrolled to.
  REQUIRE(data["processes"]["timelines"].size() == 124);
  const auto at_load = b.eval("vtPage.stacks.length").get<std::size_t>();
  CHECK(at_load < 124);
  b.eval(
      "(function(){var dt=vtPage.data.processes.timelines,h=[].filter.call(document.querySelectorAll('div'),"
      "function(e){return e.vtChart===dt[dt.length-1];})[0];h.scrollIntoView({block:'center'});return 0;})()");
  screenshot(b, "bounded-last-stacked");  // a frame: the observer sees the chart in view
  nlohmann::json last;
  for (int i = 0; i < 100; ++i) {
    last = b.eval(
        "(function(){var s=vtPage.stacks,dt=vtPage.data.processes.timelines;var k=-1;s.forEach(function(x,i){"
        "if(x.canvas.parentNode.parentNode.vtChart===dt[dt.length-1])k=i;});if(k<0)return null;"
        "var c=s[k].canvas,d=c.getContext('2d').getImageData(0,0,c.width,c.height).data,n=0;"
        "for(var i=0;i<d.length;i+=4)if(d[i]<250||d[i+1]<250||d[i+2]<250)n++;return {pixels:n,stacks:s.length};})()");
    if (!last.is_null()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  INFO("stacked charts at load " << at_load << ", then " << last.dump());
  REQUIRE(last.is_object());
  CHECK(last["pixels"].get<int>() > 1000);
  CHECK(last["stacks"].get<std::size_t>() < 124);
  b.eval("(function(){document.getElementById('other-devices').scrollIntoView({block:'start'});return 0;})()");
  screenshot(b, "bounded-other-devices");
  CHECK(report.errors() == nlohmann::json::array());
}

TEST_CASE("browser: a click on the memory chart shows the state at the checkpoint nearest before it",
          "[browser][checkpoints]") {
  skip_without_chromium();
  // GPT-2 training on the H200: 0.9 s of allocations, with the peak in its middle.
  auto report = report_of("torch-h200/gpt2_train.torchtrace.jsonl.gz", "state");
  const DeviceModel& d = report.models.at(0).devices.at(0);
  REQUIRE(d.checkpoints.size() >= ReportOptions{}.checkpoints);
  INFO("page bytes " << report.report.page.size());
  CHECK(report.report.page.size() < 2'000'000);
  Browser& b = report.b();
  CHECK(b.eval("vtPage.stateViews[0].shown") == nullptr);  // nothing before a click
  // The page keeps the model's checkpoints, one in k for its size, and the end.
  const auto every = b.eval("vtPage.data.traces[0].devices[0].checkpoints_every").get<std::size_t>();
  std::set<std::uint64_t> in_page;
  for (const auto& e : b.eval("vtPage.data.traces[0].devices[0].checkpoints.map(function(c){return c.event;})"))
    in_page.insert(e.get<std::uint64_t>());
  INFO(every << " " << in_page.size());
  CHECK(in_page.size() >= 16);
  CHECK(in_page.count(d.at_end.event_index) == 1);
  for (std::size_t i = 0; i + 1 < d.checkpoints.size(); ++i)  // the last may be the end too
    CHECK(in_page.count(d.checkpoints[i].event_index) == (i % every == 0 ? 1u : 0u));

  std::set<std::uint64_t> events;
  for (double fraction : {0.37, 0.81, 0.02}) {
    const auto shown = click_chart(b, fraction);
    INFO("click at " << fraction << ": " << shown.dump(1));
    REQUIRE(shown.is_object());
    const double clicked = shown["clicked"].get<double>();
    const StateAt& want = expected_moment(d, clicked, in_page);
    const double t = ms_since(want.time_ns, d.first_time_ns);
    CHECK(shown["event"].get<std::uint64_t>() == want.event_index);
    CHECK(shown["t"].get<double>() == t);
    CHECK_THAT(shown["head"].get<std::string>(),
               Catch::StartsWith("State at +" + fmt_t(t) + " (event " + std::to_string(want.event_index) + ", "));
    CHECK_THAT(shown["head"].get<std::string>(), Catch::EndsWith("the click at +" + fmt_t(clicked)));
    if (t <= clicked) CHECK_THAT(shown["head"].get<std::string>(), Catch::Contains("nearest before the click"));
    // Its figures as the model has them at that moment.
    const auto& st = want.stats;
    const std::vector<std::pair<std::string, std::int64_t>> figures = {
        {"allocated", st.allocated_bytes[kStatAll].current},
        {"active", st.active_bytes[kStatAll].current},
        {"requested", st.requested_bytes[kStatAll].current},
        {"reserved", st.reserved_bytes[kStatAll].current}};
    REQUIRE(shown["rows"].size() >= 5);
    CHECK_THAT(shown["rows"][0][0].get<std::string>(), Catch::Contains("(event " + std::to_string(want.event_index)));
    for (std::size_t i = 0; i < figures.size(); ++i) {
      CHECK(shown["rows"][i + 1][0] == figures[i].first);
      CHECK(shown["rows"][i + 1][1] == fmt_b(static_cast<double>(figures[i].second)));
    }
    if (!want.layout.segments.empty()) CHECK(shown["drawn"].get<int>() > 100);
    events.insert(want.event_index);
    if (fraction == 0.37) {
      screenshot(b, "state-at-clicked-time");
      b.eval("(function(){document.querySelector('.stateview').scrollIntoView({block:'start'});return 0;})()");
      screenshot(b, "state-at-clicked-time-layout");
    }
  }
  CHECK(events.size() == 3);  // three clicks, three moments
  CHECK(b.eval("JSON.parse(document.getElementById('vt-probe').textContent).errors") == nlohmann::json::array());
}

TEST_CASE("browser: the icicle at the peak names a frame and its bytes on hover, and zooms on a click",
          "[browser][icicle]") {
  skip_without_chromium();
  auto report = report_of("torch-h200/gpt2_run.snapshot.pickle.zst", "icicle");
  const TraceModel& m = report.models.at(0);
  REQUIRE(m.stacks);
  // Test-side: the bytes at the peak with a stack, and by outermost frame.
  std::uint64_t total = 0;
  for (const StackBytes& sb : m.devices.at(0).at_peak.stacks) {
    const std::vector<Frame>* st = sb.stack ? m.stacks->get(sb.stack) : nullptr;
    if (!st || st->empty()) continue;
    total += sb.bytes;
  }
  REQUIRE(total > 0);
  Browser& b = report.b();
  // The page's tree adds up: its total, and the sum of its outermost frames, are the model's bytes.
  const auto sums = b.eval(
      "(function(){var ic=vtPage.data.traces[0].devices[0].peak.icicle,top=0;"
      "ic.p.forEach(function(p,i){if(p<0)top+=ic.b[i];});return {total:ic.total,top:top};})()");
  CHECK(sums["total"].get<std::uint64_t>() == total);
  CHECK(sums["top"].get<std::uint64_t>() == total);
  // Hover the widest frame that holds less than its caller (its bytes tell it from its caller's).
  const auto at = b.eval(
      "(function(){var "
      "I=vtPage.icicles[0],ic=vtPage.data.traces[0].devices[0].peak.icicle,F=vtPage.data.traces[0].stacks.frames,best="
      "null;"
      "I.rects.forEach(function(r){var "
      "p=r.node>=0?ic.p[r.node]:-1;if(p>=0&&ic.b[r.node]<ic.b[p]&&(!best||r.w>best.w))best=r;});"
      "var path=[];for(var i=best.node;i>=0;i=ic.p[i])path.unshift(F[ic.f[i]][0]);"
      "I.canvas.scrollIntoView({block:'center'});var q=I.canvas.getBoundingClientRect();"
      "return "
      "{x:q.left+best.x+best.w/"
      "2,y:q.top+best.y+8,w:best.w,W:parseFloat(I.canvas.style.width),node:best.node,path:path};})()");
  INFO(at.dump());
  const std::size_t depth = at["path"].size();
  REQUIRE(depth >= 2);
  // Test-side: the bytes of the stacks whose outermost frames are that path.
  std::uint64_t under = 0;
  for (const StackBytes& sb : m.devices.at(0).at_peak.stacks) {
    const std::vector<Frame>* st = sb.stack ? m.stacks->get(sb.stack) : nullptr;
    if (!st || st->size() < depth) continue;
    bool match = true;
    for (std::size_t k = 0; k < depth; ++k) match &= frame_label((*st)[st->size() - 1 - k]) == at["path"][k];
    if (match) under += sb.bytes;
  }
  REQUIRE(under > 0);
  CHECK(under < total);
  b.move_mouse(at["x"].get<double>(), at["y"].get<double>());
  const auto tip = b.eval(
      "(function(){var t=vtPage.icicles[0].canvas.parentNode.querySelector('.tip');return "
      "{shown:t.style.display,text:t.textContent};})()");
  INFO(tip.dump());
  CHECK(tip["shown"] == "block");
  const std::string text = tip["text"].get<std::string>();
  char share[32];
  std::snprintf(share, sizeof share, "%.1f%%", 100.0 * static_cast<double>(under) / static_cast<double>(total));
  CHECK_THAT(text,
             Catch::StartsWith(at["path"][depth - 1].get<std::string>() + "\n" + fmt_b(static_cast<double>(under)) +
                               " (" + share + " of the " + fmt_b(static_cast<double>(total)) +
                               " allocated at the peak with a recorded stack)"));
  screenshot(b, "icicle-hover");
  // A click gives it the whole width.
  b.click(at["x"].get<double>(), at["y"].get<double>());
  const auto zoomed = b.eval(
      "(function(){var I=vtPage.icicles[0],n=I.focus(),w=0;I.rects.forEach(function(r){if(r.node===n)w=r.w;});return "
      "{focus:n,w:w};})()");
  CHECK(zoomed["focus"] == at["node"]);
  CHECK(zoomed["w"].get<double>() == at["W"].get<double>());
  CHECK(b.eval("JSON.parse(document.getElementById('vt-probe').textContent).errors") == nlohmann::json::array());
}

TEST_CASE("browser: the stacked per-process chart zooms on a drag and draws its steps", "[browser][stacked]") {
  skip_without_chromium();
  const std::string data = VRAMTRACE_TEST_DATA_DIR;
  auto models = load_models(
      {data + "/torch-h200/gpt2_train.torchtrace.jsonl.gz", data + "/torch-h200/resnet50_train.torchtrace.jsonl.gz"},
      report_model_options());
  auto report = open_report(models, "stacked");
  Browser& b = report.b();
  // The two runs were made one after another: the note under the process table says so.
  CHECK_THAT(b.eval("(function(){var e=document.querySelector('.process-note');return e?e.textContent:'';})()")
                 .get<std::string>(),
             Catch::Contains("its 2 processes' traces do not overlap in time"));
  const auto before = b.eval(
      "(function(){var s=vtPage.stacks[0];s.canvas.scrollIntoView({block:'center'});var "
      "r=s.canvas.getBoundingClientRect();"
      "return {left:r.left,top:r.top,view:s.view()};})()");
  INFO(before.dump());
  // Drag across 5% of the plot, from 1%: inside GPT-2's 0.94 s of the two runs' 13.8 s.
  const double ml = 78, plot = b.eval("parseFloat(vtPage.stacks[0].canvas.style.width)").get<double>() - 78 - 12;
  const double left = before["left"].get<double>(), y = before["top"].get<double>() + 120;
  b.drag(left + ml + 0.01 * plot, left + ml + 0.06 * plot, y);
  const auto v0 = before["view"][0].get<double>(), v1 = before["view"][1].get<double>();
  const auto view = b.eval("vtPage.stacks[0].view()");
  INFO(view.dump());
  CHECK(view[0].get<double>() == Approx(v0 + 0.01 * (v1 - v0)).epsilon(0.05));
  CHECK(view[1].get<double>() == Approx(v0 + 0.06 * (v1 - v0)).epsilon(0.05));
  // A step inside the view with memory in it: the stack's top at its middle is drawn at its sum.
  const auto step = b.eval(
      "(function(){var s=vtPage.stacks[0],dt=vtPage.data.processes.timelines[0],v=s.view(),best=-1,bw=0;"
      "function vis(i){return [Math.max(s.xOf(dt.t[i-1]),s.xOf(v[0])),Math.min(s.xOf(dt.t[i]),s.xOf(v[1]))];}"
      "for(var i=1;i<dt.t.length;i++){if(dt.t[i]<v[0]||dt.t[i-1]>v[1])continue;var "
      "sum=0;dt.bands.forEach(function(b){sum+=b.reserved[i];});"
      "var q=vis(i),w=q[1]-q[0];if(sum>0&&w>bw){bw=w;best=i;}}if(best<0)return null;"
      "var sum=0;dt.bands.forEach(function(b){sum+=b.reserved[best];});var q=vis(best),x=(q[0]+q[1])/2,"
      "dpr=window.devicePixelRatio||1,c=s.canvas,col=c.getContext('2d').getImageData(Math.round(x*dpr),0,1,c.height)."
      "data,top=-1;"
      "function band(d,o){return Math.abs(d[o]-d[o+2])>30;}"  // a band's colour, not the grey of the grid or text
      "for(var k=Math.round(11*dpr);k<c.height-Math.round(30*dpr);k++){if(band(col,k*4)){top=k/dpr;break;}}"
      "var "
      "g=c.getContext('2d').getImageData(Math.round(78*dpr),Math.round(11*dpr),c.width-Math.round(92*dpr),Math.round("
      "200*dpr)).data,drawn=0;"
      "for(var k=0;k<g.length;k+=4)if(band(g,k))drawn++;"
      "return {i:best,x:x,width:bw,sum:sum,y:s.yOf(sum),top:top,drawn:drawn,t0:dt.t[best-1],t1:dt.t[best]};})()");
  INFO(step.dump());
  REQUIRE(step.is_object());
  CHECK(step["drawn"].get<int>() > 5000);
  CHECK(std::abs(step["top"].get<double>() - step["y"].get<double>()) <= 2.5);
  // The tooltip there names the interval and the sum over the processes.
  b.move_mouse(left + step["x"].get<double>(), y);
  const auto tip = b.eval(
      "(function(){var t=vtPage.stacks[0].canvas.parentNode.querySelector('.tip');return "
      "{shown:t.style.display,text:t.textContent};})()");
  INFO(tip.dump());
  CHECK(tip["shown"] == "block");
  CHECK_THAT(tip["text"].get<std::string>(), Catch::StartsWith(fmt_t(step["t0"].get<double>()) + " .. " +
                                                               fmt_t(step["t1"].get<double>()) + " (reserved"));
  CHECK_THAT(tip["text"].get<std::string>(), Catch::EndsWith("all: " + fmt_b(step["sum"].get<double>())));
  screenshot(b, "stacked-zoomed");
  // Double-click: the whole run again.
  b.eval("(function(){vtPage.stacks[0].canvas.dispatchEvent(new MouseEvent('dblclick'));return 0;})()");
  CHECK(b.eval("vtPage.stacks[0].view()") == before["view"]);
  CHECK(b.eval("JSON.parse(document.getElementById('vt-probe').textContent).errors") == nlohmann::json::array());
}

namespace {

// A long run in the shape of an LLM's decode loop (as tests/bench/gen_long_trace.py writes it):
// `seconds` of steps 20 ms apart, each a 4 MiB activation freed 1 ms later and a KV cache growing
// by 256 KiB blocks in a ring of 100; at 61.8 % of the run a burst of 64 allocations 6 us apart,
// freed 400 us later: the run's peak, in a window far below a bucket's width.
std::vector<TraceRecord> long_decode_records(double seconds, std::int64_t* burst_ns) {
  constexpr std::uint64_t KiB = 1024, MiB = 1024 * KiB;
  const std::int64_t t0 = 1'000'000'000'000;  // ns
  const DevicePtr seg = 0x7F0000000000, act = seg, kv = seg + 4 * MiB, burst = seg + 64 * MiB;
  std::vector<TraceRecord> r;
  auto add = [&](Action a, DevicePtr addr, std::uint64_t size, std::int64_t t) {
    TraceRecord x;
    x.action = a;
    x.addr = addr;
    x.size = size;
    x.time_ns = t;
    r.push_back(x);
  };
  add(Action::segment_alloc, seg, 512 * MiB, t0);
  const auto steps = static_cast<int>(seconds * 1000 / 20);
  const std::int64_t b = t0 + static_cast<std::int64_t>(seconds * 1e9 * 0.618);
  *burst_ns = b;
  bool burst_done = false;
  for (int k = 0; k < steps; ++k) {
    const std::int64_t t = t0 + 10'000 + std::int64_t{k} * 20'000'000;
    if (!burst_done && t > b) {
      DevicePtr a = burst;
      for (int j = 0; j < 64; ++j) {
        add(Action::alloc, a, 64 * KiB * (1 + j), b + j * 6'000);
        a += 64 * KiB * (1 + j);
      }
      a = burst;
      for (int j = 0; j < 64; ++j) {
        add(Action::free_requested, a, 64 * KiB * (1 + j), b + 400'000 + j * 6'000);
        add(Action::free_completed, a, 64 * KiB * (1 + j), b + 401'000 + j * 6'000);
        a += 64 * KiB * (1 + j);
      }
      burst_done = true;
    }
    add(Action::alloc, act, 4 * MiB, t);
    const DevicePtr slot = kv + (k % 100) * 256 * KiB;
    if (k >= 100) {
      add(Action::free_requested, slot, 256 * KiB, t + 1000);
      add(Action::free_completed, slot, 256 * KiB, t + 2000);
    }
    add(Action::alloc, slot, 256 * KiB, t + 3000);
    add(Action::free_requested, act, 4 * MiB, t + 1'000'000);
    add(Action::free_completed, act, 4 * MiB, t + 1'001'000);
  }
  std::stable_sort(r.begin(), r.end(),
                   [](const TraceRecord& x, const TraceRecord& y) { return x.time_ns < y.time_ns; });
  return r;
}

// The four series (kSeriesNames) after the last record at or before `t_ns`: a model of that
// prefix of the run, independent of the page and of the timeline.
std::array<std::int64_t, 4> series_at(const std::vector<TraceRecord>& records, std::int64_t t_ns) {
  std::vector<TraceRecord> prefix;
  for (const auto& x : records)
    if (x.time_ns <= t_ns) prefix.push_back(x);
  testing::VectorReader reader(prefix);
  const TraceModel m = build_trace_model(reader);
  const DeviceStats& s = m.devices.at(0).stats;
  return {s.allocated_bytes[kStatAll].current, s.active_bytes[kStatAll].current, s.reserved_bytes[kStatAll].current,
          s.requested_bytes[kStatAll].current};
}

// What the page shows at time `t` (ms) of its first chart: its view, valuesAt, the tooltip under
// the mouse there, and the allocated line's pixels in that column.
nlohmann::json read_at(Browser& b, double t) {
  const std::string ts = std::to_string(t);
  const auto at = b.eval(
      "(function(){var tln=vtPage.timelines[0];tln.canvas.scrollIntoView({block:'center'});"
      "var r=tln.canvas.getBoundingClientRect();return {x:r.left+tln.xOf(" +
      ts + "),y:r.top+60};})()");
  b.move_mouse(at["x"].get<double>(), at["y"].get<double>());
  return b.eval(
      "(function(){var tln=vtPage.timelines[0],d=vtPage.data.traces[0].devices[0],t=" + ts +
      ",c=tln.canvas,g=c.getContext('2d'),x=Math.round(tln.xOf(t)),col=g.getImageData(x,0,1,c.height).data,ys=[];"
      "for(var y=0;y<c.height;y++){var p=y*4;if(col[p]<40&&col[p+1]>80&&col[p+1]<150&&col[p+2]>150)ys.push(y);}"
      "var pw=c.width-100,plot=g.getImageData(80,12,pw,c.height-52).data,hit=new Uint8Array(pw),drawn=0;"
      "for(var k=0;k<plot.length;k+=4)if(Math.min(plot[k],plot[k+1],plot[k+2])<200)hit[(k>>2)%pw]=1;"
      "for(var k=0;k<pw;k++)drawn+=hit[k];"
      "var tip=document.querySelector('.plot .tip');"
      "return {view:tln.view(),v:vtPage.valuesAt(d,t),ys:ys,drawn:drawn,cols:pw,coarse:tln.coarse,tip:tip.textContent,"
      "tip_shown:tip.style.display,y_alloc:tln.yOf(vtPage.valuesAt(d,t).allocated.max)};})()");
}

}  // namespace

TEST_CASE("browser: a long run zooms by drags to a millisecond at its peak, drawn and read exactly",
          "[browser][deepzoom]") {
  skip_without_chromium();
  // Ten minutes of decode steps: the timeline's buckets are about 65 ms wide.
  std::int64_t burst_ns = 0;
  const auto records = long_decode_records(600, &burst_ns);
  testing::VectorReader reader(records);
  std::vector<TraceModel> models;
  models.push_back(build_trace_model(reader, report_model_options()));
  const DeviceModel& d = models[0].devices.at(0);
  REQUIRE(d.timeline.size() > 1);
  const double bucket_ms = ms_since(d.timeline[1].t_begin_ns, d.timeline[0].t_begin_ns);
  INFO("bucket " << bucket_ms << " ms");
  REQUIRE(bucket_ms > 10);
  auto report = open_report(models, "deepzoom");
  Browser& b = report.b();

  // Halfway between the 20th and 21st allocation of the burst: 3 us from either event.
  const std::int64_t target_ns = burst_ns + 20 * 6'000 + 3'000;
  const double target = ms_since(target_ns, d.first_time_ns);
  // Drag around the target, each time a 60-pixel window, until the view is at most 1 ms.
  nlohmann::json view;
  for (int k = 0; k < 12; ++k) {
    view = b.eval("vtPage.timelines[0].view()");
    if (view[1].get<double>() - view[0].get<double>() <= 1.0) break;
    const auto at = b.eval(
        "(function(){var tln=vtPage.timelines[0];tln.canvas.scrollIntoView({block:'center'});"
        "var r=tln.canvas.getBoundingClientRect();return {x:r.left+tln.xOf(" +
        std::to_string(target) + "),y:r.top+150};})()");
    b.drag(at["x"].get<double>() - 30, at["x"].get<double>() + 30, at["y"].get<double>());
  }
  INFO(view.dump());
  REQUIRE(view[1].get<double>() - view[0].get<double>() <= 1.0);
  REQUIRE(view[0].get<double>() < target);
  REQUIRE(view[1].get<double>() > target);

  const auto shown = read_at(b, target);
  INFO(shown.dump(1));
  screenshot(b, "deep-zoom-at-peak");
  const auto want = series_at(records, target_ns);
  // The values read there are the model's at that moment, exactly (not a bucket's range).
  const char* names[4] = {"allocated", "active", "reserved", "requested"};
  for (int k = 0; k < 4; ++k) {
    INFO(names[k]);
    CHECK(shown["v"][names[k]]["min"].get<std::int64_t>() == want[k]);
    CHECK(shown["v"][names[k]]["max"].get<std::int64_t>() == want[k]);
  }
  CHECK(shown["v"]["exact"] == true);
  CHECK(shown["coarse"] == 0);
  CHECK(shown["tip_shown"] == "block");
  CHECK_THAT(shown["tip"].get<std::string>(), Catch::Contains("allocated: " + fmt_b(static_cast<double>(want[0]))));
  CHECK_THAT(shown["tip"].get<std::string>(), Catch::Contains("(exact: "));
  // Drawn: the series run across the view (a drawn pixel in nearly every column), and in the
  // target's column the allocated line is at the height of the model's value.
  CHECK(shown["drawn"].get<int>() > 0.9 * shown["cols"].get<int>());
  REQUIRE_FALSE(shown["ys"].empty());
  double nearest = 1e9;
  for (const auto& y : shown["ys"])
    nearest = std::min(nearest, std::abs(y.get<double>() - shown["y_alloc"].get<double>()));
  CHECK(nearest <= 2.0);

  // Away from the peak, a 1 ms view is inside one bucket: the page says so, and reads the bucket's
  // range there, which holds the model's value.
  const std::int64_t away_ns = d.first_time_ns + static_cast<std::int64_t>(100.5e9);
  const double away = ms_since(away_ns, d.first_time_ns);
  b.eval("(function(){vtPage.timelines[0].zoom(" + std::to_string(away - 0.5) + "," + std::to_string(away + 0.5) +
         ");return 0;})()");
  const auto coarse = read_at(b, away);
  INFO(coarse.dump(1));
  CHECK(coarse["coarse"].get<double>() > 1.0);
  CHECK_FALSE(coarse["v"].contains("exact"));
  const auto there = series_at(records, away_ns);
  for (int k = 0; k < 4; ++k) {
    CHECK(coarse["v"][names[k]]["min"].get<std::int64_t>() <= there[k]);
    CHECK(coarse["v"][names[k]]["max"].get<std::int64_t>() >= there[k]);
  }
  CHECK_THAT(coarse["tip"].get<std::string>(), !Catch::Contains("(exact"));
  CHECK(report.errors() == nlohmann::json::array());
}

TEST_CASE("browser: 2 to 16 long traces share the page's bound on timelines", "[browser][bounded]") {
  skip_without_chromium();
  // Ten-minute decode runs, each with a full timeline (8,192 to 16,384 buckets in the model) and
  // its exact points: what made two long traces exceed 2 MB when each brought its own.
  std::int64_t burst_ns = 0;
  const auto records = long_decode_records(600, &burst_ns);
  const ReportOptions o;
  for (const std::size_t n : {2u, 4u, 8u, 16u}) {
    INFO(n << " traces");
    std::vector<TraceModel> models;
    for (std::size_t r = 0; r < n; ++r) {
      TraceHeader h;
      h.pid = 200 + static_cast<int>(r);
      h.rank = std::to_string(r);
      testing::VectorReader reader(records, h);
      models.push_back(build_trace_model(reader, report_model_options(o, n)));
    }
    const nlohmann::json data = report_data(models, o);
    std::size_t timeline_bytes = 0;
    for (const auto& t : data["traces"])
      for (const auto& dj : t["devices"]) {
        timeline_bytes += dj["tl"].dump().size();
        CHECK(dj["tl"]["b"].size() >= kMinPageBuckets);
        CHECK(dj["tl"]["b"].size() <= o.max_page_buckets / n);
      }
    INFO("timeline bytes " << timeline_bytes);
    CHECK(timeline_bytes <= o.max_timeline_bytes);
    const std::string page = render_report_html(models, o);
    INFO("page bytes " << page.size());
    CHECK(page.size() < 2'000'000);  // docs/reports.md: under 2 MB for any number of these traces
    if (n != 8) continue;
    auto report = open_page(page, "bounded-long");
    Browser& b = report.b();
    // Every device's chart is drawn, and its highest drawn value is the model's peak: merging
    // buckets for the page's bound loses no peak.
    const auto drawn = b.eval("JSON.parse(document.getElementById('vt-probe').textContent)");
    REQUIRE(drawn["drawn_pixels"].size() == n);
    for (std::size_t i = 0; i < n; ++i) {
      CHECK(drawn["drawn_pixels"][i].get<int>() > 1000);
      CHECK(drawn["devices"][i]["max_allocated"].get<std::int64_t>() ==
            models[i].devices.at(0).stats.allocated_bytes[kStatAll].peak);
    }
    screenshot(b, "bounded-8-long-traces");
  }
}

TEST_CASE("browser: a run that did not finish is said first, at the top of the page", "[browser][unfinished]") {
  skip_without_chromium();
  // A vramtrace trace without its trailer (Note [a run that did not finish]).
  fs::path dir = fs::temp_directory_path() / ("vt-report-unfinished-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path trace = dir / "killed.jsonl";
  std::ofstream(trace) << R"({"a":"header","format":"vramtrace","version":"1.1","pid":7,"devices":[{"id":0,)"
                       << R"("name":"GPU","total_bytes":85899345920}],"allocator_settings":"","settings":{},)"
                       << R"("entry_points":[""]})"
                       << "\n"
                       << R"({"a":"segment_alloc","t":1000,"p":4294967296,"r":2097152})"
                       << "\n"
                       << R"({"a":"alloc","t":2000,"p":4294967296,"r":1048576})"
                       << "\n";
  const fs::path html = dir / "report.html";
  std::ofstream(html, std::ios::binary) << render_report_html(load_models({trace.string()}));
  const std::string dom = run_chromium(html, "--dump-dom", dir / "dom.err");
  const std::string main_div = "<div id=\"main\">";
  const std::size_t main = dom.find(main_div);
  REQUIRE(main != std::string::npos);
  INFO(dom.substr(main, 400));
  // The page's first content under its title: the banner, with the trace and the reason.
  const std::string banner = "<div class=\"note warn unfinished\">THE RUN DID NOT FINISH: " + trace.string() + ": ";
  CHECK(dom.compare(main + main_div.size(), banner.size(), banner) == 0);
  CHECK(dom.find("no trailer: the process did not finish tracing", main) < dom.find("<h2", main));
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST_CASE("browser: the first screen gives each OOM's diagnosis and the settings' verdicts, as oom does",
          "[browser][verdicts]") {
  skip_without_chromium();
  // A real BERT run that died of fragmentation under a 16 GiB cap (tests/data/oom/bert_16g).
  auto report = report_of("oom/bert_16g/bert.485.torch.pickle.gz", "verdicts");
  // The verdicts of `vramtrace oom` for the same trace and settings: one engine.
  auto cases = oom_cases(report.models[0]);
  const WhatIfRun run = run_whatifs(report.models[0].header.path, report.models[0]);
  note_replays_in_cases(cases, run);
  const auto page = report.b().eval(
      "(function(){var v=document.getElementById('verdicts');if(!v)return null;var r=v.getBoundingClientRect();"
      "var t=v.querySelector('table.verdict-table');return {top:r.top,height:window.innerHeight,"
      "text:v.textContent,rows:[].slice.call(t.rows,1).map(function(x){return [x.cells[0].textContent,"
      "x.cells[1].textContent,x.getAttribute('data-verdict')];})};})()");
  REQUIRE(page.is_object());
  INFO(page.dump());
  // On the first screen: the section starts within the window's height, before any chart.
  CHECK(page["top"].get<double>() < page["height"].get<double>());
  const std::string text = page["text"].get<std::string>();
  CHECK(text.find("OOM 1 on device 0: " + std::string(diagnosis_code_name(cases[0].diagnosis.code))) !=
        std::string::npos);
  CHECK(text.find(cases[0].diagnosis.headline) != std::string::npos);
  CHECK(text.find("Part of the run") != std::string::npos);  // the run died of its OOM
  CHECK(text.find("vramtrace tune --limit 17179869184") != std::string::npos);
  const auto shown = run.shown_rows();
  REQUIRE(page["rows"].size() == shown.size());
  for (std::size_t i = 0; i < shown.size(); ++i) {
    const Judgement& j = shown[i]->judgement;
    const bool firm = j.verdict != WhatIfVerdict::withheld && j.verdict != WhatIfVerdict::failed;
    CHECK(page["rows"][i][2] == (firm ? whatif_verdict_name(j.verdict) : "none"));
  }
}
