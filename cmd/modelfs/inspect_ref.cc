// `modelfs inspect REF`: a ModelPack artifact in a registry (or a volume image, followed to its
// model), from its manifest and config alone: what the config says, the identity record
// (core/oci/model_identity.h) and the files. No layer is downloaded.
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cmd/modelfs/cli.h"
#include "core/io/range_reader.h"
#include "core/oci/model_identity.h"
#include "core/publish/push.h"
#include "core/resolve/model_ref.h"
#include "core/status/status_macros.h"
#include "core/text/escape.h"

namespace modelfs::cli {

bool LooksLikeRegistryReference(const std::string& arg) {
  std::error_code ec;
  if (IsHttpUrl(arg) || std::filesystem::exists(arg, ec)) return false;
  const size_t slash = arg.find('/');
  if (slash == std::string::npos) return false;
  // The first component names a registry host: "host.tld", "host:port" or "localhost".
  const std::string host = arg.substr(0, slash);
  if (host.find('.') == std::string::npos && host.find(':') == std::string::npos &&
      host != "localhost") {
    return false;
  }
  return ImageReference::Parse(arg).ok();
}

absl::StatusOr<RefInspection> InspectReference(const std::string& arg,
                                               const RegistryAccessOptions& access) {
  ASSIGN_OR_RETURN(ImageReference ref, ImageReference::Parse(arg));
  ASSIGN_OR_RETURN(auto client, ConnectRegistry(ref, HostCapability::kPull, access));
  ASSIGN_OR_RETURN(ResolvedModel rm, ResolveModel(*client, ref));
  RefInspection out;
  out.reference = ref.String();
  out.repository = absl::StrCat(ref.registry(), "/", rm.repository);
  out.manifest = rm.model_descriptor.digest.str();
  if (rm.volume_descriptor) out.volume = rm.volume_descriptor->digest.str();
  out.image = rm.image;
  if (rm.image) out.config = nlohmann::json::parse(rm.config_json, nullptr, false);
  out.identity = IdentityFromArtifact(rm.config ? &*rm.config : nullptr, rm.model.annotations);
  out.annotations = rm.model.annotations;
  if (rm.config) {
    const ModelPackConfig& c = *rm.config;
    out.config = nlohmann::json::parse(rm.config_json, nullptr, false);
    out.name = c.descriptor.name;
    out.format = c.config.format;
    out.param_size = c.config.param_size;
    out.precision = c.config.precision;
  }
  for (const ModelLayer& l : rm.layers) {
    RefInspection::Layer layer{l.path, l.descriptor.digest.str(), l.descriptor.size,
                               std::string(LayerKindName(l.kind))};
    if (auto it = rm.chunk_indexes.find(l.descriptor.digest); it != rm.chunk_indexes.end()) {
      layer.chunk_digest = std::string(ChunkDigestName(it->second.algorithm));
      layer.chunk_size = it->second.chunk_size;
    }
    out.layers.push_back(std::move(layer));
  }
  return out;
}

nlohmann::json RefInspectionToJson(const RefInspection& r) {
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& l : r.layers) {
    nlohmann::json chunk_index = nullptr;
    if (!l.chunk_digest.empty()) {
      chunk_index = {{"algorithm", l.chunk_digest}, {"chunkSize", l.chunk_size}};
    }
    layers.push_back({{"path", l.path},
                      {"digest", l.digest},
                      {"size", l.size},
                      {"kind", l.kind},
                      {"chunkIndex", chunk_index}});
  }
  return {{"reference", r.reference},
          {"repository", r.repository},
          {"manifest", r.manifest},
          {"volume", r.volume.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.volume)},
          {"config", r.config},
          {"identity", IdentityToJson(r.identity)},
          {"annotations", r.annotations},
          {"kind", r.image ? "image" : "model"},
          {"layers", layers}};
}

std::string RenderRefInspection(const RefInspection& r) {
  auto e = [](const std::string& s) { return EscapeUntrusted(s); };
  auto or_dash = [&](const std::string& s) { return s.empty() ? std::string("-") : e(s); };
  const ModelIdentity& id = r.identity;
  std::string out =
      r.image ? absl::StrCat(e(r.repository), "@", r.manifest, ": container image, ",
                             r.layers.size(), " layers (mount and pull show them merged)\n")
              : absl::StrCat(e(r.repository), "@", r.manifest, ": ModelPack artifact, ",
                             r.layers.size(), " files\n");
  if (!r.volume.empty()) absl::StrAppend(&out, "volume image ", r.volume, "\n");
  absl::StrAppend(&out, "name ", or_dash(r.name), ", format ", or_dash(r.format), ", params ",
                  or_dash(r.param_size), ", precision ", or_dash(r.precision), "\n");
  absl::StrAppend(&out, "identity:\n");
  absl::StrAppend(&out, "  source          ", or_dash(id.source_url), "\n");
  absl::StrAppend(&out, "  revision        ", or_dash(id.revision), "\n");
  absl::StrAppend(&out, "  license         ", or_dash(absl::StrJoin(id.licenses, " AND ")), "\n");
  absl::StrAppend(
      &out, "  base model      ", or_dash(absl::StrJoin(id.base_models, ", ")),
      id.base_model_relation.empty() ? "" : absl::StrCat(" (", e(id.base_model_relation), ")"),
      "\n");
  absl::StrAppend(&out, "  tokenizer       ", or_dash(id.tokenizer_sha256), "\n");
  absl::StrAppend(
      &out, "  quantization    ", or_dash(id.quantization),
      id.quantization_recipe.empty() ? "" : absl::StrCat(" (", e(id.quantization_recipe), ")"),
      "\n");
  absl::StrAppend(&out, "  training data   ", or_dash(absl::StrJoin(id.datasets, ", ")), "\n");
  absl::StrAppend(&out, "  evaluations     ", or_dash(absl::StrJoin(id.eval_ids, ", ")), "\n");
  if (auto it = r.annotations.find(std::string(kAnnotationPickleFiles));
      it != r.annotations.end()) {
    absl::StrAppend(&out, "  pickle files    ", e(it->second), " (pushed with --allow-pickle)\n");
  }
  absl::StrAppend(&out, "files:\n");
  for (const auto& l : r.layers) {
    const std::string verified =
        l.chunk_digest.empty()
            ? std::string(r.volume.empty() ? "" : ", verified whole")
            : absl::StrCat(", ", l.chunk_digest, " chunks of ", WithCommas(l.chunk_size), " bytes");
    absl::StrAppend(&out, "  ", l.digest.substr(7, 12), " ", WithCommas(l.size), "  ",
                    or_dash(l.path), " (", l.kind, verified, ")\n");
  }
  return out;
}

}  // namespace modelfs::cli
