// A program that keeps computing the same results whatever the driver does to it (fault injection
// through the fake driver; tests/shim/test_shim_faults.cpp, docs/reliability.md). Shared cudart.
//
// Usage: road_faults MODE ROUNDS THREADS
//   MODE work: THREADS threads, each with its own stream and random generator, allocate (1 KiB to
//             2 MiB, cudaMalloc or cudaMallocAsync), write a pattern, read it back and check it,
//             synchronise in every way the runtime offers (device, stream, event query and
//             synchronise), free (cudaFree, cudaFreeAsync on the block's stream or on another
//             one), in ROUNDS rounds (0: until killed).
//   MODE fork: the same, and during every round the main thread forks a child while the workers
//             are inside CUDA calls; the child (no CUDA call: CUDA forbids it) computes on host
//             memory, and exits through exit() (atexit handlers, the shim's exit path); it must
//             be done within 10 s (a lock left held by a thread that did not survive the fork
//             would hang it).
//
// A failed allocation (cudaErrorMemoryAllocation) is retried, a failed synchronisation
// (cudaErrorLaunchFailure) is retried, as a careful program does; any other error fails the
// program. Results depend only on the generators and the data read back, never on pointers or on
// which call failed, so with the same injected faults a run without the shim and one with it must
// print the same "round R HASH" lines (one per round, flushed, so that a killed run leaves a
// prefix of them) and the same "result HASH". "program.X N" lines report what the faults did
// (not compared: the shim makes fewer driver calls, so the Nth failing call is another one).
#include <cuda_runtime_api.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "road.h"

namespace {

constexpr int kOpsPerRound = 40;
constexpr int kMaxRetries = 1000;

struct Counters {
  std::atomic<long> alloc_retries{0}, sync_errors{0}, mallocs{0}, async_mallocs{0}, frees{0}, syncs{0};
};
Counters g_counts;

std::uint64_t fnv(std::uint64_t h, const void* data, size_t n) {
  auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Retries a call while it fails with `transient`; any other error fails the program.
template <class F>
void retry(F call, cudaError_t transient, std::atomic<long>& errors) {
  for (int i = 0; i < kMaxRetries; ++i) {
    cudaError_t e = call();
    if (e == cudaSuccess) return;
    if (e != transient) {
      std::fprintf(stderr, "road_faults: unexpected error %d\n", static_cast<int>(e));
      std::exit(1);
    }
    ++errors;
  }
  std::fprintf(stderr, "road_faults: still failing after %d retries\n", kMaxRetries);
  std::exit(1);
}

struct Block {
  void* p = nullptr;
  size_t size = 0;
  std::vector<unsigned char> pattern;  // what was written at the start of the block
  int stream = 0;                      // index into Worker::streams
  bool async = false;
};

struct Worker {
  int id = 0;
  std::mt19937_64 rng;
  cudaStream_t streams[2] = {};
  cudaEvent_t event = nullptr;
  std::vector<Block> live;
  std::uint64_t hash = 1469598103934665603ull;

  void init(int t) {
    id = t;
    rng.seed(0x5eed0000u + t);
    for (auto& s : streams) CHECK_EQ(cudaStreamCreate(&s), cudaSuccess);
    CHECK_EQ(cudaEventCreate(&event), cudaSuccess);
  }

  void sync_once(unsigned how) {
    ++g_counts.syncs;
    switch (how % 4) {
      case 0:
        retry([] { return cudaDeviceSynchronize(); }, cudaErrorLaunchFailure, g_counts.sync_errors);
        break;
      case 1:
        retry([&] { return cudaStreamSynchronize(streams[how / 4 % 2]); }, cudaErrorLaunchFailure,
              g_counts.sync_errors);
        break;
      case 2:
        CHECK_EQ(cudaEventRecord(event, streams[0]), cudaSuccess);
        retry([&] { return cudaEventQuery(event); }, cudaErrorLaunchFailure, g_counts.sync_errors);
        break;
      default:
        CHECK_EQ(cudaEventRecord(event, streams[1]), cudaSuccess);
        retry([&] { return cudaEventSynchronize(event); }, cudaErrorLaunchFailure, g_counts.sync_errors);
    }
  }

  void free_block(size_t k, bool other_stream) {
    Block b = std::move(live[k]);
    live.erase(live.begin() + static_cast<long>(k));
    std::vector<unsigned char> back(b.pattern.size());
    CHECK_EQ(cudaMemcpy(back.data(), b.p, back.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    CHECK(back == b.pattern);  // the memory was ours alone while we held it
    hash = fnv(hash, back.data(), back.size());
    hash = fnv(hash, &b.size, sizeof b.size);
    if (b.async)
      CHECK_EQ(cudaFreeAsync(b.p, streams[other_stream ? 1 - b.stream : b.stream]), cudaSuccess);
    else
      CHECK_EQ(cudaFree(b.p), cudaSuccess);
    ++g_counts.frees;
  }

  void step() {
    const unsigned r = static_cast<unsigned>(rng());
    if (r % 8 < 4 || live.empty()) {  // allocate and write
      Block b;
      b.size = size_t{1024} << (r / 8 % 12);
      b.async = (r / 128) % 3 == 0;
      b.stream = (r / 512) % 2;
      b.pattern.resize(std::min<size_t>(b.size, 512));
      for (auto& c : b.pattern) c = static_cast<unsigned char>(rng());
      if (b.async) {
        retry([&] { return cudaMallocAsync(&b.p, b.size, streams[b.stream]); }, cudaErrorMemoryAllocation,
              g_counts.alloc_retries);
        ++g_counts.async_mallocs;
      } else {
        retry([&] { return cudaMalloc(&b.p, b.size); }, cudaErrorMemoryAllocation, g_counts.alloc_retries);
        ++g_counts.mallocs;
      }
      CHECK(b.p != nullptr);
      CHECK_EQ(cudaMemcpy(b.p, b.pattern.data(), b.pattern.size(), cudaMemcpyHostToDevice), cudaSuccess);
      live.push_back(std::move(b));
      if (live.size() > 24) free_block(0, false);
    } else if (r % 8 < 7) {
      free_block(r / 8 % live.size(), (r / 4096) % 4 == 0);
    } else {
      sync_once(r / 8);
    }
  }

  void finish() {
    while (!live.empty()) free_block(live.size() - 1, false);
    for (auto& s : streams) CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
    CHECK_EQ(cudaEventDestroy(event), cudaSuccess);
  }
};

// The child of a fork in a multithreaded program: host work only, then the normal exit path.
[[noreturn]] void child_after_fork(long round) {
  std::vector<std::uint64_t> v(1 << 16);
  for (size_t i = 0; i < v.size(); ++i) v[i] = i * 2654435761u + static_cast<std::uint64_t>(round);
  std::string line = "child " + std::to_string(round) + " " + std::to_string(fnv(0, v.data(), v.size() * 8)) + "\n";
  ssize_t n = write(1, line.data(), line.size());
  (void)n;
  std::exit(0);
}

void wait_child(pid_t pid) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    CHECK(r >= 0);
    if (r == pid) {
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "road_faults: forked child ended with status %d\n", status);
        std::exit(1);
      }
      return;
    }
    if (std::chrono::steady_clock::now() > until) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      std::fprintf(stderr, "road_faults: forked child hung (a lock held across fork?)\n");
      std::exit(1);
    }
    usleep(1000);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CHECK(argc == 4);
  const bool forks = std::strcmp(argv[1], "fork") == 0;
  CHECK(forks || std::strcmp(argv[1], "work") == 0);
  const long rounds = std::atol(argv[2]);
  const int threads = std::atoi(argv[3]);
  CHECK(threads >= 1 && threads <= 64);

  std::vector<Worker> workers(static_cast<size_t>(threads));
  std::atomic<bool> stop{false};
  std::atomic<long> round_started{-1};
  std::atomic<int> in_round{0};
  // Two barriers per round: start (after main printed the previous round) and end.
  std::barrier start(threads + 1), end(threads + 1);
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      Worker& w = workers[static_cast<size_t>(t)];
      w.init(t);
      for (;;) {
        start.arrive_and_wait();
        if (stop.load()) break;
        ++in_round;
        for (int i = 0; i < kOpsPerRound; ++i) w.step();
        end.arrive_and_wait();
      }
      w.finish();
    });
  }
  long forked = 0;
  for (long round = 1; rounds == 0 || round <= rounds; ++round) {
    round_started = round;
    start.arrive_and_wait();
    if (forks) {
      // Fork while the workers are inside the runtime, the shim and the driver.
      while (in_round.load() < threads) std::this_thread::yield();
      std::fflush(stdout);  // the child must not inherit unflushed output
      pid_t pid = fork();
      CHECK(pid >= 0);
      if (pid == 0) child_after_fork(round);
      ++forked;
      wait_child(pid);
    }
    end.arrive_and_wait();
    in_round = 0;
    std::uint64_t h = 1469598103934665603ull;
    for (auto& w : workers) h = fnv(h, &w.hash, sizeof w.hash);
    std::printf("round %ld %016llx\n", round, static_cast<unsigned long long>(h));
    std::fflush(stdout);
  }
  stop = true;
  start.arrive_and_wait();
  for (auto& th : ts) th.join();
  std::uint64_t h = 1469598103934665603ull;
  for (auto& w : workers) h = fnv(h, &w.hash, sizeof w.hash);
  size_t f = 0, total = 0;
  CHECK_EQ(cudaMemGetInfo(&f, &total), cudaSuccess);
  std::printf("result %016llx\n", static_cast<unsigned long long>(h));
  Tally tally;
  tally.add("alloc_retries", g_counts.alloc_retries);
  tally.add("sync_errors", g_counts.sync_errors);
  tally.add("cudaMalloc", g_counts.mallocs);
  tally.add("cudaMallocAsync", g_counts.async_mallocs);
  tally.add("frees", g_counts.frees);
  tally.add("syncs", g_counts.syncs);
  tally.add("forks", forked);
  auto injected = reinterpret_cast<long (*)(const char*)>(dlsym(fake_driver(), "fakecuda_injected_faults"));
  CHECK(injected != nullptr);
  tally.add("injected_alloc_faults", injected("alloc"));
  tally.add("injected_sync_faults", injected("sync"));
  tally.add("free_bytes_at_end", static_cast<long>(f));  // not compared: the shim keeps its cache
  tally.print();
  return 0;
}
