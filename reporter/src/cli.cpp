// The process exit code shared by the subcommands (commands.h).
#include <atomic>

#include "commands.h"

namespace vramtrace::cli {
namespace {
std::atomic<int> g_exit_code{0};
}

void set_exit_code(int code) { g_exit_code.store(code); }
int exit_code() { return g_exit_code.load(); }

}  // namespace vramtrace::cli
