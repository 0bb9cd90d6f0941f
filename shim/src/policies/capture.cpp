#include "policies/capture.h"

#include <atomic>
#include <mutex>
#include <new>
#include <set>

namespace vramtrace::shim {
namespace {
std::mutex g_mu;
std::set<std::uint64_t>* g_capturing = new std::set<std::uint64_t>;
std::atomic<int> g_active{0};
}  // namespace

void capture_begin(StreamId key) noexcept {
  std::lock_guard<std::mutex> lock(g_mu);
  try {
    if (g_capturing->insert(key.value).second) g_active.fetch_add(1, std::memory_order_release);
  } catch (...) {
    g_active.fetch_add(1, std::memory_order_release);  // conservative: never forget a capture
  }
}

void capture_end(StreamId key) noexcept {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_capturing->erase(key.value)) g_active.fetch_sub(1, std::memory_order_release);
}

bool capture_active() noexcept { return g_active.load(std::memory_order_acquire) > 0; }

void capture_after_fork_child() noexcept {
  new (&g_mu) std::mutex;
  g_capturing->clear();
  g_active.store(0);
}

}  // namespace vramtrace::shim
