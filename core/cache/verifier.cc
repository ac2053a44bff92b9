#include "core/cache/verifier.h"

#include <fcntl.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/base/buffer_pool.h"

namespace modelfs {

ChunkHash HashChunk(absl::string_view bytes) {
  Sha256 h;
  h.Update(bytes.data(), bytes.size());
  return h.Finish().raw();
}

absl::Status CheckChunkHash(const ChunkHash& got, const ChunkHash& want, const Digest& layer,
                            uint64_t chunk, uint64_t offset, uint64_t length) {
  if (got == want) return absl::OkStatus();
  return absl::DataLossError(
      absl::StrCat("chunk ", chunk, " of layer ", layer.str(), " (bytes [", offset, ", ",
                   offset + length, ")) failed verification: got ", Digest::FromRaw(got).str(),
                   ", want ", Digest::FromRaw(want).str()));
}

absl::StatusOr<LayerFileHash> HashLayerFile(const LayerStore& store, const LayerSegments& files,
                                            const Digest& layer, uint64_t size, uint64_t chunk_size,
                                            bool with_local_index,
                                            const std::vector<bool>& drop_after) {
  Sha256 whole;
  LayerFileHash out;
  BufferPool::Buffer buf =
      BufferPool::Shared().Get(std::min(chunk_size, std::max<uint64_t>(size, 1)));
  uint64_t drop_run = 0;  // where the current run of chunks to drop began
  for (uint64_t off = 0; off < size; off += chunk_size) {
    const uint64_t len = std::min(chunk_size, size - off);
    absl::Status io = files.ReadFull(store, layer, buf.data(), len, off);
    if (!io.ok()) return io;
    whole.Update(buf.data(), len);
    const uint64_t c = off / chunk_size;
    if (c < drop_after.size() && drop_after[c]) {
      // Readahead may have put this chunk's pages in a folio that also holds chunks before
      // it, and a folio goes only when all of it is in the range: the range takes in up to
      // kPageDropReach bytes of the run of dropped chunks before.
      const uint64_t from = std::max(drop_run, off > kPageDropReach ? off - kPageDropReach : 0);
      files.Advise(from, off + len, POSIX_FADV_DONTNEED);
    } else {
      drop_run = off + len;
    }
    if (with_local_index) {
      const ChunkHash h = HashChunk(absl::string_view(buf.data(), len));
      out.local_index.append(reinterpret_cast<const char*>(h.data()), h.size());
    }
  }
  out.digest = whole.Finish();
  return out;
}

}  // namespace modelfs
