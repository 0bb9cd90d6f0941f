#include "load_models.h"

#include "vramtrace/trace_reader.h"

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
  }
  return out;
}

}  // namespace vramtrace
