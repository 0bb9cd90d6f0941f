// `vramtrace report`: one self-contained HTML page (inline CSS and JS, no network) with, per
// device, allocated/active/reserved over time against the capacity, OOM and mark markers, hover
// values and zoom; the allocator's segments and blocks at the peak and at each OOM; the biggest
// allocations, with the call stack of each site and allocation on hover when the trace records
// stacks; the summary tables and settings.
//
// Safety: the page's only dynamic content is one JSON document embedded in a
// <script type="application/json"> element, with '<', '>', '&', U+2028 and U+2029 escaped and
// invalid UTF-8 replaced; the script inserts every string with textContent, never as HTML. A
// trace from someone else therefore cannot run script in the reader's browser.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/trace_model.h"

namespace vramtrace {

struct ReportOptions {
  std::size_t max_segments_drawn = 400;      ///< per state; the largest are kept
  std::size_t max_blocks_per_segment = 600;  ///< further blocks are merged into one run
  /// Call stacks shown on hover (Note [stacks in the page] in report_html.cpp): distinct stacks
  /// embedded per trace, in the order the page refers to them; later ones are left out and the
  /// page says how many.
  std::size_t max_stacks = 300;
  std::size_t max_stack_frames = 64;  ///< per stack; the rest is one "N frames left out" line
  std::size_t max_frame_chars = 300;  ///< per frame label (bytes of UTF-8); longer ones end in "..."
  std::string title;                  ///< default: the trace names
  /// The state at a clicked moment (Note [checkpoints of the state] in model/trace_model.h): the
  /// model keeps between this many and twice this many checkpoints a device
  /// (report_model_options); 0: none, and the page says that a click shows nothing.
  std::size_t checkpoints = 32;
  /// The checkpoints of the whole page take at most this many bytes of its data, shared evenly
  /// by its devices; a device over its share keeps one checkpoint in k, and the page says so.
  std::size_t max_checkpoint_bytes = 640 * 1024;
  /// The icicle of bytes alive at the peak by call stack: at most this many frames (nodes),
  /// each at least 1/1000 of the bytes; smaller callees are counted in their caller only.
  std::size_t max_icicle_nodes = 1500;
  /// Note [the timeline's exact points around the peak] (model/trace_model.h): the model keeps
  /// this many events before a device's peak and as many after it (report_model_options).
  std::size_t exact_points = 1024;
  /// Note [the timeline in the page]: the timelines of all drawn devices of the page together
  /// hold at most this many buckets (each device an equal share, at least kMinPageBuckets up to
  /// 256 drawn devices; with max_device_sections raised past that, down to kMinDeviceBuckets) ...
  std::size_t max_page_buckets = 16384;
  /// ... and at most this many exact points (each device an equal share, centred on its peak) ...
  std::size_t max_page_exact_points = 4096;
  /// ... in at most this many bytes of the page's data together (each device an equal share;
  /// over it, a device's buckets merge two by two, down to that floor, then its exact
  /// points halve).
  std::size_t max_timeline_bytes = 1024 * 1024;
  /// Note [devices in the page] (report_html.cpp): the devices' own states and tables (the peak's
  /// and each OOM's layout, sites and icicle, the summary table, the end, and the stacks they
  /// name) take at most this many bytes of the page's data together, or one device's when that
  /// one alone is larger. Devices with an OOM come first, then the highest peak reserved; the rest
  /// keep their figures and timeline, and the page says how many were left out.
  std::size_t max_detail_bytes = 600 * 1024;
  /// With several processes, the stacked per-process chart of every device holds at most this
  /// many values together (time points and each process's two series), at least 4 points a
  /// device; each value is the maximum over its interval, so no peak is lost.
  std::size_t max_process_values = 30000;
  /// Note [devices in the page] (report_html.cpp): at most this many devices of the whole page
  /// are drawn with their own section (timeline chart, marks, and their detail while it fits
  /// max_detail_bytes), in the order of the detail choice: devices with an OOM first, then the
  /// highest peak reserved. The others are rows of one "Other devices" table (their figures),
  /// and their memory over time is in the stacked per-process chart of their device. Default
  /// max_page_buckets / kMinPageBuckets (256), so that each drawn device keeps at least 64
  /// buckets.
  std::size_t max_device_sections = 256;
  /// Rows of the processes table and of the "Other devices" table, each: past it a table keeps
  /// the rows of the processes (devices) with an OOM and then the highest peak reserved, and
  /// one line gives how many more there are with the range of their peaks. The stacked chart
  /// draws the processes of the drawn devices and of the rows. Default 1,024: about 100 KB a
  /// table, so that a job of 4,096 ranks stays near a job of 1,024.
  std::size_t max_process_rows = 1024;
  /// Marks (the program's named moments) in the whole page: each drawn device an equal share,
  /// between kMinDeviceMarks and kMaxDeviceMarks, every k-th in time order (a note says so). OOM
  /// and retry markers are all kept. Default 8,000 (a mark is about 55 bytes of the page: 440 KB):
  /// 2,000 for each of up to 4 devices, 1,000 for each of 8, 31 for each of 256.
  std::size_t max_page_marks = 8000;
  /// The first screen's OOM verdicts (render/report_verdicts.h): the what-if replays of `oom` run
  /// for at most this many traces with an OOM (each replays its trace under six settings twice);
  /// a line names how many more there are. 0, or `replays` false: the diagnoses only.
  std::size_t max_whatif_traces = 8;
  bool replays = true;
};
/// The fewest buckets a drawn device's timeline keeps in the page, up to max_page_buckets /
/// kMinPageBuckets drawn devices (256, the default max_device_sections); beyond (the cap
/// raised), each device's share of max_page_buckets, down to kMinDeviceBuckets.
inline constexpr std::size_t kMinPageBuckets = 64;
inline constexpr std::size_t kMinDeviceBuckets = 16;
/// The fewest and the most marks a drawn device keeps (when it has them), whatever its share of
/// max_page_marks: a device's chart shows no more than 2,000 (about 110 KB of the page).
inline constexpr std::size_t kMinDeviceMarks = 16;
inline constexpr std::size_t kMaxDeviceMarks = 2000;

/// The model options a report of `traces` traces needs: ModelOptions' defaults with its
/// checkpoints, their layouts capped as the page draws a state, and twice the timeline's buckets
/// (Note [the timeline in the page] in report_html.cpp). A report of more than
/// kMaxTracesWithCheckpoints traces takes neither: the page's share of each device would hold
/// few of them, and the models, all alive until the page is written, would hold them all. Pure.
inline constexpr std::size_t kMaxTracesWithCheckpoints = 8;
ModelOptions report_model_options(const ReportOptions& options = {}, std::size_t traces = 1);

/// The data the page draws, as JSON (also used by tests).
nlohmann::json report_data(const std::vector<TraceModel>& models, const ReportOptions& options = {});

/// The whole page: render/report/report.html (render/report_page.h) with report_data in place of
/// its @DATA@. Deterministic for a given input.
std::string render_report_html(const std::vector<TraceModel>& models, const ReportOptions& options = {});

/// Serialises `j` for embedding inside <script type="application/json">: invalid UTF-8 replaced,
/// and '<', '>', '&', U+2028, U+2029 written as \u escapes so that no "</script>" or HTML comment
/// can form.
std::string json_for_script(const nlohmann::json& j);

}  // namespace vramtrace
