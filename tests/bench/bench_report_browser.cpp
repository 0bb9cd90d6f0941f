// How long the report page takes to answer each interaction, measured inside headless chromium
// with performance.now() around the page's own handlers: a redraw of the device timeline at full
// view and at a deep zoom, one frame of a drag, the zoom at its release, a hover's tooltip, a
// click's state view (its segment map included), the icicle's and the stacked chart's redraws.
// Each is timed through the page's functions and events, so that pages written by two builds of
// `vramtrace report` (before and after a change) are measured in the same run, interleaved.
//
// Not a ctest test: a measurement (docs/benchmarks.md has the figures and the commands).
//   VT_BENCH_PAGES="name=report.html,name2=other.html" [VT_BENCH_REPS=25] bench_report_browser
// Prints one line per page and interaction: median and max in ms over the repetitions, and the
// load average before and after.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "../reporter-reports/browser.h"

using namespace vramtrace::testing;

namespace {

// Installed into each page: window.vtBench.run(op, rep) performs one interaction and returns its
// time in ms, or null when the page has nothing for it (no icicle, no stacked chart). Untimed
// set-up (the view the interaction starts from) comes before the clock starts. The timed part
// ends with a read of the layout, so that style and layout the handler caused count too.
const char* kBenchScript = R"JS(
(function(){
 var P=window.vtPage,tln=P.timelines[0],dev=P.data.traces[0].devices[0],tl=dev.tl,n=tl.t.length,tmax=tl.te[n-1];
 var peak=dev.peak&&typeof dev.peak.t==='number'?dev.peak.t:tmax/2,cv=tln.canvas;
 function now(){return performance.now();}
 function settle(){return document.body.offsetHeight;}
 function ev(target,type,x,y,buttons){var r=cv.getBoundingClientRect();
  target.dispatchEvent(new MouseEvent(type,{bubbles:true,cancelable:true,clientX:r.left+x,clientY:r.top+y,buttons:buttons||0,button:0}));}
 function full(){tln.zoom(0,tmax*2);}
 var fr=[0.37,0.81,0.02,0.55,0.93];
 var ops={
  'timeline full':function(){full();var t=now();tln.draw();settle();return now()-t;},
  'timeline deep':function(){var s=tmax/1e4;tln.zoom(peak-s/2,peak+s/2);var t=now();tln.draw();settle();return now()-t;},
  'drag frame':function(){full();ev(cv,'mousedown',200,150,1);var t=now();ev(cv,'mousemove',600,150,1);settle();var d=now()-t;
   ev(window,'mouseup',600,150,0);return d;},
  'drag zoom':function(){full();ev(cv,'mousedown',200,150,1);ev(cv,'mousemove',600,150,1);var t=now();ev(window,'mouseup',600,150,0);settle();return now()-t;},
  'hover':function(rep){full();var t=now();ev(cv,'mousemove',150+(rep*37)%900,150,0);settle();return now()-t;},
  'click state':function(rep){if(!P.stateViews[0]||!P.stateViews[0].moments.length)return null;full();
   var t0=now();P.stateViews[0].show(tmax*fr[rep%fr.length]);settle();return now()-t0;},
  'icicle':function(){if(!P.icicles.length)return null;var c=P.icicles[0].canvas,t=now();
   c.dispatchEvent(new MouseEvent('dblclick',{bubbles:true}));settle();return now()-t;},
  'stacked':function(){if(!P.stacks.length)return null;var c=P.stacks[0].canvas,t=now();
   c.dispatchEvent(new MouseEvent('dblclick',{bubbles:true}));settle();return now()-t;}};
 window.vtBench={ops:Object.keys(ops),run:function(op,rep){return ops[op](rep);}};
 return window.vtBench.ops;})()
)JS";

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

}  // namespace

TEST_CASE("bench: report page interactions", "[bench]") {
  skip_without_chromium();
  const char* pages_env = std::getenv("VT_BENCH_PAGES");
  REQUIRE(pages_env);
  const int reps = std::getenv("VT_BENCH_REPS") ? std::atoi(std::getenv("VT_BENCH_REPS")) : 25;
  std::vector<std::pair<std::string, std::string>> pages;
  std::string list = pages_env;
  for (std::size_t a = 0; a < list.size();) {
    std::size_t z = list.find(',', a);
    if (z == std::string::npos) z = list.size();
    const std::string item = list.substr(a, z - a);
    const auto eq = item.find('=');
    REQUIRE(eq != std::string::npos);
    pages.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    a = z + 1;
  }
  std::vector<OpenReport> open;
  std::vector<std::vector<std::string>> ops;
  for (const auto& [name, path] : pages) {
    open.push_back(open_page(read_file(path), "bench-" + std::to_string(open.size())));
    Browser& b = open.back().b();
    // A page of many devices draws its stacked charts as they come near the window: scroll to the
    // first, let a frame pass (a screenshot makes one), and wait until it is drawn.
    if (b.eval("(function(){var h=[].filter.call(document.querySelectorAll('div'),function(e){return e.vtChart;})[0];"
               "if(!h)return false;h.scrollIntoView({block:'center'});return true;})()")
            .get<bool>()) {
      b.call("Page.captureScreenshot", {{"format", "png"}});
      for (int i = 0; i < 100 && b.eval("vtPage.stacks.length").get<int>() == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      b.eval("(function(){window.scrollTo(0,0);return 0;})()");
    }
    ops.push_back(b.eval(kBenchScript).get<std::vector<std::string>>());
  }
  std::printf("load average before: %s\n", load_average().c_str());
  // samples[page][op]
  std::vector<std::map<std::string, std::vector<double>>> samples(pages.size());
  for (int rep = 0; rep < reps; ++rep)
    for (std::size_t p = 0; p < pages.size(); ++p)
      for (const auto& op : ops[p]) {
        const auto v =
            open[p].b().eval("window.vtBench.run(" + nlohmann::json(op).dump() + "," + std::to_string(rep) + ")");
        if (v.is_number()) samples[p][op].push_back(v.get<double>());
      }
  std::printf("load average after:  %s\n", load_average().c_str());
  std::printf("%-22s %-14s %9s %9s %5s\n", "page", "interaction", "median", "max", "n");
  for (std::size_t p = 0; p < pages.size(); ++p)
    for (const auto& op : ops[p]) {
      auto v = samples[p][op];
      if (v.empty()) continue;
      std::sort(v.begin(), v.end());
      const double med = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
      std::printf("%-22s %-14s %7.2f ms %6.2f ms %5zu\n", pages[p].first.c_str(), op.c_str(), med, v.back(), v.size());
    }
  // For profiling: an expression to read back from each page after the runs (timings of sub-steps
  // that a temporary change to the page collected, for instance).
  if (const char* after = std::getenv("VT_BENCH_AFTER"))
    for (std::size_t p = 0; p < pages.size(); ++p)
      std::printf("%s: %s\n", pages[p].first.c_str(), open[p].b().eval(after).dump().c_str());
  for (auto& o : open) CHECK(o.errors() == nlohmann::json::array());
}
