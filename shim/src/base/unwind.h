// The native frames of a call stack: return addresses of the calling thread.
//
// Note [cached unwinding]: libgcc's _Unwind_Backtrace (linked into the shim with the static C++
// runtime) reads each frame's DWARF call-frame information afresh: it finds the frame's FDE,
// decodes its CIE and runs its CFA program up to the return address, about 200 ns a frame on the
// development VM, 13 us for a stack of 64. The shim's allocations come from the same few hundred
// return addresses again and again, so on x86-64 the rule that CFA program computes for an
// address (CFA = rsp or rbp + offset; return address at CFA - 8, as every x86-64 frame has it;
// rbp unchanged or saved at CFA + offset) is kept in a lock-free table, and a frame whose rule is
// known costs two loads. The rule is computed once with libgcc's own FDE lookup
// (_Unwind_Find_FDE) and a small interpreter of the CFA instructions compilers emit. Anything
// else -- a CFA defined by an expression (stack realignment), a signal frame, an address without
// unwind information, a frame that would not move the stack -- makes the whole stack go through
// _Unwind_Backtrace instead, which records exactly the frames it would have recorded anyway.
// The first captures of every process are taken both ways and compared; a difference turns the
// cache off for the process (VRAMTRACE_TEST_UNWIND_CHECK=1 compares every capture, for tests).
// Other architectures always use _Unwind_Backtrace.
#pragma once

#include <cstdint>

namespace vramtrace::shim {

/// Return addresses of the calling thread's frames, innermost first, leaving out those in
/// [skip_lo, skip_hi) (the shim's own code); at most `max`. A signal frame's address is its
/// interrupted instruction plus one, so that "address - 1 lies in the call" holds of every frame.
/// Never takes a lock of the shim, never calls a hook. Thread-safe. Counts each stack in
/// shim.unwind_cached or shim.unwind_full, and a check that differed in shim.unwind_mismatches.
unsigned native_backtrace(std::uint64_t* out, unsigned max, std::uintptr_t skip_lo, std::uintptr_t skip_hi) noexcept;

}  // namespace vramtrace::shim
