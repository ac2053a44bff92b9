#include "core/registry/registry_client.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/http/transport.h"
#include "core/http/url.h"
#include "core/registry/registry_exchange.h"
#include "core/registry/registry_host.h"
#include "core/status/status_macros.h"

namespace modelfs {

BlobReadAt BlobReadAtString(std::shared_ptr<const std::string> bytes) {
  return [bytes](uint64_t offset, char* buf, size_t n) -> absl::StatusOr<size_t> {
    if (offset >= bytes->size()) return size_t{0};
    size_t k = std::min<uint64_t>(n, bytes->size() - offset);
    std::memcpy(buf, bytes->data() + offset, k);
    return k;
  };
}

BlobReadAt BlobReadAtFd(int fd) {
  return [fd](uint64_t offset, char* buf, size_t n) -> absl::StatusOr<size_t> {
    while (true) {
      ssize_t r = ::pread(fd, buf, n, static_cast<off_t>(offset));
      if (r >= 0) return static_cast<size_t>(r);
      if (errno == EINTR) continue;
      return absl::InternalError(
          absl::StrCat("pread at offset ", offset, ": ", std::strerror(errno)));
    }
  };
}

absl::Duration StallTimeoutForReads(absl::Duration stall_timeout, absl::Duration read_deadline) {
  return std::min(stall_timeout,
                  std::max(absl::Seconds(1), absl::Ceil(read_deadline / 3, absl::Seconds(1))));
}

// The client's retry loops use the project's one policy (core/base/backoff.h), bounded by
// retry_deadline and the caller's deadline.
Backoff RegistryClient::MakeBackoff(absl::Time deadline) const {
  BackoffPolicy policy;
  policy.max_attempts = options_.max_attempts;
  policy.initial_backoff = options_.initial_backoff;
  policy.max_backoff = options_.max_backoff;
  return Backoff(policy, clock_, std::min(clock_->Now() + options_.retry_deadline, deadline));
}

absl::StatusOr<std::unique_ptr<RegistryClient>> RegistryClient::Create(
    RegistryClientOptions options) {
  if (options.registry.empty()) {
    return absl::InvalidArgumentError("RegistryClient needs a registry name");
  }
  if (options.hosts.empty()) {
    if (options.endpoint.host.empty()) options.endpoint = DefaultHostEndpoint(options.registry);
    options.hosts.push_back(RegistryHost{options.endpoint, options.credential});
  }
  if (options.upload_chunk_size == 0) options.upload_chunk_size = 16ull << 20;
  std::unique_ptr<RegistryClient> c(new RegistryClient(std::move(options)));
  for (const RegistryHost& rh : c->options_.hosts) {
    if (rh.endpoint.host.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("a host of registry ", c->options_.registry, " has no host name"));
    }
    auto h = std::make_unique<Host>(rh, c->options_.registry);
    for (const std::string& f : rh.endpoint.ca_files) {
      std::ifstream in(f, std::ios::binary);
      if (!in) {
        return absl::InternalError(absl::StrCat("cannot read CA file ", f, " for ", h->label));
      }
      std::stringstream ss;
      ss << in.rdbuf();
      absl::StrAppend(&h->ca_blob, ss.str(), "\n");
    }
    c->hosts_.push_back(std::move(h));
  }
  return c;
}

absl::StatusOr<std::unique_ptr<RegistryClient>> RegistryClient::ForRegistry(
    const std::string& registry, HostCapability capability, const HostsOptions& hosts,
    const CredentialStore& credentials, RegistryClientOptions base) {
  return ForRegistry(registry, capability, hosts, StaticKeychain(credentials), std::move(base));
}

absl::StatusOr<std::unique_ptr<RegistryClient>> RegistryClient::ForRegistry(
    const std::string& registry, HostCapability capability, const HostsOptions& hosts,
    std::shared_ptr<Keychain> keychain, RegistryClientOptions base) {
  ASSIGN_OR_RETURN(std::vector<HostEndpoint> all, ResolveHosts(registry, hosts));
  base.registry = registry;
  base.hosts.clear();
  for (HostEndpoint& ep : all) {
    if (capability == HostCapability::kPush) {
      if (!ep.push) continue;
      // The pusher's one host also answers the reads a push makes (blob and manifest HEADs).
      ep.pull = ep.resolve = true;
    } else if (!ep.pull) {
      continue;
    }
    RegistryHost rh;
    rh.keychain = keychain;
    // A mirror is asked for under its own name only; the server under the registry's, then its
    // host's.
    rh.keychain_keys = {ep.mirror ? ep.host : registry};
    if (!ep.mirror && ep.host != registry) rh.keychain_keys.push_back(ep.host);
    rh.endpoint = std::move(ep);
    base.hosts.push_back(std::move(rh));
    if (capability == HostCapability::kPush) break;
  }
  if (base.hosts.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no configured host for registry ", registry, " allows ",
                     capability == HostCapability::kPush ? "push" : "pull"));
  }
  return Create(std::move(base));
}

RegistryClient::RegistryClient(RegistryClientOptions options)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : Clock::Real()),
      pool_(std::make_unique<HttpHandlePool>()) {}

RegistryClient::~RegistryClient() = default;

RegistryStats RegistryClient::stats() const {
  RegistryStats s;
  s.requests = requests_.load();
  s.bytes_sent = bytes_sent_.load();
  s.bytes_received = bytes_received_.load();
  s.retries = retries_.load();
  s.token_requests = token_requests_.load();
  return s;
}

std::vector<HostEndpoint> RegistryClient::endpoints() const {
  std::vector<HostEndpoint> out;
  for (const auto& h : hosts_) out.push_back(h->endpoint);
  return out;
}

std::string RegistryClient::Url(const Host& h, const std::string& path) const {
  std::string url = absl::StrCat(h.endpoint.ApiRoot(), "/", path);
  return h.ns_query.empty() ? url : registry_internal::AppendQuery(url, h.ns_query);
}

RegistryClient::Host* RegistryClient::HostOf(const std::string& url) const {
  std::string origin = UrlOrigin(url);
  for (const auto& h : hosts_) {
    if (h->origin == origin) return h.get();
  }
  return nullptr;
}

std::string RegistryClient::HostLabel(const Host* h) const {
  return h != nullptr ? h->label : absl::StrCat("registry ", options_.registry);
}

absl::Status RegistryClient::Ping() {
  Request req;
  req.path = "";
  ASSIGN_OR_RETURN(Response r, SendToHosts(req, Op::kPull));
  if (r.status == 200) return absl::OkStatus();
  return MODELFS_HTTP_ERROR("GET /v2/", r);
}

}  // namespace modelfs
