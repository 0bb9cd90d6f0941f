// The public C API (shim/include/vramtrace.h).
#include "vramtrace.h"

#include "base/sink.h"

#define VT_STR2(x) #x
#define VT_STR(x) VT_STR2(x)

extern "C" {

void vramtrace_mark(const char* name) {
  using namespace vramtrace::shim;
  if (!sink()) return;
  emit_mark(intern_mark_name(name ? name : ""));
}

void vramtrace_flush(void) { vramtrace::shim::flush_trace_sink(); }

const char* vramtrace_version(void) {
  return VT_STR(VRAMTRACE_VERSION_MAJOR) "." VT_STR(VRAMTRACE_VERSION_MINOR) "." VT_STR(VRAMTRACE_VERSION_PATCH);
}
}
