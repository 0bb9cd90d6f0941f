// The size grammar and the byte formatter (units.h).
#include "vramtrace/units.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <system_error>
#include <vector>

#include "vramtrace/gpu_cards.h"
#include "vramtrace/types.h"

#include "text.h"

namespace vramtrace {
namespace {

using detail::strip_spaces;

// Bytes per unit, for the lower-case unit ("" = bytes).
double unit_bytes(std::string_view unit) {
  static constexpr struct {
    std::string_view name;
    double bytes;
  } kUnits[] = {
      {"", 1},         {"b", 1},      {"k", 0x1p10},   {"kib", 0x1p10}, {"m", 0x1p20}, {"mib", 0x1p20}, {"g", 0x1p30},
      {"gib", 0x1p30}, {"t", 0x1p40}, {"tib", 0x1p40}, {"kb", 1e3},     {"mb", 1e6},   {"gb", 1e9},     {"tb", 1e12},
  };
  for (const auto& u : kUnits)
    if (unit == u.name) return u.bytes;
  return 0;
}

std::string too_large(std::string_view text, std::uint64_t max_bytes) {
  if (max_bytes >= kMaxSizeBytes)
    return "'" + std::string(text) + "' is absurdly large (more than " +
           std::to_string((max_bytes - 1) / kMaxSizeBytes + 1) + " EiB)";
  return "'" + std::string(text) + "' is larger than " + std::to_string(max_bytes) + " bytes";
}

// The number-and-unit part of the grammar (everything but card names).
bool parse_number_size(std::string_view text, std::uint64_t& out_bytes, std::string& error, const SizeBounds& bounds) {
  const std::string s = strip_spaces(text);
  if (s.empty()) {
    error = "empty size";
    return false;
  }
  std::size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  const std::string_view number = std::string_view(s).substr(0, i);
  std::string unit(s.substr(i));
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double value = 0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (number.empty() || ec != std::errc() || end != number.data() + number.size() || !std::isfinite(value)) {
    error = "'" + std::string(text) +
            "' is not a size (examples: 1048576, 512MiB, 16GB, 14.58GiB, or a card name such as T4 or A100-80GB)";
    return false;
  }
  const double mult = unit_bytes(unit);
  if (mult == 0) {
    error =
        "'" + std::string(text) + "' has an unknown unit '" + unit + "' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)";
    return false;
  }
  const bool whole = number.find('.') == std::string_view::npos;
  if (unit.empty() && !whole && !bounds.fractional_bytes) {
    error = "'" + std::string(text) + "': a size in bytes must be a whole number";
    return false;
  }
  const double bytes = value * mult;
  if (bytes > static_cast<double>(bounds.max_bytes)) {
    error = too_large(text, bounds.max_bytes);
    return false;
  }
  std::uint64_t result = 0;
  if (unit.empty() && whole) {
    // Exact: a double cannot tell 2^60 + 1 from 2^60. Found by tests/fuzz/fuzz_size.cpp
    // (regressions/size/above-2pow60-integer).
    const auto [e, ec2] = std::from_chars(number.data(), number.data() + number.size(), result);
    if (ec2 != std::errc() || e != number.data() + number.size()) {
      error = "'" + std::string(text) + "' is not a whole number of bytes";
      return false;
    }
  } else {
    const double rounded = bounds.round_to_nearest ? std::round(bytes) : std::floor(bytes);
    if (rounded >= 0x1p64) {
      error = too_large(text, bounds.max_bytes);
      return false;
    }
    result = static_cast<std::uint64_t>(rounded);
  }
  if (result > bounds.max_bytes) {
    error = too_large(text, bounds.max_bytes);
    return false;
  }
  out_bytes = result;
  return true;
}

// printf into a string of whatever length it takes (a double can print 300 digits).
template <typename... Args>
std::string printed(const char* format, Args... args) {
  char buf[64];
  const int n = std::snprintf(buf, sizeof buf, format, args...);
  if (n < 0) return {};
  if (static_cast<std::size_t>(n) < sizeof buf) return std::string(buf, static_cast<std::size_t>(n));
  std::string out(static_cast<std::size_t>(n) + 1, '\0');
  std::snprintf(out.data(), out.size(), format, args...);
  out.resize(static_cast<std::size_t>(n));
  return out;
}

// The refusal of a word that is no card: the nearest names (gpu_card_suggestions), then every
// name. The wording is the one every size option prints (tests/reporter-check, test_cmd_cli).
std::string unknown_card_error(const std::string& name) {
  std::string error = "'" + name + "' is neither a size (such as 512MiB, 16GB, 14.58GiB, 1048576) nor a known card; ";
  const std::vector<std::string> near = cli::gpu_card_suggestions(name);
  for (std::size_t i = 0; i < near.size(); ++i)
    error += (i == 0 ? "did you mean " : i + 1 == near.size() ? " or " : ", ") + near[i];
  if (!near.empty()) error += "? ";
  return error + "known cards: " + cli::gpu_card_names();
}

}  // namespace

bool parse_size(std::string_view text, std::uint64_t& out_bytes, std::string& error, const SizeBounds& bounds) {
  std::string number_error;
  if (parse_number_size(text, out_bytes, number_error, bounds)) return true;
  const std::string name = strip_spaces(text);
  if (const std::uint64_t card = cli::gpu_card_bytes(name); card != 0) {
    if (card > bounds.max_bytes) {
      error = too_large(text, bounds.max_bytes);
      return false;
    }
    out_bytes = card;
    return true;
  }
  // A word is a card name that was not found: say which names were meant to be close, and list
  // them all (docs/configuration.md promises the list). A number keeps the number's error.
  error = !name.empty() && std::isalpha(static_cast<unsigned char>(name[0])) != 0 ? unknown_card_error(name)
                                                                                  : std::move(number_error);
  return false;
}

bool size_names_card(std::string_view text) {
  std::uint64_t bytes = 0;
  std::string error;
  return !parse_number_size(text, bytes, error, SizeBounds{~std::uint64_t{0}, false, true}) &&
         cli::gpu_card_bytes(strip_spaces(text)) != 0;
}

std::optional<SizeSpelling> size_spelling(std::string_view text) {
  std::uint64_t bytes = 0;
  std::string error;
  if (!parse_number_size(text, bytes, error, SizeBounds{~std::uint64_t{0}, false, true})) return std::nullopt;
  const std::string s = strip_spaces(text);
  const std::size_t unit_at = s.find_first_not_of("0123456789.");
  SizeSpelling out;
  out.number = s.substr(0, unit_at);
  out.unit = unit_at == std::string::npos ? std::string() : s.substr(unit_at);
  std::string lower = out.unit;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  out.decimal_exponent = lower == "kb" ? 3 : lower == "mb" ? 6 : lower == "gb" ? 9 : lower == "tb" ? 12 : 0;
  return out;
}

std::string format_bytes(double bytes, ByteStyle style) {
  const char* sign = bytes < 0 ? "-" : "";
  const double b = std::fabs(bytes);
  if (style == ByteStyle::pytorch) {
    // c10's format_size: <= 1 KiB in bytes, <= 1 MiB in KiB, <= 1 GiB in MiB, else GiB.
    if (b <= 1024) return printed("%s%.0f bytes", sign, b);
    if (b <= static_cast<double>(kMiB)) return printed("%s%.2f KiB", sign, b / 1024.0);
    if (b <= static_cast<double>(kGiB)) return printed("%s%.2f MiB", sign, b / static_cast<double>(kMiB));
    return printed("%s%.2f GiB", sign, b / static_cast<double>(kGiB));
  }
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = b;
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return printed("%s%.0f B", sign, v);
  return printed("%s%.2f %s", sign, v, kUnits[u]);
}

std::string format_size(std::uint64_t bytes) { return format_bytes(static_cast<double>(bytes), ByteStyle::pytorch); }

}  // namespace vramtrace
