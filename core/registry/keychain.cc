// Keychain implementations: a fixed store, a chain, and docker's config.json with its helpers.
#include "core/registry/keychain.h"

#include <sys/stat.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/registry/credential_process.h"
#include "nlohmann/json.hpp"

namespace modelfs {
namespace {

class Static : public Keychain {
 public:
  explicit Static(CredentialStore store) : store_(std::move(store)) {}
  absl::StatusOr<std::optional<Credential>> Get(const std::string& registry) override {
    return store_.Lookup(registry);
  }
  void Invalidate(const std::string&) override {}

 private:
  const CredentialStore store_;
};

class Chain : public Keychain {
 public:
  explicit Chain(std::vector<std::shared_ptr<Keychain>> chain) : chain_(std::move(chain)) {}
  absl::StatusOr<std::optional<Credential>> Get(const std::string& registry) override {
    absl::Status first_error;
    for (const auto& k : chain_) {
      absl::StatusOr<std::optional<Credential>> c = k->Get(registry);
      if (!c.ok()) {
        if (first_error.ok()) first_error = c.status();
        continue;
      }
      if (c->has_value()) return c;
    }
    if (!first_error.ok()) return first_error;
    return std::optional<Credential>();
  }
  void Invalidate(const std::string& registry) override {
    for (const auto& k : chain_) k->Invalidate(registry);
  }

 private:
  const std::vector<std::shared_ptr<Keychain>> chain_;
};

// What docker's credential helpers print (with exit 1) for a server they hold nothing for
// (docker-credential-helpers, credentials.errCredentialsNotFoundMessage).
constexpr char kNotFoundMessage[] = "credentials not found in native keychain";

// The server URL docker passes to a helper: Docker Hub's legacy index URL, else the registry.
std::string HelperServerUrl(const std::string& registry) {
  std::string key = CredentialStore::NormalizeKey(registry);
  return key == "docker.io" ? "https://index.docker.io/v1/" : key;
}

}  // namespace

std::shared_ptr<Keychain> StaticKeychain(CredentialStore store) {
  return std::make_shared<Static>(std::move(store));
}

std::shared_ptr<Keychain> ChainKeychains(std::vector<std::shared_ptr<Keychain>> chain) {
  if (chain.size() == 1) return chain.front();
  return std::make_shared<Chain>(std::move(chain));
}

absl::StatusOr<Credential> ParseCredentialHelperOutput(const std::string& out,
                                                       const std::string& label) {
  nlohmann::json doc = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": the answer is not a JSON object"));
  }
  auto str = [&](const char* field) -> absl::StatusOr<std::string> {
    auto it = doc.find(field);
    if (it == doc.end() || it->is_null()) return std::string();
    if (!it->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": \"", field, "\" in the answer is not a string"));
    }
    return it->get<std::string>();
  };
  absl::StatusOr<std::string> user = str("Username");
  if (!user.ok()) return user.status();
  absl::StatusOr<std::string> secret = str("Secret");
  if (!secret.ok()) return secret.status();
  if (secret->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": the answer has no Secret"));
  }
  Credential c;
  if (*user == "<token>") {
    c.identity_token = *std::move(secret);
  } else {
    c.username = *std::move(user);
    c.password = *std::move(secret);
  }
  return c;
}

DockerConfigKeychain::DockerConfigKeychain(Options options)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : Clock::Real()) {}

absl::StatusOr<std::unique_ptr<DockerConfigKeychain>> DockerConfigKeychain::Create(
    Options options) {
  std::unique_ptr<DockerConfigKeychain> k(new DockerConfigKeychain(std::move(options)));
  DockerConfigKeychain::FileId now = k->Stat();
  absl::MutexLock l(&k->mu_);
  if (absl::Status st = k->Refresh(now); !st.ok()) return st;
  return k;
}

DockerConfigKeychain::FileId DockerConfigKeychain::Stat() const {
  FileId id;
  struct stat st;
  if (options_.path.empty() || stat(options_.path.c_str(), &st) != 0) return id;
  id.exists = true;
  id.dev = st.st_dev;
  id.ino = st.st_ino;
  id.size = st.st_size;
  id.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  return id;
}

absl::Status DockerConfigKeychain::Refresh(const FileId& now) {
  if (now == file_) return absl::OkStatus();
  absl::StatusOr<CredentialStore> store = CredentialStore::LoadDockerConfig(options_.path);
  // A file that does not parse (a refresher caught mid-write) is read again on the next use;
  // meanwhile requests fail with its error rather than use credentials that were replaced.
  if (!store.ok()) return store.status();
  file_ = now;
  store_ = *std::move(store);
  helper_answers_.clear();
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Credential>> DockerConfigKeychain::Get(const std::string& registry) {
  std::string key = CredentialStore::NormalizeKey(registry);
  std::string helper;
  const FileId now = Stat();  // outside the lock: every request of every registry passes here
  {
    absl::MutexLock l(&mu_);
    if (absl::Status st = Refresh(now); !st.ok()) return st;
    helper = store_.HelperFor(registry);
    if (helper.empty()) return store_.Lookup(registry);
    auto it = helper_answers_.find(key);
    if (it != helper_answers_.end()) {
      if (it->second.error.ok()) return it->second.credential;
      if (clock_->Now() < it->second.retry_after) return it->second.error;
    }
  }
  absl::MutexLock run(&run_mu_);
  {
    // Another request may have run the helper while this one waited for run_mu_.
    absl::MutexLock l(&mu_);
    auto it = helper_answers_.find(key);
    if (it != helper_answers_.end() && it->second.error.ok()) return it->second.credential;
  }
  absl::StatusOr<std::optional<Credential>> answer = RunHelper(helper, registry);
  absl::MutexLock l(&mu_);
  ++helper_runs_;
  if (store_.HelperFor(registry) != helper) {
    return answer;  // the file changed meanwhile: answer this request, cache nothing
  }
  Cached& c = helper_answers_[key];
  if (answer.ok()) {
    c = Cached{*answer, absl::OkStatus(), absl::InfiniteFuture()};
  } else {
    c = Cached{std::nullopt, answer.status(), clock_->Now() + options_.failure_retry};
  }
  return answer;
}

absl::StatusOr<std::optional<Credential>> DockerConfigKeychain::RunHelper(
    const std::string& helper, const std::string& registry) {
  CredentialProcess p;
  p.argv = {"docker-credential-" + helper, "get"};
  p.stdin_data = HelperServerUrl(registry);
  p.timeout = options_.helper_timeout;
  p.label = absl::StrCat("credential helper docker-credential-", helper, " (", options_.path,
                         ") for registry ", registry);
  absl::StatusOr<CredentialProcessResult> r = RunCredentialProcess(p);
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    if (absl::StrContains(r->stdout, kNotFoundMessage)) {
      absl::MutexLock l(&mu_);
      return store_.Lookup(registry);
    }
    return absl::UnauthenticatedError(
        absl::StrCat(p.label, " failed with exit code ", r->exit_code));
  }
  absl::StatusOr<Credential> c = ParseCredentialHelperOutput(r->stdout, p.label);
  if (!c.ok()) return c.status();
  return std::optional<Credential>(*std::move(c));
}

void DockerConfigKeychain::Invalidate(const std::string& registry) {
  absl::MutexLock l(&mu_);
  helper_answers_.erase(CredentialStore::NormalizeKey(registry));
}

int DockerConfigKeychain::helper_runs() const {
  absl::MutexLock l(&mu_);
  return helper_runs_;
}

}  // namespace modelfs
