// The node's signature policy and its kept verdicts (see policy_gate.h).
#include "snapshotter/policy/policy_gate.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"

namespace modelfs::snapshotter {
namespace {

// SHA-256 over every file's path and bytes: what the policy's verdicts depend on.
std::string ContentOf(const std::vector<std::string>& files) {
  std::string all;
  for (const std::string& path : files) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    absl::StrAppend(&all, path, std::string(1, '\0'), ss.str().size(), std::string(1, '\0'),
                    ss.str());
  }
  return Digest::Of(all).str();
}

}  // namespace

PolicyGate::PolicyGate(std::string path, StoreFor store_for, size_t max_kept)
    : path_(std::move(path)), store_for_(std::move(store_for)), max_kept_(max_kept) {}

absl::StatusOr<std::shared_ptr<const TrustPolicy>> PolicyGate::Current(std::string* content) {
  std::vector<std::string> known = {path_};
  {
    absl::MutexLock lock(&mu_);
    if (loaded_) {
      // The common case: a few stat(2) calls and nothing else.
      if (StampFiles(loaded_->policy->files()) == loaded_->stamp) {
        *content = loaded_->content;
        return loaded_->policy;
      }
      known = loaded_->policy->files();
    }
  }
  // The files are stamped before and after the load, so a file replaced while it was read is
  // not taken as the version read (it would then never be read again). A policy naming other
  // key files than last time takes one more round.
  for (int attempt = 0; attempt < 3; ++attempt) {
    PolicyStamp before = StampFiles(known);
    absl::StatusOr<TrustPolicy> policy = TrustPolicy::LoadFile(path_);
    if (!policy.ok()) {
      absl::MutexLock lock(&mu_);
      loaded_.reset();
      kept_.clear();
      return policy.status();
    }
    PolicyStamp after = StampFiles(policy->files());
    if (policy->files() != known || !(before == after)) {
      known = policy->files();
      continue;
    }
    Loaded l;
    l.content = ContentOf(policy->files());
    l.stamp = std::move(after);
    l.policy = std::make_shared<const TrustPolicy>(*std::move(policy));
    absl::MutexLock lock(&mu_);
    if (!loaded_ || loaded_->content != l.content) kept_.clear();
    loaded_ = std::move(l);
    *content = loaded_->content;
    return loaded_->policy;
  }
  return absl::UnavailableError(
      absl::StrCat("policy ", path_, " kept changing while it was read; try again"));
}

void PolicyGate::CountRefusal(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  ++refusals_[reason];
}

PolicyGate::Outcome PolicyGate::Check(const ImageReference& image, const Digest& digest) {
  Outcome out;
  std::string content;
  absl::StatusOr<std::shared_ptr<const TrustPolicy>> policy = Current(&content);
  if (!policy.ok()) {
    // Fail closed: a broken policy refuses, it never lets everything through.
    out.reason = kPolicyUnreadable;
    out.status = absl::PermissionDeniedError(
        absl::StrCat(image.String(), "@", digest.str(), " refused: the policy ", path_,
                     " cannot be used: ", policy.status().message()));
    CountRefusal(out.reason);
    return out;
  }
  const std::string key = absl::StrCat(content, " ", image.String(), " ", digest.str());
  {
    absl::MutexLock lock(&mu_);
    if (kept_.count(key)) {
      out.reason = std::string(ReasonName(TrustReason::kAccepted));
      out.kept = true;
      return out;
    }
    ++evaluations_;
  }
  TrustVerdict verdict;
  absl::StatusOr<SignatureStore*> store = store_for_(image.registry());
  if (store.ok()) {
    verdict = Evaluate(**policy, image, digest, **store);
  } else {
    // No client for the registry: the signatures cannot be fetched, which refuses when the
    // scope needs them. A scope that needs none must not depend on it.
    class Unreachable final : public SignatureStore {
     public:
      explicit Unreachable(absl::Status st) : st_(std::move(st)) {}
      absl::StatusOr<SignatureSet> Fetch(const std::string&, const Digest&) override { return st_; }

     private:
      absl::Status st_;
    } unreachable(store.status());
    verdict = Evaluate(**policy, image, digest, unreachable);
  }
  out.reason = std::string(ReasonName(verdict.reason));
  out.status = VerdictStatus(verdict, image, digest, (*policy)->source());
  if (out.status.ok()) {
    absl::MutexLock lock(&mu_);
    if (kept_.size() >= max_kept_) kept_.clear();
    kept_.insert(key);
  } else {
    CountRefusal(out.reason);
  }
  return out;
}

std::map<std::string, uint64_t> PolicyGate::refusals() const {
  absl::MutexLock lock(&mu_);
  return refusals_;
}

uint64_t PolicyGate::evaluations() const {
  absl::MutexLock lock(&mu_);
  return evaluations_;
}

}  // namespace modelfs::snapshotter
