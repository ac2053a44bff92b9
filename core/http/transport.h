// The one HTTP transport: a libcurl easy handle performs one request described by HttpRequest,
// and a pool keeps idle handles so keep-alive connections are reused between requests.
//
// What every client gets the same way here:
//  - only http and https, for the URL and for any redirect followed;
//  - TLS verified against the system store unless the request's TlsSettings say otherwise
//    (a per-host CA bundle, a client certificate, or verification off for a host configured as
//    insecure); the settings apply to this request's URL only;
//  - the connect timeout, an optional total timeout, the low-speed cut-off (a transfer under
//    1 KiB/s for `low_speed_time` is aborted) and, finer, the idle cut-off (no byte in either
//    direction for `idle_limit`: libcurl's low-speed check averages over seconds, so a
//    connection that sent megabytes and then stopped would otherwise run on past the limit);
//  - redirects: not followed unless asked; when followed (at most `max_redirects`), libcurl
//    drops a custom Authorization header on a redirect to another host (CURLOPT_UNRESTRICTED_AUTH
//    stays off). Clients that follow redirects themselves compare UrlOrigin (url.h) and send
//    Authorization only to the origin it is for.
//
// libcurl is an implementation detail: callers see HttpRequest, HttpResult and their callbacks.
//
// Thread safety: an HttpHandle is used by one thread at a time; HttpHandlePool is safe for
// concurrent use.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace modelfs {

struct TlsSettings {
  bool verify = true;       // false only for a host explicitly configured as insecure
  std::string ca_pem;       // extra trusted CAs (concatenated PEM); empty: the system store
  std::string client_cert;  // file names of a client certificate and its key, or empty
  std::string client_key;
};

struct HttpRequest {
  // GET, HEAD (no body read), or any other verb (sent as a custom request).
  std::string method = "GET";
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  std::string user_agent;
  std::string range;  // "first-last" for a Range header made by libcurl; empty: none

  // A request body of `upload_length` bytes (Content-Length is sent), pulled from `read_body`,
  // which returns the bytes it wrote or nullopt to abort the transfer.
  bool upload = false;
  uint64_t upload_length = 0;
  std::function<std::optional<size_t>(char* buf, size_t n)> read_body;

  bool follow_redirects = false;
  long max_redirects = 10;
  TlsSettings tls;

  absl::Duration connect_timeout = absl::Seconds(15);
  absl::Duration total_timeout = absl::InfiniteDuration();   // whole request; infinite: none
  absl::Duration low_speed_time = absl::InfiniteDuration();  // under 1 KiB/s this long aborts
  absl::Duration idle_limit = absl::InfiniteDuration();      // no byte this long: `stalled`
  long buffer_size = 0;  // receive buffer (bytes per body callback); 0: libcurl's default

  // A status line arrived: a new response starts (after a redirect followed, or 100 Continue).
  std::function<void()> on_response;
  // One header of the current response: its name lowercased, its value without surrounding
  // whitespace.
  std::function<void(std::string name, std::string value)> on_header;
  // Body bytes of the current response with its status; false aborts the transfer
  // (HttpError::kWriteAborted).
  std::function<bool(long status, std::string_view data)> on_body;
};

// How the transfer ended, as far as the clients tell endings apart.
enum class HttpError {
  kNone,
  kWriteAborted,      // on_body returned false
  kPartialBody,       // the connection closed before the announced body length
  kBadUrl,            // malformed URL, or a scheme other than http(s)
  kTooManyRedirects,  // more than max_redirects followed
  kTlsVerify,         // the peer's certificate failed verification, or the CA file is unusable
  kOther,             // connection refused or reset, timeouts, aborted by a callback, ...
};

struct HttpResult {
  HttpError error = HttpError::kNone;
  std::string error_text;    // libcurl's name of the error ("Couldn't connect to server")
  std::string error_detail;  // libcurl's detailed message for this transfer, may be empty
  long status = 0;           // HTTP status of the last response, 0 when none arrived
  uint64_t bytes_uploaded = 0;
  bool stalled = false;  // cut by idle_limit

  bool ok() const { return error == HttpError::kNone; }
  // error_detail when libcurl gave one, else error_text.
  std::string Message() const { return error_detail.empty() ? error_text : error_detail; }
};

// One libcurl easy handle. Each Perform starts from libcurl's defaults (curl_easy_reset keeps
// the handle's connection cache), so nothing of an earlier request carries over but the
// connection.
class HttpHandle {
 public:
  // nullptr when libcurl cannot make a handle.
  static std::unique_ptr<HttpHandle> Create();
  ~HttpHandle();
  HttpHandle(const HttpHandle&) = delete;
  HttpHandle& operator=(const HttpHandle&) = delete;

  HttpResult Perform(const HttpRequest& request);

 private:
  explicit HttpHandle(void* curl) : curl_(curl) {}
  void* const curl_;  // CURL*
};

// Idle handles (at most 16 kept) so that connections survive between requests.
class HttpHandlePool {
 public:
  HttpHandlePool() = default;
  ~HttpHandlePool();
  HttpHandlePool(const HttpHandlePool&) = delete;
  HttpHandlePool& operator=(const HttpHandlePool&) = delete;

  // An idle handle, else a new one; nullptr when libcurl cannot make one.
  std::unique_ptr<HttpHandle> Acquire();
  void Release(std::unique_ptr<HttpHandle> handle);

 private:
  absl::Mutex mu_;
  std::vector<std::unique_ptr<HttpHandle>> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace modelfs
