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

}  // namespace vramtrace
