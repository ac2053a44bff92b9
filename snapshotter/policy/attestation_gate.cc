// The node's equivalence-attestation requirement (attestation_gate.h).
#include "snapshotter/policy/attestation_gate.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/attest/attestation.h"
#include "core/status/status_macros.h"
#include "snapshotter/policy/model_hosts.h"

namespace modelfs::snapshotter {

absl::StatusOr<std::unique_ptr<AttestationGate>> AttestationGate::Create(
    std::vector<std::string> repositories, const std::vector<std::string>& key_paths,
    ClientFor client_for) {
  for (const std::string& r : repositories) {
    absl::Status s = CheckModelHostEntry(r);
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("require_equivalence: ", s.message()));
    }
  }
  if (!repositories.empty() && key_paths.empty()) {
    return absl::InvalidArgumentError(
        "require_equivalence names repositories but equivalence_keys is empty: no attestation "
        "could ever be accepted");
  }
  std::vector<PublicKey> keys;
  for (const std::string& p : key_paths) {
    auto k = PublicKey::FromFile(p);
    if (!k.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("equivalence_keys: ", k.status().message()));
    }
    keys.push_back(*std::move(k));
  }
  return std::unique_ptr<AttestationGate>(
      new AttestationGate(std::move(repositories), std::move(keys), std::move(client_for)));
}

bool AttestationGate::Applies(const ImageReference& image) const {
  for (const std::string& r : repositories_) {
    if (ModelHostAllows(r, image.registry(), image.repository())) return true;
  }
  return false;
}

AttestationGate::Outcome AttestationGate::Check(const ImageReference& image, const Digest& digest) {
  Outcome out;
  if (!Applies(image)) return out;
  const std::string key = absl::StrCat(image.String(), " ", digest.str());
  {
    absl::MutexLock lock(&mu_);
    if (kept_.count(key)) {
      out.kept = true;
      return out;
    }
  }
  auto refuse = [&](const std::string& reason, const std::string& detail) {
    out.reason = reason;
    out.status = absl::PermissionDeniedError(absl::StrCat(
        image.String(), " (", digest.str(),
        ") has no accepted equivalence attestation, which require_equivalence asks of ",
        image.registry(), "/", image.repository(), ": ", reason, ": ", detail));
    absl::MutexLock lock(&mu_);
    ++refusals_[reason];
  };
  auto client = client_for_(image.registry());
  if (!client.ok()) {
    refuse("fetch_failed", std::string(client.status().message()));
    return out;
  }
  auto v =
      VerifyAttestations(**client, image.repository(), digest, keys_, kEquivalencePredicateType);
  if (!v.ok()) {
    refuse("fetch_failed", std::string(v.status().message()));
    return out;
  }
  if (!v->accepted) {
    refuse(v->reason, v->detail);
    return out;
  }
  absl::MutexLock lock(&mu_);
  if (kept_.size() >= 4096) kept_.clear();
  kept_.insert(key);
  return out;
}

std::map<std::string, uint64_t> AttestationGate::refusals() const {
  absl::MutexLock lock(&mu_);
  return refusals_;
}

}  // namespace modelfs::snapshotter
