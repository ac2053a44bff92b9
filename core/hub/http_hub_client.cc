#include "core/hub/http_hub_client.h"

#include <stdlib.h>

#include <algorithm>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "core/base/backoff.h"
#include "core/http/transport.h"
#include "core/http/url.h"
#include "core/status/status_macros.h"
#include "nlohmann/json.hpp"

namespace modelfs {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxApiBody = 64u << 20;  // a listing of many thousand files stays far below
constexpr size_t kMaxErrorBody = 64u << 10;
constexpr int kMaxHubRedirects = 5;

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// A URL for messages: no userinfo, no query (CDN URLs carry signatures there).
std::string ForMessage(std::string_view url) {
  std::string u(url.substr(0, url.find_first_of("?#")));
  const size_t sep = u.find("://");
  if (sep != std::string::npos) {
    const size_t at = u.find('@', sep + 3);
    const size_t slash = u.find('/', sep + 3);
    if (at != std::string::npos && (slash == std::string::npos || at < slash)) {
      u.erase(sep + 3, at + 1 - (sep + 3));
    }
  }
  return u;
}

std::string NormalizeEtag(std::string_view v) {
  absl::string_view s = absl::StripAsciiWhitespace(AV(v));
  absl::ConsumePrefix(&s, "W/");
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return std::string(s);
}

std::optional<uint64_t> ParseSize(const std::string& v) {
  uint64_t n = 0;
  if (v.empty() || !absl::SimpleAtoi(v, &n)) return std::nullopt;
  return n;
}

}  // namespace

std::string HubUrlEncode(std::string_view s, bool keep_slash) {
  std::string out;
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' ||
        (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, absl::StrFormat("%%%02X", c));  // RFC 3986 prefers uppercase
    }
  }
  return out;
}

HubClientOptions HubClientOptionsFromEnv() {
  HubClientOptions o;
  const char* endpoint = getenv("HF_ENDPOINT");
  if (endpoint != nullptr && *endpoint != '\0') o.endpoint = endpoint;
  const char* token = getenv("HF_TOKEN");
  if (token != nullptr) o.token = std::string(absl::StripAsciiWhitespace(token));
  return o;
}

// One HTTP exchange: the request, and the response as far as it was read.
struct HubHttpExchange {
  std::string url;
  bool send_token = false;
  bool follow_redirects = false;  // a CDN may redirect again; the Hub's own answer is not followed
  bool api = false;               // bounded total time; otherwise only the stall timeout
  // Called once before the first byte of a 2xx body reaches `sink`.
  std::function<absl::Status()> before_body;
  HubSinkFn sink;  // receives a 2xx body; without it a 2xx body is buffered (up to kMaxApiBody)

  long status = 0;
  std::multimap<std::string, std::string> headers;  // lowercase names, of the last response
  std::string body;                                 // buffered (non-2xx, or 2xx without sink)
  absl::Status callback_error;
  bool body_started = false;

  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

absl::StatusOr<std::unique_ptr<HttpHubClient>> HttpHubClient::Create(HubClientOptions options) {
  while (!options.endpoint.empty() && options.endpoint.back() == '/') options.endpoint.pop_back();
  if (!absl::StartsWith(options.endpoint, "http://") &&
      !absl::StartsWith(options.endpoint, "https://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("HF_ENDPOINT '", options.endpoint, "' is not an http:// or https:// URL"));
  }
  if (options.endpoint.find_first_of("?#") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("HF_ENDPOINT '", ForMessage(options.endpoint), "' has a query or fragment"));
  }
  return std::unique_ptr<HttpHubClient>(new HttpHubClient(std::move(options)));
}

HttpHubClient::HttpHubClient(HubClientOptions options)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : Clock::Real()) {}

absl::Status HttpHubClient::Perform(HubHttpExchange& ex) {
  std::unique_ptr<HttpHandle> handle = HttpHandle::Create();
  if (handle == nullptr) return absl::InternalError("curl_easy_init failed");
  HttpRequest req;
  req.url = ex.url;
  // Bytes exactly as stored: a compressed answer would not hash to the Hub's digests.
  req.headers.push_back("Accept-Encoding: identity");
  if (ex.send_token && !options_.token.empty()) {
    req.headers.push_back("Authorization: Bearer " + options_.token);
  }
  // The transport drops a custom Authorization header on a redirect to another host; the
  // token is only set for the Hub's origin anyway.
  req.follow_redirects = ex.follow_redirects;
  req.max_redirects = 10;
  req.user_agent = options_.user_agent;
  req.connect_timeout = options_.connect_timeout;
  req.low_speed_time = options_.stall_timeout;
  if (ex.api) req.total_timeout = options_.api_timeout;
  req.on_response = [&ex] {
    ex.headers.clear();
    ex.status = 0;
  };
  req.on_header = [&ex](std::string name, std::string value) {
    ex.headers.emplace(std::move(name), std::move(value));
  };
  req.on_body = [&ex](long status, std::string_view data) -> bool {
    ex.status = status;
    const size_t n = data.size();
    const bool ok = ex.status >= 200 && ex.status < 300;
    if (ok && ex.sink) {
      if (!ex.body_started) {
        ex.body_started = true;
        if (ex.before_body) {
          ex.callback_error = ex.before_body();
          if (!ex.callback_error.ok()) return false;
        }
      }
      ex.callback_error = ex.sink(data);
      return ex.callback_error.ok();
    }
    const size_t limit = ok ? kMaxApiBody : kMaxErrorBody;
    if (ex.body.size() + n > limit) {
      if (ok) {
        ex.callback_error =
            absl::OutOfRangeError(absl::StrCat("answer larger than ", limit, " bytes"));
      }
      return false;  // an error body is cut: enough of it to explain the error
    }
    ex.body.append(data.data(), n);
    return true;
  };
  const HttpResult done = handle->Perform(req);
  if (!ex.callback_error.ok()) return ex.callback_error;
  if (!done.ok() &&
      !(done.error == HttpError::kWriteAborted && !(ex.status >= 200 && ex.status < 300))) {
    const std::string msg = absl::StrCat(ForMessage(ex.url), ": ", done.Message());
    if (done.error == HttpError::kBadUrl) return absl::InvalidArgumentError(msg);
    if (done.error == HttpError::kTlsVerify) return absl::PermissionDeniedError(msg);
    return absl::UnavailableError(msg);
  }
  ex.status = done.status;
  return absl::OkStatus();
}

namespace {

// The Status for a Hub answer that is not a success, naming `what` and what the Hub said.
absl::Status HubError(const HubHttpExchange& ex, const std::string& what, bool have_token) {
  const std::string code = ex.Header("x-error-code");
  std::string message = ex.Header("x-error-message");
  if (message.empty() && !ex.body.empty()) {
    json j = json::parse(ex.body, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("error") && j["error"].is_string()) {
      message = j["error"].get<std::string>();
    } else if (!j.is_discarded()) {
      message = "";
    } else {
      message = ex.body.substr(0, 200);
    }
  }
  std::string said = absl::StrCat("HTTP ", ex.status);
  if (!code.empty()) absl::StrAppend(&said, " ", code);
  if (!message.empty()) absl::StrAppend(&said, ": ", message);
  const std::string prefix = absl::StrCat(what, ": ", said);
  if (ex.status == 401 || ex.status == 403 || code == "GatedRepo") {
    if (!have_token) {
      return absl::PermissionDeniedError(absl::StrCat(
          prefix,
          "; the repository is gated or private (or does not exist): set HF_TOKEN to a Hugging "
          "Face access token that can read it"));
    }
    return absl::PermissionDeniedError(absl::StrCat(
        prefix,
        "; HF_TOKEN was sent and refused: check that the token is valid and can read this "
        "repository (a gated repository needs its access request approved)"));
  }
  if (ex.status == 404 || ex.status == 410) {
    if (code == "RevisionNotFound") {
      return absl::NotFoundError(absl::StrCat(prefix, " (no such revision)"));
    }
    if (code == "EntryNotFound")
      return absl::NotFoundError(absl::StrCat(prefix, " (no such file)"));
    if (code == "RepoNotFound") {
      return absl::NotFoundError(absl::StrCat(prefix, " (no such repository)"));
    }
    return absl::NotFoundError(absl::StrCat(prefix, " (not found)"));
  }
  if (ex.status == 429 || ex.status >= 500 || ex.status == 408) {
    return absl::UnavailableError(prefix);
  }
  if (code == "RevisionNotFound")
    return absl::NotFoundError(absl::StrCat(prefix, " (no such revision)"));
  return absl::InvalidArgumentError(absl::StrCat(prefix, " (unexpected answer)"));
}

absl::StatusOr<HubRevision> ParseRevision(const std::string& body, const std::string& what) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the answer is not a JSON object"));
  }
  HubRevision r;
  auto str = [&](const char* key) -> std::string {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  r.repo = str("id");
  if (r.repo.empty()) r.repo = str("modelId");
  r.commit = absl::AsciiStrToLower(str("sha"));
  if (!IsFullCommitHash(r.commit)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the answer's \"sha\" '", str("sha"), "' is not a full commit hash"));
  }
  if (auto g = j.find("gated"); g != j.end()) {
    if (g->is_string()) r.gated = g->get<std::string>();
    if (g->is_boolean() && g->get<bool>()) r.gated = "true";
  }
  if (auto p = j.find("private"); p != j.end() && p->is_boolean()) r.is_private = p->get<bool>();
  auto siblings = j.find("siblings");
  if (siblings == j.end() || !siblings->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the answer has no \"siblings\" list"));
  }
  for (size_t i = 0; i < siblings->size(); ++i) {
    const json& s = (*siblings)[i];
    const std::string w = absl::StrCat(what, ": siblings[", i, "]");
    if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(w, ": no \"rfilename\""));
    }
    HubFile f;
    f.path = s["rfilename"].get<std::string>();
    if (auto size = s.find("size"); size != s.end() && !size->is_null()) {
      if (!size->is_number_unsigned()) {
        return absl::InvalidArgumentError(absl::StrCat(w, " '", f.path, "': bad \"size\""));
      }
      f.size = size->get<uint64_t>();
    }
    if (auto b = s.find("blobId"); b != s.end() && b->is_string()) {
      f.blob_id = absl::AsciiStrToLower(b->get<std::string>());
    }
    if (auto lfs = s.find("lfs"); lfs != s.end() && !lfs->is_null()) {
      if (!lfs->is_object() || !lfs->contains("sha256") || !(*lfs)["sha256"].is_string() ||
          !lfs->contains("size") || !(*lfs)["size"].is_number_unsigned()) {
        return absl::InvalidArgumentError(
            absl::StrCat(w, " '", f.path, "': \"lfs\" lacks sha256 or size"));
      }
      f.lfs = HubLfsInfo{absl::AsciiStrToLower((*lfs)["sha256"].get<std::string>()),
                         (*lfs)["size"].get<uint64_t>()};
    }
    r.files.push_back(std::move(f));
  }
  return r;
}

}  // namespace

absl::StatusOr<HubRevision> HttpHubClient::GetRevision(const std::string& repo,
                                                       const std::string& revision) {
  RETURN_IF_ERROR(CheckRepoId(repo));
  if (revision.empty()) return absl::InvalidArgumentError("empty revision");
  const std::string url = absl::StrCat(options_.endpoint, "/api/models/", repo, "/revision/",
                                       HubUrlEncode(revision, /*keep_slash=*/false), "?blobs=true");
  const std::string what = absl::StrCat(repo, "@", revision);
  BackoffPolicy policy;
  policy.max_attempts = std::max(1, options_.api_attempts);
  policy.initial_backoff = absl::Milliseconds(200);
  Backoff backoff(policy, clock_, clock_->Now() + absl::Minutes(5));
  for (;;) {
    HubHttpExchange ex;
    ex.url = url;
    ex.send_token = true;
    ex.api = true;
    absl::Status st = Perform(ex);
    if (st.ok() && ex.status == 200) return ParseRevision(ex.body, what);
    if (st.ok()) st = HubError(ex, what, !options_.token.empty());
    if (!RetryableCode(st.code()) || !backoff.Wait()) return st;
  }
}

absl::Status HttpHubClient::Download(const std::string& repo, const std::string& commit,
                                     const std::string& path, const HubIdentityFn& on_identity,
                                     const HubSinkFn& sink) {
  RETURN_IF_ERROR(CheckRepoId(repo));
  const std::string what = absl::StrCat(repo, "@", commit, ": ", path);
  const std::string hub_origin = UrlOrigin(options_.endpoint);
  std::string url = absl::StrCat(options_.endpoint, "/", repo, "/resolve/",
                                 HubUrlEncode(commit, false), "/", HubUrlEncode(path, true));
  auto identity_of = [](const HubHttpExchange& ex) {
    HubFileIdentity id;
    id.commit = absl::AsciiStrToLower(ex.Header("x-repo-commit"));
    std::string etag = ex.Header("x-linked-etag");
    if (etag.empty()) etag = ex.Header("etag");
    id.etag = absl::AsciiStrToLower(NormalizeEtag(etag));
    id.size = ParseSize(ex.Header("x-linked-size"));
    return id;
  };
  for (int hop = 0; hop <= kMaxHubRedirects; ++hop) {
    HubHttpExchange ex;
    ex.url = url;
    ex.send_token = UrlOrigin(url) == hub_origin;
    bool delivered = false;
    ex.before_body = [&]() -> absl::Status {
      HubFileIdentity id = identity_of(ex);
      if (!id.size.has_value()) id.size = ParseSize(ex.Header("content-length"));
      id.location = ForMessage(url);
      delivered = true;
      return on_identity(id);
    };
    ex.sink = sink;
    RETURN_IF_ERROR(Perform(ex));
    if (ex.status == 200) {
      if (!delivered) RETURN_IF_ERROR(ex.before_body());  // an empty file
      return absl::OkStatus();
    }
    if (ex.status < 300 || ex.status > 399) return HubError(ex, what, !options_.token.empty());
    const std::string location = ex.Header("location");
    if (location.empty()) {
      return absl::DataLossError(absl::StrCat(what, ": HTTP ", ex.status, " without a Location"));
    }
    const std::string next = ResolveLocation(url, location);
    HubFileIdentity id = identity_of(ex);
    if (id.commit.empty() && id.etag.empty()) {
      // No identity: only a redirect within the Hub (a renamed repository) is followed.
      if (UrlOrigin(next) != hub_origin) {
        return absl::DataLossError(
            absl::StrCat(what, ": the Hub redirected to ", ForMessage(next),
                         " without X-Repo-Commit or X-Linked-Etag, so nothing states what the "
                         "bytes there should be"));
      }
      url = next;
      continue;
    }
    id.redirected = UrlOrigin(next) != hub_origin;
    id.location = ForMessage(next);
    RETURN_IF_ERROR(on_identity(id));
    HubHttpExchange cdn;
    cdn.url = next;
    cdn.send_token = UrlOrigin(next) == hub_origin;
    cdn.follow_redirects = true;
    cdn.sink = sink;
    RETURN_IF_ERROR(Perform(cdn));
    if (cdn.status == 200) return absl::OkStatus();
    const std::string cdn_what = absl::StrCat(what, " (from ", ForMessage(next), ")");
    if (cdn.status == 429 || cdn.status >= 500 || cdn.status == 408) {
      return absl::UnavailableError(absl::StrCat(cdn_what, ": HTTP ", cdn.status));
    }
    return absl::UnavailableError(
        absl::StrCat(cdn_what, ": HTTP ", cdn.status, " (the storage URL may have expired)"));
  }
  return absl::DataLossError(
      absl::StrCat(what, ": more than ", kMaxHubRedirects, " redirects within the Hub"));
}

}  // namespace modelfs
