// Opening traces (any format open_trace knows) and building their models, for the report commands.
#pragma once

#include <string>
#include <vector>

#include "model/trace_model.h"

namespace vramtrace {

/// Opens and models each path in turn (one pass each). Throws TraceError (naming the file and
/// position) on unusable input.
std::vector<TraceModel> load_models(const std::vector<std::string>& paths, const ModelOptions& options = {});

}  // namespace vramtrace
