// Process helpers shared by the fake-driver tests of tests/shim (test_shim.cpp,
// test_shim_faults.cpp, test_ranks.cpp): a scratch directory, a clean environment, and spawning a
// program with its stdout and stderr captured to files.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace vramtrace::test {

/// The whole content of `path` ("" when it cannot be read).
inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// A fresh directory under /tmp (mkdtemp, `prefix` then six random characters), removed with
/// its content when destroyed.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& prefix = "vt-shim-test") {
    std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
    const char* d = mkdtemp(tmpl.data());
    REQUIRE(d != nullptr);
    path = d;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path + "/" + name; }
};

/// This process's environment without anything that changes what the shim, the fake driver or
/// the test programs do (LD_PRELOAD, LD_LIBRARY_PATH, VRAMTRACE_*, ROAD_*, FAKECUDA_*, and the
/// entries starting with one of `also_drop`), then LD_LIBRARY_PATH=`libpath` and `extra`.
inline std::vector<std::string> clean_environment(const std::vector<std::string>& extra, const std::string& libpath,
                                                  std::initializer_list<const char*> also_drop = {}) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string s = *e;
    bool drop = false;
    for (const char* p : {"LD_PRELOAD=", "LD_LIBRARY_PATH=", "VRAMTRACE_", "ROAD_", "FAKECUDA_"})
      drop = drop || s.rfind(p, 0) == 0;
    for (const char* p : also_drop) drop = drop || s.rfind(p, 0) == 0;
    if (!drop) env.push_back(s);
  }
  env.push_back("LD_LIBRARY_PATH=" + libpath);
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

/// Starts `argv` (argv[0] a path) with environment `env`, stdout to `out_path` and stderr to
/// `err_path`. With `default_signals`, every signal has its default disposition and none is
/// blocked, as for a program started from a terminal (a shell running ctest in the background
/// ignores SIGINT, and exec keeps ignored signals ignored). Returns the pid; REQUIREs success.
inline pid_t spawn_captured(std::vector<std::string> argv, std::vector<std::string> env, const std::string& out_path,
                            const std::string& err_path, bool default_signals = false) {
  std::vector<char*> cargv, cenv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (auto& e : env) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  if (default_signals) {
    sigset_t all, none;
    sigfillset(&all);
    sigemptyset(&none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  }
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, cargv[0], &fa, &attr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  REQUIRE(rc == 0);
  return pid;
}

/// Waits for `pid`; its exit code, or 128 + the signal that killed it.
inline int wait_exit_code(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) FAIL("waitpid failed");
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace vramtrace::test
