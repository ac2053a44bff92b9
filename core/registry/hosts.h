// Per-registry connection settings: which URL to talk to (http or https, mirrors), and how to
// verify TLS. Read from a `--plain-http` flag or from a containerd-style certs.d directory:
//   <certs_dir>/<host[:port]>/hosts.toml   (falling back to <certs_dir>/_default/hosts.toml)
//     server = "http://reg:5000"           # upstream; default https://<host>
//     ca = "/etc/ssl/reg.pem"              # or a list; relative to the file's directory
//     skip_verify = false
//     [host."https://mirror:5000"]         # tried before `server`, in file order
//       capabilities = ["pull", "resolve"] # default pull, resolve, push
//       skip_verify = true
//       ca = "mirror.pem"
//       client = ["client.crt", "client.key"]  # or one PEM holding both
// TLS is verified unless skip_verify says otherwise for that host.
//
// Thread safety: plain values and free functions; safe to use from any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace modelfs {

enum class HostCapability { kPull, kResolve, kPush };

struct HostEndpoint {
  std::string scheme = "https";  // "http" or "https"
  std::string host;              // host[:port] to connect to
  bool pull = true;              // capabilities
  bool resolve = true;
  bool push = true;
  bool skip_verify = false;
  std::vector<std::string> ca_files;  // absolute paths; empty means the system store
  std::string client_cert;            // optional client certificate (PEM)
  std::string client_key;             // its key; may equal client_cert

  // "https://reg:5000"; requests go to BaseUrl() + "/v2/...".
  std::string BaseUrl() const { return scheme + "://" + host; }
  bool Has(HostCapability c) const;
};

struct HostsOptions {
  // Talk plain HTTP to every registry (the `--plain-http` flag). Overrides certs.d.
  bool plain_http = false;
  // Registries ("host[:port]" as written in references) reached over plain HTTP; every other
  // registry keeps TLS. The snapshotter's `insecure_hosts`.
  std::vector<std::string> plain_http_hosts;
  // containerd's certs.d layout; empty means no per-host configuration.
  std::string certs_dir;
};

// The default endpoint for a registry name: https://<host>, docker.io -> registry-1.docker.io.
HostEndpoint DefaultHostEndpoint(std::string_view registry);

// Parses hosts.toml text. `dir` resolves relative ca/client paths; `source` names the file in
// errors. Returns mirrors in file order, then the server.
// Errors: kInvalidArgument naming the file and the bad key (TOML syntax, bad URL scheme).
absl::StatusOr<std::vector<HostEndpoint>> ParseHostsToml(std::string_view registry,
                                                         std::string_view text,
                                                         const std::string& dir,
                                                         const std::string& source);

// All endpoints for a registry in the order to try them. Missing certs.d entries fall back to
// DefaultHostEndpoint. Errors: as ParseHostsToml; kInternal when the file cannot be read.
absl::StatusOr<std::vector<HostEndpoint>> ResolveHosts(std::string_view registry,
                                                       const HostsOptions& options);

// The first endpoint with `capability` (a push never goes to a pull-only mirror).
// Errors: as ResolveHosts; kFailedPrecondition when no endpoint has the capability.
absl::StatusOr<HostEndpoint> ResolveHost(std::string_view registry, HostCapability capability,
                                         const HostsOptions& options);

}  // namespace modelfs
