#include "core/publish/tensor_listing.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/formats/gguf.h"
#include "core/formats/model_inspect.h"
#include "core/formats/safetensors.h"
#include "core/oci/layer_decoder.h"
#include "core/oci/volume_image.h"
#include "core/publish/registry_range_reader.h"
#include "core/publish/tar_tensor_indexer.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

// The bytes [offset, offset + size) of another reader.
class SliceReader final : public RangeReader {
 public:
  SliceReader(RangeReader& base, uint64_t offset, uint64_t size, std::string name)
      : base_(base), offset_(offset), size_(size), name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  absl::StatusOr<uint64_t> Size() override { return size_; }
  absl::StatusOr<std::string> ReadAt(uint64_t offset, uint64_t length) override {
    if (offset > size_ || length > size_ - offset) {
      return absl::OutOfRangeError(absl::StrCat(name_, ": read of ", length, " bytes at ", offset,
                                                " past the end (", size_, ")"));
    }
    return base_.ReadAt(offset_ + offset, length);
  }
  RangeReadStats stats() const override { return base_.stats(); }

 private:
  RangeReader& base_;
  const uint64_t offset_, size_;
  const std::string name_;
};

bool IsWeightPath(const std::string& path) {
  const SniffedFormat f = SniffFormat(path, "");
  return f == SniffedFormat::kSafetensors || f == SniffedFormat::kGguf;
}

// The fallback for a tar layer without tensor indexes: the layer streamed once (decoded when
// compressed), checked against its digest, its weight members followed and their tensors
// hashed (TarTensorIndexer). nullopt when the tar cannot be followed (`stopped` says why).
absl::StatusOr<std::optional<TarTensorIndexes>> HashTarLayer(
    RegistryClient& client, const std::string& repository, const ModelLayer& layer,
    const std::string& name, uint64_t* streamed, std::string* stopped) {
  const Descriptor& d = layer.descriptor;
  const std::string where = absl::StrCat("layer ", d.digest.str());
  TarTensorIndexer ix(where);
  std::unique_ptr<LayerDecoder> decoder;
  if (IsCompressedEncoding(layer.encoding)) {
    ASSIGN_OR_RETURN(decoder, LayerDecoder::Create(layer.encoding, where));
  }
  // A member's error is reported once the layer verified (the bytes are then the publisher's).
  absl::Status members = absl::OkStatus();
  auto follow = [&](std::string_view plain) {
    if (members.ok()) members = ix.Feed(plain);
    return absl::OkStatus();
  };
  Sha256 whole;
  uint64_t got = 0;
  RETURN_IF_ERROR(client.GetBlob(repository, d.digest, [&](std::string_view piece) {
    got += piece.size();
    if (got > d.size) {
      return absl::DataLossError(
          absl::StrCat(where, " (", name, ") is longer than its ", d.size, " bytes"));
    }
    whole.Update(piece);
    if (decoder) return decoder->Feed(piece, follow);
    return follow(piece);
  }));
  const Digest digest = whole.Finish();
  if (digest != d.digest || got != d.size) {
    return absl::DataLossError(absl::StrCat(where, " (", name, ") failed verification: got ",
                                            digest.str(), ", ", got, " bytes"));
  }
  if (decoder) RETURN_IF_ERROR(decoder->Finish());
  RETURN_IF_ERROR(members);
  *streamed += got;
  std::optional<TarTensorIndexes> out = ix.Finish(d.digest);
  *stopped = ix.stopped();
  return out;
}

}  // namespace

absl::StatusOr<std::optional<TensorSkeleton>> ReadTensorSkeleton(RangeReader& file,
                                                                 const std::string& path,
                                                                 const Digest& layer,
                                                                 uint64_t layer_size,
                                                                 uint64_t file_offset) {
  const SniffedFormat f = SniffFormat(path, "");
  if (f != SniffedFormat::kSafetensors && f != SniffedFormat::kGguf) {
    return std::optional<TensorSkeleton>();
  }
  ASSIGN_OR_RETURN(const uint64_t file_size, file.Size());
  TensorSkeleton s;
  s.index.layer_digest = layer;
  s.index.layer_size = layer_size;
  s.index.file_offset = file_offset;
  s.index.file_size = file_size;
  uint64_t header_size = 0;
  if (f == SniffedFormat::kSafetensors) {
    ASSIGN_OR_RETURN(SafetensorsFile st, ParseSafetensors(file));
    s.index.format = TensorFileFormat::kSafetensors;
    header_size = st.data_start;
    for (const SafetensorsTensor& t : st.tensors) {
      s.index.tensors.push_back(
          TensorEntry{t.name, t.dtype, t.shape, st.data_start + t.begin, t.size(), {}});
    }
  } else {
    ASSIGN_OR_RETURN(GgufFile g, ParseGguf(file));
    s.index.format = TensorFileFormat::kGguf;
    header_size = g.data_offset;
    for (const GgufTensor& t : g.tensors) {
      s.index.tensors.push_back(TensorEntry{t.name, t.type->name, t.dims, t.offset, t.nbytes, {}});
    }
  }
  for (const TensorEntry& t : s.index.tensors) {
    // What ParseTensorIndex refuses is never written (a GGUF name need not be UTF-8).
    if (t.name.size() <= 0xffff && !ValidTensorName(t.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": a tensor name is empty or not UTF-8 (\"",
                       absl::CEscape(t.name.substr(0, 200)), "\"); a tensor index cannot hold it"));
    }
    if (t.name.size() > 0xffff || t.dtype.size() > 0xff || t.shape.size() > TensorIndex::kMaxRank) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor ", t.name.substr(0, 200),
                       " has a name, dtype or rank a tensor index cannot hold (65535, 255, 8)"));
    }
  }
  ASSIGN_OR_RETURN(s.header, file.ReadAt(0, std::min(header_size, file_size)));
  return std::optional<TensorSkeleton>(std::move(s));
}

std::string_view TensorSourceName(TensorSource source) {
  switch (source) {
    case TensorSource::kIndex:
      return "index";
    case TensorSource::kSharedLayer:
      return "shared-layer";
    case TensorSource::kHeaderHashed:
      return "headers+hashed";
  }
  return "?";
}

absl::StatusOr<ModelTensors> ListModelTensors(RegistryClient& client, const ResolvedModel& rm,
                                              const ModelTensors* shared) {
  ModelTensors out;
  out.reference = rm.ref.String();
  out.model = rm.model_descriptor.digest;
  if (rm.volume_descriptor) out.volume = rm.volume_descriptor->digest;
  std::map<Digest, TensorIndex> indexes;
  std::map<Digest, Digest> index_digests;
  std::map<Digest, std::vector<TarTensorIndex>> tar_indexes;
  std::map<std::pair<Digest, std::string>, Digest> tar_index_digests;  // (layer, file)
  if (rm.volume_descriptor) {
    // Each index file is checked against model.json's digest here (kDataLoss otherwise).
    ASSIGN_OR_RETURN(VolumeLayerContents contents,
                     ParseVolumeLayers(rm.volume_layer_tar, rm.volume_index_layer_tars));
    indexes = std::move(contents.tensor_indexes);
    tar_indexes = std::move(contents.tar_tensor_indexes);
    for (const VolumeLayerRecord& l : contents.model.layers) {
      if (l.tensor_index) index_digests[l.digest] = l.tensor_index->digest;
      if (l.tar_tensor_indexes) {
        for (const VolumeTensorIndexRef& r : *l.tar_tensor_indexes) {
          tar_index_digests[{l.digest, r.file}] = r.digest;
        }
      }
    }
  }
  std::map<Digest, std::vector<const ModelTensorFile*>> other;
  if (shared != nullptr) {
    for (const ModelTensorFile& f : shared->files) other[f.layer].push_back(&f);
  }
  for (const ModelLayer& layer : rm.layers) {
    const Descriptor& d = layer.descriptor;
    const std::string name = layer.path.empty() ? d.digest.str() : layer.path;
    ModelTensorFile f;
    f.path = name;
    f.layer = d.digest;
    if (auto it = indexes.find(d.digest); it != indexes.end()) {
      f.source = TensorSource::kIndex;
      f.index = it->second;
      f.index_digest = index_digests[d.digest];
      out.listed_layers.insert(d.digest);
      out.files.push_back(std::move(f));
      continue;
    }
    if (layer.encoding != LayerEncoding::kRaw) {
      // A tar layer: its weight files from V's indexes, else from the other side of the diff,
      // else from the layer streamed once.
      std::vector<ModelTensorFile> files;
      if (auto it = tar_indexes.find(d.digest); it != tar_indexes.end()) {
        for (TarTensorIndex& t : it->second) {
          ModelTensorFile tf{t.file, d.digest, TensorSource::kIndex,
                             tar_index_digests[{d.digest, t.file}], std::move(t.index)};
          files.push_back(std::move(tf));
        }
      } else if (shared != nullptr && shared->listed_layers.count(d.digest)) {
        for (const ModelTensorFile* o : other[d.digest]) {
          files.push_back({o->path, d.digest, TensorSource::kSharedLayer, std::nullopt, o->index});
        }
      } else {
        std::string stopped;
        ASSIGN_OR_RETURN(
            std::optional<TarTensorIndexes> t,
            HashTarLayer(client, rm.repository, layer, name, &out.hashed_bytes, &stopped));
        if (!t) {
          out.skipped.push_back(absl::StrCat(name, " (", stopped, ")"));
          continue;
        }
        for (TarTensorIndex& x : t->files) {
          files.push_back(
              {x.file, d.digest, TensorSource::kHeaderHashed, std::nullopt, std::move(x.index)});
        }
      }
      out.listed_layers.insert(d.digest);
      for (ModelTensorFile& x : files) out.files.push_back(std::move(x));
      continue;
    }
    if (layer.path.empty() || !IsWeightPath(layer.path)) continue;
    if (auto it = other.find(d.digest); it != other.end() && !it->second.empty()) {
      f.source = TensorSource::kSharedLayer;
      f.index = it->second.front()->index;
      out.listed_layers.insert(d.digest);
      out.files.push_back(std::move(f));
      continue;
    }
    // Fallback: the header by range, then the layer streamed once, checked against its
    // digest, every tensor hashed as it passes.
    RegistryRangeReader blob(client, rm.repository, d,
                             absl::StrCat(name, " (", d.digest.str(), ")"));
    ASSIGN_OR_RETURN(std::optional<TensorSkeleton> skeleton,
                     ReadTensorSkeleton(blob, layer.path, d.digest, d.size, 0));
    if (!skeleton) continue;
    ASSIGN_OR_RETURN(TensorIndexBuilder b, TensorIndexBuilder::Create(std::move(skeleton->index),
                                                                      std::move(skeleton->header)));
    Sha256 whole;
    uint64_t got = 0;
    RETURN_IF_ERROR(client.GetBlob(rm.repository, d.digest, [&](std::string_view piece) {
      got += piece.size();
      if (got > d.size) {
        return absl::DataLossError(absl::StrCat("layer ", d.digest.str(), " (", name,
                                                ") is longer than its ", d.size, " bytes"));
      }
      whole.Update(piece);
      b.Update(piece);
      return absl::OkStatus();
    }));
    const Digest digest = whole.Finish();
    if (digest != d.digest || got != d.size) {
      return absl::DataLossError(absl::StrCat("layer ", d.digest.str(), " (", name,
                                              ") failed verification: got ", digest.str(), ", ",
                                              got, " bytes"));
    }
    out.hashed_bytes += got;
    ASSIGN_OR_RETURN(f.index, b.Finish());
    f.source = TensorSource::kHeaderHashed;
    out.listed_layers.insert(d.digest);
    out.files.push_back(std::move(f));
  }
  return out;
}

TensorDiff DiffModelTensors(const ModelTensors& a, const ModelTensors& b) {
  auto views = [](const ModelTensors& m) {
    std::vector<TensorFileView> v;
    for (const ModelTensorFile& f : m.files) v.push_back({f.path, f.index.tensors});
    return v;
  };
  return DiffTensors(views(a), views(b));
}

namespace {

nlohmann::json TensorToJson(const TensorEntry& t) {
  return {{"name", t.name},     {"dtype", t.dtype},
          {"shape", t.shape},   {"offset", t.offset},
          {"length", t.length}, {"digest", "blake3:" + TensorHashHex(t.hash)}};
}

}  // namespace

nlohmann::json ModelTensorsToJson(const ModelTensors& m) {
  nlohmann::json files = nlohmann::json::array();
  uint64_t count = 0;
  for (const ModelTensorFile& f : m.files) {
    nlohmann::json tensors = nlohmann::json::array();
    for (const TensorEntry& t : f.index.tensors) tensors.push_back(TensorToJson(t));
    count += f.index.tensors.size();
    files.push_back({{"path", f.path},
                     {"layer", f.layer.str()},
                     {"format", std::string(TensorFileFormatName(f.index.format))},
                     {"source", std::string(TensorSourceName(f.source))},
                     {"index_digest", f.index_digest ? nlohmann::json(f.index_digest->str())
                                                     : nlohmann::json(nullptr)},
                     {"tensors", std::move(tensors)}});
  }
  return {{"reference", m.reference},
          {"model", m.model.str()},
          {"volume", m.volume ? nlohmann::json(m.volume->str()) : nlohmann::json(nullptr)},
          {"files", std::move(files)},
          {"tensors", count},
          {"skipped", m.skipped},
          {"hashed_bytes", m.hashed_bytes}};
}

nlohmann::json TensorDiffToJson(const TensorDiff& d) {
  nlohmann::json files = nlohmann::json::array();
  for (const TensorFileDiff& f : d.files) {
    nlohmann::json changed = nlohmann::json::array();
    for (const TensorChange& c : f.changed) {
      nlohmann::json what = nlohmann::json::array();
      if (c.dtype) what.push_back("dtype");
      if (c.shape) what.push_back("shape");
      if (c.digest) what.push_back("digest");
      changed.push_back(
          {{"name", c.name}, {"what", what}, {"a", TensorToJson(c.a)}, {"b", TensorToJson(c.b)}});
    }
    files.push_back({{"path", f.path},
                     {"in_a", f.in_a},
                     {"in_b", f.in_b},
                     {"added", f.added},
                     {"removed", f.removed},
                     {"changed", std::move(changed)},
                     {"identical", f.identical.size()}});
  }
  return {{"files", std::move(files)},
          {"summary",
           {{"added", d.added},
            {"removed", d.removed},
            {"changed", d.changed},
            {"identical", d.identical},
            {"same", d.same()}}}};
}

}  // namespace modelfs
