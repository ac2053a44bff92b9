// model.json (SerializeVolumeModelJson, ParseVolumeModelJson) and reading V's `.modelfs/` files
// back, each index file checked against what model.json says of it (ParseVolumeFiles).
#include "core/oci/volume_image.h"

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
      sj["encoding"] = std::string(l.seek_index->encoding.seek_name());
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
      const LayerCodec* codec = FindLayerCodecBySeekName(encoding);
      if (codec == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(sw, ".encoding: \"", encoding, "\" is not ",
                                                       CompressedCodecList(/*with_ids=*/false)));
      }
      ref.encoding = LayerEncoding(*codec);
      ASSIGN_OR_RETURN(ref.diff_id, oci_json::GetDigest(*sj, "diffId", sw));
      ASSIGN_OR_RETURN(std::optional<uint64_t> us,
                       oci_json::GetSize(*sj, "uncompressedSize", sw, true));
      ref.uncompressed_size = *us;
      ASSIGN_OR_RETURN(std::optional<uint64_t> points, oci_json::GetSize(*sj, "points", sw, true));
      ref.points = *points;
      const std::optional<LayerMediaTypeInfo> info = ClassifyLayerMediaType(l.media_type);
      if (!info || info->encoding != ref.encoding) {
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
        if (!ref.encoding.codec().windowed_points) {
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
      if (!info || !info->encoding.tar() || (info->encoding.compressed() && !l.seek_index)) {
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
      if (!info || !info->encoding.tar() || (info->encoding.compressed() && !l.seek_index)) {
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
            seek.compressed_size, " bytes, ", std::string(seek.encoding.seek_name()), ", diffId ",
            seek.diff_id.str(), ", ", seek.uncompressed_size, " bytes uncompressed, ",
            seek.points.size(), " points) but model.json says ", l.digest.str(), " (", l.size,
            " bytes, ", std::string(sref.encoding.seek_name()), ", diffId ", sref.diff_id.str(),
            ", ", sref.uncompressed_size, " bytes uncompressed, ", sref.points, " points)"));
      }
      out.seek_indexes.emplace(l.digest, std::move(seek));
    }
    out.chunk_indexes.emplace(l.digest, std::move(idx));
  }
  return out;
}

}  // namespace modelfs
