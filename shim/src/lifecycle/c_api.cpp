// The public C API (shim/include/vramtrace.h).
#include "vramtrace.h"

#include "base/sink.h"

namespace vramtrace::shim {
void forward_all_allocations() noexcept;  // policies/driver_memory.cpp
}

#define VT_STR2(x) #x
#define VT_STR(x) VT_STR2(x)

extern "C" {

void vramtrace_mark(const char* name) {
  using namespace vramtrace::shim;
  if (!sink()) return;
  emit_mark(intern_mark_name(name ? name : ""));
}

void vramtrace_flush(void) { vramtrace::shim::flush_trace_sink(); }

void vramtrace_forward_allocations(void) { vramtrace::shim::forward_all_allocations(); }

const char* vramtrace_version(void) {
  return VT_STR(VRAMTRACE_VERSION_MAJOR) "." VT_STR(VRAMTRACE_VERSION_MINOR) "." VT_STR(VRAMTRACE_VERSION_PATCH);
}
}
