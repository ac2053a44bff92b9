// Indexing a model's layers for V, in one pass over each (layer_indexes.h).
#include "core/publish/layer_indexes.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <filesystem>
#include <functional>

#include "absl/strings/str_cat.h"
#include "core/io/range_reader.h"
#include "core/oci/tensor_index.h"
#include "core/oci/volume_image.h"
#include "core/publish/blob_upload.h"
#include "core/publish/registry_range_reader.h"
#include "core/publish/tensor_listing.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

using publish_internal::Fd;
using publish_internal::OpenForReading;

namespace fs = std::filesystem;

// Reads the file at `path` once, front to back, in pieces of 4 MiB given to `consume`,
// reporting `activity` ("hashing <role>") to `progress` (may be null) after each. Errors:
// kNotFound (no such file), kInternal naming the file (a read failed), `consume`'s.
absl::Status ReadFileInPieces(const std::string& path, const std::string& activity,
                              const ProgressFn& progress,
                              const std::function<absl::Status(std::string_view)>& consume) {
  ASSIGN_OR_RETURN(Fd fd, OpenForReading(path));
  posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  off_t size = lseek(fd.get(), 0, SEEK_END);
  std::string buf(4 << 20, '\0');
  uint64_t done = 0;
  for (;;) {
    ssize_t n = pread(fd.get(), buf.data(), buf.size(), static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::InternalError(absl::StrCat(path, ": read: ", strerror(errno)));
    if (n == 0) break;
    RETURN_IF_ERROR(consume(std::string_view(buf.data(), static_cast<size_t>(n))));
    done += static_cast<uint64_t>(n);
    if (progress) progress({activity, done, static_cast<uint64_t>(size)});
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ChunkIndex> IndexFile(const std::string& path, uint64_t chunk_size,
                                     ChunkDigestAlgorithm algorithm, const std::string& role,
                                     const ProgressFn& progress, TarHeaderRecorder* headers,
                                     TensorIndexBuilder* tensors, TarTensorIndexer* tar_tensors) {
  ChunkIndexBuilder b(chunk_size, algorithm);
  RETURN_IF_ERROR(ReadFileInPieces(path, "hashing " + role, progress, [&](std::string_view piece) {
    b.Update(piece);
    if (headers != nullptr) headers->Feed(piece);
    if (tensors != nullptr) tensors->Update(piece);
    if (tar_tensors != nullptr) return tar_tensors->Feed(piece);
    return absl::OkStatus();
  }));
  return b.Finish();
}

namespace publish_internal {
namespace {

// One pass over a compressed layer: its seek index, and the chunk index of its uncompressed
// tar (content kUncompressed: blob digest = diffId), built from the same decoded bytes.
class CompressedIndexer {
 public:
  static absl::StatusOr<CompressedIndexer> Create(LayerEncoding encoding, uint64_t chunk_size,
                                                  ChunkDigestAlgorithm algorithm,
                                                  const std::string& layer) {
    ASSIGN_OR_RETURN(std::unique_ptr<SeekIndexBuilder> seek,
                     SeekIndexBuilder::Create(encoding, layer));
    return CompressedIndexer(std::move(seek), chunk_size, algorithm);
  }
  // `headers` and `tar_tensors`, when set, follow the uncompressed tar too.
  absl::Status Feed(std::string_view compressed, TarHeaderRecorder* headers = nullptr,
                    TarTensorIndexer* tar_tensors = nullptr) {
    return seek_->Feed(compressed, [&](std::string_view plain) {
      chunks_.Update(plain);
      if (headers != nullptr) headers->Feed(plain);
      if (tar_tensors != nullptr) return tar_tensors->Feed(plain);
      return absl::OkStatus();
    });
  }
  absl::StatusOr<std::pair<SeekIndex, ChunkIndex>> Finish() {
    ASSIGN_OR_RETURN(SeekIndex seek, seek_->Finish());
    ChunkIndex chunks = chunks_.Finish();
    chunks.content = ChunkIndex::Content::kUncompressed;
    return std::make_pair(std::move(seek), std::move(chunks));
  }

 private:
  CompressedIndexer(std::unique_ptr<SeekIndexBuilder> seek, uint64_t chunk_size,
                    ChunkDigestAlgorithm algorithm)
      : seek_(std::move(seek)), chunks_(chunk_size, algorithm) {}
  std::unique_ptr<SeekIndexBuilder> seek_;
  ChunkIndexBuilder chunks_;
};

}  // namespace

// The chunk size of a model's indexes: `asked` when given (and the indexes fit the volume
// image with it), else the smallest that fits from 1 MiB up.
absl::StatusOr<uint64_t> PickChunkSize(const std::vector<uint64_t>& layer_sizes, uint64_t asked,
                                       ChunkDigestAlgorithm algorithm) {
  if (asked == 0) return ChunkSizeForLayers(layer_sizes, algorithm);
  ASSIGN_OR_RETURN(const uint64_t fits, ChunkSizeForLayers(layer_sizes, algorithm, asked));
  if (fits != asked) {
    return absl::InvalidArgumentError(
        absl::StrCat("--chunk-size ", asked, ": the chunk indexes would need ",
                     VolumeIndexBytesFor(layer_sizes, asked, algorithm), " bytes, over the ",
                     kMaxVolumeIndexBytes, " a volume image holds (or ", kMaxIndexLayerBytes,
                     " for one layer); use --chunk-size ", fits,
                     " or more, or leave it out to pick it by the model's size"));
  }
  return asked;
}

absl::StatusOr<std::pair<SeekIndex, ChunkIndex>> IndexCompressedFile(
    const std::string& path, LayerEncoding encoding, uint64_t chunk_size,
    ChunkDigestAlgorithm algorithm, const std::string& role, const ProgressFn& progress,
    TarHeaderRecorder* headers, TarTensorIndexer* tar_tensors) {
  ASSIGN_OR_RETURN(CompressedIndexer ix,
                   CompressedIndexer::Create(encoding, chunk_size, algorithm, path));
  RETURN_IF_ERROR(ReadFileInPieces(path, "indexing " + role, progress, [&](std::string_view piece) {
    return ix.Feed(piece, headers, tar_tensors);
  }));
  return ix.Finish();
}

absl::StatusOr<std::optional<TensorIndexBuilder>> StartTensorIndex(const std::string& path,
                                                                   const std::string& rel,
                                                                   const std::string& blob_path,
                                                                   uint64_t file_offset) {
  ASSIGN_OR_RETURN(std::unique_ptr<RangeReader> file, OpenFileRangeReader(path));
  std::error_code ec;
  const uint64_t blob_size = fs::file_size(blob_path, ec);
  ASSIGN_OR_RETURN(std::optional<TensorSkeleton> s,
                   ReadTensorSkeleton(*file, rel, Digest(), blob_size, file_offset));
  if (!s) return std::optional<TensorIndexBuilder>();
  ASSIGN_OR_RETURN(TensorIndexBuilder b,
                   TensorIndexBuilder::Create(std::move(s->index), std::move(s->header)));
  return std::optional<TensorIndexBuilder>(std::move(b));
}

absl::StatusOr<LayerIndexes> IndexLayers(RegistryClient& source, const ResolvedModel& rm,
                                         const ConvertOptions& o, PushResult& result) {
  LayerIndexes indexes;
  // The uncompressed size of a compressed layer is known only once it is decoded: its
  // compressed size stands in for it (weights compress little; V is checked again when built).
  std::vector<uint64_t> layer_sizes;
  for (const auto& layer : rm.layers) layer_sizes.push_back(layer.descriptor.size);
  ASSIGN_OR_RETURN(const uint64_t chunk_size,
                   PickChunkSize(layer_sizes, o.chunk_size, o.chunk_digest));
  for (size_t li = 0; li < rm.layers.size(); ++li) {
    const ModelLayer& layer = rm.layers[li];
    const Descriptor& d = layer.descriptor;
    ChunkIndexBuilder b(chunk_size, o.chunk_digest);
    std::optional<CompressedIndexer> compressed;
    // Every tar layer's headers, from the same pass, so a mount lists it without reading it.
    std::optional<TarHeaderRecorder> headers;
    if (layer.encoding.tar()) headers.emplace();
    // And the tensors of every weight file in the tar (a modelcar's), from the same pass.
    std::optional<TarTensorIndexer> tar_tensors;
    if (o.tensor_index && layer.encoding.tar()) {
      tar_tensors.emplace(absl::StrCat("layer ", d.digest.str()));
    }
    if (layer.encoding.compressed()) {
      ASSIGN_OR_RETURN(compressed,
                       CompressedIndexer::Create(layer.encoding, chunk_size, o.chunk_digest,
                                                 absl::StrCat("layer ", d.digest.str())));
    }
    uint64_t done = 0;
    std::string role = layer.path.empty() ? d.digest.str() : layer.path;
    // A .raw weight file's tensors: the header by range, the tensors hashed in this pass (which
    // checks the header read against the bytes streamed).
    std::optional<TensorIndexBuilder> tensors;
    if (o.tensor_index && layer.encoding == LayerEncoding::kRaw && !layer.path.empty()) {
      RegistryRangeReader reader(source, rm.repository, d, d.digest.str());
      ASSIGN_OR_RETURN(std::optional<TensorSkeleton> s,
                       ReadTensorSkeleton(reader, layer.path, d.digest, d.size, 0));
      if (s) {
        ASSIGN_OR_RETURN(tensors,
                         TensorIndexBuilder::Create(std::move(s->index), std::move(s->header)));
      }
    }
    RETURN_IF_ERROR(source.GetBlob(rm.repository, d.digest, [&](std::string_view chunk) {
      done += chunk.size();
      if (done > d.size) {
        return absl::DataLossError(absl::StrCat("layer ", d.digest.str(), " (", role,
                                                ") is longer than its descriptor's ", d.size,
                                                " bytes"));
      }
      b.Update(chunk);
      if (tensors) tensors->Update(chunk);
      if (compressed) {
        RETURN_IF_ERROR(compressed->Feed(chunk, headers ? &*headers : nullptr,
                                         tar_tensors ? &*tar_tensors : nullptr));
      } else {
        if (headers) headers->Feed(chunk);
        if (tar_tensors) RETURN_IF_ERROR(tar_tensors->Feed(chunk));
      }
      if (o.progress) o.progress({"indexing " + role, done, d.size});
      return absl::OkStatus();
    }));
    ChunkIndex idx = b.Finish();
    if (idx.blob_digest != d.digest || idx.blob_size != d.size) {
      return absl::DataLossError(absl::StrCat("layer ", d.digest.str(), " (", role,
                                              ") failed verification: got ", idx.blob_digest.str(),
                                              ", ", idx.blob_size, " bytes"));
    }
    PushedBlob pb{role, d, "present"};
    ++result.present;
    result.blobs.push_back(pb);
    if (compressed) {
      // Served through its seek index, each byte checked against the chunk index of the
      // uncompressed tar; a single zstd frame is fetched whole and decompressed instead.
      ASSIGN_OR_RETURN(auto both, compressed->Finish());
      ASSIGN_OR_RETURN(std::optional<Digest> diff_id, LayerDiffId(rm, li));
      if (diff_id && *diff_id != both.first.diff_id) {
        return absl::DataLossError(absl::StrCat(
            "layer ", d.digest.str(), " (", role, "): decompressed content has digest ",
            both.first.diff_id.str(), ", the model config's diffId is ", diff_id->str()));
      }
      if (!both.first.served_by_range()) result.verified_whole.push_back(d.digest);
      if (std::optional<TarHeaders> h = headers->Finish(both.first.diff_id, role)) {
        indexes.tar_headers.push_back(*std::move(h));
      }
      if (tar_tensors) {
        if (std::optional<TarTensorIndexes> t = tar_tensors->Finish(both.first.diff_id)) {
          indexes.tar_tensors.push_back(*std::move(t));
        }
      }
      indexes.seeks.push_back(std::move(both.first));
      indexes.chunks.push_back(std::move(both.second));
      continue;
    }
    if (headers) {
      if (std::optional<TarHeaders> h = headers->Finish(d.digest, role)) {
        indexes.tar_headers.push_back(*std::move(h));
      }
    }
    if (tar_tensors) {
      if (std::optional<TarTensorIndexes> t = tar_tensors->Finish(d.digest)) {
        indexes.tar_tensors.push_back(*std::move(t));
      }
    }
    if (tensors) {
      ASSIGN_OR_RETURN(TensorIndex t, tensors->Finish());
      indexes.tensors.push_back(std::move(t));
    }
    indexes.chunks.push_back(std::move(idx));
  }
  return indexes;
}

}  // namespace publish_internal
}  // namespace modelfs
