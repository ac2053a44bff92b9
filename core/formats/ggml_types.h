// The ggml tensor type table (GGUF tensor types): ids 0..42 with weights per block and bytes
// per block, as llama.cpp's ggml.h / ggml.c define them. Removed ids are kept, flagged, so a
// file that uses one is rejected by name. Also used for weight and KV-cache sizing.
//
// Thread safety: immutable static data.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace modelfs {

struct GgmlType {
  uint32_t id;
  const char* name;  // "F32", "Q8_0", "Q4_K", ... (as ggml_type_name spells them, upper case)
  uint32_t
      block_size;      // weights per block (1 for F32/F16/BF16/I8.., 32 for Q8_0, 256 for K-quants)
  uint32_t type_size;  // bytes per block (34 for Q8_0, 36 for Q8_1, 144 for Q4_K)
  bool removed;        // ids 4, 5, 31..33, 36..38: no longer valid in files; sizes are 0
                       // (as ggml's type_traits leave them)

  // 0 for removed types, which have no size.
  double bits_per_weight() const { return block_size == 0 ? 0.0 : 8.0 * type_size / block_size; }
};

// Returns the entry for id, or nullptr when id is outside the table.
const GgmlType* FindGgmlType(uint32_t id);
// Case-insensitive lookup by name ("q4_k", "Q8_0", "f16", "bf16"); nullptr when unknown.
// Removed types are found too (check `removed`).
const GgmlType* FindGgmlTypeByName(std::string_view name);
// Number of ids in the table (43: 0..42).
uint32_t GgmlTypeCount();

// Bytes for `elements` weights of type t: elements must be a multiple of block_size.
// Errors: kInvalidArgument when not a multiple, or when the byte count overflows.
absl::StatusOr<uint64_t> GgmlTensorBytes(const GgmlType& t, uint64_t elements);

}  // namespace modelfs
