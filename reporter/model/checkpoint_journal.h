// The values a keyed structure held at a checkpoint, without copying the structure there.
//
// The trace model wants the layout at the peak of allocated bytes, and a training run sets a new
// peak at almost every step: copying the whole layout at each (what the model did first) costs
// the layout's size per step, quadratic over a run whose live memory grows. Instead, the model
// starts a journal at each new peak and, before it changes an entry, hands the entry's value to
// before_change(); only the first change of each key since the checkpoint keeps a copy. The
// structure at the checkpoint is then the current one with those keys put back (at_checkpoint),
// built once, when it is needed. A new checkpoint drops the journal: the cost is one copy per key
// changed between two checkpoints, not one per key held.
#pragma once

#include <cstddef>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace vramtrace {

/// A journal of the first change of each key since the last checkpoint (see above). `Key` is
/// hashable and equality-comparable; `Value` copyable. Not thread-safe.
template <class Key, class Value>
class CheckpointJournal {
 public:
  /// Sets a checkpoint now: forgets every value kept for the previous one, and keeps values from
  /// now on.
  void start() {
    // clear() visits every bucket: after a checkpoint with many changes, a fresh table keeps the
    // next checkpoints (most change a few keys) from paying for the old table's size.
    if (saved_.bucket_count() > 64 && saved_.bucket_count() > 4 * saved_.size())
      std::unordered_map<Key, std::optional<Value>>().swap(saved_);
    else
      saved_.clear();
    active_ = true;
  }
  /// Stops keeping values (the checkpoint's state was taken, or none is wanted) and frees them.
  void stop() {
    std::unordered_map<Key, std::optional<Value>>().swap(saved_);
    active_ = false;
  }
  /// Whether a checkpoint is set (start() was called after the last stop()).
  bool active() const noexcept { return active_; }
  /// Keys changed since the checkpoint (each counted once).
  std::size_t size() const noexcept { return saved_.size(); }

  /// To call before creating, changing or erasing the entry at `key`: `current` is its value now,
  /// null when there is none. Copies it only on the first change of `key` since the checkpoint,
  /// and only while active().
  void before_change(const Key& key, const Value* current) {
    if (!active_ || saved_.find(key) != saved_.end()) return;
    if (current)
      saved_.emplace(key, std::optional<Value>(*current));
    else
      saved_.emplace(key, std::nullopt);
  }

  /// The entries at the checkpoint, from `now` (a map of Key to Value as it is now; any iteration
  /// order): each key of `now` the journal does not hold, with its value there, then each kept
  /// value. The pointers point into `now` and into this journal: valid until either changes.
  /// Unordered (sort by key for an ordered view).
  template <class Map>
  std::vector<std::pair<Key, const Value*>> at_checkpoint(const Map& now) const {
    std::vector<std::pair<Key, const Value*>> out;
    out.reserve(now.size() + saved_.size());
    for (const auto& [key, value] : now)
      if (saved_.find(key) == saved_.end()) out.emplace_back(key, &value);
    for (const auto& [key, value] : saved_)
      if (value) out.emplace_back(key, &*value);
    return out;
  }

 private:
  std::unordered_map<Key, std::optional<Value>> saved_;
  bool active_ = false;
};

}  // namespace vramtrace
