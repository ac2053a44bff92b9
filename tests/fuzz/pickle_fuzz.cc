// libFuzzer target: arbitrary bytes as a pickle checkpoint (zip or raw stream). Every input must
// give a scan or a Status, never a crash or an allocation its length fields ask for, and a scan
// must keep its promises: an import outside the allow-list is flagged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "cmd/modelfs/pickle_render.h"
#include "core/formats/pickle_scan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  // One stream on its own, as a zip entry is scanned.
  modelfs::PickleStream stream = modelfs::ScanPickleStream(bytes);
  if (stream.size > size) std::abort();
  auto scan = modelfs::ScanPickleBytes(bytes, "fuzz.pkl");
  if (!scan.ok()) return 0;
  for (const modelfs::PickleStream& s : scan->streams) {
    for (const modelfs::PickleImport& i : s.imports) {
      if (i.allowed) continue;
      bool flagged = false;
      for (const std::string& f : scan->flagged) flagged |= f == i.Qualified();
      if (!flagged) std::abort();
    }
  }
  (void)modelfs::cli::RenderPickleScan(*scan);
  (void)modelfs::cli::PickleScanToJson(*scan).dump();
  return 0;
}
