#include "model/load_models.h"

#include "model/ledger.h"
#include "readers/open_trace.h"
#include "readers/sidecar.h"
#include "readers/trace_paths.h"

namespace vramtrace {

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
