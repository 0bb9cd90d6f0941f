#include "analyses/oom/tensor_request.h"

#include <limits>
#include <utility>

namespace vramtrace {

std::optional<std::uint64_t> tf_dtype_bytes(std::string_view name) {
  constexpr std::string_view kRef = "_ref";
  if (name.size() > kRef.size() && name.substr(name.size() - kRef.size()) == kRef) name.remove_suffix(kRef.size());
  // DataTypeSize (types.cc): sizeof of each type's C++ representation.
  static constexpr std::pair<std::string_view, std::uint64_t> kSizes[] = {
      {"float", 4},   {"float32", 4},   {"double", 8},      {"float64", 8},     {"half", 2},
      {"float16", 2}, {"bfloat16", 2},  {"int8", 1},        {"uint8", 1},       {"bool", 1},
      {"int16", 2},   {"uint16", 2},    {"int32", 4},       {"uint32", 4},      {"int64", 8},
      {"uint64", 8},  {"complex64", 8}, {"complex128", 16}, {"qint8", 1},       {"quint8", 1},
      {"qint16", 2},  {"quint16", 2},   {"qint32", 4},      {"float8_e5m2", 1}, {"float8_e4m3fn", 1},
  };
  for (const auto& [n, bytes] : kSizes)
    if (n == name) return bytes;
  return std::nullopt;
}

std::optional<std::uint64_t> tensor_bytes(const std::vector<std::uint64_t>& shape, std::uint64_t element_bytes) {
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t total = element_bytes;
  for (std::uint64_t d : shape) {
    if (d != 0 && total > kMax / d) return std::nullopt;
    total *= d;
  }
  return total;
}

}  // namespace vramtrace
