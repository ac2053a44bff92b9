// Test fixtures that run real services on 127.0.0.1 for end-to-end tests:
//  - RegistryFixture: a Distribution 2.8 `docker-registry` with filesystem storage in a fresh
//    temporary directory, optionally behind htpasswd (Basic) or token (Bearer) auth (for token
//    auth it also runs token_server.py with a freshly generated RSA key and certificate), or
//    as a pull-through cache of another registry.
//  - FaultProxy: fault_proxy.py in front of a registry (injected 5xx/429, ignored Range,
//    redirects to a "storage" host whose URLs expire, read-only credentials, and blob bodies
//    that are reset, truncated, stalled, corrupted or sent under a wrong Content-Range).
// Every process is started by the fixture and stopped by PID in its destructor; temporary
// directories are removed.
//
// Thread safety: construct and destroy on one thread; const accessors may be used anywhere.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/oci/digest.h"

namespace modelfs::testing {

// A TCP port on 127.0.0.1 that was free a moment ago (bound, read back, closed).
absl::StatusOr<int> FreeLoopbackPort();

// A child process with stdout/stderr in a log file, stopped with SIGTERM (then SIGKILL).
class ChildProcess {
 public:
  // `append`: add to log_path instead of truncating it.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const std::vector<std::string>& argv,
                                                             const std::string& log_path,
                                                             bool append = false);
  ~ChildProcess();
  void Stop();
  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }
  bool running();

 private:
  ChildProcess() = default;
  pid_t pid_ = -1;
  std::string log_path_;
};

struct RegistryFixtureOptions {
  enum class Auth { kNone, kHtpasswd, kToken };
  Auth auth = Auth::kNone;
  std::string username = "modelfs";
  std::string password = "modelfs-test-password";
  // kToken only.
  int token_expires_in = 300;
  // Non-empty: the token server reads the password from this file at every request (a
  // password rotated while clients hold tokens), instead of `password`.
  std::string password_file;
  // Non-empty: the token server also grants tokens for POST grant_type=refresh_token with this
  // refresh token (docker's identity token), to `username`.
  std::string refresh_token;
  bool anonymous_pull = false;
  // Write the registry's access log (one line per request: method, path, status, bytes,
  // user agent) to log_path(), so tests can count which blobs were fetched.
  bool access_log = false;
  // Non-empty: run as a pull-through cache of this registry ("http://127.0.0.1:PORT"),
  // Distribution's `proxy.remoteurl`. The upstream must answer when the cache starts
  // (docker-registry 2.8 exits otherwise), not afterwards.
  std::string proxy_remote_url;
  // Non-empty: the registry starts on a copy of this storage directory (a fixture of blobs and
  // manifests written earlier, for example by an older release).
  std::string seed_storage_dir;
};

class RegistryFixture {
 public:
  static constexpr char kTokenService[] = "modelfs-test-registry";
  static constexpr char kTokenIssuer[] = "modelfs-test-issuer";

  // Starts the registry (and token server) and waits until /v2/ answers.
  // Errors: kFailedPrecondition when docker-registry, htpasswd or openssl is missing;
  // kDeadlineExceeded when a process does not come up (its log is quoted).
  static absl::StatusOr<std::unique_ptr<RegistryFixture>> Start(
      RegistryFixtureOptions options = {});
  ~RegistryFixture();

  const std::string& host_port() const { return host_port_; }  // "127.0.0.1:PORT"
  const std::string& storage_dir() const { return storage_dir_; }
  const std::string& work_dir() const { return work_dir_; }
  // The registry's stdout and stderr (with the access log when options().access_log).
  std::string log_path() const { return work_dir_ + "/registry.log"; }
  const RegistryFixtureOptions& options() const { return options_; }
  // Where the registry keeps a blob's bytes (tests tamper with it).
  std::string BlobDataPath(const Digest& digest) const;
  // "http://127.0.0.1:PORT" of the token server; empty unless Auth::kToken.
  const std::string& token_server_url() const { return token_url_; }
  // Number of token requests the token server has answered.
  absl::StatusOr<int> TokenRequestCount() const;

  // Stops the registry process (SIGTERM, then SIGKILL); its port and storage stay reserved
  // for Restart. OK if already stopped.
  void Stop();
  // Starts the registry again on the same port with the same storage and configuration (its
  // output appended to log_path()), and waits until /v2/ answers. Errors: kDeadlineExceeded
  // (its log is quoted).
  absl::Status Restart();
  bool running() const;

 private:
  RegistryFixture() = default;
  // Spawns docker-registry with config.yml, its output appended to log_path() when `append`
  // (a restart keeps the access log of earlier runs), and waits until /v2/ answers.
  absl::Status StartRegistryProcess(bool append);

  RegistryFixtureOptions options_;
  std::string work_dir_;
  std::string storage_dir_;
  std::string host_port_;
  std::string token_url_;
  std::unique_ptr<ChildProcess> token_server_;
  std::unique_ptr<ChildProcess> registry_;
};

struct FaultProxyOptions {
  int fail_first = 0;
  int fail_status = 503;
  int retry_after_seconds = 0;  // 0: no Retry-After header
  std::string fail_path;        // substring of the path to fail; empty: any /v2/<name>/ request
  bool ignore_range = false;
  bool redirect_blobs = false;
  int storage_uses = 0;    // 0: storage URLs never expire
  bool read_only = false;  // refuse POST/PUT/PATCH/DELETE with 403 DENIED

  // Broken bodies of GET .../blobs/... answers (200 or 206) from the registry (fault_proxy.py
  // --blob-fault). kNone: bodies pass unchanged.
  enum class BlobFault {
    kNone,
    kReset,       // send blob_fault_bytes of the body, then reset the connection (RST)
    kTruncate,    // full Content-Length, blob_fault_bytes of the body, then close (FIN)
    kStall,       // send blob_fault_bytes, then nothing until the client closes (<= 120 s)
    kCorrupt,     // flip the body byte at blob_fault_offset
    kWrongRange,  // a 206 whose Content-Range names the next range; the body is the asked one
  };
  BlobFault blob_fault = BlobFault::kNone;
  int blob_fault_first = 0;        // only the first N broken (retries succeed); 0: every one
  std::string blob_fault_path;     // substring of the paths to break; empty: any /blobs/
  int64_t blob_fault_bytes = -1;   // reset/truncate/stall: body bytes first; -1: half
  int64_t blob_fault_offset = -1;  // corrupt: body offset; -1: the middle
  int64_t blob_fault_from = 0;     // only requests whose Range starts at this blob offset+
  // Blob bodies sent at most this fast, all connections together (fault_proxy.py --rate);
  // 0: unshaped.
  int64_t rate_bytes_per_s = 0;
  // Requests whose bearer token was issued more than this many seconds ago get the registry's
  // 401 (fault_proxy.py --bearer-max-age; counted as bearer_refused); 0: tokens pass.
  double bearer_max_age_s = 0;
};

// fault_proxy.py's name of a BlobFault ("" for kNone).
const char* BlobFaultName(FaultProxyOptions::BlobFault fault);

class FaultProxy {
 public:
  static absl::StatusOr<std::unique_ptr<FaultProxy>> Start(const std::string& upstream_host_port,
                                                           FaultProxyOptions options);
  ~FaultProxy();
  const std::string& host_port() const { return host_port_; }
  // A counter from /__stats: requests, injected, redirects, storage_requests,
  // storage_expired, storage_with_auth, refused_writes, blob_gets (GETs of blobs answered 200
  // or 206), blob_faults (bodies broken), stalls_ended (stalled answers the client gave up),
  // bearer_refused (tokens refused for their age).
  absl::StatusOr<int> Stat(const std::string& name) const;
  // Turns the blob fault off for the answers that follow (a stalled one stays stalled).
  absl::Status ClearBlobFault() const;
  // Sets the blob fault (and its budget, path, bytes and offset) for the answers that follow.
  absl::Status SetBlobFault(FaultProxyOptions::BlobFault fault, int first,
                            const std::string& path = "", int64_t bytes = -1, int64_t offset = -1,
                            int64_t from = 0) const;

 private:
  FaultProxy() = default;
  std::string work_dir_;
  std::string host_port_;
  std::unique_ptr<ChildProcess> process_;
};

// GET http://<host_port><path> and return the body (a tiny client for fixtures' own endpoints).
absl::StatusOr<std::string> HttpGetForTest(const std::string& url, long* status = nullptr);

}  // namespace modelfs::testing
