// Keychain: where a RegistryClient gets the credential it presents to a host, asked when it
// needs one rather than once at start, so credentials can change while the client lives
// (a docker config rewritten by a refresher, a helper or plugin that hands out short-lived
// tokens). The sources, in the order a chain asks them (docs/snapshotter.md, "Credentials"):
//   kubelet image credential provider plugins (kubelet_credential_provider.h),
//   docker's config.json: the `credHelpers` helper for the registry, else `credsStore`, else
//   the static `auths` entry.
// Secrets never appear in Status messages or logs: errors name the file, the helper and the
// registry, never a value nor a helper's output.
//
// Thread safety: every Keychain is safe for concurrent calls. A keychain may run a helper
// program inside Get (bounded by its timeout); no lock of the caller should be held then.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/base/clock.h"
#include "core/registry/credentials.h"

namespace modelfs {

class Keychain {
 public:
  virtual ~Keychain() = default;
  // The credential for `registry` ("reg:5000", "docker.io", a mirror's host[:port]), nullopt
  // when this keychain has none for it. Cheap when nothing changed (a cache lookup, a stat).
  // Errors: a source that cannot answer (a helper that is missing, fails or times out; a
  // config file that no longer parses), naming the source and the registry.
  virtual absl::StatusOr<std::optional<Credential>> Get(const std::string& registry) = 0;
  // The registry refused what Get returned: forget what is cached for it, so the next Get asks
  // the source again (runs the helper or plugin once more).
  virtual void Invalidate(const std::string& registry) = 0;
};

// The entries of a store, fixed (explicit credentials, tests).
std::shared_ptr<Keychain> StaticKeychain(CredentialStore store);

// Asks each keychain in order; the first with a credential for the registry wins. A source
// that fails is passed over; when no later one has a credential the first failure is returned.
std::shared_ptr<Keychain> ChainKeychains(std::vector<std::shared_ptr<Keychain>> chain);

// Credentials the way docker finds them in a config.json: the registry's `credHelpers` entry,
// else `credsStore`, runs `docker-credential-<name> get` (found on $PATH) with the server URL
// on stdin and reads {"ServerURL","Username","Secret"}; a Username of "<token>" makes Secret an
// identity token (an OAuth2 refresh token for the token endpoint). A helper that answers
// "credentials not found" falls back to the `auths` entry. Without a helper: the `auths` entry.
//
// The file is checked on every Get (stat: inode, size, mtime) and read again when it changed;
// helper answers are cached until then, or until Invalidate. A missing file has no entries.
class DockerConfigKeychain : public Keychain {
 public:
  struct Options {
    std::string path;  // config.json
    absl::Duration helper_timeout = absl::Seconds(30);
    // How long a failing helper's error is returned before the helper is run again.
    absl::Duration failure_retry = absl::Seconds(5);
    Clock* clock = nullptr;  // null: Clock::Real()
  };
  // Reads the file now, so a bad one is reported at start. Errors: as
  // CredentialStore::FromDockerConfigJson.
  static absl::StatusOr<std::unique_ptr<DockerConfigKeychain>> Create(Options options);

  absl::StatusOr<std::optional<Credential>> Get(const std::string& registry) override;
  void Invalidate(const std::string& registry) override;
  // How many times a helper program was run (tests).
  int helper_runs() const;

 private:
  struct FileId {
    bool exists = false;
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    int64_t mtime_ns = 0;
    bool operator==(const FileId&) const = default;
  };
  struct Cached {
    std::optional<Credential> credential;
    absl::Status error;  // a failed helper, until retry_after
    absl::Time retry_after = absl::InfiniteFuture();
  };
  explicit DockerConfigKeychain(Options options);
  FileId Stat() const;
  // Reads the file again when `now` (its Stat) differs from when it was last read.
  absl::Status Refresh(const FileId& now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::optional<Credential>> RunHelper(const std::string& helper,
                                                      const std::string& registry);

  const Options options_;
  Clock* const clock_;
  // Lock order: run_mu_ (held while a helper runs, so one registry's helper runs once however
  // many requests want it) before mu_.
  absl::Mutex run_mu_;
  mutable absl::Mutex mu_;
  FileId file_ ABSL_GUARDED_BY(mu_);
  CredentialStore store_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Cached> helper_answers_ ABSL_GUARDED_BY(mu_);  // by NormalizeKey
  int helper_runs_ ABSL_GUARDED_BY(mu_) = 0;
};

// Parses a credential helper's answer to `get`. Errors: kInvalidArgument naming `label`
// (never the bytes).
absl::StatusOr<Credential> ParseCredentialHelperOutput(const std::string& out,
                                                       const std::string& label);

}  // namespace modelfs
