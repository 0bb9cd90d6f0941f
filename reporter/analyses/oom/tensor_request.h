// The request of TensorFlow's "OOM when allocating tensor with shape[32,512,512,64] and type
// float": the tensor's elements times the size of one element, which the message does not print.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace vramtrace {

/// Bytes of one element of TensorFlow's type `name` as DataTypeString prints it
/// (tensorflow/core/framework/types.cc: "float", "half", "bfloat16", "double", "int8" ... "int64",
/// "uint8" ... "uint64", "bool", "complex64", "complex128", the quantised "qint8" ... "qint32", the
/// 8-bit floats "float8_e5m2" and "float8_e4m3fn"), also the names DataTypeFromString accepts
/// ("float32", "float16", "float64"); a reference type's "_ref" suffix is ignored. nullopt for a
/// type without a fixed size ("string", "resource", "variant") and for names it does not know.
/// Pure.
std::optional<std::uint64_t> tf_dtype_bytes(std::string_view name);

/// The bytes of a tensor of `shape` whose elements take `element_bytes` each: the product of the
/// dimensions (1 for a scalar, shape "[]") times `element_bytes`. nullopt when it reaches 2^64.
/// Pure.
std::optional<std::uint64_t> tensor_bytes(const std::vector<std::uint64_t>& shape, std::uint64_t element_bytes);

}  // namespace vramtrace
