// fork and exec under the shim. Modes:
//   fork: allocate and free (the cache holds a segment), fork; the child makes no CUDA call and
//         exits (its stats must show a clean slate); the parent allocates again and exits.
//   exec <program> [args]: allocate once, then exec the program (it must be intercepted too).
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "road.h"

int main(int argc, char** argv) {
  CHECK(argc >= 2);
  void* p = nullptr;
  CHECK_EQ(cudaMalloc(&p, 1 << 20), cudaSuccess);
  CHECK_EQ(cudaFree(p), cudaSuccess);
  if (std::strcmp(argv[1], "fork") == 0) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
      std::printf("child %d\n", getpid());
      std::fflush(stdout);
      std::exit(0);  // runs the shim's exit path in the child: no CUDA call may happen
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ(cudaMalloc(&p, 1 << 20), cudaSuccess);
    CHECK_EQ(cudaFree(p), cudaSuccess);
    std::printf("parent %d\n", getpid());
    return 0;
  }
  if (std::strcmp(argv[1], "exec") == 0 && argc >= 3) {
    execv(argv[2], argv + 2);
    std::perror("execv");
    return 1;
  }
  return 2;
}
