#include "core/oci/volume_image.h"

#include <algorithm>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/oci/media_types.h"
#include "core/oci/modelpack.h"
#include "core/oci/oci_json.h"
#include "core/oci/path_safety.h"
#include "core/oci/tar.h"
#include "core/status/status_macros.h"

namespace modelfs {

using oci_json::AV;
using oci_json::Json;

namespace {

std::string ChunkIndexPath(const Digest& layer) {
  return absl::StrCat(AV(kVolumeChunksDir), "/", AV(layer.hex()), ".idx");
}
std::string SeekIndexPath(const Digest& layer) {
  return absl::StrCat(AV(kVolumeSeekDir), "/", AV(layer.hex()), ".idx");
}
std::string SeekWindowsPath(const Digest& layer) {
  return absl::StrCat(AV(kVolumeSeekDir), "/", AV(layer.hex()), ".win");
}
std::string SeekWindowsTablePath(const Digest& layer) {
  return absl::StrCat(AV(kVolumeSeekDir), "/", AV(layer.hex()), ".wt");
}
std::string TarHeadersPath(const Digest& layer) {
  return absl::StrCat(AV(kVolumeTarDir), "/", AV(layer.hex()), ".hdr");
}
std::string TensorIndexPath(const Digest& layer) {
  return absl::StrCat(AV(kVolumeTensorsDir), "/", AV(layer.hex()), ".tidx");
}
std::string TarTensorIndexPath(const Digest& layer, size_t i) {
  return absl::StrCat(AV(kVolumeTensorsDir), "/", AV(layer.hex()), "-", i, ".tidx");
}

Descriptor ManifestRef(const Descriptor& d) {
  // Only the identity of M; annotations, urls and platform do not belong in a pointer.
  Descriptor out;
  out.media_type = d.media_type;
  out.digest = d.digest;
  out.size = d.size;
  out.artifact_type = d.artifact_type;
  return out;
}

// The README of an image-compatible V: the model is in the image; modelfs only makes it lazy.
std::string ImageCompatibleReadme(const Descriptor& model_manifest, std::string_view repository) {
  return absl::StrCat(
      "This container image holds the model\n  ", AV(repository), "@", model_manifest.digest.str(),
      "\n(a ModelPack artifact) as ordinary image layers: its files are next to this\n"
      "directory, whether or not the node runs modelfs. On a node whose containerd uses the\n"
      "modelfs snapshotter they are fetched lazily and verified chunk by chunk instead of being\n"
      "pulled whole first.\n"
      "\n"
      "The files next to this one: model.json names the model and its layers; chunks/ holds\n"
      "one chunk index per layer (application/vnd.modelfs.chunk-index.v1).\n");
}

// The index files (path -> bytes, in path order) as uncompressed tars of at most
// kMaxIndexLayerBytes of files each, every one with the directories above its files.
absl::StatusOr<std::vector<VolumeBlob>> BuildIndexLayers(
    const Digest& model, const std::map<std::string, std::string>& files,
    bool seek_fallback = false) {
  uint64_t total = 0;
  for (const auto& [path, bytes] : files) {
    if (bytes.size() > kMaxIndexLayerBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "index file ", path, " of ", model.str(), " is ", bytes.size(), " bytes, over the ",
          kMaxIndexLayerBytes, " an index layer holds; use a larger chunk size (--chunk-size)"));
    }
    total += bytes.size();
  }
  if (total > kMaxVolumeIndexBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the index files of ", model.str(), " are ",
                                                   total, " bytes, over the ", kMaxVolumeIndexBytes,
                                                   " a volume image holds; use a larger chunk size "
                                                   "(--chunk-size)"));
  }
  std::vector<VolumeBlob> out;
  std::vector<std::pair<std::string_view, std::string_view>> group;
  uint64_t group_bytes = 0;
  auto flush = [&]() -> absl::Status {
    if (group.empty()) return absl::OkStatus();
    TarWriter tar;
    RETURN_IF_ERROR(tar.AddDirectory(kVolumeDir));
    std::set<std::string> dirs = {std::string(kVolumeDir)};
    for (const auto& [path, bytes] : group) {
      // Every directory between .modelfs/ and the file, once, before the file.
      for (size_t slash = path.find('/'); slash != std::string_view::npos;
           slash = path.find('/', slash + 1)) {
        std::string dir(path.substr(0, slash));
        if (dirs.insert(dir).second) RETURN_IF_ERROR(tar.AddDirectory(dir));
      }
      RETURN_IF_ERROR(tar.AddFile(path, bytes));
    }
    VolumeBlob layer;
    layer.bytes = tar.Finish();
    layer.descriptor = DescribeBlob(kOciLayerTarMediaType, layer.bytes);
    layer.descriptor.annotations[std::string(kLabelRole)] = std::string(kVolumeRoleIndex);
    if (seek_fallback) {
      layer.descriptor.annotations[std::string(kAnnotationSeekFallback)] = "true";
    }
    out.push_back(std::move(layer));
    group.clear();
    group_bytes = 0;
    return absl::OkStatus();
  };
  for (const auto& [path, bytes] : files) {
    if (group_bytes + bytes.size() > kMaxIndexLayerBytes) RETURN_IF_ERROR(flush());
    group.emplace_back(path, bytes);
    group_bytes += bytes.size();
  }
  RETURN_IF_ERROR(flush());
  return out;
}

}  // namespace

std::string SerializeVolumeModelJson(const VolumeModelInfo& info) {
  Json j = Json::object();
  j["schemaVersion"] = info.schema_version;
  if (info.revision != 1) j["revision"] = info.revision;
  j["manifest"] = oci_json::DescriptorToJson(info.manifest);
  j["repository"] = info.repository;
  if (!info.path_prefix.empty()) j["pathPrefix"] = info.path_prefix;
  Json layers = Json::array();
  for (const VolumeLayerRecord& l : info.layers) {
    Json lj = Json::object();
    lj["digest"] = l.digest.str();
    lj["size"] = l.size;
    lj["mediaType"] = l.media_type;
    if (!l.path.empty()) lj["path"] = l.path;
    if (l.chunk_index.has_value()) {
      Json cj = Json::object();
      cj["path"] = l.chunk_index->path;
      cj["digest"] = l.chunk_index->digest.str();
      cj["chunkSize"] = l.chunk_index->chunk_size;
      if (l.chunk_index->algorithm != ChunkDigestAlgorithm::kSha256) {
        cj["algorithm"] = std::string(ChunkDigestName(l.chunk_index->algorithm));
      }
      if (l.chunk_index->content == ChunkIndex::Content::kUncompressed) {
        cj["content"] = "uncompressed";
      }
      lj["chunkIndex"] = std::move(cj);
    }
    if (l.seek_index.has_value()) {
      Json sj = Json::object();
      sj["path"] = l.seek_index->path;
      sj["digest"] = l.seek_index->digest.str();
      sj["encoding"] = std::string(SeekEncodingName(l.seek_index->encoding));
      sj["diffId"] = l.seek_index->diff_id.str();
      sj["uncompressedSize"] = l.seek_index->uncompressed_size;
      sj["points"] = l.seek_index->points;
      if (l.seek_index->windows.has_value()) {
        const VolumeSeekWindowsRef& w = *l.seek_index->windows;
        Json wj = Json::object();
        wj["path"] = w.path;
        wj["digest"] = w.digest.str();
        wj["points"] = w.points;
        wj["tablePath"] = w.table_path;
        wj["tableSize"] = w.table_size;
        wj["layer"] = w.layer.str();
        wj["offset"] = w.offset;
        sj["windows"] = std::move(wj);
      }
      lj["seekIndex"] = std::move(sj);
    }
    if (l.tar_headers.has_value()) {
      Json tj = Json::object();
      tj["path"] = l.tar_headers->path;
      tj["digest"] = l.tar_headers->digest.str();
      tj["entries"] = l.tar_headers->entries;
      lj["tarHeaders"] = std::move(tj);
    }
    if (l.tensor_index.has_value()) {
      Json tj = Json::object();
      tj["path"] = l.tensor_index->path;
      tj["digest"] = l.tensor_index->digest.str();
      tj["mediaType"] = std::string(kTensorIndexMediaType);
      tj["tensors"] = l.tensor_index->tensors;
      lj["tensorIndex"] = std::move(tj);
    }
    if (l.tar_tensor_indexes.has_value()) {
      Json arr = Json::array();
      for (const VolumeTensorIndexRef& r : *l.tar_tensor_indexes) {
        Json tj = Json::object();
        tj["file"] = r.file;
        tj["path"] = r.path;
        tj["digest"] = r.digest.str();
        tj["mediaType"] = std::string(kTensorIndexMediaType);
        tj["tensors"] = r.tensors;
        arr.push_back(std::move(tj));
      }
      lj["tensorIndexes"] = std::move(arr);
    }
    layers.push_back(std::move(lj));
  }
  j["layers"] = std::move(layers);
  return oci_json::Dump(j);
}

absl::StatusOr<VolumeModelInfo> ParseVolumeModelJson(std::string_view bytes) {
  constexpr std::string_view kWhere = "model.json";
  ASSIGN_OR_RETURN(Json j, oci_json::ParseObject(bytes, kWhere));
  VolumeModelInfo info;
  ASSIGN_OR_RETURN(std::optional<int64_t> version,
                   oci_json::GetInt(j, "schemaVersion", kWhere, true));
  if (*version != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.json.schemaVersion: is ", *version, ", this build reads 1"));
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> revision, oci_json::GetInt(j, "revision", kWhere, false));
  // Any revision is read: each adds only what a reader that ignores it still serves correctly.
  if (revision.has_value()) {
    if (*revision < 1 || *revision > 1000) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.json.revision: ", *revision, " is not a revision (1..1000)"));
    }
    info.revision = static_cast<int>(*revision);
  }
  const Json* m = oci_json::Find(j, "manifest");
  if (m == nullptr)
    return absl::InvalidArgumentError("model.json.manifest: required field missing");
  ASSIGN_OR_RETURN(info.manifest, oci_json::DescriptorFromJson(*m, "model.json.manifest"));
  ASSIGN_OR_RETURN(info.repository, oci_json::GetString(j, "repository", kWhere, false));
  ASSIGN_OR_RETURN(info.path_prefix, oci_json::GetString(j, "pathPrefix", kWhere, false));
  if (!info.path_prefix.empty()) {
    absl::Status s = CheckRelativePath(info.path_prefix);
    if (!s.ok()) {
      return absl::PermissionDeniedError(absl::StrCat("model.json.pathPrefix: ", s.message()));
    }
    RETURN_IF_ERROR(CheckNotReservedModelPath(info.path_prefix, "model.json.pathPrefix"));
  }
  const Json* layers = oci_json::Find(j, "layers");
  if (layers == nullptr || !layers->is_array()) {
    return absl::InvalidArgumentError("model.json.layers: missing or not an array");
  }
  for (size_t i = 0; i < layers->size(); ++i) {
    const std::string w = absl::StrCat("model.json.layers[", i, "]");
    const Json& lj = (*layers)[i];
    if (!lj.is_object()) return absl::InvalidArgumentError(absl::StrCat(w, ": not an object"));
    VolumeLayerRecord l;
    ASSIGN_OR_RETURN(l.digest, oci_json::GetDigest(lj, "digest", w));
    ASSIGN_OR_RETURN(std::optional<uint64_t> size, oci_json::GetSize(lj, "size", w, true));
    l.size = *size;
    if (l.size > kMaxModelLayerBytes) {
      return absl::InvalidArgumentError(absl::StrCat(w, " (", l.digest.str(), "): size ", l.size,
                                                     " bytes is over the limit of ",
                                                     kMaxModelLayerBytes, " bytes (4 TiB)"));
    }
    ASSIGN_OR_RETURN(l.media_type, oci_json::GetString(lj, "mediaType", w, true));
    ASSIGN_OR_RETURN(l.path, oci_json::GetString(lj, "path", w, false));
    if (!l.path.empty()) {
      absl::Status s = CheckRelativePath(l.path);
      if (!s.ok()) return absl::PermissionDeniedError(absl::StrCat(w, ".path: ", s.message()));
    }
    if (const Json* cj = oci_json::Find(lj, "chunkIndex")) {
      const std::string cw = absl::StrCat(w, ".chunkIndex");
      if (!cj->is_object()) return absl::InvalidArgumentError(absl::StrCat(cw, ": not an object"));
      VolumeChunkIndexRef ref;
      ASSIGN_OR_RETURN(ref.path, oci_json::GetString(*cj, "path", cw, true));
      absl::Status s = CheckRelativePath(ref.path);
      if (!s.ok()) return absl::PermissionDeniedError(absl::StrCat(cw, ".path: ", s.message()));
      ASSIGN_OR_RETURN(ref.digest, oci_json::GetDigest(*cj, "digest", cw));
      ASSIGN_OR_RETURN(std::optional<uint64_t> cs, oci_json::GetSize(*cj, "chunkSize", cw, true));
      ref.chunk_size = *cs;
      if (!ChunkIndex::ValidChunkSize(ref.chunk_size)) {
        return absl::InvalidArgumentError(absl::StrCat(cw, ".chunkSize: ", ref.chunk_size,
                                                       " is not a power of two in 64 KiB..64 MiB"));
      }
      ASSIGN_OR_RETURN(std::string algorithm, oci_json::GetString(*cj, "algorithm", cw, false));
      if (!algorithm.empty()) {
        absl::StatusOr<ChunkDigestAlgorithm> a = ParseChunkDigestName(algorithm);
        if (!a.ok())
          return absl::InvalidArgumentError(absl::StrCat(cw, ".algorithm: ", a.status().message()));
        ref.algorithm = *a;
      }
      ASSIGN_OR_RETURN(std::string content, oci_json::GetString(*cj, "content", cw, false));
      if (content == "uncompressed") {
        ref.content = ChunkIndex::Content::kUncompressed;
      } else if (!content.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(cw, ".content: \"", content, "\" is not \"uncompressed\""));
      }
      l.chunk_index = std::move(ref);
    }
    if (const Json* sj = oci_json::Find(lj, "seekIndex")) {
      const std::string sw = absl::StrCat(w, ".seekIndex");
      if (!sj->is_object()) return absl::InvalidArgumentError(absl::StrCat(sw, ": not an object"));
      VolumeSeekIndexRef ref;
      ASSIGN_OR_RETURN(ref.path, oci_json::GetString(*sj, "path", sw, true));
      absl::Status s = CheckRelativePath(ref.path);
      if (!s.ok()) return absl::PermissionDeniedError(absl::StrCat(sw, ".path: ", s.message()));
      ASSIGN_OR_RETURN(ref.digest, oci_json::GetDigest(*sj, "digest", sw));
      ASSIGN_OR_RETURN(std::string encoding, oci_json::GetString(*sj, "encoding", sw, true));
      if (encoding == "gzip") {
        ref.encoding = SeekEncoding::kGzip;
      } else if (encoding == "zstd") {
        ref.encoding = SeekEncoding::kZstd;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(sw, ".encoding: \"", encoding, "\" is not gzip or zstd"));
      }
      ASSIGN_OR_RETURN(ref.diff_id, oci_json::GetDigest(*sj, "diffId", sw));
      ASSIGN_OR_RETURN(std::optional<uint64_t> us,
                       oci_json::GetSize(*sj, "uncompressedSize", sw, true));
      ref.uncompressed_size = *us;
      ASSIGN_OR_RETURN(std::optional<uint64_t> points, oci_json::GetSize(*sj, "points", sw, true));
      ref.points = *points;
      const LayerEncoding want =
          ref.encoding == SeekEncoding::kGzip ? LayerEncoding::kTarGzip : LayerEncoding::kTarZstd;
      const std::optional<LayerMediaTypeInfo> info = ClassifyLayerMediaType(l.media_type);
      if (!info || info->encoding != want) {
        return absl::InvalidArgumentError(
            absl::StrCat(sw, ": a ", encoding, " seek index for a layer of type ", l.media_type));
      }
      if (!l.chunk_index || l.chunk_index->content != ChunkIndex::Content::kUncompressed) {
        return absl::InvalidArgumentError(absl::StrCat(
            sw, ": a seek index needs the chunk index of the uncompressed bytes beside it"));
      }
      if (const Json* wj = oci_json::Find(*sj, "windows")) {
        const std::string ww = absl::StrCat(sw, ".windows");
        if (!wj->is_object()) {
          return absl::InvalidArgumentError(absl::StrCat(ww, ": not an object"));
        }
        if (ref.encoding != SeekEncoding::kGzip) {
          return absl::InvalidArgumentError(absl::StrCat(ww, ": only a gzip layer has windows"));
        }
        VolumeSeekWindowsRef w;
        ASSIGN_OR_RETURN(w.path, oci_json::GetString(*wj, "path", ww, true));
        ASSIGN_OR_RETURN(w.table_path, oci_json::GetString(*wj, "tablePath", ww, true));
        for (const std::string* path : {&w.path, &w.table_path}) {
          absl::Status ps = CheckRelativePath(*path);
          if (!ps.ok()) {
            return absl::PermissionDeniedError(absl::StrCat(ww, ": path: ", ps.message()));
          }
        }
        ASSIGN_OR_RETURN(w.digest, oci_json::GetDigest(*wj, "digest", ww));
        ASSIGN_OR_RETURN(w.layer, oci_json::GetDigest(*wj, "layer", ww));
        ASSIGN_OR_RETURN(std::optional<uint64_t> wp, oci_json::GetSize(*wj, "points", ww, true));
        ASSIGN_OR_RETURN(std::optional<uint64_t> ts, oci_json::GetSize(*wj, "tableSize", ww, true));
        ASSIGN_OR_RETURN(std::optional<uint64_t> wo, oci_json::GetSize(*wj, "offset", ww, true));
        w.points = *wp;
        w.table_size = *ts;
        w.offset = *wo;
        if (w.points == 0 || w.table_size != SeekWindowsTable::kHeaderSize +
                                                 SeekWindowsTable::kEntrySize * w.points) {
          return absl::InvalidArgumentError(absl::StrCat(ww, ": tableSize ", w.table_size,
                                                         " does not hold ", w.points, " points"));
        }
        ref.windows = std::move(w);
      }
      l.seek_index = std::move(ref);
    } else if (l.chunk_index && l.chunk_index->content == ChunkIndex::Content::kUncompressed) {
      return absl::InvalidArgumentError(absl::StrCat(
          w, ".chunkIndex: an index of uncompressed bytes needs a seekIndex beside it"));
    }
    if (const Json* tj = oci_json::Find(lj, "tarHeaders")) {
      const std::string tw = absl::StrCat(w, ".tarHeaders");
      if (!tj->is_object()) return absl::InvalidArgumentError(absl::StrCat(tw, ": not an object"));
      VolumeTarHeadersRef ref;
      ASSIGN_OR_RETURN(ref.path, oci_json::GetString(*tj, "path", tw, true));
      absl::Status s = CheckRelativePath(ref.path);
      if (!s.ok()) return absl::PermissionDeniedError(absl::StrCat(tw, ".path: ", s.message()));
      ASSIGN_OR_RETURN(ref.digest, oci_json::GetDigest(*tj, "digest", tw));
      ASSIGN_OR_RETURN(std::optional<uint64_t> entries,
                       oci_json::GetSize(*tj, "entries", tw, true));
      ref.entries = *entries;
      const std::optional<LayerMediaTypeInfo> info = ClassifyLayerMediaType(l.media_type);
      if (!info || info->encoding == LayerEncoding::kRaw ||
          (IsCompressedEncoding(info->encoding) && !l.seek_index)) {
        return absl::InvalidArgumentError(absl::StrCat(
            tw, ": tar headers for a layer of type ", l.media_type,
            " (only a tar layer, and a compressed one with its seekIndex beside them)"));
      }
      l.tar_headers = std::move(ref);
    }
    // One tensor index reference: path, digest, mediaType, tensors.
    auto tensor_ref = [&](const Json& xj,
                          const std::string& xw) -> absl::StatusOr<VolumeTensorIndexRef> {
      if (!xj.is_object()) return absl::InvalidArgumentError(absl::StrCat(xw, ": not an object"));
      VolumeTensorIndexRef ref;
      ASSIGN_OR_RETURN(ref.path, oci_json::GetString(xj, "path", xw, true));
      absl::Status s = CheckRelativePath(ref.path);
      if (!s.ok()) return absl::PermissionDeniedError(absl::StrCat(xw, ".path: ", s.message()));
      ASSIGN_OR_RETURN(ref.digest, oci_json::GetDigest(xj, "digest", xw));
      ASSIGN_OR_RETURN(std::string media_type, oci_json::GetString(xj, "mediaType", xw, true));
      if (media_type != kTensorIndexMediaType) {
        return absl::InvalidArgumentError(absl::StrCat(xw, ".mediaType: \"", media_type,
                                                       "\" is not ", AV(kTensorIndexMediaType)));
      }
      ASSIGN_OR_RETURN(std::optional<uint64_t> n, oci_json::GetSize(xj, "tensors", xw, true));
      ref.tensors = *n;
      return ref;
    };
    if (const Json* xj = oci_json::Find(lj, "tensorIndex")) {
      ASSIGN_OR_RETURN(l.tensor_index, tensor_ref(*xj, absl::StrCat(w, ".tensorIndex")));
    }
    if (const Json* xa = oci_json::Find(lj, "tensorIndexes")) {
      const std::string xw = absl::StrCat(w, ".tensorIndexes");
      if (!xa->is_array()) return absl::InvalidArgumentError(absl::StrCat(xw, ": not an array"));
      const std::optional<LayerMediaTypeInfo> info = ClassifyLayerMediaType(l.media_type);
      if (!info || info->encoding == LayerEncoding::kRaw ||
          (IsCompressedEncoding(info->encoding) && !l.seek_index)) {
        return absl::InvalidArgumentError(absl::StrCat(
            xw, ": tensor indexes of a tar's files for a layer of type ", l.media_type,
            " (only a tar layer, and a compressed one with its seekIndex beside them)"));
      }
      std::set<std::string> files;
      l.tar_tensor_indexes.emplace();
      for (size_t i = 0; i < xa->size(); ++i) {
        const std::string iw = absl::StrCat(xw, "[", i, "]");
        ASSIGN_OR_RETURN(VolumeTensorIndexRef ref, tensor_ref((*xa)[i], iw));
        ASSIGN_OR_RETURN(ref.file, oci_json::GetString((*xa)[i], "file", iw, true));
        absl::Status s = CheckRelativePath(ref.file);
        if (!s.ok()) return absl::PermissionDeniedError(absl::StrCat(iw, ".file: ", s.message()));
        if (!files.insert(ref.file).second) {
          return absl::InvalidArgumentError(absl::StrCat(iw, ".file: ", ref.file, " twice"));
        }
        l.tar_tensor_indexes->push_back(std::move(ref));
      }
    }
    info.layers.push_back(std::move(l));
  }
  return info;
}

std::string VolumeReadme(const Descriptor& model_manifest, std::string_view repository) {
  const std::string ref = absl::StrCat(AV(repository), "@", model_manifest.digest.str());
  return absl::StrCat(
      "This directory is only a pointer: the model is not here.\n"
      "\n"
      "This container image is a modelfs volume image. It stands for the model\n"
      "  ",
      ref,
      "\n"
      "(a ModelPack artifact). On a node whose containerd uses the modelfs snapshotter the\n"
      "model's files appear in this volume, fetched lazily and verified chunk by chunk.\n"
      "You are reading this file because the modelfs snapshotter is not installed (or not\n"
      "configured for this runtime) on this node, so containerd unpacked only this small\n"
      "pointer layer. Nothing large was downloaded.\n"
      "\n"
      "To serve the model on this node:\n"
      "  1. Install modelfs (apt install ./modelfs_<version>_<arch>.deb) and start it:\n"
      "       systemctl enable --now modelfs-snapshotter.socket modelfs-snapshotter\n"
      "  2. Add the proxy plugin to /etc/containerd/config.toml:\n"
      "       [proxy_plugins.modelfs]\n"
      "         type = \"snapshot\"\n"
      "         address = \"/run/modelfs/snapshotter.sock\"\n"
      "     containerd 2.1 or later (what Kubernetes image volumes need): add\n"
      "       [proxy_plugins.modelfs.exports]\n"
      "         enable_remote_snapshot_annotations = \"true\"\n"
      "     set snapshotter = \"modelfs\" for the pod's runtime handler and list modelfs\n"
      "     in the transfer service's unpack_config; do NOT set\n"
      "     disable_snapshot_annotations there.\n"
      "     containerd 1.6, 1.7 and 2.0: in the CRI plugin set snapshotter = \"modelfs\"\n"
      "     and disable_snapshot_annotations = false.\n"
      "     The full snippets: /usr/share/doc/modelfs/install.md and containerd/.\n"
      "  3. Restart containerd and recreate this pod.\n"
      "If modelfs is installed and configured, the journal says why it fell back:\n"
      "  journalctl -u modelfs-snapshotter (see troubleshooting.md).\n"
      "\n"
      "Without a node change you can still read the model elsewhere:\n"
      "  modelfs mount ",
      ref,
      " DIR\n"
      "\n"
      "The files next to this one: model.json names the model and its layers; chunks/ holds\n"
      "one SHA-256 chunk index per layer (application/vnd.modelfs.chunk-index.v1).\n");
}

std::map<std::string, std::string> MakeVolumeLabels(const Descriptor& model_manifest,
                                                    std::string_view repository) {
  std::map<std::string, std::string> labels;
  labels[std::string(kLabelModel)] = model_manifest.digest.str();
  labels[std::string(kLabelModelSize)] = std::to_string(model_manifest.size);
  labels[std::string(kLabelModelMediaType)] = model_manifest.media_type;
  if (!repository.empty()) labels[std::string(kLabelRepository)] = std::string(repository);
  labels[std::string(kLabelProfile)] = std::string(kVolumeProfileV1);
  return labels;
}

absl::StatusOr<std::optional<VolumeLabels>> ParseVolumeLabels(
    const std::map<std::string, std::string>& labels) {
  auto get = [&](std::string_view key) -> const std::string* {
    auto it = labels.find(std::string(key));
    return it == labels.end() ? nullptr : &it->second;
  };
  const std::string* model = get(kLabelModel);
  if (model == nullptr) return std::optional<VolumeLabels>();
  VolumeLabels out;
  absl::StatusOr<Digest> d = Digest::Parse(*model);
  if (!d.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("label ", AV(kLabelModel), ": ", d.status().message()));
  }
  out.model.digest = *d;
  if (const std::string* size = get(kLabelModelSize)) {
    if (!absl::SimpleAtoi(*size, &out.model.size) || size->empty() || (*size)[0] == '+' ||
        (*size)[0] == '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("label ", AV(kLabelModelSize), ": '", *size, "' is not a size"));
    }
  }
  if (const std::string* mt = get(kLabelModelMediaType)) out.model.media_type = *mt;
  if (const std::string* repo = get(kLabelRepository)) out.repository = *repo;
  const std::string* profile = get(kLabelProfile);
  out.profile = profile ? *profile : std::string(kVolumeProfileV1);
  if (out.profile != kVolumeProfileV1) {
    return absl::InvalidArgumentError(absl::StrCat("label ", AV(kLabelProfile), ": '", out.profile,
                                                   "' is not a known profile (v1)"));
  }
  return std::optional<VolumeLabels>(std::move(out));
}

absl::StatusOr<VolumeImage> BuildVolumeImage(const VolumeImageInput& input) {
  VolumeImage v;
  VolumeModelInfo& info = v.model_info;
  info.manifest = ManifestRef(input.model_manifest);
  info.repository = input.repository;
  if (!input.path_prefix.empty()) {
    absl::Status s = CheckRelativePath(input.path_prefix);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("path prefix '", input.path_prefix, "': ", s.message()));
    }
    RETURN_IF_ERROR(CheckNotReservedModelPath(input.path_prefix, "the path prefix"));
    // Image compatible: M's tar members are under the prefix already.
    if (!input.image_compatible) info.path_prefix = input.path_prefix;
  }

  std::map<Digest, const ChunkIndex*> by_digest;
  for (const ChunkIndex& idx : input.chunk_indexes) by_digest[idx.blob_digest] = &idx;
  std::map<Digest, const SeekIndex*> seek_by_layer;
  for (const SeekIndex& idx : input.seek_indexes) seek_by_layer[idx.layer_digest] = &idx;
  std::set<Digest> used;
  std::set<Digest> seek_used;
  std::map<Digest, const TarHeaders*> headers_by_tar;
  for (const TarHeaders& h : input.tar_headers) headers_by_tar[h.tar_digest] = &h;
  std::set<Digest> headers_used;
  std::map<Digest, const TensorIndex*> tensors_by_layer;
  for (const TensorIndex& t : input.tensor_indexes) tensors_by_layer[t.layer_digest] = &t;
  std::set<Digest> tensors_used;
  std::map<Digest, const TarTensorIndexes*> tar_tensors_by_tar;
  for (const TarTensorIndexes& t : input.tar_tensor_indexes) tar_tensors_by_tar[t.tar_digest] = &t;
  std::set<Digest> tar_tensors_used;
  std::map<std::string, std::string> index_files;  // path -> bytes, sorted for the tar

  ASSIGN_OR_RETURN(std::vector<ModelLayer> layers, ResolveModelLayers(input.model));
  std::vector<Descriptor> model_layers;  // image compatible: M's tars as V's first layers
  for (const ModelLayer& layer : layers) {
    if (input.image_compatible) {
      if (layer.encoding != LayerEncoding::kTar) {
        return absl::InvalidArgumentError(absl::StrCat(
            "layer ", model_layers.size(), " of ", input.model_manifest.digest.str(), " (",
            layer.descriptor.digest.str(), ", ", layer.descriptor.media_type,
            ") is not an uncompressed tar: an image-compatible volume image would copy its "
            "bytes; push with --tar, or leave out --image-compatible"));
      }
      Descriptor d;
      d.media_type = std::string(kOciLayerTarMediaType);
      d.digest = layer.descriptor.digest;
      d.size = layer.descriptor.size;
      d.annotations[std::string(kLabelRole)] = std::string(kVolumeRoleModel);
      model_layers.push_back(std::move(d));
    }
    VolumeLayerRecord rec;
    rec.digest = layer.descriptor.digest;
    rec.size = layer.descriptor.size;
    rec.media_type = layer.descriptor.media_type;
    rec.path = layer.path;
    // A compressed layer with a seek index: its chunk index is of the uncompressed tar.
    Digest indexed = rec.digest;
    uint64_t indexed_size = rec.size;
    ChunkIndex::Content content = ChunkIndex::Content::kStored;
    if (auto sit = seek_by_layer.find(rec.digest); sit != seek_by_layer.end()) {
      const SeekIndex& seek = *sit->second;
      const SeekEncoding want =
          layer.encoding == LayerEncoding::kTarGzip ? SeekEncoding::kGzip : SeekEncoding::kZstd;
      if (!IsCompressedEncoding(layer.encoding) || seek.encoding != want ||
          seek.compressed_size != rec.size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "seek index for ", rec.digest.str(), " (", std::string(SeekEncodingName(seek.encoding)),
            ", ", seek.compressed_size, " bytes) does not fit the layer (", rec.media_type, ", ",
            rec.size, " bytes)"));
      }
      std::string bytes = SerializeSeekIndex(seek);
      VolumeSeekIndexRef ref;
      ref.path = SeekIndexPath(rec.digest);
      ref.digest = Digest::Of(bytes);
      ref.encoding = seek.encoding;
      ref.diff_id = seek.diff_id;
      ref.uncompressed_size = seek.uncompressed_size;
      ref.points = seek.points.size();
      index_files[ref.path] = std::move(bytes);
      rec.seek_index = std::move(ref);
      seek_used.insert(rec.digest);
      indexed = seek.diff_id;
      indexed_size = seek.uncompressed_size;
      content = ChunkIndex::Content::kUncompressed;
      if (!by_digest.count(indexed)) {
        return absl::InvalidArgumentError(absl::StrCat("seek index for ", rec.digest.str(),
                                                       " has no chunk index of its diffId ",
                                                       indexed.str()));
      }
    }
    auto it = by_digest.find(indexed);
    if (it != by_digest.end()) {
      const ChunkIndex& idx = *it->second;
      if (idx.blob_size != indexed_size || idx.content != content) {
        return absl::InvalidArgumentError(absl::StrCat(
            "chunk index for ", indexed.str(), " describes ", idx.blob_size, " bytes (content ",
            static_cast<uint32_t>(idx.content), ") but the layer ", rec.digest.str(), " has ",
            indexed_size, " (content ", static_cast<uint32_t>(content), ")"));
      }
      std::string bytes = SerializeChunkIndex(idx);
      VolumeChunkIndexRef ref;
      ref.path = ChunkIndexPath(rec.digest);
      ref.digest = Digest::Of(bytes);
      ref.chunk_size = idx.chunk_size;
      ref.algorithm = idx.algorithm;
      ref.content = idx.content;
      index_files[ref.path] = std::move(bytes);
      rec.chunk_index = std::move(ref);
      used.insert(indexed);
    }
    if (auto hit = headers_by_tar.find(indexed); hit != headers_by_tar.end()) {
      const TarHeaders& h = *hit->second;
      if (layer.encoding == LayerEncoding::kRaw || h.tar_size != indexed_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("tar headers for ", indexed.str(), " (a tar of ", h.tar_size,
                         " bytes) do not fit the layer ", rec.digest.str(), " (", rec.media_type,
                         ", ", indexed_size, " bytes of tar)"));
      }
      std::string bytes = SerializeTarHeaders(h);
      VolumeTarHeadersRef ref;
      ref.path = TarHeadersPath(rec.digest);
      ref.digest = Digest::Of(bytes);
      ref.entries = h.entries;
      index_files[ref.path] = std::move(bytes);
      rec.tar_headers = std::move(ref);
      headers_used.insert(indexed);
    }
    if (auto xit = tensors_by_layer.find(rec.digest); xit != tensors_by_layer.end()) {
      const TensorIndex& t = *xit->second;
      if (t.layer_size != rec.size) {
        return absl::InvalidArgumentError(absl::StrCat("tensor index for ", rec.digest.str(),
                                                       " describes a layer of ", t.layer_size,
                                                       " bytes, the layer has ", rec.size));
      }
      std::string bytes = SerializeTensorIndex(t);
      VolumeTensorIndexRef ref;
      ref.path = TensorIndexPath(rec.digest);
      ref.digest = Digest::Of(bytes);
      ref.tensors = t.tensors.size();
      index_files[ref.path] = std::move(bytes);
      rec.tensor_index = std::move(ref);
      tensors_used.insert(rec.digest);
      info.revision = kVolumeRevisionTensorIndex;
    }
    if (auto tit = tar_tensors_by_tar.find(indexed); tit != tar_tensors_by_tar.end()) {
      std::set<std::string> files;
      if (layer.encoding == LayerEncoding::kRaw || tit->second->tar_size != indexed_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor indexes for the tar ", indexed.str(), " (", tit->second->tar_size,
                         " bytes) do not fit the layer ", rec.digest.str(), " (", rec.media_type,
                         ", ", indexed_size, " bytes of tar)"));
      }
      rec.tar_tensor_indexes.emplace();
      for (const TarTensorIndex& tf : tit->second->files) {
        const TarTensorIndex* t = &tf;
        if (t->index.layer_digest != indexed || t->index.layer_size != indexed_size ||
            !files.insert(t->file).second || !CheckRelativePath(t->file).ok()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "tensor index of ", t->file, " in the tar ", indexed.str(), " (", t->index.layer_size,
              " bytes) does not fit the layer ", rec.digest.str(), " (", rec.media_type, ", ",
              indexed_size, " bytes of tar), or names its file twice or unsafely"));
        }
        std::string bytes = SerializeTensorIndex(t->index);
        VolumeTensorIndexRef ref;
        ref.path = TarTensorIndexPath(rec.digest, rec.tar_tensor_indexes->size());
        ref.digest = Digest::Of(bytes);
        ref.tensors = t->index.tensors.size();
        ref.file = t->file;
        index_files[ref.path] = std::move(bytes);
        rec.tar_tensor_indexes->push_back(std::move(ref));
      }
      tar_tensors_used.insert(indexed);
      info.revision = kVolumeRevisionTensorIndex;
    }
    info.layers.push_back(std::move(rec));
  }
  for (const auto& [digest, idx] : seek_by_layer) {
    if (!seek_used.count(digest)) {
      return absl::InvalidArgumentError(absl::StrCat("seek index for ", digest.str(),
                                                     " names no layer of ",
                                                     input.model_manifest.digest.str()));
    }
  }
  for (const auto& [digest, h] : headers_by_tar) {
    if (!headers_used.count(digest)) {
      return absl::InvalidArgumentError(absl::StrCat("tar headers for ", digest.str(),
                                                     " name no tar layer of ",
                                                     input.model_manifest.digest.str()));
    }
  }
  for (const auto& [digest, t] : tensors_by_layer) {
    if (!tensors_used.count(digest)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor index for ", digest.str(),
                                                     " names no layer of ",
                                                     input.model_manifest.digest.str()));
    }
  }
  for (const auto& [digest, t] : tar_tensors_by_tar) {
    if (!tar_tensors_used.count(digest)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor index for the tar ", digest.str(),
                                                     " names no tar layer of ",
                                                     input.model_manifest.digest.str()));
    }
  }
  for (const auto& [digest, idx] : by_digest) {
    if (!used.count(digest)) {
      return absl::InvalidArgumentError(absl::StrCat("chunk index for ", digest.str(),
                                                     " names no layer of ",
                                                     input.model_manifest.digest.str()));
    }
  }

  std::map<Digest, const SeekIndex*> windows_by_layer;
  for (const SeekIndex& w : input.seek_windows) {
    auto sit = seek_by_layer.find(w.layer_digest);
    if (sit == seek_by_layer.end() || w.encoding != SeekEncoding::kGzip ||
        w.diff_id != sit->second->diff_id || w.compressed_size != sit->second->compressed_size ||
        w.uncompressed_size != sit->second->uncompressed_size || w.points.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "seek windows for ", w.layer_digest.str(), " (", w.points.size(),
          " points) do not fit a gzip seek index of ", input.model_manifest.digest.str()));
    }
    windows_by_layer[w.layer_digest] = &w;
  }

  auto build_a = [&](bool with_indexes) -> absl::StatusOr<std::string> {
    TarWriter tar;
    RETURN_IF_ERROR(tar.AddDirectory(kVolumeDir));
    RETURN_IF_ERROR(
        tar.AddFile(kVolumeReadmePath, input.image_compatible
                                           ? ImageCompatibleReadme(info.manifest, info.repository)
                                           : VolumeReadme(info.manifest, info.repository)));
    RETURN_IF_ERROR(tar.AddFile(kVolumeModelJsonPath, SerializeVolumeModelJson(info)));
    if (with_indexes) {
      RETURN_IF_ERROR(tar.AddDirectory(kVolumeChunksDir));
      if (!seek_used.empty()) RETURN_IF_ERROR(tar.AddDirectory(kVolumeSeekDir));
      if (!headers_used.empty()) RETURN_IF_ERROR(tar.AddDirectory(kVolumeTarDir));
      if (!tensors_used.empty()) RETURN_IF_ERROR(tar.AddDirectory(kVolumeTensorsDir));
      for (const auto& [path, bytes] : index_files) RETURN_IF_ERROR(tar.AddFile(path, bytes));
    }
    return tar.Finish();
  };
  // Seek windows, when the inline seek indexes are over kSeekWindowsMinInlineBytes: each gzip
  // layer's windows go to a windows layer of their own, read by range a window at a time, with
  // only their table among the index files; the (thinned) inline seek index stays for readers
  // without windows support, in seek-fallback index layers that readers using the windows skip.
  std::vector<VolumeBlob> windows_layers;
  std::map<std::string, std::string> fallback_files;
  uint64_t inline_seek_bytes = 0;
  for (const VolumeLayerRecord& rec : info.layers) {
    if (!rec.seek_index || !windows_by_layer.count(rec.digest)) continue;
    if (auto it = index_files.find(rec.seek_index->path); it != index_files.end()) {
      inline_seek_bytes += it->second.size();
    }
  }
  if (inline_seek_bytes > kSeekWindowsMinInlineBytes) {
    std::map<Digest, VolumeSeekWindowsRef> windows_built;
    for (VolumeLayerRecord& rec : info.layers) {
      if (!rec.seek_index) continue;
      auto wit = windows_by_layer.find(rec.digest);
      if (wit == windows_by_layer.end()) continue;
      if (auto done = windows_built.find(rec.digest); done != windows_built.end()) {
        rec.seek_index->windows = done->second;  // M lists the same layer twice
        continue;
      }
      const std::string file = SerializeSeekWindows(*wit->second);
      VolumeSeekWindowsRef w;
      w.path = SeekWindowsPath(rec.digest);
      w.table_path = SeekWindowsTablePath(rec.digest);
      w.points = wit->second->points.size();
      w.table_size = SeekWindowsTable::kHeaderSize + SeekWindowsTable::kEntrySize * w.points;
      std::string table = file.substr(0, w.table_size);
      w.digest = Digest::Of(table);
      index_files[w.table_path] = std::move(table);
      if (auto fit = index_files.find(rec.seek_index->path); fit != index_files.end()) {
        fallback_files[fit->first] = std::move(fit->second);
        index_files.erase(fit);
      }
      TarWriter tar;
      RETURN_IF_ERROR(tar.AddDirectory(kVolumeDir));
      RETURN_IF_ERROR(tar.AddDirectory(kVolumeSeekDir));
      RETURN_IF_ERROR(tar.AddFile(w.path, file));
      VolumeBlob layer;
      layer.bytes = tar.Finish();
      ASSIGN_OR_RETURN(std::vector<TarEntry> entries, IndexTarBytes(layer.bytes));
      for (const TarEntry& e : entries) {
        if (e.path == w.path) w.offset = e.data_offset;
      }
      layer.descriptor = DescribeBlob(kOciLayerTarMediaType, layer.bytes);
      layer.descriptor.annotations[std::string(kLabelRole)] = std::string(kVolumeRoleWindows);
      w.layer = layer.descriptor.digest;
      windows_layers.push_back(std::move(layer));
      rec.seek_index->windows = w;
      windows_built[rec.digest] = std::move(w);
      info.revision = std::max(info.revision, kVolumeRevisionSeekWindows);
    }
  }
  ASSIGN_OR_RETURN(std::vector<VolumeBlob> fallback,
                   BuildIndexLayers(info.manifest.digest, fallback_files, true));
  v.index_layers = std::move(windows_layers);
  for (VolumeBlob& b : fallback) v.index_layers.push_back(std::move(b));
  ASSIGN_OR_RETURN(v.layer, build_a(true));
  if (v.layer.size() > kMaxVolumeLayerBytes) {
    ASSIGN_OR_RETURN(v.layer, build_a(false));
    if (v.layer.size() > kMaxVolumeLayerBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("volume layer for ", info.manifest.digest.str(), " would be ",
                       v.layer.size(), " bytes without its chunk indexes, over the 4 MiB limit"));
    }
    ASSIGN_OR_RETURN(std::vector<VolumeBlob> rest,
                     BuildIndexLayers(info.manifest.digest, index_files));
    for (VolumeBlob& b : rest) v.index_layers.push_back(std::move(b));
  }
  v.layer_descriptor = DescribeBlob(kOciLayerTarMediaType, v.layer);
  v.layer_descriptor.annotations = MakeVolumeLabels(info.manifest, info.repository);

  Json config = Json::object();
  config["architecture"] = input.architecture;
  config["os"] = input.os;
  Json rootfs = Json::object();
  rootfs["type"] = "layers";
  Json diff_ids = Json::array();
  // Uncompressed tars all: each diff ID is the layer's digest.
  for (const Descriptor& d : model_layers) diff_ids.push_back(d.digest.str());
  for (const VolumeBlob& l : v.index_layers) diff_ids.push_back(l.descriptor.digest.str());
  diff_ids.push_back(v.layer_descriptor.digest.str());
  rootfs["diff_ids"] = std::move(diff_ids);
  config["rootfs"] = std::move(rootfs);
  v.config = oci_json::Dump(config);
  v.config_descriptor = DescribeBlob(kOciConfigMediaType, v.config);

  v.manifest.schema_version = 2;
  v.manifest.media_type = std::string(kOciManifestMediaType);
  v.manifest.artifact_type = std::string(kVolumeImageArtifactType);
  v.manifest.config = v.config_descriptor;
  v.manifest.layers = model_layers;
  for (const VolumeBlob& l : v.index_layers) v.manifest.layers.push_back(l.descriptor);
  v.manifest.layers.push_back(v.layer_descriptor);
  v.manifest.subject = info.manifest;
  v.manifest.annotations[std::string(kAnnotationVolumeModel)] = info.manifest.digest.str();
  if (input.image_compatible) {
    v.manifest.annotations[std::string(kAnnotationVolumeProfile)] =
        std::string(kVolumeProfileImageCompatible);
  }
  if (!input.created.empty()) {
    v.manifest.annotations[std::string(kAnnotationCreated)] = input.created;
  }
  v.manifest.annotations[std::string(kAnnotationDescription)] =
      absl::StrCat("modelfs volume image for ", info.repository, "@", info.manifest.digest.str());
  v.manifest_json = SerializeManifest(v.manifest);
  v.manifest_descriptor = DescribeBlob(kOciManifestMediaType, v.manifest_json);
  v.manifest_descriptor.artifact_type = std::string(kVolumeImageArtifactType);
  return v;
}

absl::Status AddVolumeLayerFiles(std::string_view tar, VolumeFiles& files) {
  ASSIGN_OR_RETURN(std::vector<TarEntry> entries, IndexTarBytes(tar));
  for (const TarEntry& e : entries) {  // the last entry of a path wins
    if (e.type == TarEntryType::kFile) {
      files[e.path] = tar.substr(e.data_offset, e.size);
    } else {
      files.erase(e.path);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<VolumeLayerContents> ParseVolumeLayer(std::string_view tar) {
  return ParseVolumeLayers(tar, {});
}

absl::StatusOr<VolumeLayerContents> ParseVolumeLayers(
    std::string_view a, const std::vector<std::string>& index_layers) {
  VolumeFiles files;
  for (const std::string& layer : index_layers) RETURN_IF_ERROR(AddVolumeLayerFiles(layer, files));
  RETURN_IF_ERROR(AddVolumeLayerFiles(a, files));
  return ParseVolumeFiles(files);
}

absl::StatusOr<VolumeLayerContents> ParseVolumeFiles(const VolumeFiles& files) {
  auto model_it = files.find(std::string(kVolumeModelJsonPath));
  if (model_it == files.end()) {
    return absl::InvalidArgumentError("volume layer: no .modelfs/model.json");
  }
  VolumeLayerContents out;
  ASSIGN_OR_RETURN(out.model, ParseVolumeModelJson(model_it->second));
  // The file model.json names at `path` for `layer`, checked against its digest there.
  auto file_of = [&](std::string_view what, const std::string& path, const Digest& digest,
                     const Digest& layer) -> absl::StatusOr<std::string_view> {
    auto it = files.find(path);
    if (it == files.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("volume layer: ", AV(what), " ", path, " for ", layer.str(), " is missing"));
    }
    const Digest got = Digest::Of(it->second);
    if (got != digest) {
      return absl::DataLossError(absl::StrCat("volume layer: ", AV(what), " ", path, " has ",
                                              got.str(), ", model.json says ", digest.str()));
    }
    return it->second;
  };
  for (const VolumeLayerRecord& l : out.model.layers) {
    if (!l.tar_headers.has_value() || out.tar_headers.count(l.digest)) continue;
    const VolumeTarHeadersRef& ref = *l.tar_headers;
    ASSIGN_OR_RETURN(std::string_view bytes,
                     file_of("tar header file", ref.path, ref.digest, l.digest));
    ASSIGN_OR_RETURN(TarHeaders h, ParseTarHeaders(bytes));
    const Digest& want = l.seek_index ? l.seek_index->diff_id : l.digest;
    const uint64_t want_size = l.seek_index ? l.seek_index->uncompressed_size : l.size;
    if (h.tar_digest != want || h.tar_size != want_size || h.entries != ref.entries) {
      return absl::InvalidArgumentError(absl::StrCat(
          "volume layer: tar header file ", ref.path, " describes ", h.tar_digest.str(), " (",
          h.tar_size, " bytes, ", h.entries, " entries) but model.json says ", want.str(), " (",
          want_size, " bytes, ", ref.entries, " entries)"));
    }
    out.tar_headers.emplace(l.digest, std::move(h));
  }
  for (const VolumeLayerRecord& l : out.model.layers) {
    if (!l.tensor_index.has_value() || out.tensor_indexes.count(l.digest)) continue;
    const VolumeTensorIndexRef& ref = *l.tensor_index;
    ASSIGN_OR_RETURN(std::string_view bytes,
                     file_of("tensor index", ref.path, ref.digest, l.digest));
    ASSIGN_OR_RETURN(TensorIndex t, ParseTensorIndex(bytes));
    if (t.layer_digest != l.digest || t.layer_size != l.size || t.tensors.size() != ref.tensors) {
      return absl::InvalidArgumentError(absl::StrCat(
          "volume layer: tensor index ", ref.path, " describes ", t.layer_digest.str(), " (",
          t.layer_size, " bytes, ", t.tensors.size(), " tensors) but model.json says ",
          l.digest.str(), " (", l.size, " bytes, ", ref.tensors, " tensors)"));
    }
    out.tensor_indexes.emplace(l.digest, std::move(t));
  }
  for (const VolumeLayerRecord& l : out.model.layers) {
    if (!l.tar_tensor_indexes || out.tar_tensor_indexes.count(l.digest)) continue;
    // The tar the indexes describe, as for the tar headers.
    const Digest& want = l.seek_index ? l.seek_index->diff_id : l.digest;
    const uint64_t want_size = l.seek_index ? l.seek_index->uncompressed_size : l.size;
    std::vector<TarTensorIndex> files;
    for (const VolumeTensorIndexRef& ref : *l.tar_tensor_indexes) {
      ASSIGN_OR_RETURN(std::string_view bytes,
                       file_of("tensor index", ref.path, ref.digest, l.digest));
      ASSIGN_OR_RETURN(TensorIndex t, ParseTensorIndex(bytes));
      if (t.layer_digest != want || t.layer_size != want_size || t.tensors.size() != ref.tensors) {
        return absl::InvalidArgumentError(
            absl::StrCat("volume layer: tensor index ", ref.path, " of ", ref.file, " describes ",
                         t.layer_digest.str(), " (", t.layer_size, " bytes, ", t.tensors.size(),
                         " tensors) but model.json says ", want.str(), " (", want_size, " bytes, ",
                         ref.tensors, " tensors)"));
      }
      files.push_back(TarTensorIndex{ref.file, std::move(t)});
    }
    out.tar_tensor_indexes.emplace(l.digest, std::move(files));
  }
  for (const VolumeLayerRecord& l : out.model.layers) {
    if (!l.chunk_index.has_value() || out.chunk_indexes.count(l.digest)) continue;
    const VolumeChunkIndexRef& ref = *l.chunk_index;
    ASSIGN_OR_RETURN(std::string_view bytes,
                     file_of("chunk index", ref.path, ref.digest, l.digest));
    ASSIGN_OR_RETURN(ChunkIndex idx, ParseChunkIndex(bytes));
    // An index of the uncompressed bytes describes the diffId and its size.
    const Digest& want = l.seek_index ? l.seek_index->diff_id : l.digest;
    const uint64_t want_size = l.seek_index ? l.seek_index->uncompressed_size : l.size;
    if (idx.content != ref.content) {
      return absl::InvalidArgumentError(
          absl::StrCat("volume layer: chunk index ", ref.path, " covers content ",
                       static_cast<uint32_t>(idx.content), " but model.json says ",
                       static_cast<uint32_t>(ref.content), " (1: the uncompressed bytes)"));
    }
    if (idx.blob_digest != want || idx.blob_size != want_size || idx.chunk_size != ref.chunk_size ||
        idx.algorithm != ref.algorithm) {
      return absl::InvalidArgumentError(
          absl::StrCat("volume layer: chunk index ", ref.path, " describes ", idx.blob_digest.str(),
                       " (", idx.blob_size, " bytes, chunk ", idx.chunk_size, ", ",
                       std::string(ChunkDigestName(idx.algorithm)), ") but model.json says ",
                       want.str(), " (", want_size, " bytes, chunk ", ref.chunk_size, ", ",
                       std::string(ChunkDigestName(ref.algorithm)), ")"));
    }
    if (l.seek_index && l.seek_index->windows) {
      const VolumeSeekIndexRef& sref = *l.seek_index;
      const VolumeSeekWindowsRef& wref = *sref.windows;
      ASSIGN_OR_RETURN(std::string_view tbytes,
                       file_of("seek windows table", wref.table_path, wref.digest, l.digest));
      ASSIGN_OR_RETURN(SeekWindowsTable t, ParseSeekWindowsTable(tbytes));
      const SeekIndex& ti = t.index;
      if (tbytes.size() != t.table_size() || t.table_size() != wref.table_size ||
          ti.layer_digest != l.digest || ti.compressed_size != l.size ||
          ti.diff_id != sref.diff_id || ti.uncompressed_size != sref.uncompressed_size ||
          ti.points.size() != wref.points) {
        return absl::InvalidArgumentError(absl::StrCat(
            "volume layer: seek windows table ", wref.table_path, " describes ",
            ti.layer_digest.str(), " (", ti.compressed_size, " bytes, diffId ", ti.diff_id.str(),
            ", ", ti.uncompressed_size, " bytes uncompressed, ", ti.points.size(), " points, ",
            tbytes.size(), " bytes of table) but model.json says ", l.digest.str(), " (", l.size,
            " bytes, diffId ", sref.diff_id.str(), ", ", sref.uncompressed_size,
            " bytes uncompressed, ", wref.points, " points, ", wref.table_size,
            " bytes of table)"));
      }
      out.seek_windows.emplace(l.digest, std::move(t));
    }
    // A layer with windows may come without its inline seek index: a reader using the windows
    // does not fetch the seek-fallback layers that hold it.
    const bool inline_seek =
        l.seek_index && (!l.seek_index->windows || files.find(l.seek_index->path) != files.end());
    if (inline_seek) {
      const VolumeSeekIndexRef& sref = *l.seek_index;
      ASSIGN_OR_RETURN(std::string_view sbytes,
                       file_of("seek index", sref.path, sref.digest, l.digest));
      ASSIGN_OR_RETURN(SeekIndex seek, ParseSeekIndex(sbytes));
      if (seek.layer_digest != l.digest || seek.compressed_size != l.size ||
          seek.encoding != sref.encoding || seek.diff_id != sref.diff_id ||
          seek.uncompressed_size != sref.uncompressed_size || seek.points.size() != sref.points) {
        return absl::InvalidArgumentError(absl::StrCat(
            "volume layer: seek index ", sref.path, " describes ", seek.layer_digest.str(), " (",
            seek.compressed_size, " bytes, ", std::string(SeekEncodingName(seek.encoding)),
            ", diffId ", seek.diff_id.str(), ", ", seek.uncompressed_size, " bytes uncompressed, ",
            seek.points.size(), " points) but model.json says ", l.digest.str(), " (", l.size,
            " bytes, ", std::string(SeekEncodingName(sref.encoding)), ", diffId ",
            sref.diff_id.str(), ", ", sref.uncompressed_size, " bytes uncompressed, ", sref.points,
            " points)"));
      }
      out.seek_indexes.emplace(l.digest, std::move(seek));
    }
    out.chunk_indexes.emplace(l.digest, std::move(idx));
  }
  return out;
}

uint64_t VolumeLayerBytesFor(const std::vector<uint64_t>& layer_sizes, uint64_t chunk_size,
                             ChunkDigestAlgorithm algorithm) {
  // README, model.json's fixed part and the tar's directories and end blocks.
  uint64_t bytes = 16 << 10;
  for (uint64_t size : layer_sizes) {
    const uint64_t index = SerializedChunkIndexSize(size, chunk_size, algorithm);
    // One tar header and the padding of the index file, and the layer's model.json entry (a
    // path is at most a few hundred bytes).
    bytes += 512 + (index + 511) / 512 * 512 + 1024;
  }
  return bytes;
}

uint64_t VolumeIndexBytesFor(const std::vector<uint64_t>& layer_sizes, uint64_t chunk_size,
                             ChunkDigestAlgorithm algorithm) {
  uint64_t bytes = 0;
  for (uint64_t size : layer_sizes) bytes += SerializedChunkIndexSize(size, chunk_size, algorithm);
  return bytes;
}

absl::StatusOr<uint64_t> ChunkSizeForLayers(const std::vector<uint64_t>& layer_sizes,
                                            ChunkDigestAlgorithm algorithm, uint64_t at_least) {
  const uint64_t from = at_least == 0 ? ChunkIndex::kDefaultChunkSize : at_least;
  if (!ChunkIndex::ValidChunkSize(from)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk size ", from, " is not a power of two from 65536 (64 KiB) to 67108864 (64 MiB)"));
  }
  const uint64_t budget = at_least == 0 ? kAutoVolumeIndexBytes : kMaxVolumeIndexBytes;
  for (uint64_t cs = from; cs <= ChunkIndex::kMaxChunkSize; cs *= 2) {
    bool each_fits = true;
    for (uint64_t size : layer_sizes) {
      each_fits = each_fits && SerializedChunkIndexSize(size, cs, algorithm) <= kMaxIndexLayerBytes;
    }
    if (each_fits && VolumeIndexBytesFor(layer_sizes, cs, algorithm) <= budget) return cs;
  }
  uint64_t total = 0;
  for (uint64_t size : layer_sizes) total += size;
  return absl::InvalidArgumentError(absl::StrCat(
      "a model of ", total, " bytes in ", layer_sizes.size(), " layers needs chunk indexes over ",
      budget, " bytes (or one over ", kMaxIndexLayerBytes, ") even at 64 MiB chunks"));
}

bool IsVolumeImageManifest(const Manifest& v) {
  if (v.artifact_type == kVolumeImageArtifactType) return true;
  return v.layers.size() == 1 && v.layers[0].Annotation(kLabelModel) != nullptr;
}

bool IsImageCompatibleVolume(const Manifest& v) {
  for (const Descriptor& l : v.layers) {
    const std::string* role = l.Annotation(kLabelRole);
    if (role != nullptr && *role == kVolumeRoleModel) return true;
  }
  return false;
}

absl::StatusOr<size_t> VolumeLayerIndex(const Manifest& v) {
  std::optional<size_t> found;
  for (size_t i = 0; i < v.layers.size(); ++i) {
    if (v.layers[i].Annotation(kLabelModel) == nullptr) continue;
    if (found) {
      return absl::InvalidArgumentError(absl::StrCat("volume image has two layers annotated ",
                                                     AV(kLabelModel), " (", *found, " and ", i,
                                                     ")"));
    }
    found = i;
  }
  if (!found) {
    return absl::InvalidArgumentError(
        absl::StrCat("volume image has no layer annotated ", AV(kLabelModel)));
  }
  return *found;
}

absl::StatusOr<std::vector<size_t>> VolumeIndexLayerIndexes(const Manifest& v) {
  ASSIGN_OR_RETURN(const size_t a, VolumeLayerIndex(v));
  std::vector<size_t> out;
  for (size_t i = 0; i < v.layers.size(); ++i) {
    const std::string* role = v.layers[i].Annotation(kLabelRole);
    if (role == nullptr || *role != kVolumeRoleIndex) continue;
    if (i > a) {
      return absl::InvalidArgumentError(absl::StrCat("volume image: index layer ", i, " (",
                                                     v.layers[i].digest.str(), ") is above A"));
    }
    if (v.layers[i].media_type != kOciLayerTarMediaType) {
      return absl::InvalidArgumentError(absl::StrCat(
          "volume image: index layer ", i, " (", v.layers[i].digest.str(), ") has media type ",
          v.layers[i].media_type, ", not ", AV(kOciLayerTarMediaType)));
    }
    out.push_back(i);
  }
  return out;
}

absl::StatusOr<size_t> CheckVolumeLowerBinding(const Manifest& v,
                                               const std::vector<Digest>& diff_ids,
                                               std::string_view parent, std::string_view target) {
  absl::StatusOr<size_t> a = VolumeLayerIndex(v);
  if (!a.ok()) return absl::FailedPreconditionError(a.status().message());
  if (diff_ids.size() != v.layers.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "image config lists ", diff_ids.size(), " diff_ids for ", v.layers.size(), " layers"));
  }
  std::vector<Digest> chain;
  for (size_t i = 0; i < *a; ++i) {
    chain.push_back(diff_ids[i]);
    if (ChainIdOf(chain).str() != target) continue;
    const Descriptor& l = v.layers[i];
    if (l.Annotation(kLabelRole) == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("layer ", i, " (", l.digest.str(), ") carries no ", AV(kLabelRole)));
    }
    if (l.media_type != kOciLayerTarMediaType || diff_ids[i] != l.digest) {
      return absl::FailedPreconditionError(
          absl::StrCat("layer ", i, " (", l.digest.str(), ", ", l.media_type,
                       ") is not an uncompressed tar whose diff ID the config names"));
    }
    chain.pop_back();
    const std::string want_parent = chain.empty() ? "" : ChainIdOf(chain).str();
    const bool parent_ok = want_parent.empty() ? parent.empty()
                                               : (parent == want_parent ||
                                                  absl::EndsWith(AV(parent), "/" + want_parent));
    if (!parent_ok) {
      return absl::FailedPreconditionError(absl::StrCat("parent snapshot \"", AV(parent),
                                                        "\" is not the chain ID below layer ", i,
                                                        " (\"", want_parent, "\")"));
    }
    return i;
  }
  return absl::FailedPreconditionError(absl::StrCat("target snapshot \"", AV(target),
                                                    "\" is the chain ID of no layer of V below A"));
}

Digest ChainIdOf(const std::vector<Digest>& diff_ids) {
  Digest chain = diff_ids.at(0);
  for (size_t i = 1; i < diff_ids.size(); ++i) {
    chain = Digest::Of(absl::StrCat(chain.str(), " ", diff_ids[i].str()));
  }
  return chain;
}

absl::StatusOr<std::vector<Digest>> ParseImageConfigDiffIds(std::string_view config_json) {
  Json j = Json::parse(config_json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::InvalidArgumentError("image config is not a JSON object");
  auto rootfs = j.find("rootfs");
  if (rootfs == j.end() || !rootfs->is_object()) {
    return absl::InvalidArgumentError("image config has no rootfs object");
  }
  auto ids = rootfs->find("diff_ids");
  if (ids == rootfs->end() || !ids->is_array()) {
    return absl::InvalidArgumentError("image config has no rootfs.diff_ids array");
  }
  std::vector<Digest> out;
  for (const Json& id : *ids) {
    if (!id.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("image config rootfs.diff_ids[", out.size(), "] is not a string"));
    }
    absl::StatusOr<Digest> d = Digest::Parse(id.get<std::string>());
    if (!d.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("image config rootfs.diff_ids[", out.size(), "]: ", d.status().message()));
    }
    out.push_back(*std::move(d));
  }
  return out;
}

absl::Status CheckVolumeSnapshotBinding(const Manifest& v, const std::vector<Digest>& diff_ids,
                                        std::string_view parent, std::string_view target) {
  absl::StatusOr<size_t> index = VolumeLayerIndex(v);
  if (!index.ok()) return absl::FailedPreconditionError(index.status().message());
  const size_t i = *index;
  const Descriptor& a = v.layers[i];
  if (a.media_type != kOciLayerTarMediaType) {
    return absl::FailedPreconditionError(
        absl::StrCat("volume layer ", a.digest.str(), " has media type ", a.media_type, ", not ",
                     AV(kOciLayerTarMediaType), " (its diff ID would not be its digest)"));
  }
  if (diff_ids.size() != v.layers.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "image config lists ", diff_ids.size(), " diff_ids for ", v.layers.size(), " layers"));
  }
  if (diff_ids[i] != a.digest) {
    return absl::FailedPreconditionError(absl::StrCat("image config rootfs.diff_ids[", i, "] is ",
                                                      diff_ids[i].str(), ", not the volume layer ",
                                                      a.digest.str()));
  }
  std::vector<Digest> below(diff_ids.begin(), diff_ids.begin() + i);
  const std::string want_parent = below.empty() ? "" : ChainIdOf(below).str();
  // containerd's metadata store names a backend snapshot "<namespace>/<id>/<its own name>", and
  // its own name for a committed layer is the chain ID.
  const bool parent_ok = want_parent.empty() ? parent.empty()
                                             : (parent == want_parent ||
                                                absl::EndsWith(AV(parent), "/" + want_parent));
  if (!parent_ok) {
    return absl::FailedPreconditionError(
        absl::StrCat("parent snapshot \"", AV(parent),
                     "\" is not the chain ID below the volume layer (\"", want_parent, "\")"));
  }
  below.push_back(a.digest);
  const std::string want_target = ChainIdOf(below).str();
  if (target != want_target) {
    return absl::FailedPreconditionError(absl::StrCat("target snapshot \"", AV(target),
                                                      "\" is not the chain ID of volume layer ",
                                                      a.digest.str(), " (", want_target, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckVolumeMatchesModel(const VolumeModelInfo& info, const Descriptor& model_manifest,
                                     const Manifest& model) {
  if (info.manifest.digest != model_manifest.digest) {
    return absl::DataLossError(absl::StrCat("model.json names ", info.manifest.digest.str(),
                                            " but the model is ", model_manifest.digest.str()));
  }
  if (info.layers.size() != model.layers.size()) {
    return absl::DataLossError(absl::StrCat("model.json lists ", info.layers.size(), " layers but ",
                                            model_manifest.digest.str(), " has ",
                                            model.layers.size()));
  }
  for (size_t i = 0; i < info.layers.size(); ++i) {
    const VolumeLayerRecord& a = info.layers[i];
    const Descriptor& b = model.layers[i];
    if (a.digest != b.digest || a.size != b.size || a.media_type != b.media_type) {
      return absl::DataLossError(absl::StrCat("model.json layer ", i, " is ", a.digest.str(), " (",
                                              a.size, " bytes, ", a.media_type, ") but ",
                                              model_manifest.digest.str(), " has ", b.digest.str(),
                                              " (", b.size, " bytes, ", b.media_type, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace modelfs
