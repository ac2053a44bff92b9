// Resolving a ModelPack artifact from containerd's content store (see content_store_model.h).
#include "snapshotter/content/content_store_model.h"

#include "absl/strings/str_cat.h"
#include "core/status/status_macros.h"
#include "nlohmann/json.hpp"

namespace modelfs::snapshotter {

absl::StatusOr<std::string> ContentStoreModelFetcher::ReadVerified(const Digest& digest,
                                                                   uint64_t size) {
  std::string out;
  out.reserve(size);
  Sha256 h;
  if (size > 0) {
    absl::Status st = store_.Read(ns_, digest, 0, size, clock_->Now() + absl::Seconds(60),
                                  [&](std::string_view piece) {
                                    out.append(piece);
                                    h.Update(piece);
                                    return absl::OkStatus();
                                  });
    if (absl::IsOutOfRange(st)) st = absl::DataLossError(st.message());
    RETURN_IF_ERROR(st);
  }
  const Digest got = h.Finish();
  if (got != digest) {
    return absl::DataLossError(absl::StrCat("blob ", digest.str(), " in containerd's content store",
                                            " (namespace \"", ns_, "\") failed verification: got ",
                                            got.str()));
  }
  return out;
}

absl::StatusOr<ManifestResult> ContentStoreModelFetcher::GetManifest(const std::string& repository,
                                                                     const std::string& reference) {
  absl::StatusOr<Digest> digest = Digest::Parse(reference);
  if (!digest.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "containerd's content store is addressed by digest, not by \"", reference, "\""));
  }
  ASSIGN_OR_RETURN(uint64_t size, store_.Size(ns_, *digest));
  if (size > kMaxContentManifestBytes) {
    return absl::InvalidArgumentError(absl::StrCat("manifest ", digest->str(), " is ", size,
                                                   " bytes; refusing more than ",
                                                   kMaxContentManifestBytes));
  }
  ManifestResult r;
  ASSIGN_OR_RETURN(r.bytes, ReadVerified(*digest, size));
  r.digest = *digest;
  // The store keeps no media type; a manifest names its own (both OCI and Docker ones do).
  nlohmann::json j = nlohmann::json::parse(r.bytes, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("mediaType") && j["mediaType"].is_string()) {
    r.media_type = j["mediaType"].get<std::string>();
  }
  return r;
}

absl::StatusOr<std::string> ContentStoreModelFetcher::GetBlob(const std::string& repository,
                                                              const Descriptor& d,
                                                              uint64_t max_bytes) {
  if (d.size > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("blob ", d.digest.str(), " is ", d.size,
                                                   " bytes; refusing more than ", max_bytes));
  }
  ASSIGN_OR_RETURN(uint64_t size, store_.Size(ns_, d.digest));
  if (size != d.size) {
    return absl::DataLossError(
        absl::StrCat("blob ", d.digest.str(), " in containerd's content store (namespace \"", ns_,
                     "\") is ", size, " bytes; its descriptor says ", d.size));
  }
  return ReadVerified(d.digest, size);
}

std::string ContentStoreReference(const Digest& manifest) {
  return absl::StrCat("containerd.invalid/content@", manifest.str());
}

absl::StatusOr<ResolvedModel> ResolveContentStoreModel(ContentStore& store,
                                                       const ImageVolumeKey& key, Clock* clock) {
  ContentStoreModelFetcher fetcher(store, key.ns, clock);
  ASSIGN_OR_RETURN(ImageReference ref, ImageReference::Parse(ContentStoreReference(key.image)));
  ASSIGN_OR_RETURN(ResolvedModel rm, ResolveModel(fetcher, ref));
  if (rm.volume_descriptor) {
    // A volume image is mounted through its layer (the remote-snapshot path), never from here.
    return absl::InvalidArgumentError(
        absl::StrCat(key.image.str(), " is a volume image, not a ModelPack artifact"));
  }
  return rm;
}

}  // namespace modelfs::snapshotter
