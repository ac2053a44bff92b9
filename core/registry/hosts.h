// Per-registry connection settings, the way containerd reads them (remotes/docker/config/
// hosts.go, docs/hosts.md): which hosts serve a registry, in what order, for which operations,
// and how to verify TLS. Read from a `--plain-http` flag or from a certs.d directory:
//   <certs_dir>/<host>_<port>_/, <certs_dir>/<host:port>/ or <certs_dir>/_default/ (the first
//   directory that exists), holding hosts.toml, or else docker-style *.crt / *.cert + *.key:
//     server = "http://reg:5000"           # upstream; default https://<host>
//     capabilities = ["pull", "resolve"]   # the server's (only when `server` is set)
//     ca = "/etc/ssl/reg.pem"              # or a list; relative to the file's directory
//     skip_verify = false
//     [host."https://mirror:5000"]         # tried before `server`, in file order
//       capabilities = ["pull", "resolve"] # default pull, resolve, push
//       skip_verify = true
//       ca = "mirror.pem"
//       client = ["client.crt", "client.key"]  # or one PEM holding both
//       override_path = true               # the URL's path is the API root (no /v2 appended)
//       [host."https://mirror:5000".header]
//         x-custom = "value"               # or a list of values
// A URL without a scheme is https; a URL path gets "/v2" appended unless it ends in /v2 or
// override_path is set. TLS is verified unless skip_verify says otherwise for that host.
// Capabilities: `pull` fetches manifests and blobs by digest, `resolve` turns a tag into a
// digest (trusting the host with it), `push` uploads.
//
// Thread safety: plain values and free functions; safe to use from any thread.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace modelfs {

enum class HostCapability { kPull, kResolve, kPush };

struct HostEndpoint {
  std::string scheme = "https";  // "http" or "https"
  std::string host;              // host[:port] to connect to
  std::string path = "/v2";      // API root: requests go to BaseUrl() + path + "/<repo>/..."
  bool pull = true;              // capabilities
  bool resolve = true;
  bool push = true;
  bool skip_verify = false;
  std::vector<std::string> ca_files;  // absolute paths; empty means the system store
  std::string client_cert;            // optional client certificate (PEM)
  std::string client_key;             // its key; may equal client_cert
  // Extra request headers ("Name: value") sent to this host only (never to a redirect target).
  std::vector<std::string> headers;
  // A [host."..."] entry of hosts.toml (a mirror), not the registry's server.
  bool mirror = false;

  // "https://reg:5000" (scheme and authority only).
  std::string BaseUrl() const { return scheme + "://" + host; }
  // BaseUrl() + path: "https://reg:5000/v2".
  std::string ApiRoot() const { return BaseUrl() + path; }
  bool Has(HostCapability c) const;
};

struct HostsOptions {
  // Use http, not https, for a registry's default server (the `--plain-http` flag): the scheme
  // containerd calls DefaultScheme. URLs written in hosts.toml keep their own scheme.
  bool plain_http = false;
  // Registries ("host[:port]" as written in references) whose default server is reached over
  // plain HTTP; every other registry keeps TLS. The snapshotter's `insecure_hosts`.
  std::vector<std::string> plain_http_hosts;
  // containerd's certs.d layout; empty means no per-host configuration.
  std::string certs_dir;
};

// The default endpoint for a registry name: https://<host>/v2, docker.io ->
// registry-1.docker.io.
HostEndpoint DefaultHostEndpoint(std::string_view registry);

// Parses hosts.toml text. `dir` resolves relative ca/client paths; `source` names the file in
// errors; `default_scheme` is the server's scheme when `server` is not set. Returns mirrors in
// file order, then the server.
// Errors: kInvalidArgument naming the file and the bad key (TOML syntax, bad URL scheme, an
// unknown capability). containerd logs such a file and ignores it; a node that silently lost
// its mirrors is worse, so modelfs refuses it.
absl::StatusOr<std::vector<HostEndpoint>> ParseHostsToml(std::string_view registry,
                                                         std::string_view text,
                                                         const std::string& dir,
                                                         const std::string& source,
                                                         std::string_view default_scheme = "https");

// All endpoints for a registry in the order to try them (mirrors, then the server). Without a
// certs.d directory for the registry: DefaultHostEndpoint (http when plain_http or listed).
// Errors: as ParseHostsToml; kInternal when the file cannot be read.
absl::StatusOr<std::vector<HostEndpoint>> ResolveHosts(std::string_view registry,
                                                       const HostsOptions& options);

// The first endpoint with `capability` (a push never goes to a pull-only mirror).
// Errors: as ResolveHosts; kFailedPrecondition when no endpoint has the capability.
absl::StatusOr<HostEndpoint> ResolveHost(std::string_view registry, HostCapability capability,
                                         const HostsOptions& options);

// The certs.d directory names containerd looks for, in order: "<host>_<port>_" (when there is
// a port), "<host:port>", "_default".
std::vector<std::string> HostDirectoryNames(std::string_view registry);

// Whether requests to `endpoint` for `registry` go to another host than the registry's own
// (containerd's isProxy): those carry "?ns=<registry>", which multi-registry mirrors route by.
bool IsProxyFor(const HostEndpoint& endpoint, std::string_view registry);

}  // namespace modelfs
