#include "model/load_models.h"

#include "model/ledger.h"
#include "readers/open_trace.h"
#include "readers/sidecar.h"
#include "readers/trace_paths.h"

namespace vramtrace {

void complete_deferred_peaks(TraceModel& m, const std::string& path, const ModelOptions& options) {
  ModelOptions again = options;
  again.checkpoints = 0;  // the first pass has them
  for (const auto& d : m.devices)
    if (d.peak_layout_deferred) again.capture_peak_after_event[d.device] = d.at_peak.event_index;
  if (again.capture_peak_after_event.empty()) return;
  auto r2 = open_trace(path);
  TraceModel second = build_trace_model(*r2, again);
  for (auto& d : m.devices) {
    if (!d.peak_layout_deferred) continue;
    for (auto& d2 : second.devices) {
      if (d2.device != d.device || !d2.at_peak.captured || d2.at_peak.event_index != d.at_peak.event_index) continue;
      d.at_peak.layout = std::move(d2.at_peak.layout);
      d.at_peak.biggest = std::move(d2.at_peak.biggest);
      d.at_peak.stacks = std::move(d2.at_peak.stacks);
      d.peak_layout_deferred = false;
    }
  }
}

std::vector<TraceModel> load_models(const std::vector<std::string>& paths, const ModelOptions& options) {
  std::vector<TraceModel> out;
  out.reserve(paths.size());
  for (const auto& p : paths) {
    auto reader = open_trace(p);
    try {
      out.push_back(build_trace_model(*reader, options));
    } catch (const TraceError&) {
      throw;
    } catch (const std::exception& e) {
      throw TraceError(p + ": " + reader->position() + ": " + e.what());
    }
    if (out.back().header.path.empty()) out.back().header.path = p;
    // A trace that set new peaks too often: read it again to copy the layout at the final peak.
    complete_deferred_peaks(out.back(), p, options);
    // Both levels of a `vramtrace run` of PyTorch: the ledger of the snapshot and its companions.
    if (options.ledger && out.back().header.format == "snapshot" && p != "-") {
      const SidecarRead sidecar = read_sidecar(p);
      const std::string device_trace = device_level_companion(p);
      if (sidecar.sidecar || !device_trace.empty())
        out.back().ledger = std::make_shared<const MemoryLedger>(
            build_memory_ledger(out.back(), sidecar.sidecar ? &*sidecar.sidecar : nullptr, device_trace));
    }
  }
  return out;
}

}  // namespace vramtrace
