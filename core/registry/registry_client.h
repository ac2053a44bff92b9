// RegistryClient: the OCI Distribution API (v2) over core/http for one registry, served by one
// or more hosts: blobs (HEAD, streaming GET, ranged GET, monolithic and chunked upload,
// cross-repository mount), manifests (GET/HEAD/PUT, digest computed and checked), referrers
// (the API, or the "sha256-<hex>" fallback tag on registries without it).
//
// Hosts (mirrors and the server, from hosts.toml; see hosts.h) are used the way containerd's
// resolver and fetcher use them:
//  - a tag is resolved only by hosts with both `pull` and `resolve`; manifests and blobs by
//    digest by hosts with `pull`; uploads go to the first host with `push`, and nowhere else;
//  - hosts are tried in order; a host that fails (connection error, an HTTP error status, 404,
//    or a 200 to a range request) passes the request to the next one, and when all fail the
//    first failure that is not a 404 is returned, naming every host tried;
//  - requests to a host other than the registry's own carry "?ns=<registry>".
// A host that failed with a connection error or a 5xx/429 is tried after the others for a
// backoff (host_failure_backoff, doubling with each failure in a row up to
// host_failure_cooldown), so a dead mirror costs one failed connection per backoff, not one
// per read, and a mirror that failed once is asked again soon. A host that answered a range
// request with the whole blob is tried after the others for that blob for
// ignored_range_cooldown; so is a host whose answer the caller found wrong (a Content-Range
// for another range, or bytes that failed verification: IsBadAnswer in core/base/backoff.h),
// for bad_answer_cooldown.
//
// Mirrors that are pull-through caches (hosts.toml [host] entries) get range reads of a blob
// one at a time until one is answered with 206: a pull-through cache that has not stored a blob
// answers a range request with the whole blob, streamed from its upstream once more for every
// such request while it stores the blob from a fetch of its own (Distribution 2.8,
// registry/proxy/proxyblobstore.go ServeBlob). So a whole-blob answer is cut at its first byte,
// and range reads of that blob wait for the mirror (asking it again after mirror_probe_interval,
// doubling to 2 s, then after a quarter of the time waited) rather than going to the registry: the
// registry then serves each blob once, to the mirror, however many nodes read it. A read waits at
// most half of what is left of its deadline, and no read waits once the mirror has answered that
// way for mirror_fill_wait (a host that never serves ranges); it then goes to the next host as
// before. A whole-blob answer for a small blob (up to 4 MiB) is read instead, and the range taken
// from it.
//
// Authentication: per host, anonymous, Basic, or the Bearer token flow (a 401 challenge names
// a realm, service and scope; a token is fetched with the host's credential and cached per
// scope until it expires). A mirror gets only the credential stored for its own host name,
// never the registry's. Credentials and tokens never appear in Status messages.
// A host's credential may come from a Keychain (keychain.h), asked on every request (a cache
// lookup there): when its answer changes (a rewritten docker config), the host's tokens are
// dropped. When the registry answers 401 to a request that carried a token or credentials, the
// refused token is dropped and one is fetched again; when the token server (or, with Basic, the
// registry) refuses the credential, the keychain is told to forget it (Invalidate), asked again
// (a helper or plugin runs once more) and the request retried once. Concurrent requests share
// one refresh: token fetches and credential refreshes of a host are serialised, and a request
// that waited uses the token or credential the first one got.
//
// Manifests are raw bytes plus a media type here: parsing them is core/oci's business.
// Blob bytes are NOT verified by GetBlob/GetBlobRange; the caller hashes them (the trust
// chain lives in core/cache). Manifest bytes ARE checked against the digest asked for and
// against Docker-Content-Digest.
//
// Retries: 5xx, 429 (honouring Retry-After) and connection errors are retried with jittered
// exponential backoff (core/base/backoff.h) until an overall deadline, each round trying the
// hosts in order; other 4xx never are. GetBlobRange is the exception: it serves the blob
// cache, which owns the read deadline and the retry loop, so it makes one attempt per host
// and says by its code whether another is worth it (kUnavailable for 5xx and connection
// errors, kResourceExhausted for 429).
//
// Where the code is: this class is the façade; its parts are in files of their own.
//   registry_client.cc     creation, host resolution from hosts.toml, stats, Ping
//   registry_exchange.h/cc one exchange (Request, Response) over core/http, error statuses
//   registry_auth.cc       the token dance, Basic, credentials; Send (auth and redirects)
//   registry_host.h        what the client knows of one host (tokens, cooldowns, mirror fills)
//   registry_fallback.cc   host order, failure backoff, mirror gating, SendToHosts
//   registry_blobs.cc      blob HEAD, GET, range reads, uploads, mounts
//   registry_manifests.cc  manifests and referrers
//
// Thread safety: all methods may be called concurrently. Each request uses its own HttpHandle
// (taken from an HttpHandlePool so connections are reused); token, redirect and host-health
// state is guarded by absl::Mutex (lock order: a host's mutex is never held while taking
// another lock).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/base/backoff.h"
#include "core/base/clock.h"
#include "core/oci/digest.h"
#include "core/registry/credentials.h"
#include "core/registry/hosts.h"
#include "core/registry/keychain.h"
#include "core/registry/registry_observer.h"

namespace modelfs {

class HttpHandlePool;

inline constexpr char kMediaTypeOciManifest[] = "application/vnd.oci.image.manifest.v1+json";
inline constexpr char kMediaTypeOciIndex[] = "application/vnd.oci.image.index.v1+json";
inline constexpr char kMediaTypeDockerManifest[] =
    "application/vnd.docker.distribution.manifest.v2+json";
inline constexpr char kMediaTypeDockerManifestList[] =
    "application/vnd.docker.distribution.manifest.list.v2+json";

// One host the client may talk to, with the credential it presents there: `credential` fixed,
// or asked of `keychain` (under each of `keychain_keys` in turn) whenever one is needed.
struct RegistryHost {
  HostEndpoint endpoint;
  std::optional<Credential> credential;
  std::shared_ptr<Keychain> keychain;
  std::vector<std::string> keychain_keys;
};

struct RegistryClientOptions {
  // The registry as references name it ("reg:5000", "docker.io"); used in messages and in
  // the "ns" query parameter sent to mirrors.
  std::string registry;
  // The hosts to try, in order (hosts.toml mirrors, then the server; see hosts.h). Empty: one
  // host, `endpoint` with `credential`.
  std::vector<RegistryHost> hosts;
  // Where to connect and how to verify TLS when `hosts` is empty. Empty host:
  // DefaultHostEndpoint.
  HostEndpoint endpoint;
  std::optional<Credential> credential;
  // How long a host that failed (connection error, 5xx, 429) is tried after the others: the
  // backoff after its first failure in a row, doubling with each further one up to the cooldown.
  absl::Duration host_failure_backoff = absl::Seconds(1);
  absl::Duration host_failure_cooldown = absl::Seconds(30);
  // How long a host that answered a range request for a blob with the whole blob is tried
  // after the others for that blob. A pull-through cache does so until it has stored the blob,
  // and each request it gets before then costs its upstream another fetch; asking again every
  // few seconds finds the stored copy soon after it is there.
  absl::Duration ignored_range_cooldown = absl::Seconds(5);
  // How long a host whose answer for a blob was wrong (IsBadAnswer) is tried after the others
  // for that blob.
  absl::Duration bad_answer_cooldown = absl::Seconds(30);
  // Mirrors filling a blob (see the file comment): the first wait before asking again, and how
  // long after its first whole-blob answer a mirror is waited for at all.
  // The first wait is at least 1 s: each request a filling Distribution mirror gets costs its
  // upstream a few MB (measured: 4-8 MB on loopback), and most fills of a large blob last
  // seconds.
  absl::Duration mirror_probe_interval = absl::Seconds(1);
  absl::Duration mirror_fill_wait = absl::Seconds(60);

  absl::Duration connect_timeout = absl::Seconds(15);
  // A transfer that moves no byte, or under 1 KiB/s, for this long is aborted (and retried). Large
  // blobs have no fixed total timeout; small requests also have request_timeout. Clients that serve
  // reads with a deadline use StallTimeoutForReads.
  absl::Duration stall_timeout = absl::Seconds(60);
  absl::Duration request_timeout = absl::Minutes(2);  // requests without a blob body
  // Retries stop when either limit is reached.
  absl::Duration retry_deadline = absl::Minutes(2);
  int max_attempts = 6;
  absl::Duration initial_backoff = absl::Milliseconds(200);
  absl::Duration max_backoff = absl::Seconds(10);

  // Blobs up to this size go in one PUT; larger ones in PATCH chunks of upload_chunk_size.
  uint64_t monolithic_upload_limit = 16ull << 20;
  uint64_t upload_chunk_size = 16ull << 20;
  // How long a redirect target (a presigned storage URL) is reused for range reads.
  absl::Duration redirect_cache_ttl = absl::Seconds(60);
  std::string user_agent = "modelfs/0.1";
  // Time for backoff, token expiry and the redirect cache; null: Clock::Real(). Must outlive
  // the client.
  Clock* clock = nullptr;
  // Told about every HTTP exchange (metrics); null: nobody. Must outlive the client.
  RegistryObserver* observer = nullptr;
};

// Counters since the client was created. Push reports "uploaded N bytes" from bytes_sent.
struct RegistryStats {
  uint64_t requests = 0;        // HTTP requests sent (token requests included)
  uint64_t bytes_sent = 0;      // request body bytes
  uint64_t bytes_received = 0;  // response body bytes
  uint64_t retries = 0;         // attempts repeated after a 5xx, 429 or connection error
  uint64_t token_requests = 0;  // requests to a token realm
};

struct ManifestResult {
  std::string bytes;
  std::string media_type;
  Digest digest;  // SHA-256 of bytes (checked against the request and Docker-Content-Digest)
};

struct ManifestHead {
  Digest digest;
  std::string media_type;
  uint64_t size = 0;
};

// Receives blob bytes in order; an error stops the transfer and is returned as is.
using BlobSink = std::function<absl::Status(std::string_view chunk)>;
// Reads up to `n` bytes at `offset` into `buf`; returns the count, 0 only at the end.
// May be called again for the same offset (a retried upload).
using BlobReadAt = std::function<absl::StatusOr<size_t>(uint64_t offset, char* buf, size_t n)>;

BlobReadAt BlobReadAtString(std::shared_ptr<const std::string> bytes);
// pread() on fd; the caller keeps fd open for the duration of the push.
BlobReadAt BlobReadAtFd(int fd);

// The stall timeout of a client whose bytes serve reads that wait at most `read_deadline`:
// stall_timeout, but never longer than a third of the deadline (rounded up to whole seconds,
// as libcurl counts; at least 1 s). A connection that moves under 1 KiB/s for that long is cut
// off and its request retried on a new one, while the reader waiting on it still has two
// thirds of its deadline: one stalled connection costs the reader time, not an EIO (a model
// server that gets EIO at start exits). Left to the 60 s default, a stalled readahead request
// held the chunks that readers wait for, and every read of them failed with EIO for a minute
// after the registry answered again.
absl::Duration StallTimeoutForReads(absl::Duration stall_timeout, absl::Duration read_deadline);

class RegistryClient {
 public:
  // Errors: kInvalidArgument (no registry name), kInternal (a CA file cannot be read).
  static absl::StatusOr<std::unique_ptr<RegistryClient>> Create(RegistryClientOptions options);

  // Resolves the hosts for `registry` from `hosts` and their credentials from `credentials`,
  // then Create()s. kPull (or kResolve): every host with `pull`, in order. kPush: only the
  // first host with `push` (as containerd's pusher), used for every request of the client.
  // Credentials: a mirror gets the entry for its own host[:port]; the server the registry's
  // entry, else the one for its host. `base` supplies timeouts and limits.
  // Errors: as ResolveHosts; kFailedPrecondition when no host has the capability.
  static absl::StatusOr<std::unique_ptr<RegistryClient>> ForRegistry(
      const std::string& registry, HostCapability capability, const HostsOptions& hosts,
      const CredentialStore& credentials, RegistryClientOptions base = {});
  // The same with credentials asked of `keychain` when needed (see the file comment).
  static absl::StatusOr<std::unique_ptr<RegistryClient>> ForRegistry(
      const std::string& registry, HostCapability capability, const HostsOptions& hosts,
      std::shared_ptr<Keychain> keychain, RegistryClientOptions base = {});

  ~RegistryClient();
  RegistryClient(const RegistryClient&) = delete;
  RegistryClient& operator=(const RegistryClient&) = delete;

  // GET /v2/. OK when the registry answers (with credentials if it asks for them).
  absl::Status Ping();

  // The blob's size, or nullopt when the registry does not have it (404).
  absl::StatusOr<std::optional<uint64_t>> HeadBlob(const std::string& repo, const Digest& digest);
  absl::StatusOr<bool> BlobExists(const std::string& repo, const Digest& digest);

  // Streams the whole blob into `sink`. After a dropped connection the transfer resumes with
  // a Range request, so the sink sees every byte exactly once. Not verified: hash in the sink.
  absl::Status GetBlob(const std::string& repo, const Digest& digest, const BlobSink& sink);
  // The whole blob in memory, for small documents (signature payloads, attestations, their
  // configs): more than `max_bytes` is kInvalidArgument naming the blob and the cap, so a
  // hostile registry cannot make the caller hold more. Not verified: the caller hashes it.
  absl::StatusOr<std::string> GetSmallBlob(const std::string& repo, const Digest& digest,
                                           size_t max_bytes);

  // Returns exactly `length` bytes at `offset`. Requires 206: a 200 is kFailedPrecondition
  // ("registry ignored Range"); 416 or a short body is kOutOfRange; a 206 whose Content-Range
  // names another range is kFailedPrecondition marked IsBadAnswer (the host is avoided for the
  // blob, so the caller's one refetch goes to the next host). Redirects to storage are
  // followed (without Authorization when the host changes) and remembered per digest for
  // redirect_cache_ttl; a failing remembered URL is dropped and the registry asked again.
  // One attempt, bounded by `deadline` (kDeadlineExceeded once it has passed): the caller
  // retries. 5xx and connection errors are kUnavailable, 429 is kResourceExhausted.
  absl::StatusOr<std::string> GetBlobRange(const std::string& repo, const Digest& digest,
                                           uint64_t offset, uint64_t length,
                                           absl::Time deadline = absl::InfiniteFuture());

  // GetBlobRange delivering the body to `sink` as it arrives (same checks, one attempt). A
  // sink error ends the transfer and is returned; one marked IsBadAnswer (bytes that failed
  // verification) also makes the host that sent them avoided for the blob.
  absl::Status StreamBlobRange(const std::string& repo, const Digest& digest, uint64_t offset,
                               uint64_t length, absl::Time deadline,
                               const std::function<absl::Status(absl::string_view)>& sink);

  // Uploads `size` bytes read from `source` as blob `digest` (the registry checks the digest;
  // a mismatch is kDataLoss). Small blobs: POST then one PUT ?digest=. Larger: PATCH chunks
  // with Content-Range, following Location each time, then PUT ?digest=. A failure that is
  // worth retrying restarts the upload session. Does not check BlobExists first.
  absl::Status PushBlob(const std::string& repo, const Digest& digest, uint64_t size,
                        const BlobReadAt& source);

  // Cross-repository mount: POST ?mount=<digest>&from=<from_repo>. true when mounted (201);
  // false when the registry opened an upload session instead (202; cancelled here), and the
  // caller should PushBlob.
  absl::StatusOr<bool> MountBlob(const std::string& repo, const Digest& digest,
                                 const std::string& from_repo);

  // `reference` is a tag or a digest string. `accept` defaults to OCI manifest/index and
  // Docker v2 manifest/list. Errors: kNotFound; kDataLoss when the bytes do not hash to the
  // digest asked for or to Docker-Content-Digest; kInvalidArgument for a manifest over 4 MiB.
  absl::StatusOr<ManifestResult> GetManifest(const std::string& repo, const std::string& reference,
                                             const std::vector<std::string>& accept = {});
  // HEAD: digest (Docker-Content-Digest, required), media type and size without the body.
  absl::StatusOr<ManifestHead> HeadManifest(const std::string& repo, const std::string& reference,
                                            const std::vector<std::string>& accept = {});
  // PUT /v2/<repo>/manifests/<reference>; returns the digest of `bytes` (kDataLoss when the
  // registry reports another one).
  absl::StatusOr<Digest> PutManifest(const std::string& repo, const std::string& reference,
                                     const std::string& bytes, const std::string& media_type);

  // An OCI image index (JSON bytes) listing the manifests whose subject is `subject`,
  // filtered by artifactType when `artifact_type` is not empty. Uses /v2/<repo>/referrers/
  // and on 404 the fallback tag "sha256-<hex>"; neither present gives an empty index.
  absl::StatusOr<std::string> GetReferrers(const std::string& repo, const Digest& subject,
                                           const std::string& artifact_type = "");
  // Adds `descriptor_json` (an OCI descriptor object for a manifest whose subject is
  // `subject`) to the fallback tag's index, creating it if needed; a descriptor with the
  // same digest already there is left alone. Read-modify-write: concurrent writers to the
  // same subject can lose an entry (the referrers tag schema has no compare-and-swap).
  absl::Status PutReferrersFallback(const std::string& repo, const Digest& subject,
                                    const std::string& descriptor_json);
  // Whether the registry answers the referrers API (GET /v2/<repo>/referrers/<subject> is
  // 200) and so indexes manifests by their subject itself; false on 404 (Distribution 2.8),
  // when writers must maintain the fallback tag instead.
  absl::StatusOr<bool> HasReferrersApi(const std::string& repo, const Digest& subject);

  RegistryStats stats() const;
  const std::string& registry() const { return options_.registry; }
  // The hosts in configuration order.
  std::vector<HostEndpoint> endpoints() const;

 private:
  struct Request;
  struct Response;
  struct Challenge {
    std::string realm;
    std::string service;
  };
  struct CachedToken {
    std::string token;
    absl::Time expires;
  };
  struct CachedRedirect {
    std::string url;
    absl::Time expires;
  };
  class Host;
  // Which hosts may serve a request: containerd's capabilities.
  enum class Op { kResolve, kPull, kPush };

  explicit RegistryClient(RegistryClientOptions options);
  Backoff MakeBackoff(absl::Time deadline) const;

  // The hosts for `op` in the order to try them now: configuration order, except that hosts in
  // their failure cooldown (and, for `blob`, hosts that ignored Range for it) come last. kPush:
  // the first host with push only.
  std::vector<Host*> Candidates(Op op, const std::string& blob);
  // "<api root>/<path>" on host `h`, with "ns=<registry>" for a host of another name.
  std::string Url(const Host& h, const std::string& path) const;
  // How messages name a host ("registry r" when null).
  std::string HostLabel(const Host* h) const;
  // The configured host whose scheme://authority is url's, or null (a storage backend, a
  // token realm elsewhere).
  Host* HostOf(const std::string& url) const;

  // One HTTP exchange, no auth logic, no redirects. Transport errors are kUnavailable.
  absl::StatusOr<Response> Transport(const Request& req, const std::string& url,
                                     const std::string& authorization);
  // Auth (challenge/token/basic) on req.host and redirects; any HTTP status comes back as a
  // Response.
  absl::StatusOr<Response> Send(const Request& req);
  // Whether a range read of `blob` may go to mirror `h` now: it holds the blob, or this read is
  // the one request it is asked at a time while its state is unknown or it fills the blob.
  // Waits (for the request in flight, or until the next may be sent) until `until`; false when
  // the mirror is not to be asked this time.
  bool AwaitMirrorTurn(Host& h, const std::string& blob, absl::Time until);
  // What the mirror's answer to that request says. Returns true when the mirror is filling the
  // blob (the request should wait its turn again), false otherwise.
  bool MirrorAnswered(Host& h, const std::string& blob, const absl::StatusOr<Response>& r);
  // Marks a host as failing (connection error, 5xx, 429) for its current backoff.
  void HostFailed(Host& h);
  // Avoids `h` for `blob` for `cooldown` (ignored Range, a bad answer).
  void DemoteForBlob(Host& h, const std::string& blob, absl::Duration cooldown);
  // Sends to the hosts for `op` in turn (or to req.host when set), falling back to the next on
  // failure, and retries rounds with backoff while every host failed in a retryable way
  // (one round when req.single_attempt). Returns the accepted response, else the first
  // failure that is not a 404 (or the first 404), annotated with the other hosts' failures.
  absl::StatusOr<Response> SendToHosts(const Request& req, Op op);

  // The credential the host presents now: the fixed one, or the keychain's answer (when it
  // changed, the host's tokens are dropped). Errors: the keychain's.
  absl::StatusOr<std::optional<Credential>> CurrentCredential(Host& host);
  // The keychain's credential `refused` was refused: unless another request has already
  // replaced it, tell the keychain to forget it. Returns whether the host now has another
  // credential to try.
  absl::StatusOr<bool> RefreshCredential(Host& host, const std::optional<Credential>& refused);
  // The Authorization header for a request with `scopes` ("" anonymous). Errors: the keychain's.
  absl::StatusOr<std::string> AuthorizationFor(Host& host, const std::vector<std::string>& scopes);
  // After a 401 to a request sent with `sent` as its Authorization.
  absl::Status Authenticate(Host& host, const Response& unauthorized,
                            const std::vector<std::string>& scopes, const std::string& sent);
  // A token for `scopes` in the host's cache, fetched unless one is there other than
  // `refused_token` (another request fetched it meanwhile). Serialised per host.
  absl::Status EnsureToken(Host& host, const Challenge& challenge,
                           const std::vector<std::string>& scopes,
                           const std::string& refused_token);
  absl::Status FetchToken(Host& host, const Challenge& challenge,
                          const std::vector<std::string>& scopes,
                          const std::optional<Credential>& cred);

  absl::StatusOr<Response> GetBlobOnce(const std::string& repo, const Digest& digest, Request& req);
  absl::Status PushBlobOnce(const std::string& repo, const Digest& digest, uint64_t size,
                            const BlobReadAt& source, bool* retryable, absl::Duration* hint);

  RegistryClientOptions options_;
  Clock* const clock_;
  std::vector<std::unique_ptr<Host>> hosts_;  // configuration order; fixed after Create
  std::unique_ptr<HttpHandlePool> pool_;

  absl::Mutex mu_;
  std::map<std::string, CachedRedirect> redirects_ ABSL_GUARDED_BY(mu_);

  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> bytes_received_{0};
  std::atomic<uint64_t> retries_{0};
  std::atomic<uint64_t> token_requests_{0};
};

}  // namespace modelfs
