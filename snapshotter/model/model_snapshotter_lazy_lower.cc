// ModelSnapshotter, the lower layers of a lazily served ordinary image (lazy_images): each is
// fetched, verified and unpacked here, so that containerd's unpacker, which fetches a layer
// and every layer above it as soon as one Prepare is not answered, fetches no blob of the
// image (see model_snapshotter.h, PrepareLazyLower).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/io/range_reader.h"
#include "core/oci/layer_decoder.h"
#include "core/oci/media_types.h"
#include "core/status/status_macros.h"
#include "snapshotter/model/model_snapshotter.h"
#include "snapshotter/store/layer_applier.h"

namespace modelfs::snapshotter {
namespace fs = std::filesystem;
namespace {

absl::Status WriteAll(int fd, std::string_view bytes, const fs::path& path) {
  while (!bytes.empty()) {
    ssize_t n = write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return absl::InternalError(absl::StrCat("write ", path.string(), ": ", strerror(errno)));
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// Streams blob `layer` of `repo` into `path`, checking its size and digest against the
// descriptor. Errors: kDataLoss naming the layer (wrong size or digest), the registry's.
absl::Status FetchLayerBlob(RegistryClient& client, const std::string& repo,
                            const Descriptor& layer, const fs::path& path) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat(path.string(), ": ", strerror(errno)));
  Sha256 hash;
  uint64_t got = 0;
  absl::Status st = client.GetBlob(repo, layer.digest, [&](std::string_view chunk) {
    got += chunk.size();
    if (got > layer.size) {
      return absl::DataLossError(absl::StrCat("layer ", layer.digest.str(), ": the registry sent ",
                                              "more than its ", layer.size, " bytes"));
    }
    hash.Update(chunk);
    return WriteAll(fd, chunk, path);
  });
  if (close(fd) != 0 && st.ok()) {
    st = absl::InternalError(absl::StrCat("close ", path.string(), ": ", strerror(errno)));
  }
  RETURN_IF_ERROR(st);
  if (got != layer.size) {
    return absl::DataLossError(absl::StrCat("layer ", layer.digest.str(), ": the registry sent ",
                                            got, " bytes, the manifest says ", layer.size));
  }
  const Digest digest = hash.Finish();
  if (digest != layer.digest) {
    return absl::DataLossError(absl::StrCat("layer ", layer.digest.str(),
                                            ": the registry's bytes have digest ", digest.str()));
  }
  return absl::OkStatus();
}

// Decodes the verified compressed blob at `in` into `out`; the decoded bytes must have the
// config's diff ID. Errors: kDataLoss naming the layer (a corrupt stream, another diff ID).
absl::Status DecodeLayerFile(const fs::path& in, LayerEncoding encoding, const Descriptor& layer,
                             const Digest& diff_id, const fs::path& out) {
  constexpr uint64_t kPiece = 4ull << 20;
  ASSIGN_OR_RETURN(std::unique_ptr<RangeReader> reader, OpenFileRangeReader(in.string()));
  int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat(out.string(), ": ", strerror(errno)));
  absl::StatusOr<DecodedLayer> decoded = DecodeLayer(
      encoding, layer.digest, diff_id,
      [&](uint64_t offset, std::string* piece) -> absl::Status {
        piece->clear();
        if (offset >= layer.size) return absl::OkStatus();
        ASSIGN_OR_RETURN(*piece, reader->ReadAt(offset, std::min(kPiece, layer.size - offset)));
        return absl::OkStatus();
      },
      [&](std::string_view bytes) { return WriteAll(fd, bytes, out); });
  if (close(fd) != 0 && decoded.ok()) {
    return absl::InternalError(absl::StrCat("close ", out.string(), ": ", strerror(errno)));
  }
  return decoded.status();
}

absl::Status SyncFs(const fs::path& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat(dir.string(), ": ", strerror(errno)));
  const int rc = syncfs(fd);
  const int err = errno;
  close(fd);
  if (rc != 0)
    return absl::InternalError(absl::StrCat("syncfs ", dir.string(), ": ", strerror(err)));
  return absl::OkStatus();
}

}  // namespace

absl::Status ModelSnapshotter::PrepareLazyLower(const std::string& key, const std::string& parent,
                                                const std::string& target, const Labels& labels,
                                                const LazyImage& image, RegistryClient& client) {
  if (base_->Stat(target).ok()) {
    return absl::AlreadyExistsError(absl::StrCat("target snapshot \"", target, "\" exists"));
  }
  const std::string& repo = image.named.repository();
  // Bound as for the top layer: V must name this image as its subject. V's model is resolved
  // by the top layer's Prepare; were that to fail, these layers are still right.
  ASSIGN_OR_RETURN(ManifestResult vm, client.GetManifest(repo, image.volume.str()));
  ASSIGN_OR_RETURN(Manifest v, ParseManifest(vm.bytes));
  if (!v.subject || v.subject->digest != image.digest) {
    return absl::FailedPreconditionError(
        absl::StrCat("volume image ", image.volume.str(), " is not a referrer of ",
                     image.named.String(), "@", image.digest.str()));
  }
  const Descriptor& layer = image.manifest.layers[image.index];
  const Digest& diff_id = image.diff_ids[image.index];
  std::optional<LayerMediaTypeInfo> info = ClassifyLayerMediaType(layer.media_type);
  if (!info || !info->encoding.tar()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "layer ", layer.digest.str(), " has media type ", layer.media_type, ", not a tar layer"));
  }
  if (!info->encoding.compressed() && layer.digest != diff_id) {
    return absl::DataLossError(absl::StrCat("layer ", layer.digest.str(),
                                            " is an uncompressed tar, but the config's diff ID is ",
                                            diff_id.str()));
  }

  // Into the active snapshot's own directory: a crash leaves an uncommitted snapshot, which is
  // removed as any other (containerd's garbage collection of snapshots it does not know).
  RETURN_IF_ERROR(base_->Prepare(key, parent, labels).status());
  absl::Status st = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(SnapshotRecord active, base_->Record(key));
    const fs::path upper = base_->UpperPath(active.id);
    const fs::path blob = upper.parent_path() / "lazy-layer.blob";
    const fs::path tar = upper.parent_path() / "lazy-layer.tar";
    absl::Status fetched = FetchLayerBlob(client, repo, layer, blob);
    const bool compressed = info->encoding.compressed();
    if (fetched.ok() && compressed) {
      fetched = DecodeLayerFile(blob, info->encoding, layer, diff_id, tar);
    }
    std::error_code ec;
    if (fetched.ok() && compressed) fs::remove(blob, ec);
    const fs::path verified = compressed ? tar : blob;
    absl::StatusOr<LayerApplyCounts> counts;
    if (fetched.ok()) {
      // Only bytes that matched the digest and the diff ID reach the snapshot.
      LayerApplyOptions options;
      options.overlay_whiteouts = !parent.empty();
      for (int64_t id : active.parent_ids) options.parents.push_back(base_->UpperPath(id));
      absl::StatusOr<std::unique_ptr<RangeReader>> reader = OpenFileRangeReader(verified.string());
      counts = reader.ok() ? ApplyOverlayLayer(**reader, upper,
                                               absl::StrCat("layer ", layer.digest.str()), options)
                           : reader.status();
    }
    fs::remove(blob, ec);
    fs::remove(tar, ec);
    RETURN_IF_ERROR(fetched);
    RETURN_IF_ERROR(counts.status());
    // On disk before the commit makes the snapshot a layer others build on: a power loss after
    // it must not leave empty files in a committed snapshot (containerd's applier with sync).
    RETURN_IF_ERROR(SyncFs(upper));
    Log(absl::StrCat("snapshot ", target, " for image ", image.named.String(), "@",
                     image.digest.str(), ": layer ", image.index, " (", layer.digest.str(), ", ",
                     layer.size, " bytes) unpacked by the snapshotter: ", counts->entries,
                     " entries, ", counts->whiteouts, " whiteouts, ", counts->opaque_dirs,
                     " opaque directories"));
    return base_->Commit(target, key, labels);
  }();
  if (!st.ok()) {
    (void)base_->Remove(key);
    return st;
  }
  {
    absl::MutexLock lock(&mu_);
    counts_.lazy_lowers++;
  }
  return absl::AlreadyExistsError(absl::StrCat("target snapshot \"", target,
                                               "\" exists (a lower layer of an image served "
                                               "lazily, unpacked by the snapshotter)"));
}

}  // namespace modelfs::snapshotter
