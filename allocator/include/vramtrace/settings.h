// Allocator settings in PYTORCH_CUDA_ALLOC_CONF syntax (also VRAMTRACE_CONF and `--conf`).
// Every key, unit and default is documented in docs/configuration.md.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "vramtrace/types.h"
#include "vramtrace/units.h"

namespace vramtrace {

/// When the shim may hand a block that the program freed with cudaFree to a new request.
/// Note [reuse policy] (shim/src/policies/context_pool.h) explains each; replay ignores it.
enum class ReusePolicy : std::uint8_t {
  lazy_sync,       ///< default: stream-ordered while the program has used only the legacy default
                   ///< stream; from its first other stream on, one device synchronisation before
                   ///< reusing blocks freed since the last one
  device_sync,     ///< that synchronisation from the start, whatever streams the program uses
  lazy_barrier,    ///< lazy_sync, with a GPU-side barrier instead of the device synchronisation
                   ///< where the shim knows every stream with work (Note [GPU-side barrier])
  stream_ordered,  ///< reuse at once on the same stream (fast; for single-stream programs)
  none,            ///< no caching: every free goes to the device at once
};

/// The `reuse` setting's spelling of a policy ("lazy_sync", "device_sync", "lazy_barrier",
/// "stream_ordered", "none"). Never null.
const char* reuse_policy_name(ReusePolicy p) noexcept;

/// An item of a settings string that AllocatorSettings::parse_recorded left out.
struct RejectedSetting {
  std::string key;        ///< as written (the whole item when it has no ':')
  std::string value;      ///< as written, whitespace removed
  bool has_value = true;  ///< false for an item without ':' (a key alone)
  std::string error;      ///< AllocatorSettings::parse's message for it
};

/// The allocator's policy knobs. Defaults follow PyTorch's native caching allocator.
struct AllocatorSettings {
  /// Blocks >= this are never split and only serve requests within max_non_split_rounding_bytes
  /// of their size. Default: unlimited. Key `max_split_size_mb` (MiB, >= 20).
  std::uint64_t max_split_size_bytes = std::numeric_limits<std::uint64_t>::max();
  /// Slack allowed when an oversize block serves an oversize request. Key
  /// `max_non_split_rounding_mb` (MiB, >= 20), default 20 MiB.
  std::uint64_t max_non_split_rounding_bytes = 20 * kMiB;
  /// Power-of-two divisions per size interval [2^(20+i), 2^(21+i)); 0 or 1 = plain 512 B
  /// rounding. Key `roundup_power2_divisions` (an int or a `[MB:div,...,>:div]` list).
  std::array<std::uint32_t, 16> roundup_power2_divisions{};
  /// Fraction (0,1) of the allowed memory above which cached large blocks are reclaimed before a
  /// new device allocation; 0 = off. Acts only with a memory fraction < 1 or a limit (PyTorch).
  double garbage_collection_threshold = 0.0;
  /// Fraction of the device total this allocator may reserve. Key `per_process_memory_fraction`.
  double per_process_memory_fraction = 1.0;
  /// Reserve address space and map pages on demand. Key `expandable_segments` (True/False).
  bool expandable_segments = false;
  /// Our own: cap in bytes on reserved memory plus memory outside the allocator (0 = none).
  /// Key `limit` (a size such as `14.58GiB` or a card name such as `T4`: units.h).
  std::uint64_t limit_bytes = 0;
  /// Our own, shim only: when freed blocks may be reused. Key `reuse`
  /// (`lazy_sync`, `stream_ordered`, `none`).
  ReusePolicy reuse = ReusePolicy::lazy_sync;
  /// The settings string as given (for reports).
  std::string text;

  /// Reads `conf` (e.g. "max_split_size_mb:128,expandable_segments:True") on top of the
  /// defaults. Whitespace is ignored; keys are case-sensitive as in PyTorch. Keys PyTorch accepts
  /// that do not change device-memory policy (`backend:native`, `release_lock_on_cudamalloc`,
  /// `pinned_*`, `graph_capture_record_stream_reuse`) are accepted and ignored.
  /// Returns false and sets `error` to a message naming the key and what it accepts on any
  /// unknown key or bad value; `out` is then unchanged.
  static bool parse(std::string_view conf, AllocatorSettings& out, std::string& error);

  /// Reads settings that a program recorded (a trace's PYTORCH_CUDA_ALLOC_CONF or header) with
  /// parse's rules, item by item: an item parse would refuse (an unknown key, no value, a bad
  /// value) is left out, and listed in `rejected` when given; every other item applies on top
  /// of the defaults. For readers of traces, which must not fail on settings another version
  /// wrote. Never fails; thread-safe (pure).
  static AllocatorSettings parse_recorded(std::string_view conf, std::vector<RejectedSetting>* rejected = nullptr);

  /// `roundup_power2_divisions` for a rounded size in bytes (interval index clamped to [0,15]).
  std::uint32_t divisions_for(std::uint64_t bytes) const noexcept;

  /// Canonical text of the non-default settings ("" for defaults), stable for reports.
  std::string to_string() const;
};

}  // namespace vramtrace
