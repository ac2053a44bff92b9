// Fuzzes TarTensorIndexer (core/publish/tar_tensor_indexer.h), which follows a layer's tar as it
// streams and parses every weight member's header from the passing bytes: the input is the tar,
// fed in pieces whose size its last byte picks. Never aborts; every index it gives has a safe,
// unique member path, lies inside the tar, names a member ScanTarHeaders finds at that data
// offset, hashes each tensor's bytes as they are there, and serializes to bytes that parse back
// to itself.
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "core/oci/chunk_hash.h"
#include "core/oci/path_safety.h"
#include "core/oci/tar.h"
#include "core/oci/tensor_index.h"
#include "core/publish/tar_tensor_indexer.h"

using namespace modelfs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  TarTensorIndexer ix("layer fuzz");
  const size_t piece = 1 + data[size - 1] % 1031;
  for (size_t at = 0; at < size; at += piece) {
    if (!ix.Feed(bytes.substr(at, piece)).ok()) return 0;
  }
  std::optional<TarTensorIndexes> got = ix.Finish(Digest::Of(bytes));
  if (!got) return 0;
  if (got->tar_size != size) abort();
  absl::StatusOr<std::vector<TarEntry>> entries = IndexTarBytes(bytes);
  std::map<std::string, uint64_t> data_offset;  // the last member of a path, as unpacking keeps
  if (entries.ok()) {
    for (const TarEntry& e : *entries) data_offset[e.path] = e.data_offset;
  }
  std::set<std::string> files;
  for (const TarTensorIndex& t : got->files) {
    if (!CheckRelativePath(t.file).ok() || !files.insert(t.file).second) abort();
    const TensorIndex& x = t.index;
    if (x.layer_size != size || x.file_offset > size || x.file_size > size - x.file_offset) abort();
    if (entries.ok() && data_offset.count(t.file) && data_offset[t.file] != x.file_offset) abort();
    for (const TensorEntry& e : x.tensors) {
      if (e.offset > x.file_size || e.length > x.file_size - e.offset) abort();
      const std::string_view b = bytes.substr(x.file_offset + e.offset, e.length);
      if (HashChunkBytes(ChunkDigestAlgorithm::kBlake3, b) != e.hash) abort();
    }
    absl::StatusOr<TensorIndex> back = ParseTensorIndex(SerializeTensorIndex(x));
    if (!back.ok() || *back != x) abort();
  }
  return 0;
}
