// Open-addressing hash map from a device address to a pointer, for the allocator's live blocks.
// Linear probing with backward-shift deletion: no tombstones, one cache line per lookup in the
// common case. Not thread-safe (the allocator's lock protects it).
#pragma once

#include <cstdint>
#include <vector>

#include "vramtrace/types.h"

namespace vramtrace::detail {

template <class V>
class PtrMap {
 public:
  PtrMap() { set_capacity(1024); }

  /// The value stored for `key`, or nullptr. `key` must not be 0.
  V* find(DevicePtr key) const noexcept {
    for (std::size_t i = index(key);; i = (i + 1) & mask()) {
      const Slot& s = slots_[i];
      if (s.key == key) return s.value;
      if (s.key == 0) return nullptr;
    }
  }

  /// Inserts or overwrites. `key` must not be 0. May throw std::bad_alloc when growing.
  void insert(DevicePtr key, V* value) {
    if (size_ >= grow_at_) grow();  // keeps the load factor at most 3/4
    place(key, value);
  }

  /// Removes `key` if present; returns whether it was.
  bool erase(DevicePtr key) noexcept {
    std::size_t i = index(key);
    for (;; i = (i + 1) & mask()) {
      if (slots_[i].key == key) break;
      if (slots_[i].key == 0) return false;
    }
    // Backward-shift: move later entries of the probe run into the hole.
    std::size_t hole = i;
    for (std::size_t j = (i + 1) & mask(); slots_[j].key != 0; j = (j + 1) & mask()) {
      const std::size_t home = index(slots_[j].key);
      // Move j into the hole unless its home lies cyclically in (hole, j].
      const bool home_after_hole = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
      if (!home_after_hole) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole] = Slot{};
    --size_;
    return true;
  }

  std::size_t size() const noexcept { return size_; }

  template <class F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_)
      if (s.key != 0) f(s.key, s.value);
  }

 private:
  struct Slot {
    DevicePtr key = 0;
    V* value = nullptr;
  };
  std::vector<Slot> slots_;
  std::size_t size_ = 0;
  // slots_.size() - 1 and 3/4 of slots_.size(), kept beside the vector so that a lookup does not
  // re-derive them (the table's size is a power of two, a multiple of 4).
  std::size_t mask_ = 0;
  std::size_t grow_at_ = 0;

  void set_capacity(std::size_t slots) {
    slots_.resize(slots);
    mask_ = slots - 1;
    grow_at_ = slots / 4 * 3;
  }
  std::size_t mask() const noexcept { return mask_; }
  std::size_t index(DevicePtr key) const noexcept {
    // Addresses are multiples of 512: drop those bits, then Fibonacci hashing.
    return static_cast<std::size_t>(((key >> 9) * 0x9E3779B97F4A7C15ull) >> 20) & mask();
  }
  void place(DevicePtr key, V* value) noexcept {
    for (std::size_t i = index(key);; i = (i + 1) & mask()) {
      if (slots_[i].key == key) {
        slots_[i].value = value;
        return;
      }
      if (slots_[i].key == 0) {
        slots_[i] = Slot{key, value};
        ++size_;
        return;
      }
    }
  }
  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    set_capacity(old.size() * 2);
    size_ = 0;
    for (const Slot& s : old)
      if (s.key != 0) place(s.key, s.value);
  }
};

/// A free-list allocator for node-based containers (std::set nodes), one pool per owner, so that
/// the free-block index neither calls malloc on the hot path nor scatters its nodes.
class NodePool {
 public:
  NodePool() = default;
  NodePool(const NodePool&) = delete;
  NodePool& operator=(const NodePool&) = delete;
  ~NodePool() {
    for (void* c : chunks_) ::operator delete(c);
  }
  void* allocate(std::size_t bytes) {
    if (node_bytes_ == 0) node_bytes_ = bytes;
    if (bytes != node_bytes_) return ::operator new(bytes);  // not a node: pass through
    if (free_ != nullptr) {
      void* p = free_;
      free_ = *static_cast<void**>(free_);
      return p;
    }
    if (used_ + bytes > kChunk || chunks_.empty()) {
      chunks_.push_back(::operator new(kChunk));
      used_ = 0;
    }
    void* p = static_cast<char*>(chunks_.back()) + used_;
    used_ += (bytes + 15) & ~std::size_t{15};
    return p;
  }
  void deallocate(void* p, std::size_t bytes) noexcept {
    if (bytes != node_bytes_) {
      ::operator delete(p);
      return;
    }
    *static_cast<void**>(p) = free_;
    free_ = p;
  }

 private:
  static constexpr std::size_t kChunk = 64 * 1024;
  std::vector<void*> chunks_;
  std::size_t used_ = 0;
  std::size_t node_bytes_ = 0;
  void* free_ = nullptr;
};

template <class T>
struct PoolAllocator {
  using value_type = T;
  NodePool* pool;
  explicit PoolAllocator(NodePool* p) noexcept : pool(p) {}
  template <class U>
  PoolAllocator(const PoolAllocator<U>& o) noexcept : pool(o.pool) {}
  T* allocate(std::size_t n) { return static_cast<T*>(pool->allocate(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { pool->deallocate(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const PoolAllocator<U>& o) const noexcept {
    return pool == o.pool;
  }
};

}  // namespace vramtrace::detail
