// A flat hash map from trace addresses to replay state, for the replay engine's hot path.
#pragma once

#include <cstdint>
#include <vector>

namespace vramtrace {

/// Open addressing with linear probing and backward-shift deletion. Key 0 is reserved (never a
/// valid device address). Not thread-safe.
template <typename V>
class AddrMap {
 public:
  AddrMap() { rehash(1024); }

  /// Pointer to the value of `key`, nullptr if absent. Valid until the next insert/erase.
  V* find(std::uint64_t key) {
    std::size_t i = slot(key);
    for (;;) {
      Entry& e = table_[i];
      if (e.key == key) return &e.value;
      if (e.key == 0) return nullptr;
      i = (i + 1) & mask_;
    }
  }
  /// Inserts or overwrites.
  void put(std::uint64_t key, const V& value) {
    if ((size_ + 1) * 4 > table_.size() * 3) rehash(table_.size() * 2);
    std::size_t i = slot(key);
    for (;;) {
      Entry& e = table_[i];
      if (e.key == key) {
        e.value = value;
        return;
      }
      if (e.key == 0) {
        e.key = key;
        e.value = value;
        ++size_;
        return;
      }
      i = (i + 1) & mask_;
    }
  }
  /// Removes `key` if present.
  void erase(std::uint64_t key) {
    std::size_t i = slot(key);
    for (;;) {
      if (table_[i].key == 0) return;
      if (table_[i].key == key) break;
      i = (i + 1) & mask_;
    }
    // Backward shift: move later entries of the probe chain into the hole.
    std::size_t hole = i;
    std::size_t j = i;
    for (;;) {
      j = (j + 1) & mask_;
      if (table_[j].key == 0) break;
      std::size_t home = slot(table_[j].key);
      // Entry j may move into the hole if its home is not in (hole, j] cyclically.
      bool in_range = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
      if (!in_range) {
        table_[hole] = table_[j];
        hole = j;
      }
    }
    table_[hole].key = 0;
    --size_;
  }
  std::size_t size() const { return size_; }

 private:
  struct Entry {
    std::uint64_t key = 0;
    V value{};
  };
  std::size_t slot(std::uint64_t key) const {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return static_cast<std::size_t>(key) & mask_;
  }
  void rehash(std::size_t n) {
    std::vector<Entry> old = std::move(table_);
    table_.assign(n, Entry{});
    mask_ = n - 1;
    size_ = 0;
    for (const Entry& e : old)
      if (e.key != 0) put(e.key, e.value);
  }
  std::vector<Entry> table_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

}  // namespace vramtrace
