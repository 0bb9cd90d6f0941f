// Opening traces (any format open_trace knows) and building their models, for the report commands.
#pragma once

#include <string>
#include <vector>

#include "model/trace_model.h"

namespace vramtrace {

/// Opens and models each path in turn (one pass each). A tensor-level snapshot with its sidecar
/// or the shim's trace of the same process beside it (device_level_companion) gets its memory
/// ledger (TraceModel::ledger; one more pass, over the shim's trace). Throws TraceError (naming
/// the file and position) on unusable input; a companion that cannot be used is a note of the
/// ledger, never an error.
std::vector<TraceModel> load_models(const std::vector<std::string>& paths, const ModelOptions& options = {});

/// When the model of `path` deferred the layout at a device's peak (DeviceModel::
/// peak_layout_deferred: the trace set new peaks too often to copy the layout each time), reads
/// the trace again and copies the layout, biggest allocations and bytes per stack at that peak
/// into `m`. Nothing happens otherwise, or for "-". Throws TraceError like load_models.
void complete_deferred_peaks(TraceModel& m, const std::string& path, const ModelOptions& options = {});

}  // namespace vramtrace
