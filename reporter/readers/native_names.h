// Names for the native frames of vramtrace traces: the symbolizer of reporter/symbols behind the
// FrameNamer interface of the trace readers (vramtrace/trace/reader.h). open_trace sets one on
// every vramtrace trace it opens, so the reports name C and C++ frames by function, file and line
// where this machine has the modules, and as "libfoo.so+0x1234" where it has not.
#pragma once

#include <memory>

#include "vramtrace/trace/reader.h"

namespace vramtrace {

/// A namer for one trace. Every namer of the process shares one Symbolizer (its per-module and
/// per-address caches: the ranks of a job load the same libraries), behind a mutex; each namer's
/// notes cover only the modules its own trace asked for: one line per module that could not be
/// used at all (named with its reason, at most five, then a count). Thread-safe.
std::shared_ptr<FrameNamer> native_frame_namer();

}  // namespace vramtrace
