// Byte sizes as people write and read them: the one size grammar of every option that takes a
// size (the `limit` setting and its per-device list, `replay`/`oom --capacity`, `run --limit`,
// `check`'s budgets and budget file, `diff --noise-margin`) and the one byte formatter of every
// message and report. docs/configuration.md lists the units and the card names.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace vramtrace {

/// The largest size parse_size accepts by default: 2^60 bytes (1 EiB), PyTorch's "more than 1EB"
/// sanity bound. Larger sizes are typing mistakes.
inline constexpr std::uint64_t kMaxSizeBytes = std::uint64_t{1} << 60;

/// What a caller allows beyond the grammar, which is the same for every caller. The default is
/// what settings and capacities take: whole bytes, at most 1 EiB, a fraction of a byte that a
/// unit produces ("0.3KiB" = 307.2 B) rounded down.
struct SizeBounds {
  std::uint64_t max_bytes = kMaxSizeBytes;  ///< larger sizes are refused
  bool round_to_nearest = false;            ///< a fraction of a byte rounds to the nearest byte, else down
  bool fractional_bytes = false;            ///< "1.5" (no unit) is allowed, rounded as above
};

/// Parses a byte size. The grammar, the same for every option (whitespace anywhere is ignored):
///  - a plain number of bytes: "1048576";
///  - a number (fractions allowed) and a unit, case-insensitive: binary B, K/KiB, M/MiB, G/GiB,
///    T/TiB (powers of 1024) or decimal KB, MB, GB, TB (powers of 1000): "14.58GiB", "16 GB",
///    "512MiB", "1.5 kib". Decimal units stay decimal ("16GB" is 16 x 10^9 bytes = 14.90 GiB);
///    the command line says so when one is used (commands.h, size_check);
///  - the name of a GPU card (vramtrace/gpu_cards.h; case-insensitive, '-', '_' and ' '
///    ignored): "T4", "A100-40GB", "rtx4090" = total_memory as PyTorch reports it on that card. A
///    text that reads as a number is a number ("3090" is 3090 bytes, not the card).
/// `bounds` says how large a size may be and how fractions of a byte round (SizeBounds).
/// Returns false and sets `error` for anything else, for negatives and for sizes above
/// `bounds.max_bytes`; `out_bytes` is then unchanged. The error names the text and what is
/// accepted; for a word that is no card it is "'H100' is neither a size (such as ...) nor a known
/// card; did you mean H100-80GB or H100-NVL? known cards: T4, ..." (gpu_card_suggestions).
/// Thread-safe (pure).
bool parse_size(std::string_view text, std::uint64_t& out_bytes, std::string& error, const SizeBounds& bounds = {});

/// Whether parse_size reads `text` as a GPU card name rather than as a number with a unit
/// ("T4": true; "3090", "16GB", "lots": false). For messages that show what a name stood for.
bool size_names_card(std::string_view text);

/// A size written as a number, with or without a unit, as written (spaces removed): "16 GB" is
/// {"16", "GB", 9}.
struct SizeSpelling {
  std::string number;        ///< the digits and point: "16", "1.5"
  std::string unit;          ///< the unit as written, "" for bytes: "GB", "gib"
  int decimal_exponent = 0;  ///< 3, 6, 9, 12 for KB, MB, GB, TB (powers of 1000); 0 for the others
};

/// How `text` is spelled when parse_size reads it as a number (whatever its bounds), else nullopt
/// (a card name, a refusal). For messages that say what a size was understood as. Thread-safe (pure).
std::optional<SizeSpelling> size_spelling(std::string_view text);

/// How format_bytes writes a size. Both use binary units and two decimals; they differ below
/// 1 KiB and in where a unit starts.
enum class ByteStyle : std::uint8_t {
  /// PyTorch's format_size (c10/cuda/CUDACachingAllocator.cpp), as its OOM message prints:
  /// up to 1024 B "512 bytes", up to 1 MiB "1.50 KiB" (so 1 MiB is "1024.00 KiB"), up to
  /// 1 GiB "20.00 MiB", above "14.58 GiB" (GiB however large).
  pytorch,
  /// The largest binary unit not above the size, up to PiB: "512 B", "1.50 KiB", "100.00 MiB",
  /// "1.00 GiB". For sizes that are not whole bytes (fitted slopes, noise margins).
  binary,
};

/// Writes `bytes` in `style`; a negative size gets a leading '-' (the magnitude is written as
/// for a positive one). Sizes written in bytes have no decimals (rounded to the nearest byte).
/// Thread-safe (pure).
std::string format_bytes(double bytes, ByteStyle style);

/// PyTorch's format_size: format_bytes(bytes, ByteStyle::pytorch).
std::string format_size(std::uint64_t bytes);

}  // namespace vramtrace
