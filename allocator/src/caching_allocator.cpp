// The caching allocator of one device. Each rule follows PyTorch's native allocator
// (c10/cuda/CUDACachingAllocator.cpp, DeviceCachingAllocator); docs/pytorch-allocator.md
// states them with worked examples. Differences from PyTorch are named notes below.
//
// Layout of the state:
//   segment (one device allocation, or one expandable address range)
//     = doubly linked list of Blocks in address order (prev/next), tiling it completely
//   free mapped blocks live in their pool's `blocks` set, ordered (stream, size, address): best fit
//   unmapped ranges of expandable segments live in the pool's `unmapped` set, ordered (stream, address)
//   allocated and pending-free blocks live in `active_` (address -> Block)
#include "vramtrace/caching_allocator.h"

#include "ptr_map.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <deque>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace vramtrace {
namespace {

constexpr std::uint64_t kOneExaByte = std::uint64_t{1} << 60;  // PyTorch's "more than 1EB" sanity check

std::uint32_t current_thread_id() noexcept {
  static thread_local std::uint32_t tid = static_cast<std::uint32_t>(::syscall(SYS_gettid));
  return tid;
}

struct BlockPool;
struct ExpandableSegment;

// One block: 64 bytes, one cache line, because with 100,000 live blocks the cost of an
// operation is the cache lines it touches. Rare data lives beside it: the streams a block was
// used on (Impl::stream_uses) and its expandable segment (Impl::segment_of).
struct alignas(64) Block {
  DevicePtr ptr = 0;
  std::uint64_t size = 0;
  std::uint64_t requested_size = 0;
  StreamId stream{};
  BlockPool* pool = nullptr;
  Block* prev = nullptr;
  Block* next = nullptr;
  std::uint32_t gc_count_base = 0;  // pool's get_free_block count (mod 2^32) when cached
  std::uint16_t event_count = 0;    // outstanding events (and a deferred replay free)
  bool allocated : 1 = false;
  bool mapped : 1 = true;
  bool deferred : 1 = false;         // freed by deallocate_deferred, waiting for complete_deferred_free
  bool expandable : 1 = false;       // part of an expandable segment
  bool has_stream_uses : 1 = false;  // other streams used it (record_stream)

  bool is_split() const noexcept { return prev != nullptr || next != nullptr; }
};
static_assert(sizeof(Block) == 64, "Block must stay one cache line");

// Free mapped blocks in best-fit order: same stream first, then smallest size, then lowest
// address (PyTorch's BlockComparatorSize). The key is copied into the tree node so that a search
// never dereferences a Block: with 100,000 live blocks that keeps the tree in cache. A block's
// key fields are never changed while it is in the set (every caller erases first).
class FreeBlocks {
  struct Key {
    std::uint64_t stream;
    std::uint64_t size;
    DevicePtr ptr;
    Block* block;
    bool operator<(const Key& o) const noexcept {
      if (stream != o.stream) return stream < o.stream;
      if (size != o.size) return size < o.size;
      return ptr < o.ptr;
    }
  };
  using Set = std::set<Key, std::less<Key>, detail::PoolAllocator<Key>>;
  Set set_;
  static Key key_of(const Block* b) noexcept { return Key{b->stream.value, b->size, b->ptr, const_cast<Block*>(b)}; }

 public:
  explicit FreeBlocks(detail::NodePool* nodes) : set_(detail::PoolAllocator<Key>(nodes)) {}

  class iterator {
   public:
    iterator() = default;
    explicit iterator(typename Set::const_iterator it) : it_(it) {}
    Block* operator*() const noexcept { return it_->block; }
    iterator& operator++() noexcept {
      ++it_;
      return *this;
    }
    iterator& operator--() noexcept {
      --it_;
      return *this;
    }
    iterator operator++(int) noexcept {
      iterator old = *this;
      ++it_;
      return old;
    }
    bool operator==(const iterator& o) const noexcept { return it_ == o.it_; }
    typename Set::const_iterator raw() const noexcept { return it_; }

   private:
    typename Set::const_iterator it_;
  };

  iterator begin() const noexcept { return iterator(set_.begin()); }
  iterator end() const noexcept { return iterator(set_.end()); }
  /// First block on `stream` with size >= `size` (ties: lowest address), or the first block of
  /// a later stream, or end().
  iterator lower_bound(StreamId stream, std::uint64_t size) const {
    return iterator(set_.lower_bound(Key{stream.value, size, 0, nullptr}));
  }
  void insert(Block* b) { set_.insert(key_of(b)); }
  void erase(iterator it) { set_.erase(it.raw()); }
  std::size_t erase(const Block* b) {
    auto it = set_.find(key_of(b));
    if (it == set_.end()) return 0;
    set_.erase(it);
    return 1;
  }
  /// The entry of a block in the set (its key fields as they are now), or end().
  iterator find(const Block* b) const { return iterator(set_.find(key_of(b))); }

  /// Makes the entry at `it` stand for `b` with b's key as it is now, where that key sorts
  /// below the entry's old key: the caller shrank the block the entry was made for from below (a
  /// split remainder). Same result as erase(it) then insert(b), cheaper: when the new key still
  /// sorts above the entry's predecessor (the usual case: no other free block of that stream has
  /// a size in between), the key is rewritten in the node, with no rebalancing and no node
  /// allocation.
  void replace_with_smaller(iterator it, Block* b) {
    const Key key = key_of(b);
    auto raw = it.raw();
    if (raw == set_.begin() || *std::prev(raw) < key)
      rewrite(raw, key);
    else
      reinsert(raw, key);
  }
  /// As replace_with_smaller, for a key that sorts above the entry's old key (the block the entry
  /// was made for was merged into `b`, which grew): rewritten in place while it stays below the
  /// entry's successor.
  void replace_with_larger(iterator it, Block* b) {
    const Key key = key_of(b);
    auto raw = it.raw();
    auto next = std::next(raw);
    if (next == set_.end() || key < *next)
      rewrite(raw, key);
    else
      reinsert(raw, key);
  }

 private:
  static void rewrite(typename Set::const_iterator raw, const Key& key) noexcept {
    // The node's value is not const (only the set's view of it is), and the caller checked that
    // the new key keeps the set's order, so the tree stays valid.
    const_cast<Key&>(*raw) = key;
  }
  [[gnu::noinline]] void reinsert(typename Set::const_iterator raw, const Key& key) {
    set_.erase(raw);
    set_.insert(key);
  }

 public:
  std::size_t count(const Block* b) const { return set_.count(key_of(b)); }
  std::size_t size() const noexcept { return set_.size(); }
};
// Unmapped ranges: same stream first, then lowest address (BlockComparatorAddress).
struct ByAddress {
  bool operator()(const Block* a, const Block* b) const noexcept {
    if (a->stream.value != b->stream.value) return a->stream.value < b->stream.value;
    return a->ptr < b->ptr;
  }
};

struct BlockPool {
  explicit BlockPool(detail::NodePool* nodes) : blocks(nodes) {}
  FreeBlocks blocks;
  std::set<Block*, ByAddress> unmapped;
  bool is_small = false;
  std::uint64_t get_free_blocks_call_count = 0;  // "age" clock for garbage collection

  void insert_into_blocks(Block* b) {
    b->gc_count_base = static_cast<std::uint32_t>(get_free_blocks_call_count);
    blocks.insert(b);
  }
  /// insert_into_blocks(b) for a block that takes over the entry `it`, whose key sorts below
  /// (a split remainder) or above (a merged block) the entry's old key (FreeBlocks::replace_with_*).
  void replace_in_blocks_smaller(FreeBlocks::iterator it, Block* b) {
    b->gc_count_base = static_cast<std::uint32_t>(get_free_blocks_call_count);
    blocks.replace_with_smaller(it, b);
  }
  void replace_in_blocks_larger(FreeBlocks::iterator it, Block* b) {
    b->gc_count_base = static_cast<std::uint32_t>(get_free_blocks_call_count);
    blocks.replace_with_larger(it, b);
  }
};

// Address space reserved for one (stream, pool), mapped page by page (PyTorch's ExpandableSegment).
struct ExpandableSegment {
  DevicePtr base = 0;
  std::uint64_t size = 0;          // reserved bytes
  std::uint64_t segment_size = 0;  // page size of this pool: 2 MiB small, 20 MiB large
  StreamId stream{};
  std::vector<bool> mapped;  // per page
};

// The per-device lock. Critical sections are short (a few hundred instructions, no system calls
// except on a miss, when the device call dominates anyway), so a test-and-test-and-set spin lock
// with a yield fallback costs a fraction of a pthread mutex on the cache-hit path.
class SpinLock {
 public:
  void lock() noexcept {
    for (int spins = 0; flag_.exchange(true, std::memory_order_acquire); ++spins) {
      while (flag_.load(std::memory_order_relaxed)) {
        if (++spins > 64) {
          sched_yield();
          spins = 0;
        } else {
          __builtin_ia32_pause();
        }
      }
    }
  }
  void unlock() noexcept { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

struct AllocParams {
  StreamId stream{};
  std::uint64_t size = 0;        // rounded request
  std::uint64_t alloc_size = 0;  // device allocation needed on a miss
  BlockPool* pool = nullptr;
  Block* block = nullptr;
  // Where get_free_block found `block` in its pool; the entry stays there until
  // alloc_found_block reuses it for the split remainder or erases it.
  FreeBlocks::iterator found;
  bool in_pool = false;
  Status err = Status::ok;
};

}  // namespace

struct CachingAllocator::Impl {
  DeviceBackend& backend;
  AllocatorSettings settings;
  DeviceId device;
  EventSink* sink;

  mutable SpinLock mu;
  DeviceStats stats;
  detail::NodePool nodes;  // tree nodes of both pools' free-block sets
  BlockPool small_pool{&nodes};
  BlockPool large_pool{&nodes};
  detail::PtrMap<Block> active;  // allocated and pending-free blocks by address
  std::unordered_map<StreamId, std::deque<std::pair<EventHandle, Block*>>> stream_events;
  std::vector<ExpandableSegment*> expandable_segments;
  std::uint64_t total_allocated_memory = 0;  // reserved bytes (PyTorch's name for it)
  // Settings-derived flags, fixed at construction (settings never change afterwards), so that the
  // cache-hit path tests one bool instead of re-deriving them.
  bool any_divisions = false;      // some roundup_power2_divisions entry > 1
  bool gc_active = false;          // garbage_collection_threshold > 0 with a memory fraction or limit
  std::uint64_t device_total = 0;  // cached mem_info().total_bytes, 0 = not read yet
  OomInfo last_oom;

  std::deque<Block> block_arena;  // stable addresses; freed Blocks are recycled through free_list
  Block* free_list = nullptr;     // freed Blocks, linked through `next` (last freed first)
  std::unordered_map<const Block*, std::vector<StreamId>> stream_uses;  // record_stream, rare

  Impl(DeviceBackend& b, const AllocatorSettings& s, DeviceId d, EventSink* k)
      : backend(b), settings(s), device(d), sink(k) {
    small_pool.is_small = true;
    for (std::uint32_t d : settings.roundup_power2_divisions) any_divisions = any_divisions || d > 1;
    gc_active = settings.garbage_collection_threshold > 0.0 && set_fraction();
    stats.max_split_size = settings.max_split_size_bytes == std::numeric_limits<std::uint64_t>::max()
                               ? -1
                               : static_cast<std::int64_t>(settings.max_split_size_bytes);
  }

  ~Impl() {
    for (auto* es : expandable_segments) delete es;
  }

  // ---- small helpers ------------------------------------------------------------------------

  [[gnu::always_inline]] Block* new_block(DevicePtr ptr, std::uint64_t size, StreamId stream, BlockPool* pool) {
    Block* b;
    if (free_list != nullptr) {
      b = free_list;
      free_list = b->next;
      *b = Block{};
    } else {
      b = &block_arena.emplace_back();
    }
    b->ptr = ptr;
    b->size = size;
    b->stream = stream;
    b->pool = pool;
    return b;
  }
  [[gnu::always_inline]] void delete_block(Block* b) {
    if (b->has_stream_uses) [[unlikely]]
      forget_stream_uses(b);
    b->next = free_list;
    free_list = b;
  }
  [[gnu::noinline]] void forget_stream_uses(const Block* b) { stream_uses.erase(b); }

  ExpandableSegment* segment_of(const Block* b) const noexcept {
    for (ExpandableSegment* es : expandable_segments)
      if (b->ptr >= es->base && b->ptr < es->base + es->size) return es;
    return nullptr;
  }

  // Blocks of a segment age as their pool searches; the age survives 2^32 searches wrapping.
  static std::uint32_t age_of(const BlockPool& pool, const Block* b) noexcept {
    return static_cast<std::uint32_t>(pool.get_free_blocks_call_count) - b->gc_count_base;
  }

  static int pool_stat(const BlockPool& pool) { return pool.is_small ? kStatSmall : kStatLarge; }
  static void increase(StatArray& a, int pool, std::int64_t amount) {
    a[kStatAll].increase(amount);
    a[pool].increase(amount);
  }
  static void decrease(StatArray& a, int pool, std::int64_t amount) {
    a[kStatAll].decrease(amount);
    a[pool].decrease(amount);
  }

  bool set_fraction() const { return settings.per_process_memory_fraction < 1.0 || settings.limit_bytes != 0; }

  std::uint64_t total_memory() {
    if (device_total == 0) device_total = backend.mem_info().total_bytes;
    return device_total;
  }

  // allowed_memory_maximum: the memory fraction of the device, and our own limit.
  std::uint64_t allowed_memory() {
    std::uint64_t allowed = std::numeric_limits<std::uint64_t>::max();
    if (settings.per_process_memory_fraction < 1.0)
      allowed = static_cast<std::uint64_t>(settings.per_process_memory_fraction * static_cast<double>(total_memory()));
    if (settings.limit_bytes != 0) allowed = std::min(allowed, settings.limit_bytes);
    return allowed;
  }

  void emit(Action action, DevicePtr addr, std::uint64_t size, std::uint64_t block_bytes, StreamId stream, bool small,
            std::uint16_t entry_point = 0, std::uint64_t aux = 0) noexcept {
    if (sink == nullptr) return;
    Event e;
    e.time_ns = event_time_ns();
    e.addr = addr;
    e.size_bytes = size;
    e.block_bytes = block_bytes;
    e.stream = stream.value;
    e.aux = aux;
    e.device = device.value;
    e.thread_id = current_thread_id();
    e.action = action;
    e.pool = small ? PoolKind::small : PoolKind::large;
    e.entry_point = entry_point;
    sink->record(e);
  }

  // ---- sizes (round_size, get_allocation_size: vramtrace/size_rules.h) ------------------------

  std::uint64_t round_size(std::uint64_t size) const {
    return vramtrace::round_size(size, any_divisions ? settings.divisions_for(size) : 0);
  }

  // ---- events of blocks used on other streams ---------------------------------------------------

  // Returns blocks whose last event completed to the pool (process_events).
  void process_events() {
    if (stream_events.empty()) return;
    for (auto it = stream_events.begin(); it != stream_events.end();) {
      auto& queue = it->second;
      while (!queue.empty()) {
        auto [ev, block] = queue.front();
        if (!backend.event_done(ev)) break;
        backend.destroy_event(ev);
        queue.pop_front();
        if (--block->event_count == 0) free_block(block);
      }
      it = queue.empty() ? stream_events.erase(it) : std::next(it);
    }
  }

  // Waits for every outstanding event (synchronize_and_free_events).
  void synchronize_and_free_events() {
    for (auto& [stream, queue] : stream_events) {
      for (auto [ev, block] : queue) {
        backend.wait_event(ev);
        backend.destroy_event(ev);
        if (--block->event_count == 0) free_block(block);
      }
    }
    stream_events.clear();
    stats.num_sync_all_streams += 1;
  }

  void insert_events(Block* block) {
    std::vector<StreamId> uses;
    if (block->has_stream_uses) {
      auto it = stream_uses.find(block);
      uses.swap(it->second);
      stream_uses.erase(it);
      block->has_stream_uses = false;
    }
    for (StreamId s : uses) {
      EventHandle ev = backend.record_event(s);
      if (ev == 0) continue;  // backend without events: the use cannot be tracked
      block->event_count++;
      stream_events[s].emplace_back(ev, block);
    }
    if (block->event_count == 0) free_block(block);
  }

  // ---- finding and creating blocks ------------------------------------------------------------

  [[gnu::always_inline]] bool get_free_block(AllocParams& p) {
    BlockPool& pool = *p.pool;
    if (gc_active) ++pool.get_free_blocks_call_count;
    auto it = pool.blocks.lower_bound(p.stream, p.size);
    if (it == pool.blocks.end() || (*it)->stream != p.stream) return false;

    if ((*it)->expandable) {
      if (settings.expandable_segments) {
        // For best fit, a block followed by unmapped space counts as the size it can grow to.
        auto expandable_size = [](const Block* b) {
          return b->size + (b->next != nullptr && !b->next->mapped ? b->next->size : 0);
        };
        auto next = it;
        ++next;
        while ((*it)->expandable && next != pool.blocks.end() && (*next)->stream == p.stream &&
               expandable_size(*next) < expandable_size(*it)) {
          it = next++;
        }
      } else {
        do {
          ++it;
        } while (it != pool.blocks.end() && (*it)->expandable && (*it)->stream == p.stream);
        if (it == pool.blocks.end() || (*it)->stream != p.stream) return false;
      }
    }
    const std::uint64_t max_split = settings.max_split_size_bytes;
    // Do not return an oversize block for a small request.
    if (p.size < max_split && (*it)->size >= max_split) return false;
    // Do not return an oversize block for a large request unless it is close in size.
    if (p.size >= max_split && (*it)->size >= p.size + settings.max_non_split_rounding_bytes) return false;
    p.block = *it;
    p.found = it;
    p.in_pool = true;
    return true;
  }

  bool alloc_block(AllocParams& p) {
    const std::uint64_t size = p.alloc_size;
    if (set_fraction() && total_allocated_memory + size > allowed_memory()) {
      p.err = Status::out_of_memory;
      return false;
    }
    if (settings.expandable_segments) {
      p.block = try_allocate_expandable_block(p.stream, *p.pool, p.size);
      p.err = p.block != nullptr ? Status::ok : Status::out_of_memory;
      return p.block != nullptr;
    }
    DevicePtr ptr = 0;
    p.err = backend.allocate(size, &ptr);
    if (p.err != Status::ok) return false;
    total_allocated_memory += size;
    p.block = new_block(ptr, size, p.stream, p.pool);
    const int ps = pool_stat(*p.pool);
    increase(stats.segment, ps, 1);
    increase(stats.reserved_bytes, ps, static_cast<std::int64_t>(size));
    if (size >= settings.max_split_size_bytes) stats.oversize_segments.increase(1);
    stats.num_device_alloc += 1;
    emit(Action::segment_alloc, ptr, size, size, p.stream, p.pool->is_small);
    return true;
  }

  // Frees one cached, unsplit segment back to the device (release_block).
  void release_block(Block* block) {
    BlockPool& pool = *block->pool;
    stats.num_device_free += 1;
    emit(Action::segment_free, block->ptr, block->size, block->size, block->stream, pool.is_small);
    backend.deallocate(block->ptr, block->size);
    total_allocated_memory -= block->size;
    const int ps = pool_stat(pool);
    decrease(stats.segment, ps, 1);
    decrease(stats.reserved_bytes, ps, static_cast<std::int64_t>(block->size));
    if (block->size >= settings.max_split_size_bytes) stats.oversize_segments.decrease(1);
    pool.blocks.erase(block);
    delete_block(block);
  }

  // With max_split_size set: free the smallest oversize cached segment that covers the request,
  // or oversize segments from the largest down until enough is freed (release_available_cached_blocks).
  bool release_available_cached_blocks(const AllocParams& p) {
    const std::uint64_t max_split = settings.max_split_size_bytes;
    if (max_split == std::numeric_limits<std::uint64_t>::max()) return false;
    BlockPool& pool = *p.pool;
    const std::uint64_t key_size = std::max(p.size, max_split);
    auto it = pool.blocks.lower_bound(p.stream, key_size);
    if (it == pool.blocks.end() || (*it)->stream != p.stream || (*it)->expandable) {
      if (it == pool.blocks.begin()) return false;
      std::uint64_t released = 0;
      --it;  // the largest block on this stream below the key
      while (released < key_size && (*it)->size >= max_split && (*it)->stream == p.stream) {
        auto cur = it;
        const bool is_first = cur == pool.blocks.begin();
        if (!is_first) --it;
        Block* b = *cur;
        if (!b->expandable && !b->is_split()) {
          released += b->size;
          release_block(b);
        }
        if (is_first) break;
      }
      if (released < key_size) return false;
    } else {
      Block* b = *it;
      if (b->is_split()) return false;
      release_block(b);
    }
    return true;
  }

  // Frees every unsplit cached segment and unmaps free pages of expandable segments.
  void release_blocks(BlockPool& pool) {
    std::vector<Block*> to_unmap;
    for (auto it = pool.blocks.begin(); it != pool.blocks.end();) {
      Block* b = *it;
      ++it;
      if (b->expandable) {
        to_unmap.push_back(b);
      } else if (!b->is_split()) {
        release_block(b);
      }
    }
    for (Block* b : to_unmap) {
      Block* after = unmap_block(b);
      if (after != nullptr && !after->mapped && after->prev == nullptr && after->next == nullptr)
        release_expandable_segment(after);
    }
  }

  bool release_cached_blocks() {
    synchronize_and_free_events();
    release_blocks(large_pool);
    release_blocks(small_pool);
    return true;
  }

  // Frees cached large segments older than the average age until reserved memory is back under
  // garbage_collection_threshold x allowed memory (garbage_collect_cached_blocks).
  void garbage_collect_cached_blocks() {
    const auto gc_threshold =
        static_cast<std::uint64_t>(settings.garbage_collection_threshold * static_cast<double>(allowed_memory()));
    if (total_allocated_memory <= gc_threshold) return;
    const std::uint64_t target = total_allocated_memory - gc_threshold;
    std::uint64_t reclaimed = 0;
    std::uint64_t total_age = 0;
    std::int64_t freeable = 0;
    for (Block* b : large_pool.blocks) {
      if (!b->is_split() && !b->expandable) {
        total_age += age_of(large_pool, b);
        ++freeable;
      }
    }
    if (freeable == 0) return;
    bool freed = true;
    while (reclaimed < target && freed && freeable > 0) {
      const double age_threshold = static_cast<double>(total_age) / static_cast<double>(freeable);
      freed = false;
      for (auto it = large_pool.blocks.begin(); it != large_pool.blocks.end();) {
        Block* b = *it;
        ++it;
        const std::uint64_t age = age_of(large_pool, b);
        if (!b->is_split() && !b->expandable && static_cast<double>(age) >= age_threshold) {
          freed = true;
          reclaimed += b->size;
          total_age -= age;
          --freeable;
          release_block(b);
        }
      }
    }
  }

  // ---- expandable segments ----------------------------------------------------------------------

  Block* try_allocate_expandable_block(StreamId stream, BlockPool& pool, std::uint64_t size) {
    Block* candidate = find_expandable_block(stream, pool, size);
    if (candidate == nullptr) return nullptr;
    // candidate is: unmapped -> ..., or free -> unmapped -> ...
    if (!candidate->mapped && !map_block(candidate, std::min(candidate->size, size))) return nullptr;
    while (candidate->size < size) {
      const std::uint64_t remaining = size - candidate->size;
      Block* next = candidate->next;
      if (!map_block(next, std::min(remaining, next->size))) return nullptr;
      candidate = next;  // map_block merged the new pages into the free block before them
    }
    pool.blocks.erase(candidate);
    return candidate;
  }

  Block* find_expandable_block(StreamId stream, BlockPool& pool, std::uint64_t size) {
    auto allocatable = [](const Block* b) {
      return b != nullptr && !b->allocated && b->event_count == 0 && !b->has_stream_uses;
    };
    auto has_room = [&](const Block* b) {
      std::uint64_t bytes = 0;
      while (bytes < size && allocatable(b)) {
        bytes += b->size;
        b = b->next;
      }
      return bytes >= size;
    };
    Block key;
    key.stream = stream;
    key.ptr = 0;
    for (auto it = pool.unmapped.lower_bound(&key); it != pool.unmapped.end() && (*it)->stream == stream; ++it) {
      Block* c = *it;
      if (allocatable(c->prev)) c = c->prev;  // a free block just before the unmapped range can join
      if (has_room(c)) return c;
    }
    // A new segment: address space for 9/8 of the device, as PyTorch reserves.
    const std::uint64_t segment_size = pool.is_small ? kSmallBuffer : kLargeBuffer;
    std::uint64_t va_size = total_memory() / 8 * 9;
    va_size = std::max<std::uint64_t>((va_size + segment_size - 1) / segment_size * segment_size, segment_size);
    if (va_size < size) va_size = (size + segment_size - 1) / segment_size * segment_size;
    DevicePtr base = 0;
    if (backend.reserve_address(va_size, &base) != Status::ok) return nullptr;
    auto* es = new ExpandableSegment{base, va_size, segment_size, stream, std::vector<bool>(va_size / segment_size)};
    expandable_segments.push_back(es);
    Block* c = new_block(base, va_size, stream, &pool);
    c->mapped = false;
    c->expandable = true;
    pool.unmapped.insert(c);
    return c;
  }

  // Maps the pages covering [to_map->ptr, +size) and merges them with free neighbours (map_block).
  bool map_block(Block* to_map, std::uint64_t size) {
    ExpandableSegment& es = *segment_of(to_map);
    const std::uint64_t first = (to_map->ptr - es.base) / es.segment_size;
    const std::uint64_t last = (to_map->ptr + size - es.base + es.segment_size - 1) / es.segment_size;
    const DevicePtr range_ptr = es.base + first * es.segment_size;
    const std::uint64_t range_size = (last - first) * es.segment_size;
    if (backend.map(range_ptr, range_size) != Status::ok) return false;
    for (auto i = first; i < last; ++i) es.mapped[i] = true;

    BlockPool& pool = *to_map->pool;
    pool.unmapped.erase(to_map);
    to_map->mapped = true;
    if (range_size < to_map->size) {
      Block* remaining = new_block(to_map->ptr + range_size, to_map->size - range_size, to_map->stream, &pool);
      remaining->mapped = false;
      remaining->expandable = to_map->expandable;
      remaining->prev = to_map;
      remaining->next = to_map->next;
      if (remaining->next != nullptr) remaining->next->prev = remaining;
      to_map->next = remaining;
      pool.unmapped.insert(remaining);
      to_map->size = range_size;
    }
    try_merge_blocks(to_map, to_map->prev, pool);
    try_merge_blocks(to_map, to_map->next, pool);
    pool.insert_into_blocks(to_map);

    total_allocated_memory += range_size;
    increase(stats.reserved_bytes, pool_stat(pool), static_cast<std::int64_t>(range_size));
    stats.num_device_alloc += 1;
    emit(Action::segment_map, range_ptr, range_size, range_size, to_map->stream, pool.is_small);
    return true;
  }

  // Unmaps the whole pages inside a free block (unmap_block). Returns the unmapped block after
  // merging (nullptr if no whole page was inside).
  // Note [sync before unmap]: unlike cudaFree, unmapping does not synchronise, so the device is
  // synchronised first (PyTorch synchronises the segment's stream).
  Block* unmap_block(Block* block) {
    ExpandableSegment& es = *segment_of(block);
    const std::uint64_t first = (block->ptr - es.base + es.segment_size - 1) / es.segment_size;
    const std::uint64_t last = (block->ptr + block->size - es.base) / es.segment_size;
    if (first >= last) return nullptr;
    const DevicePtr range_ptr = es.base + first * es.segment_size;
    const std::uint64_t range_size = (last - first) * es.segment_size;
    backend.synchronize();
    if (backend.unmap(range_ptr, range_size) != Status::ok) return nullptr;
    for (auto i = first; i < last; ++i) es.mapped[i] = false;

    BlockPool& pool = *block->pool;
    pool.blocks.erase(block);
    const std::uint64_t before = range_ptr - block->ptr;
    if (before > 0) {
      Block* b = new_block(block->ptr, before, block->stream, &pool);
      b->expandable = block->expandable;
      b->prev = block->prev;
      if (b->prev != nullptr) b->prev->next = b;
      b->next = block;
      block->prev = b;
      pool.insert_into_blocks(b);
    }
    const std::uint64_t after = block->size - before - range_size;
    if (after > 0) {
      Block* a = new_block(range_ptr + range_size, after, block->stream, &pool);
      a->expandable = block->expandable;
      a->next = block->next;
      if (a->next != nullptr) a->next->prev = a;
      a->prev = block;
      block->next = a;
      pool.insert_into_blocks(a);
    }
    block->ptr = range_ptr;
    block->size = range_size;
    block->mapped = false;
    try_merge_blocks(block, block->prev, pool);
    try_merge_blocks(block, block->next, pool);
    pool.unmapped.insert(block);

    total_allocated_memory -= range_size;
    decrease(stats.reserved_bytes, pool_stat(pool), static_cast<std::int64_t>(range_size));
    stats.num_device_free += 1;
    emit(Action::segment_unmap, range_ptr, range_size, range_size, block->stream, pool.is_small);
    return block;
  }

  void release_expandable_segment(Block* block) {
    ExpandableSegment* es = segment_of(block);
    backend.release_address(es->base, es->size);
    expandable_segments.erase(std::find(expandable_segments.begin(), expandable_segments.end(), es));
    block->pool->unmapped.erase(block);
    delete es;
    delete_block(block);
  }

  // ---- splitting and merging --------------------------------------------------------------------

  bool should_split(const Block* block, std::uint64_t size) const {
    return vramtrace::should_split(size, block->size - size, block->pool->is_small || settings.expandable_segments,
                                   settings.max_split_size_bytes);
  }

  // Merges `src` into `dst` if src is free, idle and in the same mapped state. Returns the bytes
  // subsumed (try_merge_blocks). With `keep_entry` and a mapped src, src's entry in the pool is
  // left in place for the caller to reuse (pool.replace_in_blocks) and returned there.
  [[gnu::always_inline]] std::uint64_t try_merge_blocks(Block* dst, Block* src, BlockPool& pool,
                                                        FreeBlocks::iterator* keep_entry = nullptr) {
    if (src == nullptr || src->allocated || src->event_count > 0 || src->has_stream_uses || dst->mapped != src->mapped)
      return 0;
    if (dst->prev == src) {  // [src dst]
      dst->ptr = src->ptr;
      dst->prev = src->prev;
      if (dst->prev != nullptr) dst->prev->next = dst;
    } else {  // [dst src]
      dst->next = src->next;
      if (dst->next != nullptr) dst->next->prev = dst;
    }
    const std::uint64_t subsumed = src->size;
    dst->size += subsumed;
    if (!src->mapped)
      pool.unmapped.erase(src);
    else if (keep_entry != nullptr)
      *keep_entry = pool.blocks.find(src);
    else
      pool.blocks.erase(src);
    delete_block(src);
    return subsumed;
  }

  Block* alloc_found_block(AllocParams& p, std::uint64_t orig_size, bool split_remainder, std::uint16_t entry) {
    Block* block = p.block;
    BlockPool& pool = *p.pool;
    const int ps = pool_stat(pool);
    const bool already_split = block->is_split();
    if (split_remainder) {
      Block* remaining = block;
      block = new_block(remaining->ptr, p.size, p.stream, &pool);
      block->expandable = remaining->expandable;
      block->prev = remaining->prev;
      if (block->prev != nullptr) block->prev->next = block;
      block->next = remaining;
      remaining->prev = block;
      remaining->ptr += p.size;
      remaining->size -= p.size;
      if (p.in_pool)
        pool.replace_in_blocks_smaller(p.found, remaining);  // the remainder keeps the found entry
      else
        pool.insert_into_blocks(remaining);
      if (already_split && !block->expandable) {
        // An inactive split block shrinks by the bytes handed out.
        decrease(stats.inactive_split_bytes, ps, static_cast<std::int64_t>(block->size));
      } else if (!block->expandable) {
        // A new inactive split block is created from an unsplit one.
        increase(stats.inactive_split_bytes, ps, static_cast<std::int64_t>(remaining->size));
        increase(stats.inactive_split, ps, 1);
      }
    } else {
      if (p.in_pool) pool.blocks.erase(p.found);
      if (already_split && !block->expandable) {
        decrease(stats.inactive_split_bytes, ps, static_cast<std::int64_t>(block->size));
        decrease(stats.inactive_split, ps, 1);
      }
    }
    p.in_pool = false;
    block->allocated = true;
    block->requested_size = orig_size;
    active.insert(block->ptr, block);
    increase(stats.allocation, ps, 1);
    increase(stats.allocated_bytes, ps, static_cast<std::int64_t>(block->size));
    increase(stats.active, ps, 1);
    increase(stats.active_bytes, ps, static_cast<std::int64_t>(block->size));
    increase(stats.requested_bytes, ps, static_cast<std::int64_t>(orig_size));
    if (block->size >= settings.max_split_size_bytes) stats.oversize_allocations.increase(1);
    emit(Action::alloc, block->ptr, orig_size, block->size, block->stream, pool.is_small, entry);
    return block;
  }

  // First half of a free: the program no longer owns the block (free in PyTorch).
  void release_ownership(Block* block, std::uint16_t entry) {
    block->allocated = false;
    const int ps = pool_stat(*block->pool);
    decrease(stats.allocation, ps, 1);
    decrease(stats.allocated_bytes, ps, static_cast<std::int64_t>(block->size));
    if (block->size >= settings.max_split_size_bytes) stats.oversize_allocations.decrease(1);
    emit(Action::free_requested, block->ptr, block->requested_size, block->size, block->stream, block->pool->is_small,
         entry);
  }

  // Second half: the block returns to its pool and merges with free neighbours (free_block).
  // Out of line for the rare callers (events, deferred frees); deallocate inlines the body.
  [[gnu::noinline]] void free_block(Block* block) { free_block_inline(block); }
  [[gnu::always_inline]] void free_block_inline(Block* block) {
    emit(Action::free_completed, block->ptr, block->requested_size, block->size, block->stream, block->pool->is_small);
    const std::uint64_t original_size = block->size;
    const std::uint64_t requested = block->requested_size;
    BlockPool& pool = *block->pool;
    std::int64_t net_split_blocks = 0;
    std::int64_t net_split_bytes = 0;
    active.erase(block->ptr);
    // The merged block takes over the pool entry of the first neighbour it absorbs.
    FreeBlocks::iterator reuse;
    bool have_reuse = false;
    Block* const next = block->next;  // read before a merge with prev can change the links
    if (const std::uint64_t subsumed = try_merge_blocks(block, block->prev, pool, &reuse); subsumed > 0) {
      have_reuse = block->mapped;  // a mapped neighbour's entry was kept
      net_split_blocks -= 1;
      net_split_bytes -= static_cast<std::int64_t>(subsumed);
    }
    if (const std::uint64_t subsumed = try_merge_blocks(block, next, pool, have_reuse ? nullptr : &reuse);
        subsumed > 0) {
      have_reuse = have_reuse || block->mapped;
      net_split_blocks -= 1;
      net_split_bytes -= static_cast<std::int64_t>(subsumed);
    }
    if (have_reuse)
      pool.replace_in_blocks_larger(reuse, block);
    else
      pool.insert_into_blocks(block);
    if (block->is_split()) {
      net_split_blocks += 1;
      net_split_bytes += static_cast<std::int64_t>(block->size);
    }
    const int ps = pool_stat(pool);
    // Expandable blocks are left out of inactive_split: their free pages can always be released.
    if (!block->expandable) {
      if (net_split_blocks > 0)
        increase(stats.inactive_split, ps, net_split_blocks);
      else if (net_split_blocks < 0)
        decrease(stats.inactive_split, ps, -net_split_blocks);
      if (net_split_bytes > 0)
        increase(stats.inactive_split_bytes, ps, net_split_bytes);
      else if (net_split_bytes < 0)
        decrease(stats.inactive_split_bytes, ps, -net_split_bytes);
    }
    decrease(stats.active, ps, 1);
    decrease(stats.active_bytes, ps, static_cast<std::int64_t>(original_size));
    decrease(stats.requested_bytes, ps, static_cast<std::int64_t>(requested));
    block->requested_size = 0;
  }

  // ---- the allocation path ----------------------------------------------------------------------

  [[gnu::always_inline]] Status allocate(std::uint64_t orig_size, StreamId stream, DevicePtr* out,
                                         std::uint16_t entry) {
    if (orig_size >= kOneExaByte) return Status::out_of_memory;  // "Tried to allocate more than 1EB memory."
    process_events();
    AllocParams p;
    p.stream = stream;
    p.size = round_size(orig_size);
    p.pool = in_small_pool(p.size) ? &small_pool : &large_pool;

    bool found = get_free_block(p);
    if (!found) {
      p.alloc_size = allocation_size(p.size);  // only a miss needs the segment size
      if (gc_active) garbage_collect_cached_blocks();
      found = alloc_block(p) || (release_available_cached_blocks(p) && alloc_block(p));
      if (!found) {
        // Last resort: wait for pending frees, release every unsplit cached segment, retry.
        // Note [search again after the flush]: blocks whose pending events the flush completed
        // went back to the pool, so the pool is searched again before the device is asked
        // (PyTorch 2.11 only retries the device and can raise a spurious OOM: pytorch#189504).
        stats.num_alloc_retries += 1;
        release_cached_blocks();
        p.block = nullptr;
        found = get_free_block(p) || alloc_block(p);
      }
    }
    if (!found) {
      const MemInfo info = backend.mem_info();
      last_oom.requested_bytes = orig_size;
      last_oom.alloc_bytes = p.alloc_size;
      last_oom.device_free_bytes = info.free_bytes;
      last_oom.device_total_bytes = info.total_bytes;
      last_oom.allocated_bytes = static_cast<std::uint64_t>(stats.allocated_bytes[kStatAll].current);
      last_oom.reserved_bytes = static_cast<std::uint64_t>(stats.reserved_bytes[kStatAll].current);
      last_oom.allowed_bytes = set_fraction() ? allowed_memory() : info.total_bytes;
      stats.num_ooms += 1;
      if (sink != nullptr) {
        Event e;
        e.time_ns = event_time_ns();
        e.size_bytes = orig_size;
        e.block_bytes = p.alloc_size;
        e.stream = stream.value;
        e.aux = info.free_bytes;
        e.addr = static_cast<DevicePtr>(stats.num_alloc_retries);
        e.device = device.value;
        e.thread_id = current_thread_id();
        e.action = Action::oom;
        e.pool = p.pool->is_small ? PoolKind::small : PoolKind::large;
        e.entry_point = entry;
        sink->record_oom(e, take_snapshot());
      }
      return Status::out_of_memory;
    }
    Block* b = alloc_found_block(p, orig_size, should_split(p.block, p.size), entry);
    *out = b->ptr;
    return Status::ok;
  }

  // ---- snapshots and checks -------------------------------------------------------------------

  template <class F>
  void for_each_segment_head(F&& f) const {
    auto visit = [&](const Block* b) {
      if (b->prev == nullptr) f(b);
    };
    active.for_each([&](DevicePtr, const Block* b) { visit(b); });
    for (const BlockPool* pool : {&small_pool, &large_pool}) {
      for (const Block* b : pool->blocks) visit(b);
      for (const Block* b : pool->unmapped) visit(b);
    }
  }

  static BlockState state_of(const Block* b) {
    if (b->allocated) return BlockState::active_allocated;
    if (b->event_count > 0) return BlockState::active_pending_free;
    return BlockState::inactive;
  }

  Snapshot take_snapshot() const {
    Snapshot snap;
    std::vector<const Block*> heads;
    for_each_segment_head([&](const Block* b) { heads.push_back(b); });
    std::sort(heads.begin(), heads.end(), [](const Block* a, const Block* b) { return a->ptr < b->ptr; });
    for (const Block* head : heads) {
      SegmentSnapshot seg;
      bool open = false;
      auto close = [&] {
        if (open) snap.segments.push_back(std::move(seg));
        seg = SegmentSnapshot{};
        open = false;
      };
      for (const Block* b = head; b != nullptr; b = b->next) {
        if (head->expandable && !b->mapped) {  // one snapshot segment per mapped range
          close();
          continue;
        }
        if (!open) {
          seg.device = device.value;
          seg.address = b->ptr;
          seg.stream = b->stream.value;
          seg.is_large = !b->pool->is_small;
          seg.is_expandable = b->expandable;
          open = true;
        }
        BlockSnapshot bs{b->ptr, b->size, b->allocated || b->event_count > 0 ? b->requested_size : 0, state_of(b),
                         b->mapped};
        seg.total_size += b->size;
        if (b->allocated) seg.allocated_size += b->size;
        if (bs.state != BlockState::inactive) {
          seg.active_size += b->size;
          seg.requested_size += b->requested_size;
        }
        seg.blocks.push_back(bs);
      }
      close();
    }
    return snap;
  }

  bool check_invariants(std::string& error) const {
    auto fail = [&](const std::string& what) {
      error = what;
      return false;
    };
    DeviceStats recount;
    std::size_t free_mapped[2] = {0, 0}, unmapped_count[2] = {0, 0}, active_count = 0;
    std::vector<const Block*> heads;
    for_each_segment_head([&](const Block* b) { heads.push_back(b); });
    std::sort(heads.begin(), heads.end(), [](const Block* a, const Block* b) { return a->ptr < b->ptr; });
    DevicePtr previous_end = 0;
    std::size_t expandable_heads = 0;
    for (const Block* head : heads) {
      if (head->ptr < previous_end) return fail("segments overlap at address " + std::to_string(head->ptr));
      const int ps = pool_stat(*head->pool);
      const bool expandable = head->expandable;
      std::uint64_t seg_bytes = 0;
      std::size_t nblocks = 0;
      for (const Block* b = head; b != nullptr; b = b->next) {
        ++nblocks;
        if (b->next != nullptr && b->next->ptr != b->ptr + b->size)
          return fail("blocks do not tile the segment at " + std::to_string(b->ptr));
        if (b->next != nullptr && b->next->prev != b) return fail("broken prev link at " + std::to_string(b->ptr));
        if (b->pool != head->pool || b->expandable != head->expandable)
          return fail("block in a different pool than its segment at " + std::to_string(b->ptr));
        if (b->size == 0) return fail("empty block at " + std::to_string(b->ptr));
        seg_bytes += b->size;
        const int pi = b->pool->is_small ? 0 : 1;
        if (b->allocated || b->event_count > 0) {
          ++active_count;
          if (active.find(b->ptr) != b) return fail("active block missing from the address map");
          increase(recount.active, ps, 1);
          increase(recount.active_bytes, ps, static_cast<std::int64_t>(b->size));
          increase(recount.requested_bytes, ps, static_cast<std::int64_t>(b->requested_size));
          if (b->allocated) {
            increase(recount.allocation, ps, 1);
            increase(recount.allocated_bytes, ps, static_cast<std::int64_t>(b->size));
            if (b->size >= settings.max_split_size_bytes) recount.oversize_allocations.increase(1);
          }
        } else if (b->mapped) {
          ++free_mapped[pi];
          if (!b->pool->blocks.count(b)) return fail("free block missing from its pool");
          if (!expandable && b->is_split()) {
            increase(recount.inactive_split, ps, 1);
            increase(recount.inactive_split_bytes, ps, static_cast<std::int64_t>(b->size));
          }
          // Two idle free neighbours in the same mapped state must have been merged.
          if (b->next != nullptr && !b->next->allocated && b->next->event_count == 0 && b->next->mapped)
            return fail("unmerged free neighbours at " + std::to_string(b->ptr));
        } else {
          ++unmapped_count[pi];
          if (!b->pool->unmapped.count(const_cast<Block*>(b))) return fail("unmapped block missing from its pool");
          if (b->next != nullptr && !b->next->mapped) return fail("unmerged unmapped neighbours");
        }
        if (b->mapped) increase(recount.reserved_bytes, ps, static_cast<std::int64_t>(b->size));
        previous_end = b->ptr + b->size;
      }
      if (expandable) {
        ++expandable_heads;
        const ExpandableSegment* es = segment_of(head);
        if (es == nullptr || head->ptr != es->base || seg_bytes != es->size)
          return fail("expandable segment blocks do not cover its reservation");
      } else {
        increase(recount.segment, ps, 1);
        if (seg_bytes >= settings.max_split_size_bytes) recount.oversize_segments.increase(1);
      }
    }
    if (expandable_heads != expandable_segments.size()) return fail("expandable segment list out of step");
    if (active_count != active.size()) return fail("address map holds blocks not in any segment");
    if (free_mapped[0] != small_pool.blocks.size() || free_mapped[1] != large_pool.blocks.size())
      return fail("pool holds blocks not in any segment");
    if (unmapped_count[0] != small_pool.unmapped.size() || unmapped_count[1] != large_pool.unmapped.size())
      return fail("unmapped set holds blocks not in any segment");
    if (static_cast<std::int64_t>(total_allocated_memory) != stats.reserved_bytes[kStatAll].current)
      return fail("reserved bytes disagree with the device total");
    auto cmp = [&](const char* name, const StatArray& got, const StatArray& want) {
      for (int i = 0; i < kNumStatPools; ++i)
        if (got[i].current != want[i].current) {
          error = std::string(name) + "[" + std::to_string(i) + "].current is " + std::to_string(got[i].current) +
                  ", recount gives " + std::to_string(want[i].current);
          return false;
        }
      return true;
    };
#define VRAMTRACE_CHECK_POOL_STAT(name) \
  if (!cmp(#name, stats.name, recount.name)) return false;
    VRAMTRACE_POOL_STATS(VRAMTRACE_CHECK_POOL_STAT)
#undef VRAMTRACE_CHECK_POOL_STAT
    if (stats.oversize_allocations.current != recount.oversize_allocations.current)
      return fail("oversize_allocations disagrees with a recount");
    if (stats.oversize_segments.current != recount.oversize_segments.current)
      return fail("oversize_segments disagrees with a recount");
    return true;
  }
};

// ---- public interface: lock, delegate ------------------------------------------------------------

CachingAllocator::CachingAllocator(DeviceBackend& backend, const AllocatorSettings& settings, DeviceId device,
                                   EventSink* sink)
    : impl_(std::make_unique<Impl>(backend, settings, device, sink)) {}

CachingAllocator::~CachingAllocator() = default;

Status CachingAllocator::allocate(std::uint64_t bytes, StreamId stream, DevicePtr* out,
                                  std::uint16_t entry_point) noexcept {
  if (out == nullptr) return Status::invalid_value;
  if (bytes == 0) {
    *out = 0;
    return Status::ok;
  }
  std::lock_guard<SpinLock> lock(impl_->mu);
  try {
    return impl_->allocate(bytes, stream, out, entry_point);
  } catch (const std::bad_alloc&) {
    return Status::device_error;  // host memory exhausted while bookkeeping
  }
}

Status CachingAllocator::deallocate(DevicePtr ptr, std::uint16_t entry_point) noexcept {
  std::lock_guard<SpinLock> lock(impl_->mu);
  Block* b = ptr != 0 ? impl_->active.find(ptr) : nullptr;
  if (b == nullptr || !b->allocated) return Status::invalid_value;
  try {
    impl_->release_ownership(b, entry_point);
    if (!!b->has_stream_uses)
      impl_->insert_events(b);
    else
      impl_->free_block_inline(b);
  } catch (const std::bad_alloc&) {
    return Status::device_error;
  }
  return Status::ok;
}

Status CachingAllocator::deallocate_deferred(DevicePtr ptr) noexcept {
  std::lock_guard<SpinLock> lock(impl_->mu);
  Block* b = ptr != 0 ? impl_->active.find(ptr) : nullptr;
  if (b == nullptr || !b->allocated) return Status::invalid_value;
  impl_->release_ownership(b, 0);
  if (b->has_stream_uses) {  // the trace's free_completed stands for every other stream's use
    impl_->stream_uses.erase(b);
    b->has_stream_uses = false;
  }
  b->deferred = true;
  b->event_count += 1;
  return Status::ok;
}

Status CachingAllocator::complete_deferred_free(DevicePtr ptr) noexcept {
  std::lock_guard<SpinLock> lock(impl_->mu);
  Block* b = ptr != 0 ? impl_->active.find(ptr) : nullptr;
  if (b == nullptr || !b->deferred) return Status::invalid_value;
  b->deferred = false;
  if (--b->event_count == 0) impl_->free_block(b);
  return Status::ok;
}

Status CachingAllocator::record_stream(DevicePtr ptr, StreamId stream) noexcept {
  std::lock_guard<SpinLock> lock(impl_->mu);
  Block* b = ptr != 0 ? impl_->active.find(ptr) : nullptr;
  if (b == nullptr || !b->allocated) return Status::invalid_value;
  if (stream == b->stream) return Status::ok;  // uses on the allocation stream need no event
  try {
    auto& uses = impl_->stream_uses[b];
    if (std::find(uses.begin(), uses.end(), stream) == uses.end()) uses.push_back(stream);
    b->has_stream_uses = true;
  } catch (const std::bad_alloc&) {
    return Status::device_error;
  }
  return Status::ok;
}

void CachingAllocator::empty_cache() noexcept {
  std::lock_guard<SpinLock> lock(impl_->mu);
  impl_->release_cached_blocks();
}

std::optional<BlockInfo> CachingAllocator::find(DevicePtr ptr) const noexcept {
  std::lock_guard<SpinLock> lock(impl_->mu);
  const Block* b = ptr != 0 ? impl_->active.find(ptr) : nullptr;
  if (b == nullptr) return std::nullopt;
  return BlockInfo{b->ptr, b->size, b->requested_size, b->stream,
                   b->pool->is_small ? PoolKind::small : PoolKind::large};
}

std::optional<BlockInfo> CachingAllocator::find_containing(DevicePtr addr) const noexcept {
  if (addr == 0) return std::nullopt;
  std::lock_guard<SpinLock> lock(impl_->mu);
  // Allocated blocks only (a freed block waiting for another stream's events is not the
  // program's any more), and only the bytes the program asked for: the rounding after them is
  // no allocation's, as behind the driver.
  auto holds = [addr](DevicePtr start, const Block* c) {
    return c->allocated && addr >= start && addr - start < std::max<std::uint64_t>(c->requested_size, 1);
  };
  const Block* b = impl_->active.find(addr);
  if (b != nullptr && !holds(addr, b)) b = nullptr;
  if (b == nullptr) {
    // Blocks are linked only within their segment and free blocks are indexed by size, so an
    // interior address is found by a scan of the live blocks.
    impl_->active.for_each([&](DevicePtr start, const Block* candidate) {
      if (b == nullptr && holds(start, candidate)) b = candidate;
    });
  }
  if (b == nullptr) return std::nullopt;
  return BlockInfo{b->ptr, b->size, b->requested_size, b->stream,
                   b->pool->is_small ? PoolKind::small : PoolKind::large};
}

std::uint64_t CachingAllocator::cached_free_bytes() const noexcept {
  std::lock_guard<SpinLock> lock(impl_->mu);
  return static_cast<std::uint64_t>(impl_->stats.reserved_bytes[kStatAll].current -
                                    impl_->stats.active_bytes[kStatAll].current);
}

DeviceStats CachingAllocator::stats() const noexcept {
  std::lock_guard<SpinLock> lock(impl_->mu);
  return impl_->stats;
}

void CachingAllocator::reset_peak_stats() noexcept {
  std::lock_guard<SpinLock> lock(impl_->mu);
  impl_->stats.reset_peaks();
}

Snapshot CachingAllocator::snapshot() const {
  std::lock_guard<SpinLock> lock(impl_->mu);
  return impl_->take_snapshot();
}

OomInfo CachingAllocator::last_oom() const noexcept {
  std::lock_guard<SpinLock> lock(impl_->mu);
  return impl_->last_oom;
}

const AllocatorSettings& CachingAllocator::settings() const noexcept { return impl_->settings; }
DeviceId CachingAllocator::device() const noexcept { return impl_->device; }

bool CachingAllocator::check_invariants(std::string& error) const {
  std::lock_guard<SpinLock> lock(impl_->mu);
  return impl_->check_invariants(error);
}

}  // namespace vramtrace
