// A bounded multi-producer single-consumer ring of fixed-size records: the only thing the
// allocation path touches when tracing is on.
//
// Layout (Vyukov's bounded queue, one sequence word per slot):
//
//   tail_ (producers, fetch_add)          head_ (consumer only)
//        |                                     |
//   slots_: [ T ][ T ][ T ] ... [ T ]     capacity = 2^k records of sizeof(T) bytes
//   seq_:   [ s ][ s ][ s ] ... [ s ]     one 64-bit word per slot, in its own array
//
//   For the record at position `pos` (a count that never wraps), slot = pos & (capacity - 1):
//     seq == pos              the slot is free for the producer that owns `pos`
//     seq == pos + 1          the producer has written the record: the consumer may take it
//     seq == pos + capacity   the consumer has taken it: free for position pos + capacity
//
// A producer claims a position with one atomic add, copies the record and publishes it with one
// release store: no lock, no allocation, no system call unless the ring is full. The consumer
// reads records in position order, so records of one thread keep their order, and records of
// different threads appear in the order they claimed positions.
#pragma once

#include <time.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>

namespace vramtrace::trace {

template <class T>
class MpscRing {
  static_assert(std::is_trivially_copyable_v<T>, "records are copied with plain stores");

 public:
  /// Allocates a ring of `capacity` records, rounded up to a power of two (at least 64).
  /// Throws std::bad_alloc. Not for the allocation path: call once at start-up.
  explicit MpscRing(std::size_t capacity) {
    std::size_t c = 64;
    while (c < capacity) c <<= 1;
    capacity_ = c;
    mask_ = c - 1;
    slots_.reset(static_cast<T*>(::operator new[](c * sizeof(T), std::align_val_t{64})));
    std::uninitialized_default_construct_n(slots_.get(), c);
    seq_.reset(new std::atomic<std::uint64_t>[c]);
    reset();
  }

  std::size_t capacity() const noexcept { return capacity_; }

  /// Producer, waiting: claims the next position and waits while the ring is full (until the
  /// consumer frees the slot) or until `keep_waiting()` returns false, in which case the record is
  /// abandoned and false is returned (the position then stays unpublished: use this only when
  /// the consumer has gone away). On success `*pos_out` is the record's position.
  /// Thread-safe for any number of producers; lock-free unless the ring is full.
  template <class KeepWaiting>
  bool push_wait(const T& record, std::uint64_t* pos_out, KeepWaiting&& keep_waiting) noexcept {
    const std::uint64_t pos = tail_.fetch_add(1, std::memory_order_relaxed);
    std::atomic<std::uint64_t>& seq = seq_[pos & mask_];
    if (seq.load(std::memory_order_acquire) != pos) [[unlikely]] {
      unsigned spins = 0;
      while (seq.load(std::memory_order_acquire) != pos) {
        if (!keep_waiting()) return false;
        backoff(spins++);
      }
    }
    slots_[pos & mask_] = record;
    seq.store(pos + 1, std::memory_order_release);
    *pos_out = pos;
    return true;
  }

  /// Producer, never waiting: false when the ring is full (the caller counts a dropped record).
  bool try_push(const T& record, std::uint64_t* pos_out) noexcept {
    std::uint64_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      std::atomic<std::uint64_t>& seq = seq_[pos & mask_];
      const std::int64_t diff =
          static_cast<std::int64_t>(seq.load(std::memory_order_acquire)) - static_cast<std::int64_t>(pos);
      if (diff == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          slots_[pos & mask_] = record;
          seq.store(pos + 1, std::memory_order_release);
          *pos_out = pos;
          return true;
        }
      } else if (diff < 0) {
        return false;  // the slot still holds the record from one lap ago: full
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  /// Consumer only: copies up to `max` published records, in position order, into `out`, stopping
  /// at the first position not yet published. Returns how many were taken.
  std::size_t pop(T* out, std::size_t max) noexcept {
    std::size_t n = 0;
    while (n < max) {
      std::atomic<std::uint64_t>& seq = seq_[head_ & mask_];
      if (seq.load(std::memory_order_acquire) != head_ + 1) break;
      out[n++] = slots_[head_ & mask_];
      seq.store(head_ + capacity_, std::memory_order_release);
      ++head_;
      head_published_.store(head_, std::memory_order_release);
    }
    return n;
  }

  /// Positions claimed so far (published or not). Any thread.
  std::uint64_t claimed() const noexcept { return tail_.load(std::memory_order_acquire); }
  /// Positions the consumer has taken so far. Any thread.
  std::uint64_t consumed() const noexcept { return head_published_.load(std::memory_order_acquire); }

  /// Empties the ring. Only when no other thread uses it (construction, a fork child).
  void reset() noexcept {
    for (std::size_t i = 0; i < capacity_; ++i) seq_[i].store(i, std::memory_order_relaxed);
    head_ = 0;
    head_published_.store(0, std::memory_order_relaxed);
    tail_.store(0, std::memory_order_release);
  }

 private:
  // A full ring means the consumer is behind: spin briefly, then sleep rather than yield, so that
  // waiting producers leave the CPU to the consumer (sched_yield hands it to anyone).
  static void backoff(unsigned spins) noexcept {
    if (spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else {
      timespec ts{0, 20'000};  // 20 us: the consumer frees slots in batches
      nanosleep(&ts, nullptr);
    }
  }

  std::size_t capacity_ = 0;
  std::size_t mask_ = 0;
  struct AlignedDelete {
    void operator()(T* p) const noexcept { ::operator delete[](p, std::align_val_t{64}); }
  };
  std::unique_ptr<T[], AlignedDelete> slots_;  // cache-line aligned: one 64-byte record per line
  std::unique_ptr<std::atomic<std::uint64_t>[]> seq_;
  alignas(64) std::atomic<std::uint64_t> tail_{0};
  alignas(64) std::uint64_t head_ = 0;
  std::atomic<std::uint64_t> head_published_{0};
};

}  // namespace vramtrace::trace
