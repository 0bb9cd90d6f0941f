// Reading many traces at once: a job of 1,024 ranks is 1,024 independent passes, one per file,
// and one core reads them one after another at about 0.2 s each. parallel_map runs such passes
// on a few threads and hands the results back in the order of the inputs, so that every command
// prints the same output whatever the number of threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace vramtrace {

/// How many threads parallel_map uses for `tasks` independent passes: VRAMTRACE_JOBS when it is
/// a positive integer, else the machine's hardware threads, at most 8 (each pass holds one
/// trace's model, so memory grows with the threads), and never more than `tasks`. At least 1.
/// Thread-safe.
inline unsigned map_workers(std::size_t tasks) {
  unsigned n = std::thread::hardware_concurrency();
  if (n == 0) n = 1;
  n = std::min(n, 8u);
  if (const char* env = std::getenv("VRAMTRACE_JOBS")) {
    char* end = nullptr;
    const unsigned long v = std::strtoul(env, &end, 10);
    if (end != env && *end == '\0' && v > 0 && v <= 1024) n = static_cast<unsigned>(v);
  }
  if (tasks < n) n = static_cast<unsigned>(std::max<std::size_t>(tasks, 1));
  return n;
}

/// Calls `fn(i)` for every i in [0, n) on map_workers(n) threads and returns the results in
/// index order. `fn` must be safe to call concurrently for different indices. When calls throw,
/// the exception of the lowest failing index is rethrown here after every running call has
/// returned, and indices above a failure are not started (as a sequential loop would have
/// stopped there; indices below it still run, so the rethrown exception is the one a sequential
/// loop would have met first). With one worker the calls run on the caller's thread, in order.
template <class T, class Fn>
std::vector<T> parallel_map(std::size_t n, Fn fn, unsigned workers = 0) {
  if (workers == 0) workers = map_workers(n);
  std::vector<std::optional<T>> slots(n);
  if (workers <= 1) {
    for (std::size_t i = 0; i < n; ++i) slots[i].emplace(fn(i));
  } else {
    std::atomic<std::size_t> next{0};
    std::atomic<std::size_t> first_failure{n};
    std::mutex mu;
    std::vector<std::pair<std::size_t, std::exception_ptr>> errors;
    auto work = [&] {
      for (;;) {
        const std::size_t i = next.fetch_add(1, std::memory_order_relaxed);
        if (i >= n || i > first_failure.load(std::memory_order_relaxed)) return;
        try {
          slots[i].emplace(fn(i));
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu);
          errors.emplace_back(i, std::current_exception());
          std::size_t seen = first_failure.load(std::memory_order_relaxed);
          while (i < seen && !first_failure.compare_exchange_weak(seen, i, std::memory_order_relaxed)) {
          }
        }
      }
    };
    std::vector<std::thread> threads;
    threads.reserve(workers - 1);
    try {
      for (unsigned t = 1; t < workers; ++t) threads.emplace_back(work);
    } catch (const std::system_error&) {
      // No more threads to be had: the ones started and this one do the work.
    }
    work();
    for (auto& t : threads) t.join();
    if (!errors.empty()) {
      auto lowest = std::min_element(errors.begin(), errors.end(),
                                     [](const auto& a, const auto& b) { return a.first < b.first; });
      std::rethrow_exception(lowest->second);
    }
  }
  std::vector<T> out;
  out.reserve(n);
  for (auto& s : slots) out.push_back(std::move(*s));
  return out;
}

}  // namespace vramtrace
