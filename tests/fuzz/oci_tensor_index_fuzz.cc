// Fuzzes ParseTensorIndex: never aborts, an accepted index serializes to the same bytes, and
// every tensor it accepts lies inside the file, the file inside the layer.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/oci/tensor_index.h"

using namespace modelfs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto idx = ParseTensorIndex(bytes);
  if (!idx.ok()) return 0;
  if (SerializeTensorIndex(*idx) != bytes) abort();
  if (idx->file_offset + idx->file_size > idx->layer_size) abort();
  for (const TensorEntry& t : idx->tensors) {
    if (t.offset + t.length > idx->file_size || t.name.empty() || t.shape.size() > 8) abort();
  }
  return 0;
}
