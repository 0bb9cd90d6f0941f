// Process lifecycle: exit, fork, and the test stats file.
//
// Note [no CUDA call at exit]: once exit has begun the driver may already be torn down (its own
// atexit handlers), so the shim makes no driver call of its own any more: every backend is
// abandoned, frees of our blocks are only forgotten, and new allocations are forwarded to the
// driver (that call is the program's, not ours). Cached memory is never freed at exit: process
// teardown releases it.
//
// Note [fork child starts clean]: CUDA cannot be used in a child forked after the parent used it,
// but the child must stay alive and truthful: its pools, pass-through records, capture state and
// counters are dropped without any driver call (pthread_atfork child handler), so its stats and
// trace describe the child only. Programs it execs start from scratch and are intercepted again
// because LD_PRELOAD is inherited.
#pragma once

namespace vramtrace::shim {

/// True once process exit has begun (an atexit handler of ours ran, or our destructor).
bool exiting() noexcept;

/// Called after a pool was created: registers (once more) our atexit handler so that it runs
/// before the handlers registered earlier, e.g. the CUDA runtime's teardown. (The fork handlers
/// are installed once, when the library is loaded.)
void lifecycle_pool_created() noexcept;

/// Writes the stats file named by VRAMTRACE_TEST_STATS_FILE ("%p" is replaced by the pid):
/// "key value" lines: calls.<hook>, shim.<counter>, events.<action>, entry.<hook>, and the
/// allocator's flat statistics summed over live pools (allocator.<name>). Used by tests and the
/// GPU compatibility script. No driver call.
void write_stats_file() noexcept;

}  // namespace vramtrace::shim
