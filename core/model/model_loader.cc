#include "core/model/model_loader.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/model/blob_range_reader.h"
#include "core/model/modelinfo.h"
#include "core/model/tar_records_check.h"
#include "core/oci/image_tree.h"
#include "core/oci/manifest.h"
#include "core/oci/media_types.h"
#include "core/oci/model_identity.h"
#include "core/oci/model_time.h"
#include "core/oci/path_safety.h"
#include "core/oci/tar.h"
#include "core/oci/tar_headers.h"
#include "core/status/status_macros.h"

namespace modelfs {

namespace {

// Takes back the references a load took unless it is dismissed: every early return and any
// exception leave the cache as it was.
class CacheRollback {
 public:
  CacheRollback(BlobCache& cache, std::string model_ref)
      : cache_(cache), model_ref_(std::move(model_ref)) {}
  ~CacheRollback() {
    if (armed_) cache_.UnregisterModel(model_ref_);
  }
  CacheRollback(const CacheRollback&) = delete;
  CacheRollback& operator=(const CacheRollback&) = delete;
  void Dismiss() { armed_ = false; }

 private:
  BlobCache& cache_;
  const std::string model_ref_;
  bool armed_ = true;
};

bool IsCompressed(const ModelLayer& l) { return IsCompressedEncoding(l.encoding); }

// The layer whose bytes are l's tar: l itself, or for a compressed layer its decoded one in
// `decoded`. Errors: kUnimplemented for a compressed layer `decoded` does not hold.
absl::StatusOr<DecodedLayer> TarLayerOf(const ModelLayer& l,
                                        const std::map<Digest, DecodedLayer>& decoded) {
  const Descriptor& d = l.descriptor;
  if (!IsCompressed(l)) return DecodedLayer{d.digest, d.size};
  auto it = decoded.find(d.digest);
  if (it == decoded.end()) {
    return absl::UnimplementedError(
        absl::StrCat("layer ", d.digest.str(), " is compressed (", d.media_type,
                     "); only the modelfs cache serves compressed layers (decompressed "
                     "whole), not this reader"));
  }
  return it->second;
}

// The tree of M's layers; `decoded` gives the decompressed layer of each compressed one.
absl::StatusOr<LoadedModel> Assemble(const ResolvedModel& rm, BlobReader& reader,
                                     const std::string& verification, const LoadOptions& o,
                                     const std::map<Digest, DecodedLayer>& decoded,
                                     const std::map<std::string, std::string>& serving);

// A document made by the first Get (its caller waits; concurrent callers wait for that one
// call) and kept: one .modelinfo.json served at two paths is made once.
class MadeOnce {
 public:
  explicit MadeOnce(std::function<std::string()> make) : make_(std::move(make)) {}
  std::string Get() {
    std::call_once(once_, [this] { bytes_ = make_(); });
    return bytes_;
  }

 private:
  const std::function<std::string()> make_;
  std::once_flag once_;
  std::string bytes_;  // written once, under once_; read after it
};

// The merged tree of an ordinary image's layers (core/oci/image_tree.h), every tar's headers
// read through `reader` (so verified), as the files, links and directories the tree serves.
struct ImageFiles {
  std::vector<TreeFile> files;
  ImageTreeCounts counts;
};
absl::StatusOr<ImageFiles> ImageTreeFiles(const ResolvedModel& rm, BlobReader& reader,
                                          const std::map<Digest, DecodedLayer>& decoded,
                                          std::vector<TarRecordsCheck::Tar>* checks);

// What .modelinfo.json describes of an image: its weight files and the files beside them (an
// image's busybox and /etc are not the model).
std::vector<TreeFile> ModelFilesOfImage(const std::vector<TreeFile>& files);

struct TarToIndex {
  Digest digest;
  uint64_t size = 0;
  std::string name;  // for errors: "layer sha256:..."
  // V's records of the tar's headers (ResolvedModel::tar_headers), when it has them: the tar is
  // indexed from those and none of its bytes are read.
  std::shared_ptr<const TarHeaders> headers;
};
// A tar layer of `rm`: the layer whose bytes are its tar, named for errors, with V's records of
// its headers when there are some.
absl::StatusOr<TarToIndex> TarToIndexOf(const ResolvedModel& rm, const ModelLayer& l,
                                        const std::map<Digest, DecodedLayer>& decoded) {
  ASSIGN_OR_RETURN(const DecodedLayer tar_layer, TarLayerOf(l, decoded));
  TarToIndex t{tar_layer.digest, tar_layer.size, absl::StrCat("layer ", l.descriptor.digest.str()),
               nullptr};
  if (auto it = rm.tar_headers.find(l.descriptor.digest); it != rm.tar_headers.end() &&
                                                          it->second->tar_digest == t.digest &&
                                                          it->second->tar_size == t.size) {
    t.headers = it->second;
  }
  return t;
}

// Each tar's headers are read one after another (where one entry ends says where the next
// header is), and in a compressed layer each read decodes a span: the tars are indexed side by
// side, so a model of several layers is ready in the time of its slowest, not their sum. Up to
// kParallelTars at a time (BlobReader takes concurrent calls). A tar with V's header records is
// indexed from them, reading nothing. Results in the order given.
// `checks`, when given, gets a TarRecordsCheck::Tar for each tar indexed from records (the
// ranges the scan used and what it found), for a model whose records nobody pinned.
std::vector<absl::StatusOr<std::vector<TarEntry>>> IndexTarsSideBySide(
    BlobReader& reader, const std::vector<TarToIndex>& tars,
    std::vector<TarRecordsCheck::Tar>* checks = nullptr) {
  constexpr size_t kParallelTars = 8;
  std::vector<absl::StatusOr<std::vector<TarEntry>>> out(tars.size(),
                                                         absl::UnknownError("not indexed"));
  auto index = [&](size_t i) {
    if (tars[i].headers != nullptr) {
      std::unique_ptr<RangeReader> recorded = MakeTarHeadersReader(tars[i].headers, tars[i].name);
      UsedRanges used;
      TarReadOptions options;
      options.on_bytes_used = [&used](uint64_t offset, uint64_t length) {
        used.Add(offset, length);
      };
      out[i] = IndexTar(*recorded, options);
      if (checks != nullptr && out[i].ok()) {
        checks->push_back({tars[i].digest, tars[i].name, tars[i].headers, used.Merged(), *out[i]});
      }
      return;
    }
    BlobRangeReader tar(&reader, tars[i].digest, 0, tars[i].size, tars[i].name);
    out[i] = IndexTar(tar);
  };
  std::vector<size_t> to_read;  // the tars indexed by reading their layers
  for (size_t i = 0; i < tars.size(); ++i) {
    if (tars[i].headers != nullptr) {
      index(i);
    } else {
      to_read.push_back(i);
    }
  }
  if (to_read.size() == 1) {
    index(to_read[0]);
    return out;
  }
  for (size_t first = 0; first < to_read.size(); first += kParallelTars) {
    std::vector<std::thread> workers;
    for (size_t k = first; k < std::min(to_read.size(), first + kParallelTars); ++k) {
      workers.emplace_back(index, to_read[k]);
    }
    for (std::thread& t : workers) t.join();
  }
  return out;
}

}  // namespace

absl::StatusOr<LoadedModel> LoadModel(const ResolvedModel& rm, BlobCache& cache,
                                      const LoadOptions& o) {
  const std::string model_ref = rm.model_descriptor.digest.str();
  CacheRollback rollback(cache, model_ref);
  bool all_indexed = true;
  std::vector<Digest> layers;
  std::map<Digest, DecodedLayer> decoded;
  std::map<std::string, std::string> serving;
  for (size_t i = 0; i < rm.layers.size(); ++i) {
    const ModelLayer& l = rm.layers[i];
    const Descriptor& d = l.descriptor;
    if (IsCompressed(l) && o.decoding != nullptr && !o.insecure_stream) {
      // With a seek index: served lazily, as a chunk-mode layer of the uncompressed bytes
      // (named by the diffId, checked against V's chunk index of them) that the decoding source
      // decompresses span by span.
      auto seek = rm.seek_indexes.find(d.digest);
      auto idx = rm.chunk_indexes.find(d.digest);
      if (seek != rm.seek_indexes.end() && seek->second->served_by_range() &&
          idx != rm.chunk_indexes.end() &&
          idx->second.content == ChunkIndex::Content::kUncompressed) {
        const SeekIndex& si = *seek->second;
        ASSIGN_OR_RETURN(std::optional<Digest> diff_id, LayerDiffId(rm, i));
        if ((diff_id && *diff_id != si.diff_id) || idx->second.blob_digest != si.diff_id) {
          return absl::DataLossError(absl::StrCat(
              "layer ", d.digest.str(), ": the volume image's seek index decodes it to ",
              si.diff_id.str(), ", the model config's diffId is ",
              diff_id ? diff_id->str() : std::string("(none)")));
        }
        if (auto w = rm.seek_windows.find(d.digest); w != rm.seek_windows.end()) {
          // Windows fetched per point, by range from V's windows layer (beside M, so through
          // the same source), checked against the table before a decoder sees them.
          DecodingBlobSource* const decoding = o.decoding;
          const Digest holder = w->second.layer;
          const uint64_t base = w->second.offset;
          o.decoding->AddWithWindows(std::make_shared<SeekWindowSource>(
              w->second.table,
              [decoding, holder, base](uint64_t off, uint64_t len, absl::Time deadline) {
                return decoding->FetchRange(holder, base + off, len, deadline);
              },
              absl::StrCat("layer ", d.digest.str(), " (diffId ", si.diff_id.str(), ")")));
        } else {
          o.decoding->Add(seek->second);
        }
        LayerSpec spec;
        spec.digest = si.diff_id;
        spec.size = si.uncompressed_size;
        spec.model_ref = model_ref;
        spec.mode = VerifyMode::kChunk;
        spec.index = idx->second;
        // Readahead only for a run of two spans, and of more than a large random read (4 MiB,
        // which the kernel sends as a run of 1 MiB requests): a lone random read is not followed
        // by the decoding of a span it does not need.
        uint64_t widest = 0;
        for (size_t p = 0; p < si.points.size(); ++p) {
          const uint64_t end = p + 1 < si.points.size() ? si.points[p + 1].uncompressed_offset
                                                        : si.uncompressed_size;
          widest = std::max(widest, end - si.points[p].uncompressed_offset);
        }
        spec.readahead_min = std::clamp<uint64_t>(2 * widest, 8ull << 20, 64ull << 20);
        RETURN_IF_ERROR(cache.RegisterLayer(spec));
        decoded[d.digest] = DecodedLayer{si.diff_id, si.uncompressed_size};
        layers.push_back(si.diff_id);
        serving[d.digest.str()] = "lazy-seek-index";
        continue;
      }
    }
    if (IsCompressed(l)) {
      // Fetched whole, checked against its digest, decompressed into a layer of its own and
      // checked against its diffId before anything of it is served. V's chunk index of the
      // compressed bytes (if any) is not needed: the whole-layer check covers every byte.
      // insecure_stream does not apply: nothing can be decompressed before it is all here.
      ASSIGN_OR_RETURN(std::optional<Digest> diff_id, LayerDiffId(rm, i));
      DecodedLayerSpec ds;
      ds.source = d.digest;
      ds.source_size = d.size;
      ds.encoding = l.encoding;
      ds.diff_id = diff_id;
      ds.model_ref = model_ref;
      ASSIGN_OR_RETURN(DecodedLayer dl, cache.RegisterDecodedLayer(ds));
      decoded[d.digest] = dl;
      layers.push_back(dl.digest);
      serving[d.digest.str()] = "decoded-whole";
      all_indexed = false;
      continue;
    }
    LayerSpec spec;
    spec.digest = d.digest;
    spec.size = d.size;
    spec.model_ref = model_ref;
    auto idx = rm.chunk_indexes.find(d.digest);
    if (o.insecure_stream) {
      spec.mode = VerifyMode::kInsecureStream;
      serving[d.digest.str()] = "unverified";
    } else if (idx != rm.chunk_indexes.end()) {
      spec.mode = VerifyMode::kChunk;
      spec.index = idx->second;
      serving[d.digest.str()] = "chunk-index";
    } else {
      spec.mode = VerifyMode::kWholeLayer;
      serving[d.digest.str()] = "whole-layer";
      all_indexed = false;
    }
    RETURN_IF_ERROR(cache.RegisterLayer(spec));
    layers.push_back(d.digest);
  }
  const std::string verification = o.insecure_stream ? "unverified"
                                   : all_indexed     ? "chunk-index"
                                                     : "whole-layer";
  ASSIGN_OR_RETURN(LoadedModel out, Assemble(rm, cache, verification, o, decoded, serving));
  out.layers = std::move(layers);
  out.layer_serving = std::move(serving);
  rollback.Dismiss();
  return out;
}

absl::StatusOr<LoadedModel> AssembleModel(const ResolvedModel& rm, BlobReader& reader,
                                          const std::string& verification, const LoadOptions& o) {
  return Assemble(rm, reader, verification, o, {}, {});
}

namespace {

absl::StatusOr<LoadedModel> Assemble(const ResolvedModel& rm, BlobReader& reader,
                                     const std::string& verification, const LoadOptions& o,
                                     const std::map<Digest, DecodedLayer>& decoded,
                                     const std::map<std::string, std::string>& serving) {
  LoadedModel out;
  out.name = absl::StrCat("sha256-", std::string(rm.model_descriptor.digest.hex()));
  out.verification = verification;
  {
    std::optional<Manifest> volume;
    if (!rm.volume_manifest_json.empty()) {
      auto parsed = ParseManifest(rm.volume_manifest_json);
      if (parsed.ok()) volume = std::move(*parsed);
    }
    out.mtime_sec =
        ModelMtimeSeconds(rm.config ? &*rm.config : nullptr, rm.model, volume ? &*volume : nullptr);
  }
  std::set<std::string> seen;
  // Records nobody pinned: what the scans used of them, checked against the layers before
  // anything of the model is served (tar_records_check.h).
  std::vector<TarRecordsCheck::Tar> unchecked;
  std::vector<TarRecordsCheck::Tar>* checks = rm.tar_headers_unpinned ? &unchecked : nullptr;
  if (rm.image) {
    ASSIGN_OR_RETURN(ImageFiles image, ImageTreeFiles(rm, reader, decoded, checks));
    out.files = std::move(image.files);
    out.image = true;
    out.image_counts = image.counts;
  }
  // ModelPack tar layers: their headers indexed side by side first, used in layer order below.
  std::vector<TarToIndex> tar_jobs;
  for (const ModelLayer& l : rm.layers) {
    if (rm.image || l.encoding == LayerEncoding::kRaw) continue;
    ASSIGN_OR_RETURN(TarToIndex job, TarToIndexOf(rm, l, decoded));
    tar_jobs.push_back(std::move(job));
  }
  std::vector<absl::StatusOr<std::vector<TarEntry>>> tar_entries =
      IndexTarsSideBySide(reader, tar_jobs, checks);
  size_t next_tar = 0;
  for (const ModelLayer& l : rm.layers) {
    if (rm.image) break;  // merged above, with whiteouts
    const Descriptor& d = l.descriptor;
    // The layer whose bytes are the tar: a compressed layer's decoded one.
    ASSIGN_OR_RETURN(const DecodedLayer tar_layer, TarLayerOf(l, decoded));
    const Digest& tar_digest = tar_layer.digest;
    if (l.encoding == LayerEncoding::kRaw) {
      RETURN_IF_ERROR(CheckRelativePath(l.path));
      if (!seen.insert(l.path).second) {
        return absl::PermissionDeniedError(absl::StrCat("two layers provide '", l.path, "'"));
      }
      out.files.push_back(TreeFile{l.path, d.digest, 0, d.size, d.digest.str()});
      continue;
    }
    // A tar layer: its headers, indexed above by range reads of verified bytes.
    ASSIGN_OR_RETURN(std::vector<TarEntry> entries, std::move(tar_entries[next_tar++]));
    std::vector<std::pair<uint64_t, uint64_t>> members;
    for (const TarEntry& e : entries) {
      if (e.type != TarEntryType::kFile) continue;  // directories are implied; links are skipped
      ASSIGN_OR_RETURN(std::string rel, NormalizeRelativePath(e.path));
      RETURN_IF_ERROR(CheckNotReservedModelPath(rel, absl::StrCat("layer ", d.digest.str())));
      if (!seen.insert(rel).second) {
        return absl::PermissionDeniedError(absl::StrCat("layer ", d.digest.str(), ": path '", rel,
                                                        "' appears twice in the model"));
      }
      out.files.push_back(TreeFile{rel, tar_digest, e.data_offset, e.size, ""});
      members.emplace_back(e.data_offset, e.size);
    }
    // Where the tar's files are, so that a cache may keep each in a file of its own and serve
    // it by passthrough once verified. Only where bytes are kept changes: an error (a full
    // disk, logged by the cache) leaves the layer served as it was.
    reader.SetLayerMembers(tar_digest, members).IgnoreError();
  }
  ModelInfoContext ctx;
  ctx.reference = o.reference.empty() ? rm.ref.String() : o.reference;
  ctx.digests["manifest"] = rm.model_descriptor.digest.str();
  ctx.digests["config"] = rm.model.config.digest.str();
  if (rm.volume_descriptor) ctx.digests["volumeManifest"] = rm.volume_descriptor->digest.str();
  ctx.verification = out.verification;
  ctx.layer_serving = serving;
  for (const auto& [layer, ref] : rm.tensor_index_refs) {
    ctx.tensor_indexes[layer.str()] = {ref.digest.str(), ref.tensors};
  }
  for (const auto& [at, ref] : rm.tar_tensor_index_refs) {
    ctx.tar_tensor_indexes[{at.first.str(), at.second}] = {ref.digest.str(), ref.tensors};
  }
  {
    std::set<std::string> algorithms;
    for (const auto& [digest, idx] : rm.chunk_indexes) {
      algorithms.insert(std::string(ChunkDigestName(idx.algorithm)));
    }
    if (out.verification == "chunk-index")
      ctx.chunk_digests.assign(algorithms.begin(), algorithms.end());
  }
  ctx.provenance["repository"] = rm.repository;
  if (rm.config) {
    const auto& desc = rm.config->descriptor;
    if (!desc.name.empty()) ctx.provenance["name"] = desc.name;
    if (!desc.revision.empty()) ctx.provenance["revision"] = desc.revision;
    if (!desc.version.empty()) ctx.provenance["version"] = desc.version;
    if (!desc.source_url.empty()) ctx.provenance["source"] = desc.source_url;
    if (!desc.licenses.empty()) {
      std::string l;
      for (const auto& x : desc.licenses) l += (l.empty() ? "" : ",") + x;
      ctx.provenance["licenses"] = l;
    }
    if (desc.created_at) ctx.provenance["createdAt"] = *desc.created_at;
    const auto& c = rm.config->config;
    if (!c.format.empty()) ctx.provenance["format"] = c.format;
    if (!c.param_size.empty()) ctx.provenance["paramSize"] = c.param_size;
    if (!c.quantization.empty()) ctx.provenance["quantization"] = c.quantization;
    if (!c.precision.empty()) ctx.provenance["precision"] = c.precision;
  }
  for (const auto& [k, v] : rm.model.annotations) ctx.provenance[k] = v;
  if (rm.state) {
    const StateConfig& st = *rm.state;
    ctx.state = {{"name", st.name},
                 {"format", st.format},
                 {"tokens", st.tokens ? nlohmann::json(*st.tokens) : nlohmann::json(nullptr)},
                 {"precision",
                  st.precision.empty() ? nlohmann::json(nullptr) : nlohmann::json(st.precision)},
                 {"model",
                  {{"digest", st.model.digest.str()},
                   {"mediaType", st.model.media_type},
                   {"size", st.model.size},
                   {"reference",
                    absl::StrCat(rm.registry, "/", rm.repository, "@", st.model.digest.str())}}}};
  }
  ctx.identity =
      IdentityToJson(IdentityFromArtifact(rm.config ? &*rm.config : nullptr, rm.model.annotations));
  // Made on first lookup (fuse/model_tree.h SyntheticFile): it reads every weight file's
  // header, which registering the model (a CRI PullImage) should not wait for.
  std::shared_ptr<BlobReader> gated;  // .modelinfo.json's reader, while the records are unchecked
  if (!unchecked.empty()) {
    out.records_check = std::make_shared<TarRecordsCheck>(
        &reader, rm.model_descriptor.digest.str(), std::move(unchecked), o.on_records_checked);
    for (TreeFile& f : out.files) {
      if (f.kind != TreeFile::Kind::kDirectory) f.gate = out.records_check;
    }
    gated = std::make_shared<GatedBlobReader>(&reader, out.records_check);
  }
  auto info = std::make_shared<MadeOnce>(
      [&reader, gated, files = rm.image ? ModelFilesOfImage(out.files) : out.files,
       ctx = std::move(ctx)] {
        return MakeModelInfoFile(gated != nullptr ? *gated : reader, files, ctx);
      });
  out.synthetic[kModelInfoFileName] = SyntheticFile::Lazy([info] { return info->Get(); });
  // V may show M's files under a directory (its record's pathPrefix, "models" for KServe).
  // .modelinfo.json names paths within that directory; it stays at the root and is served
  // inside the directory too, the same bytes made once, so that a pod mounting only the
  // directory (an image volume's subPath, KServe's `subPath: models`) sees it beside the files.
  if (!rm.path_prefix.empty()) {
    out.synthetic[absl::StrCat(rm.path_prefix, "/", kModelInfoFileName)] =
        SyntheticFile::Lazy([info] { return info->Get(); });
    for (TreeFile& f : out.files) f.path = absl::StrCat(rm.path_prefix, "/", f.path);
  }
  return out;
}

absl::StatusOr<ImageFiles> ImageTreeFiles(const ResolvedModel& rm, BlobReader& reader,
                                          const std::map<Digest, DecodedLayer>& decoded,
                                          std::vector<TarRecordsCheck::Tar>* checks) {
  ImageTree tree;
  std::vector<TarToIndex> tars;  // the layer whose bytes are each layer's tar
  for (const ModelLayer& l : rm.layers) {
    ASSIGN_OR_RETURN(TarToIndex job, TarToIndexOf(rm, l, decoded));
    tars.push_back(std::move(job));
  }
  std::vector<absl::StatusOr<std::vector<TarEntry>>> indexed =
      IndexTarsSideBySide(reader, tars, checks);
  for (size_t i = 0; i < rm.layers.size(); ++i) {
    const Digest& tar_digest = tars[i].digest;
    ASSIGN_OR_RETURN(std::vector<TarEntry> entries, std::move(indexed[i]));
    RETURN_IF_ERROR(ApplyImageLayer(tree, i, tars[i].name, entries));
    // As for a ModelPack tar layer: every regular file may get a file of its own in the cache
    // and be served by passthrough once verified (a file whited out above is kept, not shown).
    std::vector<std::pair<uint64_t, uint64_t>> members;
    for (const TarEntry& e : entries) {
      if (e.type == TarEntryType::kFile) members.emplace_back(e.data_offset, e.size);
    }
    reader.SetLayerMembers(tar_digest, members).IgnoreError();
  }
  const std::string where = absl::StrCat("image ", rm.model_descriptor.digest.str());
  ImageFiles out;
  std::vector<TreeFile>& files = out.files;
  files.reserve(tree.nodes.size());
  for (auto& [path, node] : tree.nodes) {
    RETURN_IF_ERROR(CheckNotReservedModelPath(path, where));
    TreeFile f;
    f.path = path;
    switch (node.type) {
      case ImageNodeType::kFile:
        f.layer = tars[node.layer].digest;
        f.offset_in_layer = node.offset;
        f.size = node.size;
        f.executable = (node.mode & 0111) != 0;
        break;
      case ImageNodeType::kDirectory:
        f.kind = TreeFile::Kind::kDirectory;
        break;
      case ImageNodeType::kSymlink:
        f.kind = TreeFile::Kind::kSymlink;
        f.symlink_target = std::move(node.link_target);
        break;
    }
    files.push_back(std::move(f));
  }
  out.counts = tree.counts;
  return out;
}

std::vector<TreeFile> ModelFilesOfImage(const std::vector<TreeFile>& files) {
  auto dir_of = [](const std::string& p) { return p.substr(0, p.rfind('/') + 1); };
  std::set<std::string> dirs;
  for (const TreeFile& f : files) {
    if (f.kind == TreeFile::Kind::kFile &&
        (absl::EndsWith(f.path, ".safetensors") || absl::EndsWith(f.path, ".gguf"))) {
      dirs.insert(dir_of(f.path));
    }
  }
  std::vector<TreeFile> out;
  for (const TreeFile& f : files) {
    if (f.kind == TreeFile::Kind::kFile && dirs.count(dir_of(f.path)) != 0) out.push_back(f);
  }
  return out;
}

}  // namespace

}  // namespace modelfs
