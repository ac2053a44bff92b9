// libFuzzer target: ParseGguf must turn any byte string into a GgufFile or a Status, never a
// crash, a sanitizer report or a huge allocation; a parsed file must survive the JSON view
// (dumped, so invalid UTF-8 would throw) and a peek at its first tensor.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/formats/dequant.h"
#include "core/formats/gguf.h"
#include "core/io/range_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto reader = modelfs::MakeMemoryRangeReader(
      "fuzz.gguf", std::string(reinterpret_cast<const char*>(data), size));
  auto file = modelfs::ParseGguf(*reader);
  if (!file.ok()) return 0;
  std::string json = file->MetadataJson(4).dump();
  for (const auto& [key, value] : file->metadata) {
    json += modelfs::GgufValueToJson(value).dump();
  }
  if (file->data_offset + file->TotalTensorBytes() + file->PaddingBytes() != file->file_size) {
    __builtin_trap();
  }
  if (!file->tensors.empty()) {
    (void)modelfs::PeekValues(*reader, *file, file->tensors.front().name, 40);
  }
  return 0;
}
