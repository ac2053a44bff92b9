// Building the volume image V for a model M (BuildVolumeImage): layer A with model.json, the
// README and the index files; the index layers and windows layers below it; V's config and
// manifest. Also the sizing of chunk indexes so V stays within its limits (ChunkSizeForLayers).
// model.json itself is in volume_model_json.cc, the snapshotter's binding checks in
// volume_binding.cc.
#include "core/oci/volume_image.h"

#include <algorithm>
#include <set>

#include "absl/status/status.h"
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
      if (!layer.encoding.compressed() || seek.encoding != layer.encoding ||
          seek.compressed_size != rec.size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "seek index for ", rec.digest.str(), " (", std::string(seek.encoding.seek_name()), ", ",
            seek.compressed_size, " bytes) does not fit the layer (", rec.media_type, ", ",
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
      if (!layer.encoding.tar() || h.tar_size != indexed_size) {
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
      if (!layer.encoding.tar() || tit->second->tar_size != indexed_size) {
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
    if (sit == seek_by_layer.end() || !w.encoding.codec().windowed_points ||
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

}  // namespace modelfs
