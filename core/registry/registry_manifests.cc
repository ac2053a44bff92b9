// RegistryClient's manifest calls (GET with the digest checked, HEAD, PUT) and referrers (the
// API, or the "sha256-<hex>" fallback tag on registries without it).
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "core/oci/descriptor.h"
#include "core/registry/registry_client.h"
#include "core/registry/registry_exchange.h"
#include "core/registry/registry_host.h"
#include "core/status/status_macros.h"
#include "nlohmann/json.hpp"

namespace modelfs {
namespace {

using json = nlohmann::json;
using registry_internal::AppendQuery;
using registry_internal::IsDigestReference;
using registry_internal::PercentEncode;
using registry_internal::PullScope;
using registry_internal::PushScope;

constexpr size_t kMaxManifestBytes = 4 << 20;

std::string MediaTypeOf(const std::string& content_type) {
  std::string mt = content_type.substr(0, content_type.find(';'));
  return std::string(absl::StripAsciiWhitespace(mt));
}

std::string AcceptHeader(const std::vector<std::string>& accept) {
  if (!accept.empty()) return "Accept: " + absl::StrJoin(accept, ", ");
  return absl::StrCat("Accept: ", kMediaTypeOciManifest, ", ", kMediaTypeOciIndex, ", ",
                      kMediaTypeDockerManifest, ", ", kMediaTypeDockerManifestList);
}

}  // namespace

absl::StatusOr<ManifestResult> RegistryClient::GetManifest(const std::string& repo,
                                                           const std::string& reference,
                                                           const std::vector<std::string>& accept) {
  Request req;
  req.path = absl::StrCat(repo, "/manifests/", reference);
  req.scopes = PullScope(repo);
  req.headers.push_back(AcceptHeader(accept));
  req.max_body = kMaxManifestBytes;
  std::string what = absl::StrCat("GET manifest ", reference, " in repository ", repo);
  // A tag is resolved only by hosts trusted with `resolve`; a digest is checked here.
  absl::StatusOr<Response> sent =
      SendToHosts(req, IsDigestReference(reference) ? Op::kPull : Op::kResolve);
  if (!sent.ok() && absl::IsOutOfRange(sent.status())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": manifest larger than ", kMaxManifestBytes, " bytes"));
  }
  ASSIGN_OR_RETURN(Response r, std::move(sent));
  if (r.status != 200) return MODELFS_HTTP_ERROR(what, r);
  ManifestResult out;
  out.digest = Digest::Of(r.body);
  if (absl::StartsWith(reference, "sha256:") && out.digest.str() != reference) {
    return absl::DataLossError(absl::StrCat(what, ": ", HostLabel(r.host),
                                            " returned bytes with digest ", out.digest.str()));
  }
  std::string reported = r.Header("docker-content-digest");
  if (!reported.empty() && absl::StartsWith(reported, "sha256:") && reported != out.digest.str()) {
    return absl::DataLossError(absl::StrCat(what, ": bytes hash to ", out.digest.str(), " but ",
                                            HostLabel(r.host), " says Docker-Content-Digest ",
                                            reported));
  }
  out.media_type = MediaTypeOf(r.Header("content-type"));
  if (out.media_type.empty() || out.media_type == "application/json" ||
      out.media_type == "text/plain" || out.media_type == "application/octet-stream") {
    json doc = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_discarded() && doc.is_object() && doc.contains("mediaType") &&
        doc["mediaType"].is_string()) {
      out.media_type = doc["mediaType"].get<std::string>();
    }
  }
  out.bytes = std::move(r.body);
  return out;
}

absl::StatusOr<ManifestHead> RegistryClient::HeadManifest(const std::string& repo,
                                                          const std::string& reference,
                                                          const std::vector<std::string>& accept) {
  Request req;
  req.method = "HEAD";
  req.path = absl::StrCat(repo, "/manifests/", reference);
  req.scopes = PullScope(repo);
  req.headers.push_back(AcceptHeader(accept));
  std::string what = absl::StrCat("HEAD manifest ", reference, " in repository ", repo);
  ASSIGN_OR_RETURN(Response r,
                   SendToHosts(req, IsDigestReference(reference) ? Op::kPull : Op::kResolve));
  if (r.status != 200) return MODELFS_HTTP_ERROR(what, r);
  ManifestHead out;
  absl::StatusOr<Digest> d = Digest::Parse(r.Header("docker-content-digest"));
  if (!d.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": ", HostLabel(r.host), " sent no usable Docker-Content-Digest"));
  }
  if (absl::StartsWith(reference, "sha256:") && d->str() != reference) {
    return absl::DataLossError(
        absl::StrCat(what, ": ", HostLabel(r.host), " reports digest ", d->str()));
  }
  out.digest = *d;
  out.media_type = MediaTypeOf(r.Header("content-type"));
  (void)absl::SimpleAtoi(r.Header("content-length"), &out.size);
  return out;
}

absl::StatusOr<Digest> RegistryClient::PutManifest(const std::string& repo,
                                                   const std::string& reference,
                                                   const std::string& bytes,
                                                   const std::string& media_type) {
  Request req;
  req.method = "PUT";
  req.path = absl::StrCat(repo, "/manifests/", reference);
  req.scopes = PushScope(repo);
  req.headers.push_back("Content-Type: " + media_type);
  req.body = &bytes;
  std::string what = absl::StrCat("PUT manifest ", reference, " in repository ", repo);
  ASSIGN_OR_RETURN(Response r, SendToHosts(req, Op::kPush));
  if (r.status != 201 && r.status != 200) return MODELFS_HTTP_ERROR(what, r);
  Digest d = Digest::Of(bytes);
  std::string reported = r.Header("docker-content-digest");
  if (!reported.empty() && reported != d.str()) {
    return absl::DataLossError(absl::StrCat(what, ": ", HostLabel(r.host), " stored it as ",
                                            reported, ", expected ", d.str()));
  }
  return d;
}

namespace {

absl::StatusOr<json> ParseIndex(const std::string& bytes, const std::string& what) {
  json doc = json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not a JSON object"));
  }
  if (!doc.contains("manifests")) doc["manifests"] = json::array();
  if (!doc["manifests"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": \"manifests\" is not an array"));
  }
  return doc;
}

json EmptyIndex() {
  return json{
      {"schemaVersion", 2}, {"mediaType", kMediaTypeOciIndex}, {"manifests", json::array()}};
}

void FilterByArtifactType(json* index, const std::string& artifact_type) {
  if (artifact_type.empty()) return;
  json kept = json::array();
  for (const json& d : (*index)["manifests"]) {
    if (d.is_object() && d.value("artifactType", "") == artifact_type) kept.push_back(d);
  }
  (*index)["manifests"] = std::move(kept);
}

}  // namespace

absl::StatusOr<std::string> RegistryClient::GetReferrers(const std::string& repo,
                                                         const Digest& subject,
                                                         const std::string& artifact_type) {
  Request req;
  std::string path = absl::StrCat(repo, "/referrers/", subject.str());
  if (!artifact_type.empty()) {
    path = AppendQuery(path, "artifactType=" + PercentEncode(artifact_type));
  }
  req.path = path;
  req.scopes = PullScope(repo);
  req.headers.push_back(absl::StrCat("Accept: ", kMediaTypeOciIndex));
  std::string what = absl::StrCat("GET referrers of ", subject.str(), " in repository ", repo);
  ASSIGN_OR_RETURN(Response r, SendToHosts(req, Op::kPull));
  if (r.status == 200) {
    ASSIGN_OR_RETURN(json index, ParseIndex(r.body, what));
    if (!absl::StrContains(r.Header("oci-filters-applied"), "artifactType")) {
      FilterByArtifactType(&index, artifact_type);
    }
    return index.dump();
  }
  if (r.status != 404) return MODELFS_HTTP_ERROR(what, r);

  // No referrers API (Distribution 2.8): the referrers tag schema.
  std::string tag = ::modelfs::ReferrersFallbackTag(subject);
  absl::StatusOr<ManifestResult> m = GetManifest(repo, tag, {kMediaTypeOciIndex});
  if (absl::IsNotFound(m.status())) return EmptyIndex().dump();
  if (!m.ok()) return m.status();
  ASSIGN_OR_RETURN(json index,
                   ParseIndex(m->bytes, absl::StrCat("referrers tag ", tag, " in ", repo)));
  FilterByArtifactType(&index, artifact_type);
  return index.dump();
}

absl::StatusOr<bool> RegistryClient::HasReferrersApi(const std::string& repo,
                                                     const Digest& subject) {
  Request req;
  req.path = absl::StrCat(repo, "/referrers/", subject.str());
  req.scopes = PullScope(repo);
  req.headers.push_back(absl::StrCat("Accept: ", kMediaTypeOciIndex));
  ASSIGN_OR_RETURN(Response r, SendToHosts(req, Op::kPull));
  if (r.status == 200) return true;
  if (r.status == 404) return false;
  return MODELFS_HTTP_ERROR(
      absl::StrCat("GET referrers of ", subject.str(), " in repository ", repo), r);
}

absl::Status RegistryClient::PutReferrersFallback(const std::string& repo, const Digest& subject,
                                                  const std::string& descriptor_json) {
  json desc = json::parse(descriptor_json, nullptr, /*allow_exceptions=*/false);
  if (desc.is_discarded() || !desc.is_object() || !desc.contains("digest") ||
      !desc["digest"].is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("referrer descriptor for ", subject.str(), " is not a descriptor object"));
  }
  std::string tag = ::modelfs::ReferrersFallbackTag(subject);
  json index = EmptyIndex();
  absl::StatusOr<ManifestResult> m = GetManifest(repo, tag, {kMediaTypeOciIndex});
  if (m.ok()) {
    ASSIGN_OR_RETURN(index,
                     ParseIndex(m->bytes, absl::StrCat("referrers tag ", tag, " in ", repo)));
  } else if (!absl::IsNotFound(m.status())) {
    return m.status();
  }
  for (const json& d : index["manifests"]) {
    if (d.is_object() && d.value("digest", "") == desc["digest"].get<std::string>()) {
      return absl::OkStatus();
    }
  }
  index["manifests"].push_back(desc);
  index["mediaType"] = kMediaTypeOciIndex;
  ASSIGN_OR_RETURN(Digest d, PutManifest(repo, tag, index.dump(), kMediaTypeOciIndex));
  (void)d;
  return absl::OkStatus();
}

}  // namespace modelfs
