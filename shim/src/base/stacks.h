// Call stacks of allocations: the code behind each alloc, segment_alloc, segment_map and oom
// event (Event::stack_id; docs/trace-format.md, "stack").
//
// Note [stack capture]: the traced process only records return addresses and, for Python, the
// (file, function, line) of each frame; names are found later, by the reports, on another
// machine (heaptrack's model: the recorder stays small and fast).
//  - Native frames come from the DWARF call-frame information of every module (base/unwind.h,
//    Note [cached unwinding]: libgcc's _Unwind_Backtrace, linked into the shim with the static C++
//    runtime, with each return address's rule cached on x86-64), so the walk goes through PyTorch,
//    libcudart and distribution libraries, which are built without frame pointers; modules' unwind
//    tables are found with glibc's lock-free _dl_find_object. The shim's own frames (the hook, the
//    allocator, the unwinder) are left out: a stack starts at the caller of the CUDA function.
//  - Python frames are added (outermost, after the native ones) only when the allocating thread
//    already holds the GIL: PyGILState_Check and a current thread state, looked up with dlsym at
//    run time (the shim does not link libpython), never while the interpreter is not initialised
//    or is finalising. The walk uses the stable C API (PyEval_GetFrame, PyFrame_GetBack,
//    PyFrame_GetCode, PyFrame_GetLineNumber, Python 3.9 and later; older Pythons get native frames
//    and one debug line), saves and restores a pending exception around it, releases every
//    reference it takes (it keeps only the interned names "co_filename" and "co_name"), and turns
//    the cyclic garbage collector off while it runs (3.10 and later), so that no finalizer can run
//    Python code, and so no CUDA call of ours, inside the walk.
//  - A stack is captured once per outermost hook call (cudaMalloc and the cuMemAlloc_v2 that
//    cudart makes for it share one), before the caching allocator takes its lock, and interned in
//    the trace writer's lock-free table (Note [stacks without locks],
//    vramtrace/trace/stack_interner.h); the events of the call get its id. No lock of ours is
//    taken while unwinding, and nothing here calls a hook; a capture entered again on the same
//    thread (which the collector being off prevents) records no stack instead of recursing.
//  - Settings: VRAMTRACE_STACKS and VRAMTRACE_STACK_DEPTH (base/config.h). Without a trace file
//    nothing is captured.
#pragma once

#include <cstdint>

namespace vramtrace::shim {

/// The call stack of the allocation in progress on this thread, as an id of the trace writer's
/// stack table (Event::stack_id), captured the first time it is asked for during the outermost
/// hook call and the same id afterwards. 0 when stacks are off (VRAMTRACE_STACKS=none), there is
/// no trace, the table is full, or nothing could be captured. Call it before taking any lock of
/// the shim (the allocator's included). Safe in any thread; takes no lock of ours, calls no hook.
std::uint32_t call_stack() noexcept;

/// The stack call_stack captured for the call in progress, or 0: never captures (for the event
/// sink, which runs with the allocator's lock held). Thread-local, one load.
std::uint32_t current_call_stack() noexcept;

}  // namespace vramtrace::shim
