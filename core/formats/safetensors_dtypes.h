// The safetensors dtype table and size rules that the parser (safetensors.cc) and the writer
// (safetensors_writer.cc) share, so both accept exactly the dtypes and shapes the reference
// implementation accepts and lay tensors out in its order. Internal to core/formats.
//
// Thread safety: pure functions over constant data.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace modelfs::safetensors_internal {

// The dtype's position in the reference's Dtype enum (its alignment order), or -1.
int DtypeRank(std::string_view dtype);

// "[2,3]": a shape as the reference writes it.
std::string ShapeString(const std::vector<uint64_t>& shape);

// Element count and byte size of a shape, as the reference computes them (checked products;
// the bit count must be a whole number of bytes).
struct SizeResult {
  enum Kind { kOk, kOverflow, kPartialByte } kind = kOk;
  uint64_t elements = 0;
  uint64_t bytes = 0;
};
SizeResult ComputeSize(const std::vector<uint64_t>& shape, uint32_t bits);

}  // namespace modelfs::safetensors_internal
