// Internal to core/registry: one HTTP exchange of the RegistryClient (its Request and
// Response, built over core/http by RegistryClient::Transport), the status payloads the
// client's files use to pass a failure's kind along, and the helpers every API call uses
// (scopes, error statuses from registry answers).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/http/content_range.h"
#include "core/oci/digest.h"
#include "core/registry/registry_client.h"

namespace modelfs {
namespace registry_internal {

inline constexpr size_t kMaxErrorBodyBytes = 64 << 10;
inline constexpr size_t kMaxJsonBodyBytes = 8 << 20;
inline constexpr char kRetryablePayload[] = "modelfs.dev/retryable-transport";
inline constexpr char kIgnoredRangePayload[] = "modelfs.dev/ignored-range";
// On an ignored-range status: the size of the whole blob the host offered instead (decimal).
inline constexpr char kWholeSizePayload[] = "modelfs.dev/whole-size";

// Transport failures (connection refused, reset, timeouts) carry kRetryablePayload so retry
// loops can tell them from a sink or source error that happens to share a status code.
absl::Status TransportError(std::string message);
bool IsRetryableTransport(const absl::Status& s);
// A host answered a range request with the whole blob: the next host may serve the range.
bool IsIgnoredRange(const absl::Status& s);

// Unreserved characters (A-Z a-z 0-9 - . _ ~) as they are, every other byte as %xx.
std::string PercentEncode(std::string_view s);
std::string AppendQuery(const std::string& url, const std::string& param);

// The status for a registry's answer `status` to `what`: the code from the Distribution error
// code in `body` or from the HTTP status, the message naming the host, the registry's own
// explanation, why a 401 stands, the attempts, and what other hosts answered.
absl::Status StatusFromResponse(const std::string& what, const std::string& host_label, long status,
                                const std::string& body, int attempts, const std::string& auth_note,
                                const std::string& tried);

std::vector<std::string> PullScope(const std::string& repo);
std::vector<std::string> PushScope(const std::string& repo);
std::string BlobWhat(const char* verb, const std::string& repo, const Digest& d);
bool IsDigestReference(const std::string& reference);

// What a body sink wants after a piece of the body (RegistryClient::Request::sink).
enum class BodyNeed { kMore, kDone };

}  // namespace registry_internal

struct RegistryClient::Request {
  std::string method = "GET";
  // An API path below a host's root ("<repo>/blobs/<digest>", query allowed; "" is the root):
  // SendToHosts builds the URL for each host it tries. Absent: `url` on `host` as given.
  std::optional<std::string> path;
  std::string url;
  Host* host = nullptr;  // the host `url` is on (set per attempt by SendToHosts)
  // A blob digest: hosts known to ignore Range for it are tried last (range reads only).
  std::string range_blob;
  std::vector<std::string> headers;  // "Name: value"; never Authorization
  std::vector<std::string> scopes;   // token scopes this request needs
  // Evaluated before every attempt so a resumed GET can ask for the bytes still missing.
  std::function<std::string()> dynamic_header;
  // Request body: bytes, or a window of a reader.
  const std::string* body = nullptr;
  const BlobReadAt* reader = nullptr;
  uint64_t reader_offset = 0;
  uint64_t reader_length = 0;
  // Receives 2xx bodies (otherwise buffered in Response::body up to max_body), a piece at a
  // time: kMore to go on, kDone when it has all it wants (a range read served from a whole-blob
  // answer), which ends the transfer there with the response answered (Response::sink_done);
  // an error ends it with that error.
  std::function<absl::StatusOr<registry_internal::BodyNeed>(const Response&, std::string_view)>
      sink;
  size_t max_body = registry_internal::kMaxJsonBodyBytes;
  bool long_transfer = false;  // blob bodies: no total timeout, only the stall timeout
  // The caller's deadline: caps every attempt's timeout and the retry loop.
  absl::Time deadline = absl::InfiniteFuture();
  // One attempt (auth and redirects included), no retries: the caller retries.
  bool single_attempt = false;
};

struct RegistryClient::Response {
  long status = 0;
  std::multimap<std::string, std::string> headers;  // lowercase names
  std::string body;
  std::string url;  // after redirects
  bool redirected = false;
  uint64_t body_bytes = 0;  // bytes of this response's body seen so far
  // The sink had all it wanted (BodyNeed::kDone) and the transfer was stopped there: the body
  // is cut short on purpose, and the answer stands.
  bool sink_done = false;
  int attempts = 1;
  std::string auth_note;  // why a 401 stands (no credentials, refused credentials)
  Host* host = nullptr;   // the host that answered
  std::string tried;      // what the other hosts tried for this request answered

  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
  std::vector<std::string> Headers(const std::string& name) const {
    std::vector<std::string> v;
    for (auto [it, end] = headers.equal_range(name); it != end; ++it) v.push_back(it->second);
    return v;
  }
  // Start offset of a 206 body ("Content-Range: bytes 100-199/1000"); 0 otherwise, and when
  // Content-Range is missing or not one ParseContentRange accepts.
  uint64_t RangeStart() const {
    if (status != 206) return 0;
    std::optional<ContentRange> cr = ParseContentRange(Header("content-range"));
    return cr.has_value() && cr->first.has_value() ? *cr->first : 0;
  }
};

#define MODELFS_HTTP_ERROR(what, r)                 \
  ::modelfs::registry_internal::StatusFromResponse( \
      (what), HostLabel((r).host), (r).status, (r).body, (r).attempts, (r).auth_note, (r).tried)

}  // namespace modelfs
