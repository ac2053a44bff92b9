// libFuzzer target: arbitrary bytes as a safetensors file, read through the same RangeReader and
// HeaderCursor path an http source takes. Every input must give a value or a Status, never a
// crash, and an accepted file must satisfy the invariants the parser promises.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/formats/safetensors.h"
#include "core/io/range_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  auto reader = modelfs::MakeMemoryRangeReader("fuzz.safetensors", bytes);
  auto file = modelfs::ParseSafetensors(*reader);
  if (!file.ok()) return 0;
  // Accepted: the tensors tile [0, file_size - data_start) in order.
  uint64_t next = 0;
  for (const modelfs::SafetensorsTensor& t : file->tensors) {
    if (t.begin != next || t.end < t.begin) std::abort();
    next = t.end;
  }
  if (file->data_start + next != size || file->file_size != size) std::abort();
  // The in-memory entry point agrees with the reader one.
  auto again = modelfs::ParseSafetensorsBytes(bytes, size);
  if (!again.ok() || again->tensors.size() != file->tensors.size()) std::abort();
  return 0;
}
