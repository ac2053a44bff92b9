// kubelet image credential provider plugins (KEP-2133), run by modelfs the way the kubelet runs
// them, so a node's plugin (ECR, GCR, ACR, a site's own) serves the snapshotter too:
//  - the CredentialProviderConfig file (apiVersion kubelet.config.k8s.io/v1): providers[] with
//    name, matchImages, defaultCacheDuration, apiVersion, args, env. modelfs reads it as JSON
//    (YAML's JSON form; the kubelet reads that too, so one file can serve both);
//  - the plugin, <bin dir>/<name>, gets a CredentialProviderRequest on stdin
//    ({"apiVersion": "credentialprovider.kubelet.k8s.io/v1", "kind":
//    "CredentialProviderRequest", "image": "..."}) and answers a CredentialProviderResponse
//    (cacheKeyType Image/Registry/Global, cacheDuration, auth: {pattern: {username, password}});
//  - answers are cached per cacheKeyType for cacheDuration, else the provider's
//    defaultCacheDuration; a duration of 0 is not cached.
// matchImages follow the kubelet's rules (pkg/credentialprovider, URLsMatch): the pattern and
// the image are split into host, port and path; the hosts must have as many dot-separated parts,
// each matched as a glob (`*`, `?`, `[...]`, within the part); the ports must be equal; the
// pattern's path must be a prefix of the image's. modelfs asks per registry: the image in the
// request is the registry ("reg:5000"), so a pattern with a path never matches.
// The first provider whose matchImages match is run; among the answer's auth entries the one
// whose pattern matches with the most specific (longest) pattern is used.
//
// Thread safety: KubeletCredentialProviders is a Keychain: safe for concurrent calls; plugins are
// run one at a time per provider.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/base/clock.h"
#include "core/registry/keychain.h"

namespace modelfs {

struct KubeletCredentialProvider {
  std::string name;
  std::vector<std::string> match_images;
  absl::Duration default_cache_duration = absl::ZeroDuration();
  std::string api_version;
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;
};

enum class CredentialCacheKeyType { kImage, kRegistry, kGlobal };

struct KubeletCredentialResponse {
  CredentialCacheKeyType cache_key_type = CredentialCacheKeyType::kImage;
  std::optional<absl::Duration> cache_duration;  // unset: the provider's default
  std::map<std::string, Credential> auth;        // by match pattern
};

// Parses a CredentialProviderConfig (JSON). Errors: kInvalidArgument naming `source` and the
// provider (missing name, matchImages or apiVersion; a bad duration; an apiVersion other than
// credentialprovider.kubelet.k8s.io/v1 or v1beta1; a name with '/').
absl::StatusOr<std::vector<KubeletCredentialProvider>> ParseCredentialProviderConfig(
    const std::string& json, const std::string& source);

// Parses a plugin's CredentialProviderResponse. `api_version` is the one the request carried
// (the response must name it). Errors: kInvalidArgument naming `label`, never a value.
absl::StatusOr<KubeletCredentialResponse> ParseCredentialProviderResponse(
    const std::string& json, const std::string& api_version, const std::string& label);

// The kubelet's matchImages rule (see the file comment) for one pattern and one image.
bool KubeletImageMatches(const std::string& pattern, const std::string& image);

// Parses a Go duration ("12h", "1h30m", "0s"). Errors: kInvalidArgument.
absl::StatusOr<absl::Duration> ParseGoDuration(const std::string& s);

class KubeletCredentialProviders : public Keychain {
 public:
  struct Options {
    std::string config_path;  // the CredentialProviderConfig file
    std::string bin_dir;      // where the plugins are
    absl::Duration plugin_timeout = absl::Seconds(30);
    Clock* clock = nullptr;  // null: Clock::Real()
  };
  // Reads and checks the config now; every provider's plugin must exist in bin_dir.
  // Errors: kInvalidArgument (the config), kNotFound (the file, a plugin), naming them.
  static absl::StatusOr<std::unique_ptr<KubeletCredentialProviders>> Create(Options options);

  absl::StatusOr<std::optional<Credential>> Get(const std::string& registry) override;
  void Invalidate(const std::string& registry) override;
  int plugin_runs() const;

 private:
  struct CachedAnswer {
    std::optional<Credential> credential;
    absl::Time expires;
  };
  struct Provider {
    KubeletCredentialProvider config;
    absl::Mutex run_mu;  // one run of the plugin at a time
  };
  explicit KubeletCredentialProviders(Options options) : options_(std::move(options)) {}
  absl::StatusOr<std::optional<Credential>> Run(Provider& p, const std::string& image);

  const Options options_;
  Clock* clock_ = nullptr;
  std::vector<std::unique_ptr<Provider>> providers_;
  mutable absl::Mutex mu_;
  // By provider name and cache key ("" for Global).
  std::map<std::pair<std::string, std::string>, CachedAnswer> cache_ ABSL_GUARDED_BY(mu_);
  int plugin_runs_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace modelfs
