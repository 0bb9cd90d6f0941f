// Opening traces (any format open_trace knows) and building their models, for the report commands.
#pragma once

#include <string>
#include <vector>

#include "model/trace_model.h"

namespace vramtrace {

/// Opens and models each path in turn (one pass each). Throws TraceError (naming the file and
/// position) on unusable input.
std::vector<TraceModel> load_models(const std::vector<std::string>& paths, const ModelOptions& options = {});

/// When the model of `path` deferred the layout at a device's peak (DeviceModel::
/// peak_layout_deferred: the trace set new peaks too often to copy the layout each time), reads
/// the trace again and copies the layout, biggest allocations and bytes per stack at that peak
/// into `m`. Nothing happens otherwise, or for "-". Throws TraceError like load_models.
void complete_deferred_peaks(TraceModel& m, const std::string& path, const ModelOptions& options = {});

}  // namespace vramtrace
