// HttpHubClient: HubSource over the Hugging Face Hub's HTTP API, sent through core/http.
//
//   revision  GET {endpoint}/api/models/{repo}/revision/{rev}?blobs=true   (JSON: sha, siblings)
//   file      GET {endpoint}/{repo}/resolve/{commit}/{path}, redirects not followed:
//               200: a small file, identity in X-Repo-Commit and ETag (its git blob id);
//               30x with X-Repo-Commit / X-Linked-Etag / X-Linked-Size: an LFS file, whose bytes
//                 are then fetched from Location (another host, a CDN) without the token;
//               30x without them to the same origin (a renamed repository) is followed.
//   errors    X-Error-Code (RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo) and
//             X-Error-Message name what is wrong; 401/403 without a token point at HF_TOKEN.
//
// The token is sent as "Authorization: Bearer" to the endpoint's origin only, never to a CDN,
// and never appears in a message. TLS is verified (system store). API answers are retried
// with the project's backoff policy on 5xx, 429 and transport errors; Download is one attempt.
//
// Thread safety: not safe for concurrent use (one curl handle at a time, no shared state).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/base/clock.h"
#include "core/hub/hub_source.h"

namespace modelfs {

inline constexpr std::string_view kDefaultHubEndpoint = "https://huggingface.co";

struct HubClientOptions {
  std::string endpoint = std::string(kDefaultHubEndpoint);  // trailing "/" removed
  std::string token;                                        // empty: anonymous
  std::string user_agent = "modelfs/0.1";
  absl::Duration connect_timeout = absl::Seconds(15);
  absl::Duration api_timeout = absl::Seconds(60);
  absl::Duration stall_timeout = absl::Seconds(60);  // under 1 KiB/s this long aborts a download
  int api_attempts = 4;
  Clock* clock = nullptr;  // default Clock::Real()
};

// Options from the environment, the Hub client's own conventions: HF_ENDPOINT (default
// https://huggingface.co) and HF_TOKEN.
HubClientOptions HubClientOptionsFromEnv();

struct HubHttpExchange;  // one request and its answer (http_hub_client.cc)

class HttpHubClient final : public HubSource {
 public:
  // Errors: kInvalidArgument for an endpoint that is not an http(s) URL.
  static absl::StatusOr<std::unique_ptr<HttpHubClient>> Create(HubClientOptions options);

  const std::string& endpoint() const override { return options_.endpoint; }
  absl::StatusOr<HubRevision> GetRevision(const std::string& repo,
                                          const std::string& revision) override;
  absl::Status Download(const std::string& repo, const std::string& commit, const std::string& path,
                        const HubIdentityFn& on_identity, const HubSinkFn& sink) override;

 private:
  explicit HttpHubClient(HubClientOptions options);
  absl::Status Perform(HubHttpExchange& ex);

  HubClientOptions options_;
  Clock* clock_;
};

// "/a b/c.json" -> "%2Fa%20b%2Fc.json" with keep_slash false; path segments keep "/" when
// keep_slash is true. Unreserved characters (A-Z a-z 0-9 - . _ ~) stay as they are.
std::string HubUrlEncode(std::string_view s, bool keep_slash);

}  // namespace modelfs
