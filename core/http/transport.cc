#include "core/http/transport.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "core/http/curl_global.h"

namespace modelfs {
namespace {

constexpr size_t kMaxIdleHandles = 16;

// No byte in either direction for `limit` aborts the transfer (`stalled`). libcurl's low-speed
// check alone averages over a few seconds: a connection that sent megabytes and then stopped
// went on for seconds past the stall timeout (and a request for a reader with a 3 s deadline
// outlived it).
struct IdleState {
  std::chrono::steady_clock::time_point last;
  curl_off_t seen = -1;
  std::chrono::nanoseconds limit{0};
  bool stalled = false;
};

int XferInfoCb(void* user, curl_off_t /*dltotal*/, curl_off_t dlnow, curl_off_t /*ultotal*/,
               curl_off_t ulnow) {
  auto* s = static_cast<IdleState*>(user);
  const auto now = std::chrono::steady_clock::now();
  if (dlnow + ulnow != s->seen) {
    s->seen = dlnow + ulnow;
    s->last = now;
    return 0;
  }
  if (now - s->last < s->limit) return 0;
  s->stalled = true;
  return 1;
}

struct Callbacks {
  CURL* handle;
  const HttpRequest* request;
};

size_t HeaderCb(char* ptr, size_t size, size_t nmemb, void* user) {
  const size_t n = size * nmemb;
  const HttpRequest& req = *static_cast<Callbacks*>(user)->request;
  absl::string_view line(ptr, n);
  if (absl::StartsWith(line, "HTTP/")) {
    if (req.on_response) req.on_response();
    return n;
  }
  const size_t colon = line.find(':');
  if (colon == absl::string_view::npos || !req.on_header) return n;
  req.on_header(absl::AsciiStrToLower(line.substr(0, colon)),
                std::string(absl::StripAsciiWhitespace(line.substr(colon + 1))));
  return n;
}

size_t WriteCb(char* ptr, size_t size, size_t nmemb, void* user) {
  const size_t n = size * nmemb;
  auto* cb = static_cast<Callbacks*>(user);
  if (!cb->request->on_body) return n;
  long status = 0;
  curl_easy_getinfo(cb->handle, CURLINFO_RESPONSE_CODE, &status);
  return cb->request->on_body(status, std::string_view(ptr, n)) ? n : 0;
}

size_t ReadCb(char* ptr, size_t size, size_t nmemb, void* user) {
  std::optional<size_t> got = static_cast<Callbacks*>(user)->request->read_body(ptr, size * nmemb);
  return got.has_value() ? *got : CURL_READFUNC_ABORT;
}

HttpError ErrorOf(CURLcode rc) {
  switch (rc) {
    case CURLE_OK:
      return HttpError::kNone;
    case CURLE_WRITE_ERROR:
      return HttpError::kWriteAborted;
    case CURLE_PARTIAL_FILE:
      return HttpError::kPartialBody;
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
      return HttpError::kBadUrl;
    case CURLE_TOO_MANY_REDIRECTS:
      return HttpError::kTooManyRedirects;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
      return HttpError::kTlsVerify;
    default:
      return HttpError::kOther;
  }
}

long Millis(absl::Duration d) { return static_cast<long>(absl::ToInt64Milliseconds(d)); }

}  // namespace

std::unique_ptr<HttpHandle> HttpHandle::Create() {
  EnsureCurlGlobalInit();
  CURL* h = curl_easy_init();
  if (h == nullptr) return nullptr;
  return std::unique_ptr<HttpHandle>(new HttpHandle(h));
}

HttpHandle::~HttpHandle() { curl_easy_cleanup(static_cast<CURL*>(curl_)); }

HttpResult HttpHandle::Perform(const HttpRequest& req) {
  CURL* h = static_cast<CURL*>(curl_);
  Callbacks cb{h, &req};
  char error[CURL_ERROR_SIZE] = {};

  curl_slist* headers = nullptr;
  for (const std::string& hd : req.headers) headers = curl_slist_append(headers, hd.c_str());
  struct SlistFree {
    curl_slist* l;
    ~SlistFree() { curl_slist_free_all(l); }
  } slist_free{headers};

  curl_easy_setopt(h, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, req.follow_redirects ? 1L : 0L);
  if (req.follow_redirects) {
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, req.max_redirects);
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  }
  if (!req.user_agent.empty()) curl_easy_setopt(h, CURLOPT_USERAGENT, req.user_agent.c_str());
  if (headers != nullptr) curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  if (!req.range.empty()) curl_easy_setopt(h, CURLOPT_RANGE, req.range.c_str());
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, HeaderCb);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &cb);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, WriteCb);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &cb);
  if (req.buffer_size > 0) curl_easy_setopt(h, CURLOPT_BUFFERSIZE, req.buffer_size);

  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, Millis(req.connect_timeout));
  if (req.total_timeout != absl::InfiniteDuration()) {
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, Millis(req.total_timeout));
  }
  if (req.low_speed_time != absl::InfiniteDuration()) {
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(
        h, CURLOPT_LOW_SPEED_TIME,
        static_cast<long>(std::max<int64_t>(1, absl::ToInt64Seconds(req.low_speed_time))));
  }
  IdleState idle;
  if (req.idle_limit != absl::InfiniteDuration()) {
    idle.last = std::chrono::steady_clock::now();
    idle.limit = absl::ToChronoNanoseconds(req.idle_limit);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, XferInfoCb);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &idle);
  }

  if (!req.tls.verify) {
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  curl_blob ca{};
  if (!req.tls.ca_pem.empty()) {
    ca.data = const_cast<char*>(req.tls.ca_pem.data());
    ca.len = req.tls.ca_pem.size();
    ca.flags = CURL_BLOB_COPY;
    curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &ca);
  }
  if (!req.tls.client_cert.empty()) {
    curl_easy_setopt(h, CURLOPT_SSLCERT, req.tls.client_cert.c_str());
    curl_easy_setopt(h, CURLOPT_SSLKEY, req.tls.client_key.c_str());
  }

  if (req.method == "HEAD") {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (req.upload) {
    // An upload with a known length, whatever the verb: curl sends Content-Length.
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, ReadCb);
    curl_easy_setopt(h, CURLOPT_READDATA, &cb);
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(req.upload_length));
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  } else if (req.method != "GET") {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  }

  const CURLcode rc = curl_easy_perform(h);
  HttpResult result;
  result.error = ErrorOf(rc);
  if (rc != CURLE_OK) {
    result.error_text = curl_easy_strerror(rc);
    result.error_detail = error;
  }
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &result.status);
  curl_off_t sent = 0;
  curl_easy_getinfo(h, CURLINFO_SIZE_UPLOAD_T, &sent);
  result.bytes_uploaded = static_cast<uint64_t>(sent);
  result.stalled = idle.stalled;
  // Back to libcurl's defaults (the connection cache stays): nothing points at this frame's
  // callbacks, headers or error buffer once it returns.
  curl_easy_reset(h);
  return result;
}

HttpHandlePool::~HttpHandlePool() = default;

std::unique_ptr<HttpHandle> HttpHandlePool::Acquire() {
  {
    absl::MutexLock l(&mu_);
    if (!idle_.empty()) {
      std::unique_ptr<HttpHandle> h = std::move(idle_.back());
      idle_.pop_back();
      return h;
    }
  }
  return HttpHandle::Create();
}

void HttpHandlePool::Release(std::unique_ptr<HttpHandle> handle) {
  if (handle == nullptr) return;
  absl::MutexLock l(&mu_);
  if (idle_.size() < kMaxIdleHandles) idle_.push_back(std::move(handle));
}

}  // namespace modelfs
