// Fuzzes the tar header reader, the tar header records (core/oci/tar_headers.h) and the
// volume-layer parser (A alone, and A over an index layer): never aborts, and every entry it
// reports has its data inside the blob and (with path checks) a canonical relative path. The
// records the recorder keeps of the input, fed in pieces whose size the input picks, index to
// exactly the entries of the input itself; the input parsed as records serializes back to itself.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "core/oci/path_safety.h"
#include "core/oci/tar.h"
#include "core/oci/tar_headers.h"
#include "core/oci/volume_image.h"

using namespace modelfs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (bool check : {true, false}) {
    TarReadOptions options;
    options.check_paths = check;
    auto entries = IndexTarBytes(bytes, options);
    if (!entries.ok()) continue;
    for (const TarEntry& e : *entries) {
      if (e.data_offset > size || e.size > size - e.data_offset) abort();
      if (check && !CheckRelativePath(e.path).ok()) abort();
    }
  }
  if (size > 0) {
    TarHeaderRecorder recorder;
    const size_t piece = 1 + data[size - 1] % 1031;
    for (size_t at = 0; at < size; at += piece) recorder.Feed(bytes.substr(at, piece));
    std::optional<TarHeaders> h = recorder.Finish(Digest::Of(bytes), "fuzz");
    if (h) {
      auto want = IndexTarBytes(bytes);
      std::unique_ptr<RangeReader> r =
          MakeTarHeadersReader(std::make_shared<const TarHeaders>(*h), "fuzz");
      auto got = IndexTar(*r);
      if (!want.ok() || !got.ok() || want->size() != got->size()) abort();
      for (size_t i = 0; i < got->size(); ++i) {
        const TarEntry& a = (*want)[i];
        const TarEntry& b = (*got)[i];
        if (a.path != b.path || a.type != b.type || a.size != b.size ||
            a.data_offset != b.data_offset || a.linkname != b.linkname || a.mode != b.mode ||
            a.uid != b.uid || a.mtime != b.mtime || a.xattrs != b.xattrs) {
          abort();
        }
      }
      auto back = ParseTarHeaders(SerializeTarHeaders(*h));
      if (!back.ok() || !(*back == *h)) abort();
    }
  }
  if (auto parsed = ParseTarHeaders(bytes); parsed.ok() && SerializeTarHeaders(*parsed) != bytes) {
    abort();
  }
  (void)ParseVolumeLayer(bytes);
  // A over an index layer: the input split at a block boundary (V with index layers).
  const size_t split = (size / 2) / 512 * 512;
  (void)ParseVolumeLayers(bytes.substr(split), {std::string(bytes.substr(0, split))});
  return 0;
}
