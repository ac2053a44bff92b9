#include "core/registry/registry_exchange.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/http/transport.h"
#include "core/http/url.h"
#include "core/registry/registry_host.h"
#include "nlohmann/json.hpp"

namespace modelfs {
namespace registry_internal {
namespace {

using json = nlohmann::json;

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string RegistryErrorDetail(const std::string& body) {
  json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return "";
  auto errs = doc.find("errors");
  if (errs == doc.end() || !errs->is_array()) return "";
  std::vector<std::string> parts;
  for (const json& e : *errs) {
    if (!e.is_object()) continue;
    std::string code = e.value("code", "");
    std::string message =
        e.contains("message") && e["message"].is_string() ? e["message"].get<std::string>() : "";
    parts.push_back(message.empty() ? code : absl::StrCat(code, ": ", message));
  }
  return absl::StrJoin(parts, "; ");
}

bool ErrorCodeIs(const std::string& body, std::string_view code) {
  return absl::StrContains(body, absl::StrCat("\"", AV(code), "\""));
}

}  // namespace

absl::Status TransportError(std::string message) {
  absl::Status s = absl::UnavailableError(message);
  s.SetPayload(kRetryablePayload, absl::Cord("1"));
  return s;
}
bool IsRetryableTransport(const absl::Status& s) {
  return s.GetPayload(kRetryablePayload).has_value();
}
bool IsIgnoredRange(const absl::Status& s) {
  return s.GetPayload(kIgnoredRangePayload).has_value();
}

std::string PercentEncode(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  // Hex() prints lowercase; RFC 3986 prefers uppercase but both are valid.
  return out;
}

std::string AppendQuery(const std::string& url, const std::string& param) {
  return absl::StrCat(url, url.find('?') == std::string::npos ? "?" : "&", param);
}

absl::Status StatusFromResponse(const std::string& what, const std::string& host_label, long status,
                                const std::string& body, int attempts, const std::string& auth_note,
                                const std::string& tried) {
  std::string msg = absl::StrCat(what, ": HTTP ", status, " from ", host_label);
  std::string detail = RegistryErrorDetail(body);
  if (!detail.empty()) absl::StrAppend(&msg, " (", detail, ")");
  if (!auth_note.empty()) absl::StrAppend(&msg, "; ", auth_note);
  if (attempts > 1) absl::StrAppend(&msg, " after ", attempts, " attempts");
  if (!tried.empty()) absl::StrAppend(&msg, "; ", tried);
  if (ErrorCodeIs(body, "DIGEST_INVALID")) return absl::DataLossError(msg);
  if (ErrorCodeIs(body, "BLOB_UNKNOWN") || ErrorCodeIs(body, "MANIFEST_UNKNOWN") ||
      ErrorCodeIs(body, "NAME_UNKNOWN") || status == 404) {
    return absl::NotFoundError(msg);
  }
  if (status == 401) return absl::UnauthenticatedError(msg);
  if (status == 403) return absl::PermissionDeniedError(msg);
  if (status == 416) return absl::OutOfRangeError(msg);
  if (status == 405) return absl::UnimplementedError(msg);
  if (status == 429) return absl::ResourceExhaustedError(msg);
  if (status >= 500) return absl::UnavailableError(msg);
  if (status == 400) return absl::InvalidArgumentError(msg);
  return absl::FailedPreconditionError(msg);
}

std::vector<std::string> PullScope(const std::string& repo) {
  return {absl::StrCat("repository:", repo, ":pull")};
}
std::vector<std::string> PushScope(const std::string& repo) {
  return {absl::StrCat("repository:", repo, ":pull,push")};
}
std::string BlobWhat(const char* verb, const std::string& repo, const Digest& d) {
  return absl::StrCat(verb, " blob ", d.str(), " in repository ", repo);
}
bool IsDigestReference(const std::string& reference) {
  return absl::StartsWith(reference, "sha256:") || absl::StartsWith(reference, "sha512:");
}

}  // namespace registry_internal

using registry_internal::BodyNeed;
using registry_internal::kMaxErrorBodyBytes;
using registry_internal::TransportError;

std::string_view RegistryRequestKindName(RegistryRequestKind kind) {
  switch (kind) {
    case RegistryRequestKind::kBlob:
      return "blob";
    case RegistryRequestKind::kManifest:
      return "manifest";
    case RegistryRequestKind::kToken:
      return "token";
    case RegistryRequestKind::kOther:
      return "other";
  }
  return "other";
}

// One exchange through core/http: no auth logic, no redirects (Send does those).
absl::StatusOr<RegistryClient::Response> RegistryClient::Transport(
    const Request& req, const std::string& url, const std::string& authorization) {
  std::unique_ptr<HttpHandle> handle = pool_->Acquire();
  if (handle == nullptr) return absl::InternalError("curl_easy_init failed");
  struct Releaser {
    HttpHandlePool* pool;
    std::unique_ptr<HttpHandle>& h;
    ~Releaser() { pool->Release(std::move(h)); }
  } releaser{pool_.get(), handle};

  Response resp;
  resp.url = url;
  absl::Status callback_error;
  bool truncated_error_body = false;
  uint64_t read_pos = 0;
  uint64_t body_length = req.body ? req.body->size() : req.reader ? req.reader_length : 0;
  bool has_body = req.body != nullptr || req.reader != nullptr;

  HttpRequest http;
  http.method = req.method;
  http.url = url;
  http.on_response = [&] { resp.headers.clear(); };  // a new response (after 100 Continue)
  http.on_header = [&](std::string name, std::string value) {
    resp.headers.emplace(std::move(name), std::move(value));
  };
  http.on_body = [&](long status, std::string_view data) -> bool {
    const size_t n = data.size();
    resp.status = status;
    bytes_received_ += n;
    bool ok_status = resp.status >= 200 && resp.status < 300;
    if (ok_status && req.sink) {
      absl::StatusOr<BodyNeed> need = req.sink(resp, data);
      resp.body_bytes += n;
      if (!need.ok()) {
        callback_error = need.status();
        return false;
      }
      if (*need == BodyNeed::kDone) {
        resp.sink_done = true;
        return false;  // libcurl ends the transfer (kWriteAborted): the answer stands
      }
      return true;
    }
    size_t limit = ok_status ? req.max_body : kMaxErrorBodyBytes;
    if (resp.body.size() + n > limit) {
      if (ok_status) {
        callback_error =
            absl::OutOfRangeError(absl::StrCat("response body larger than ", limit, " bytes"));
      } else {
        truncated_error_body = true;  // enough of the error to explain it
      }
      return false;
    }
    resp.body.append(data.data(), n);
    resp.body_bytes += n;
    return true;
  };
  http.read_body = [&](char* buf, size_t n) -> std::optional<size_t> {
    uint64_t left = body_length - read_pos;
    size_t want = static_cast<size_t>(std::min<uint64_t>(n, left));
    if (want == 0) return 0;
    if (req.body != nullptr) {
      std::memcpy(buf, req.body->data() + read_pos, want);
      read_pos += want;
      return want;
    }
    absl::StatusOr<size_t> got = (*req.reader)(req.reader_offset + read_pos, buf, want);
    if (!got.ok()) {
      callback_error = got.status();
      return std::nullopt;
    }
    if (*got == 0) {
      callback_error = absl::OutOfRangeError(
          absl::StrCat("upload source ended at byte ", req.reader_offset + read_pos, ", expected ",
                       req.reader_offset + body_length));
      return std::nullopt;
    }
    read_pos += *got;
    return *got;
  };

  // The host this URL is on, if it is one of the registry's (not a storage backend).
  const Host* on_host = HostOf(url);
  http.headers = req.headers;
  if (on_host != nullptr) {
    for (const std::string& hd : on_host->endpoint.headers) http.headers.push_back(hd);
  }
  if (req.dynamic_header) {
    std::string dh = req.dynamic_header();
    if (!dh.empty()) http.headers.push_back(std::move(dh));
  }
  if (!authorization.empty()) http.headers.push_back("Authorization: " + authorization);
  http.headers.push_back("Expect:");  // no 100-continue round trip
  http.user_agent = options_.user_agent;
  // Blob bodies are read from the socket up to 512 KiB at a time rather than 16 KiB: fewer
  // recv calls on the read path. libcurl (7.88) still hands the body on in 16 KiB pieces
  // (CURL_MAX_WRITE_SIZE) out of its own buffer, so the chunk assembler copies each piece; that
  // copy is about 0.05 CPU-s/GiB, and libcurl has no documented way to receive into ours.
  http.buffer_size = 512L * 1024;
  http.connect_timeout = options_.connect_timeout;
  http.idle_limit = options_.stall_timeout;
  http.low_speed_time = options_.stall_timeout;
  absl::Duration timeout = req.long_transfer ? absl::InfiniteDuration() : options_.request_timeout;
  if (req.deadline != absl::InfiniteFuture()) {
    absl::Duration left = req.deadline - clock_->Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat(req.method, " ", UrlOrigin(url), ": deadline passed before the request"));
    }
    timeout = std::min(timeout, left);
  }
  if (timeout != absl::InfiniteDuration()) {
    http.total_timeout =
        absl::Milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout)));
  }
  // TLS: a host's own settings apply to that host only; storage backends behind redirects
  // and token realms elsewhere are verified against the system store.
  if (on_host != nullptr) {
    const HostEndpoint& ep = on_host->endpoint;
    http.tls.verify = !ep.skip_verify;
    http.tls.ca_pem = on_host->ca_blob;
    if (!ep.client_cert.empty()) {
      http.tls.client_cert = ep.client_cert;
      http.tls.client_key = ep.client_key;
    }
  }
  http.upload = req.method != "HEAD" &&
                (has_body || req.method == "POST" || req.method == "PUT" || req.method == "PATCH");
  http.upload_length = body_length;

  ++requests_;
  const absl::Time sent = clock_->Now();
  HttpResult done = handle->Perform(http);
  resp.status = done.status;
  bytes_sent_ += done.bytes_uploaded;
  if (options_.observer != nullptr) {
    const bool answered =
        !done.stalled &&
        (done.ok() || !callback_error.ok() || done.error == HttpError::kWriteAborted ||
         (done.error == HttpError::kPartialBody && resp.status >= 400));
    // What the exchange was for, from its API path: /blobs/ and /manifests/ are the
    // Distribution API's; a request with neither a path nor a registry host is a token
    // request (FetchToken builds it from the challenge's realm).
    const std::string_view path = req.path.has_value() ? std::string_view(*req.path) : url;
    RegistryRequestKind kind = RegistryRequestKind::kOther;
    if (path.find("/blobs/") != std::string_view::npos) {
      kind = RegistryRequestKind::kBlob;
    } else if (path.find("/manifests/") != std::string_view::npos) {
      kind = RegistryRequestKind::kManifest;
    } else if (!req.path.has_value() && req.host == nullptr) {
      kind = RegistryRequestKind::kToken;
    }
    options_.observer->OnRequest(RegistryRequestRecord{
        options_.registry, kind, answered ? done.status : 0, clock_->Now() - sent});
  }

  if (!callback_error.ok()) return callback_error;
  if (resp.sink_done) return resp;
  if (done.stalled) {
    return TransportError(absl::StrCat(req.method, " ", UrlOrigin(url), " failed: no byte for ",
                                       absl::FormatDuration(options_.stall_timeout), " (stalled)"));
  }
  // An error answer that stops short (Distribution announces the blob's Content-Length on a
  // 416) or that we cut off ourselves still says everything we need.
  bool error_answer_complete = (done.error == HttpError::kWriteAborted && truncated_error_body) ||
                               (done.error == HttpError::kPartialBody && resp.status >= 400);
  if (!done.ok() && !error_answer_complete) {
    // The URL can carry a presigned query string; name only its origin.
    return TransportError(
        absl::StrCat(req.method, " ", UrlOrigin(url), " failed: ", done.error_text));
  }
  return resp;
}

}  // namespace modelfs
