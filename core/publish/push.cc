#include "core/publish/push.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/formats/model_inspect.h"
#include "core/formats/pickle_scan.h"
#include "core/hub/lock_file.h"
#include "core/io/range_reader.h"
#include "core/oci/manifest.h"
#include "core/oci/media_types.h"
#include "core/oci/model_identity.h"
#include "core/oci/model_time.h"
#include "core/oci/modelpack.h"
#include "core/oci/path_safety.h"
#include "core/oci/seek_index.h"
#include "core/oci/tar.h"
#include "core/oci/tar_headers.h"
#include "core/oci/volume_image.h"
#include "core/oci/zstd_frames.h"
#include "core/publish/blob_upload.h"
#include "core/publish/layer_indexes.h"
#include "core/publish/push_inputs.h"
#include "core/publish/registry_range_reader.h"
#include "core/publish/tensor_listing.h"
#include "core/resolve/model_ref.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

using publish_internal::BuildIdentity;
using publish_internal::CheckAgainstLock;
using publish_internal::CheckDigestAgainstLock;
using publish_internal::CheckPathPrefix;
using publish_internal::CheckPickles;
using publish_internal::CollectInputs;
using publish_internal::CreatedAtOf;
using publish_internal::Fd;
using publish_internal::FindLock;
using publish_internal::IndexCompressedFile;
using publish_internal::IndexLayers;
using publish_internal::InputFile;
using publish_internal::LayerIndexes;
using publish_internal::OpenForReading;
using publish_internal::PickChunkSize;
using publish_internal::PushedBlobsToJson;
using publish_internal::PutManifestChecked;
using publish_internal::StartTensorIndex;
using publish_internal::Uploader;

namespace fs = std::filesystem;

std::string DefaultVolumeTag(const ImageReference& ref, const std::string& given) {
  if (!given.empty()) return given;
  if (!ref.tag().empty()) return ref.tag() + "-volume";
  return ref.digest() ? absl::StrCat("sha256-", std::string(ref.digest()->hex()), ".volume")
                      : "latest-volume";
}

// Builds V for M (which lives at `model_repository`, "registry/repo"), pushes it into `repo`
// through `client`, and links V to M through the referrers fallback tag there.
absl::Status PushVolume(RegistryClient& client, const std::string& model_repository,
                        const std::string& repo, const Descriptor& model_desc,
                        const Manifest& model, LayerIndexes indexes, const std::string& volume_tag,
                        const std::string& path_prefix, const ModelPackConfig* config, Uploader& up,
                        PushResult& result, bool image_compatible = false) {
  VolumeImageInput vin;
  // V carries M's own time; for an M without one (some other tool's), none, so that converting
  // the same M again gives the same V.
  vin.created = ModelCreatedAt(config, model).value_or("");
  vin.model_manifest = model_desc;
  vin.model = model;
  vin.repository = model_repository;
  vin.path_prefix = path_prefix;
  vin.chunk_indexes = std::move(indexes.chunks);
  // Every gzip point goes to the windows file (fetched a window at a time, so never thinned);
  // the inline seek indexes, which readers without windows support fetch whole, are thinned.
  for (const SeekIndex& s : indexes.seeks) {
    if (s.encoding.codec().windowed_points && s.points.size() > 1) vin.seek_windows.push_back(s);
  }
  ThinSeekIndexes(indexes.seeks, kSeekIndexBudgetBytes);
  vin.seek_indexes = std::move(indexes.seeks);
  vin.tar_headers = std::move(indexes.tar_headers);
  vin.tensor_indexes = std::move(indexes.tensors);
  vin.tar_tensor_indexes = std::move(indexes.tar_tensors);
  vin.image_compatible = image_compatible;
  ASSIGN_OR_RETURN(VolumeImage v, BuildVolumeImage(vin));
  if (image_compatible) {
    // M's tars are V's layers: present in V's repository, or mounted there from M's, never
    // uploaded again.
    const std::string model_registry = model_repository.substr(0, model_repository.find('/'));
    const std::string model_repo = model_repository.substr(model_repository.find('/') + 1);
    for (const Descriptor& d : v.manifest.layers) {
      const std::string* role = d.Annotation(kLabelRole);
      if (role == nullptr || *role != kVolumeRoleModel) continue;
      PushedBlob pb{"model layer", d, "present"};
      ASSIGN_OR_RETURN(bool exists, client.BlobExists(repo, d.digest));
      if (!exists) {
        bool mounted = false;
        if (model_registry == client.registry()) {
          ASSIGN_OR_RETURN(mounted, client.MountBlob(repo, d.digest, model_repo));
        }
        if (!mounted) {
          return absl::InvalidArgumentError(absl::StrCat(
              "layer ", d.digest.str(), " of ", model_repository, " cannot be mounted into ",
              client.registry(), "/", repo,
              ": an image-compatible volume image there would copy its bytes; convert it into "
              "a repository of M's registry"));
        }
        pb.action = "mounted";
        ++result.mounted;
      } else {
        ++result.present;
      }
      result.blobs.push_back(std::move(pb));
    }
  }
  for (VolumeBlob& l : v.index_layers) {
    RETURN_IF_ERROR(up.UploadBytes("volume index layer", l.descriptor, std::move(l.bytes)));
  }
  RETURN_IF_ERROR(up.UploadBytes("volume layer", v.layer_descriptor, v.layer));
  RETURN_IF_ERROR(up.UploadBytes("volume config", v.config_descriptor, v.config));
  RETURN_IF_ERROR(PutManifestChecked(client, repo, volume_tag, v.manifest_json,
                                     v.manifest_descriptor.digest, "volume"));
  RETURN_IF_ERROR(client.PutReferrersFallback(repo, model_desc.digest,
                                              SerializeDescriptor(v.manifest_descriptor)));
  result.volume = v.manifest_descriptor;
  result.volume_tag = volume_tag;
  return absl::OkStatus();
}

}  // namespace

std::string ParamSizeLabel(uint64_t p) {
  auto fmt = [](double v, const char* unit) {
    std::string s = v >= 100 ? absl::StrFormat("%.0f", v) : absl::StrFormat("%.1f", v);
    if (s.size() > 2 && s.substr(s.size() - 2) == ".0") s.resize(s.size() - 2);
    return s + unit;
  };
  if (p >= 1'000'000'000ull) return fmt(p / 1e9, "b");
  if (p >= 1'000'000ull) return fmt(p / 1e6, "m");
  // The spec's pattern needs a scale letter, even for a toy model: 544 -> "0.5k".
  return fmt(p / 1e3, "k");
}

absl::StatusOr<PushResult> PushModel(RegistryClient& client, const ImageReference& ref,
                                     const PushOptions& o) {
  if (ref.digest()) {
    return absl::InvalidArgumentError(
        absl::StrCat(ref.String(), ": push needs a tag, not a digest (the digest is computed)"));
  }
  RETURN_IF_ERROR(CheckPathPrefix(o.path_prefix));
  if (o.image_compatible && (!o.tar || o.compress_zstd)) {
    return absl::InvalidArgumentError(
        "--image-compatible needs --tar (and no --compress): the image's layers are M's own "
        "uncompressed tars, and a raw layer would have to be copied into one");
  }
  ASSIGN_OR_RETURN(std::vector<InputFile> files, CollectInputs(o.inputs));
  std::map<std::string, std::string> annotations = o.annotations;
  ASSIGN_OR_RETURN(bool pickles, CheckPickles(files, o.allow_pickle, annotations));
  std::string lock_dir;
  ASSIGN_OR_RETURN(std::optional<LockFile> lock, FindLock(files, &lock_dir));
  if (lock.has_value()) {
    for (const auto& f : files) {
      if (f.dir == lock_dir && f.rel != kLockFileName) RETURN_IF_ERROR(CheckAgainstLock(*lock, f));
    }
  }
  ASSIGN_OR_RETURN(ModelIdentity identity, BuildIdentity(files, lock, o));
  const std::string repo = ref.repository();
  PushResult result;
  result.repository = absl::StrCat(ref.registry(), "/", repo);
  Uploader up(client, repo, o.mount_from, result);

  // Inspect model files first, so a malformed file stops the push before any upload.
  // config.json only describes weights, so it is read only when weights are pushed too.
  std::vector<std::string> model_paths, config_paths;
  for (const auto& f : files) {
    SniffedFormat sf = SniffFormat(f.rel, "");
    if (sf == SniffedFormat::kSafetensors || sf == SniffedFormat::kGguf) {
      model_paths.push_back(f.path);
    } else if (sf == SniffedFormat::kConfigJson) {
      config_paths.push_back(f.path);
    }
  }
  ModelPackConfig config;
  config.descriptor.name = o.name.empty() ? repo.substr(repo.rfind('/') + 1) : o.name;
  if (!model_paths.empty()) {
    model_paths.insert(model_paths.end(), config_paths.begin(), config_paths.end());
    ASSIGN_OR_RETURN(InspectedModel inspected, InspectModel(model_paths));
    config.config.format = inspected.format;
    if (inspected.parameters) config.config.param_size = ParamSizeLabel(inspected.parameters);
    config.config.precision = inspected.precision;
    config.config.quantization = inspected.quantization;
    config.config.architecture =
        inspected.architecture.empty() ? "transformer" : inspected.architecture;
    // GGUF names its recipe ("MOSTLY_Q4_K_M"); ModelPack spells it "q4_k_m".
    for (const auto& f : inspected.files) {
      if (f.file_type.empty() || f.file_type == "ALL_F32") continue;
      std::string q = f.file_type.rfind("MOSTLY_", 0) == 0 ? f.file_type.substr(7) : f.file_type;
      for (char& ch : q) ch = static_cast<char>(tolower(static_cast<unsigned char>(ch)));
      config.config.quantization = q;
    }
  } else if (pickles) {
    config.config.format = "pytorch";  // the spec's own example value for torch checkpoints
  }

  ApplyIdentity(identity, config, annotations);
  if (!config.descriptor.created_at.has_value()) {
    ASSIGN_OR_RETURN(config.descriptor.created_at, CreatedAtOf(files));
  }
  result.identity = IdentityFromArtifact(&config, annotations);
  if (lock.has_value()) result.lock = (fs::path(lock_dir) / std::string(kLockFileName)).string();

  // Hash (and index) every layer, then upload what the registry lacks.
  std::vector<ModelLayerInput> layers;
  LayerIndexes indexes;
  std::vector<std::string> temp_files;
  struct TempCleanup {
    std::vector<std::string>& files;
    ~TempCleanup() {
      for (const auto& f : files) unlink(f.c_str());
    }
  } cleanup{temp_files};
  std::vector<uint64_t> layer_sizes;
  for (const auto& f : files) {
    std::error_code ec;
    const uint64_t size = fs::file_size(f.path, ec);
    // A tar layer adds its header, the padding and the two end blocks.
    layer_sizes.push_back(o.tar ? kTarBlockSize + size + TarPadding(size) + 2 * kTarBlockSize
                                : size);
  }
  ASSIGN_OR_RETURN(const uint64_t chunk_size,
                   PickChunkSize(layer_sizes, o.chunk_size, o.chunk_digest));
  for (const auto& f : files) {
    std::string blob_path = f.path;
    LayerEncoding enc = LayerEncoding::kRaw;
    std::optional<Digest> diff_id;  // of a compressed layer: its tar's digest
    if (o.tar || o.compress_zstd) {
      // One tar per file: header, data, padding, two zero blocks; staged on disk.
      std::string tmp = absl::StrCat(fs::temp_directory_path().string(), "/modelfs-push-", getpid(),
                                     "-", temp_files.size(), ".tar");
      temp_files.push_back(tmp);
      std::error_code ec;
      uint64_t size = fs::file_size(f.path, ec);
      // Image compatible: containerd unpacks the tars as they are, so their members carry the
      // path prefix.
      const std::string member = o.image_compatible && !o.path_prefix.empty()
                                     ? absl::StrCat(o.path_prefix, "/", f.rel)
                                     : f.rel;
      ASSIGN_OR_RETURN(std::string header, EncodeTarHeader(member, '0', size, 0644));
      {
        FILE* out = fopen(tmp.c_str(), "wb");
        if (!out) return absl::InternalError(absl::StrCat(tmp, ": ", strerror(errno)));
        FILE* in = fopen(f.path.c_str(), "rb");
        if (!in) {
          fclose(out);
          return absl::NotFoundError(absl::StrCat(f.path, ": ", strerror(errno)));
        }
        fwrite(header.data(), 1, header.size(), out);
        std::string buf(1 << 20, '\0');
        size_t n;
        while ((n = fread(buf.data(), 1, buf.size(), in)) > 0) fwrite(buf.data(), 1, n, out);
        fclose(in);
        std::string pad(TarPadding(size) + 2 * kTarBlockSize, '\0');
        fwrite(pad.data(), 1, pad.size(), out);
        if (fclose(out) != 0) return absl::InternalError(absl::StrCat(tmp, ": write failed"));
      }
      blob_path = tmp;
      enc = LayerEncoding::kTar;
      if (o.compress_zstd) {
        // Independent frames of one chunk of the tar each: a standard zstd stream whose
        // frames can be decoded one by one.
        const std::string zst = tmp + ".zst";
        temp_files.push_back(zst);
        ASSIGN_OR_RETURN(ZstdFramesResult z, WriteZstdFrames(tmp, zst, chunk_size));
        diff_id = z.diff_id;
        result.uncompressed_bytes += z.input_size;
        result.compressed_bytes += z.size;
        blob_path = zst;
        enc = LayerEncoding::kTarZstd;
      }
    }
    ChunkIndex idx;
    std::optional<SeekIndex> seek;
    // A tar layer's headers, as convert records them, so that pushing M gives the V converting
    // it would.
    std::optional<TarHeaderRecorder> headers;
    if (enc != LayerEncoding::kRaw) headers.emplace();
    // A tar layer's weight file: its tensors, from the same pass, as convert indexes them.
    std::optional<TarTensorIndexer> tar_tensors;
    if (o.tensor_index && enc != LayerEncoding::kRaw) tar_tensors.emplace(f.rel);
    if (enc.compressed()) {
      // The frames' seek index and the chunk index of the tar, in one pass over the layer.
      ASSIGN_OR_RETURN(auto both, IndexCompressedFile(blob_path, enc, chunk_size, o.chunk_digest,
                                                      f.rel, o.progress, &*headers,
                                                      tar_tensors ? &*tar_tensors : nullptr));
      seek = std::move(both.first);
      idx = std::move(both.second);
      if (seek->diff_id != *diff_id || idx.blob_digest != *diff_id) {
        return absl::DataLossError(absl::StrCat(blob_path, ": decodes to ", idx.blob_digest.str(),
                                                ", the tar written was ", diff_id->str()));
      }
    } else {
      // The tensors of a .raw weight file, hashed in the same read.
      std::optional<TensorIndexBuilder> tensors;
      if (o.tensor_index && enc == LayerEncoding::kRaw) {
        ASSIGN_OR_RETURN(tensors, StartTensorIndex(f.path, f.rel, blob_path, 0));
      }
      ASSIGN_OR_RETURN(idx, IndexFile(blob_path, chunk_size, o.chunk_digest, f.rel, o.progress,
                                      headers ? &*headers : nullptr, tensors ? &*tensors : nullptr,
                                      tar_tensors ? &*tar_tensors : nullptr));
      if (tensors) {
        ASSIGN_OR_RETURN(TensorIndex t, tensors->Finish());
        t.layer_digest = idx.blob_digest;
        indexes.tensors.push_back(std::move(t));
      }
    }
    if (headers) {
      if (std::optional<TarHeaders> h = headers->Finish(idx.blob_digest, f.rel)) {
        indexes.tar_headers.push_back(*std::move(h));
      }
    }
    if (tar_tensors) {
      // The chunk index covers the tar (a compressed layer's diffId).
      if (std::optional<TarTensorIndexes> t = tar_tensors->Finish(idx.blob_digest)) {
        indexes.tar_tensors.push_back(*std::move(t));
      }
    }
    // The layer's own digest and size (a compressed layer's, not its tar's).
    const Digest layer_digest = seek ? seek->layer_digest : idx.blob_digest;
    const uint64_t layer_size = seek ? seek->compressed_size : idx.blob_size;
    if (lock.has_value() && f.dir == lock_dir && f.rel != kLockFileName) {
      // Before this file is uploaded: for .raw the layer digest is the file's SHA-256.
      if (enc == LayerEncoding::kRaw) {
        RETURN_IF_ERROR(CheckDigestAgainstLock(*lock, f, idx.blob_digest));
      } else {
        ASSIGN_OR_RETURN(Digest file_digest, DigestFile(f.path));
        RETURN_IF_ERROR(CheckDigestAgainstLock(*lock, f, file_digest));
      }
    }
    std::error_code ec;
    FileMetadata meta;
    meta.name = fs::path(f.rel).filename().string();
    meta.size = static_cast<int64_t>(fs::file_size(f.path, ec));
    ModelLayerInput in;
    in.path = f.rel;
    in.digest = layer_digest;
    in.size = layer_size;
    in.kind = ClassifyFile(f.rel);
    in.encoding = enc;
    in.file_metadata_json = SerializeFileMetadata(meta);
    config.modelfs.diff_ids.push_back(diff_id.value_or(idx.blob_digest));
    layers.push_back(std::move(in));
    if (seek) {
      // Served lazily through the seek index when it has more than one frame or is small; a
      // large single frame is fetched whole, checked and decompressed (design.md, "The trust
      // chain").
      if (!seek->served_by_range()) result.verified_whole.push_back(layer_digest);
      indexes.seeks.push_back(std::move(*seek));
    }
    indexes.chunks.push_back(std::move(idx));

    Descriptor d;
    d.media_type = ModelLayerMediaType(layers.back().kind, enc);
    d.digest = layers.back().digest;
    d.size = layers.back().size;
    ASSIGN_OR_RETURN(Fd fd, OpenForReading(blob_path));
    RETURN_IF_ERROR(up.Upload(f.rel, d, BlobReadAtFd(fd.get()), o.progress));
  }

  std::string config_json = SerializeModelPackConfig(config);
  ASSIGN_OR_RETURN(Manifest m, BuildModelManifest(config_json, layers, annotations));
  RETURN_IF_ERROR(up.UploadBytes("config", m.config, config_json));
  std::string manifest_json = SerializeManifest(m);
  result.model = DescribeBlob(kOciManifestMediaType, manifest_json);
  result.model.artifact_type = std::string(kModelArtifactType);
  RETURN_IF_ERROR(
      PutManifestChecked(client, repo, ref.tag(), manifest_json, result.model.digest, "model"));
  result.model_tag = ref.tag();
  RETURN_IF_ERROR(PushVolume(client, result.repository, repo, result.model, m, std::move(indexes),
                             DefaultVolumeTag(ref, o.volume_tag), o.path_prefix, &config, up,
                             result, o.image_compatible));
  result.bytes_uploaded = client.stats().bytes_sent;
  return result;
}

namespace {

// Image compatible with a path prefix: containerd unpacks M's tars as they are, so every member
// must be under the prefix already. Reads only the tars' headers. Errors: kInvalidArgument
// naming the first member outside it.
absl::Status CheckTarMembersUnder(RegistryClient& source, const ResolvedModel& rm,
                                  const std::string& prefix) {
  if (prefix.empty()) return absl::OkStatus();
  for (const ModelLayer& layer : rm.layers) {
    if (layer.encoding != LayerEncoding::kTar) continue;  // BuildVolumeImage refuses it
    RegistryRangeReader reader(source, rm.repository, layer.descriptor,
                               layer.descriptor.digest.str());
    RETURN_IF_ERROR(ScanTarHeaders(reader, [&](const TarEntry& e) -> absl::Status {
      if (e.path == prefix || absl::StartsWith(e.path, prefix + "/")) return absl::OkStatus();
      return absl::InvalidArgumentError(absl::StrCat(
          "layer ", layer.descriptor.digest.str(), " has member ", e.path,
          ", not under --path-prefix ", prefix,
          ": an image-compatible volume image shows M's tars as they are; push the model "
          "with --image-compatible --path-prefix, or leave the prefix out"));
    }));
  }
  return absl::OkStatus();
}

absl::StatusOr<ResolvedModel> ResolvePlainModel(RegistryClient& client, const ImageReference& ref) {
  ASSIGN_OR_RETURN(ResolvedModel rm, ResolveModel(client, ref));
  if (rm.volume_descriptor) {
    return absl::InvalidArgumentError(absl::StrCat(ref.String(),
                                                   " is already a volume image (for model ",
                                                   rm.model_descriptor.digest.str(), ")"));
  }
  return rm;
}

}  // namespace

absl::StatusOr<PushResult> ConvertModel(RegistryClient& client, const ImageReference& ref,
                                        const ConvertOptions& o) {
  RETURN_IF_ERROR(CheckPathPrefix(o.path_prefix));
  ASSIGN_OR_RETURN(ResolvedModel rm, ResolvePlainModel(client, ref));
  PushResult result;
  result.repository = absl::StrCat(ref.registry(), "/", rm.repository);
  result.model = rm.model_descriptor;
  result.model_tag = ref.tag();
  Uploader up(client, rm.repository, /*mount_from=*/{}, result);
  if (o.image_compatible) RETURN_IF_ERROR(CheckTarMembersUnder(client, rm, o.path_prefix));
  ASSIGN_OR_RETURN(LayerIndexes indexes, IndexLayers(client, rm, o, result));
  std::string tag = o.volume_tag;
  if (tag.empty()) tag = DefaultVolumeTag(ref, "");
  RETURN_IF_ERROR(PushVolume(client, result.repository, rm.repository, rm.model_descriptor,
                             rm.model, std::move(indexes), tag, o.path_prefix,
                             rm.config ? &*rm.config : nullptr, up, result, o.image_compatible));
  result.bytes_uploaded = client.stats().bytes_sent;
  return result;
}

absl::StatusOr<PushResult> ConvertModelTo(RegistryClient& source, const ImageReference& source_ref,
                                          RegistryClient& target,
                                          const std::string& target_repository,
                                          const ConvertOptions& o) {
  RETURN_IF_ERROR(ValidateRepository(target_repository));
  RETURN_IF_ERROR(CheckPathPrefix(o.path_prefix));
  ASSIGN_OR_RETURN(ResolvedModel rm, ResolvePlainModel(source, source_ref));
  PushResult result;
  result.repository = absl::StrCat(target.registry(), "/", target_repository);
  result.model_repository = absl::StrCat(rm.registry, "/", rm.repository);
  result.model = rm.model_descriptor;
  result.model_tag = source_ref.tag();
  if (result.repository == result.model_repository) result.model_repository.clear();
  Uploader up(target, target_repository, /*mount_from=*/{}, result);
  if (o.image_compatible) RETURN_IF_ERROR(CheckTarMembersUnder(source, rm, o.path_prefix));
  ASSIGN_OR_RETURN(LayerIndexes indexes, IndexLayers(source, rm, o, result));
  std::string tag = o.volume_tag;
  if (tag.empty()) tag = DefaultVolumeTag(source_ref, "");
  RETURN_IF_ERROR(PushVolume(target, absl::StrCat(rm.registry, "/", rm.repository),
                             target_repository, rm.model_descriptor, rm.model, std::move(indexes),
                             tag, o.path_prefix, rm.config ? &*rm.config : nullptr, up, result,
                             o.image_compatible));
  result.bytes_uploaded = target.stats().bytes_sent;
  return result;
}

nlohmann::json PushResultToJson(const PushResult& r) {
  nlohmann::json verified_whole = nlohmann::json::array();
  for (const Digest& d : r.verified_whole) verified_whole.push_back(d.str());
  return {
      {"repository", r.repository},
      {"identity", IdentityToJson(r.identity)},
      {"lock", r.lock.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.lock)},
      {"model",
       {{"digest", r.model.digest.str()},
        {"size", r.model.size},
        {"tag", r.model_tag},
        {"repository", r.model_repository.empty() ? r.repository : r.model_repository},
        {"reference", absl::StrCat(r.model_repository.empty() ? r.repository : r.model_repository,
                                   "@", r.model.digest.str())}}},
      {"volume",
       {{"digest", r.volume.digest.str()},
        {"size", r.volume.size},
        {"tag", r.volume_tag},
        {"reference", absl::StrCat(r.repository, "@", r.volume.digest.str())}}},
      {"blobs", PushedBlobsToJson(r.blobs)},
      {"uploaded", r.uploaded},
      {"present", r.present},
      {"mounted", r.mounted},
      {"bytes_uploaded", r.bytes_uploaded},
      {"verified_whole", verified_whole},
      {"uncompressed_bytes", r.uncompressed_bytes},
      {"compressed_bytes", r.compressed_bytes},
  };
}

}  // namespace modelfs
