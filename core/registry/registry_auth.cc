// RegistryClient's authentication (anonymous, Basic, the Bearer token flow with tokens
// cached per scope) and Send: one request on one host with its auth and redirects, where
// Authorization never follows a redirect to another host. Credentials and tokens never appear
// in a Status message.
#include <algorithm>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/http/url.h"
#include "core/registry/registry_client.h"
#include "core/registry/registry_exchange.h"
#include "core/registry/registry_host.h"
#include "core/status/status_macros.h"
#include "nlohmann/json.hpp"

namespace modelfs {
namespace {

using json = nlohmann::json;
using registry_internal::AppendQuery;
using registry_internal::IsRetryableTransport;
using registry_internal::PercentEncode;

constexpr int kMaxRedirects = 10;

struct ChallengeParams {
  std::string scheme;  // lowercase
  std::map<std::string, std::string> params;
};

// Parses `Bearer realm="...",service="...",scope="a b"` (RFC 7235 auth-params, quoted
// strings with backslash escapes). Several challenges in one header are split on a scheme
// token that is not followed by '='.
std::vector<ChallengeParams> ParseWwwAuthenticate(const std::string& h) {
  std::vector<ChallengeParams> out;
  size_t i = 0;
  auto skip_ws = [&] {
    while (i < h.size() && (h[i] == ' ' || h[i] == '\t' || h[i] == ',')) ++i;
  };
  while (true) {
    skip_ws();
    if (i >= h.size()) break;
    size_t start = i;
    while (i < h.size() && h[i] != ' ' && h[i] != ',' && h[i] != '=') ++i;
    std::string token = h.substr(start, i - start);
    if (i < h.size() && h[i] == '=' && !out.empty()) {
      ++i;
      std::string value;
      if (i < h.size() && h[i] == '"') {
        ++i;
        while (i < h.size() && h[i] != '"') {
          if (h[i] == '\\' && i + 1 < h.size()) ++i;
          value.push_back(h[i++]);
        }
        if (i < h.size()) ++i;
      } else {
        size_t vs = i;
        while (i < h.size() && h[i] != ',' && h[i] != ' ') ++i;
        value = h.substr(vs, i - vs);
      }
      out.back().params[absl::AsciiStrToLower(token)] = value;
    } else {
      out.push_back({absl::AsciiStrToLower(token), {}});
    }
  }
  return out;
}

}  // namespace

std::string RegistryClient::AuthorizationFor(Host& host, const std::vector<std::string>& scopes) {
  const std::optional<Credential>& cred = host.credential;
  if (cred.has_value() && !cred->registry_token.empty()) return "Bearer " + cred->registry_token;
  std::string key = absl::StrJoin(scopes, " ");
  std::optional<Challenge> challenge;
  {
    absl::MutexLock l(&host.mu);
    if (host.challenge.has_value()) {
      auto it = host.tokens.find(key);
      if (it != host.tokens.end() && it->second.expires > clock_->Now()) {
        return "Bearer " + it->second.token;
      }
      challenge = host.challenge;
    } else if (host.basic_auth && cred.has_value()) {
      return "Basic " + absl::Base64Escape(cred->username + ":" + cred->password);
    } else {
      return "";
    }
  }
  // The host already told us where tokens come from: fetch one for this scope now rather
  // than paying a 401 round trip. On failure the request goes out bare and the 401 path
  // reports the error.
  if (!FetchToken(host, *challenge, scopes).ok()) return "";
  absl::MutexLock l(&host.mu);
  auto it = host.tokens.find(key);
  return it == host.tokens.end() ? "" : "Bearer " + it->second.token;
}

absl::Status RegistryClient::Authenticate(Host& host, const Response& unauthorized,
                                          const std::vector<std::string>& scopes) {
  std::optional<Challenge> bearer;
  bool basic = false;
  for (const std::string& h : unauthorized.Headers("www-authenticate")) {
    for (const ChallengeParams& c : ParseWwwAuthenticate(h)) {
      if (c.scheme == "bearer" && c.params.count("realm")) {
        Challenge ch;
        ch.realm = c.params.at("realm");
        auto svc = c.params.find("service");
        if (svc != c.params.end()) ch.service = svc->second;
        bearer = ch;
      } else if (c.scheme == "basic") {
        basic = true;
      }
    }
  }
  const std::optional<Credential>& cred = host.credential;
  if (bearer.has_value()) {
    {
      absl::MutexLock l(&host.mu);
      host.challenge = bearer;
      host.tokens.erase(absl::StrJoin(scopes, " "));  // a token the host refused
    }
    return FetchToken(host, *bearer, scopes);
  }
  if (basic && cred.has_value() && !cred->username.empty()) {
    absl::MutexLock l(&host.mu);
    if (host.basic_auth) {
      return absl::UnauthenticatedError(
          absl::StrCat(host.label, " refused the configured username and password"));
    }
    host.basic_auth = true;
    return absl::OkStatus();
  }
  return absl::UnauthenticatedError(
      absl::StrCat(host.label, " requires authentication",
                   cred.has_value() ? " and refused the configured credentials"
                                    : " and no credentials are configured for it"));
}

absl::Status RegistryClient::FetchToken(Host& host, const Challenge& challenge,
                                        const std::vector<std::string>& scopes) {
  const std::optional<Credential>& cred = host.credential;
  Request req;
  req.scopes = scopes;
  std::string authorization;
  std::string form;
  if (cred.has_value() && !cred->identity_token.empty()) {
    // docker's identity token is an OAuth2 refresh token (distribution's token spec, oauth.md).
    req.method = "POST";
    req.url = challenge.realm;
    form = absl::StrCat(
        "grant_type=refresh_token&client_id=modelfs&service=", PercentEncode(challenge.service),
        "&scope=", PercentEncode(absl::StrJoin(scopes, " ")),
        "&refresh_token=", PercentEncode(cred->identity_token));
    req.body = &form;
    req.headers.push_back("Content-Type: application/x-www-form-urlencoded");
  } else {
    std::string url = challenge.realm;
    if (!challenge.service.empty()) {
      url = AppendQuery(url, "service=" + PercentEncode(challenge.service));
    }
    for (const std::string& s : scopes) url = AppendQuery(url, "scope=" + PercentEncode(s));
    if (cred.has_value() && !cred->username.empty()) {
      url = AppendQuery(url, "account=" + PercentEncode(cred->username));
      authorization = "Basic " + absl::Base64Escape(cred->username + ":" + cred->password);
    }
    req.url = url;
  }
  Backoff backoff = MakeBackoff(absl::InfiniteFuture());
  while (true) {
    ++token_requests_;
    absl::StatusOr<Response> r = Transport(req, req.url, authorization);
    absl::Duration hint = absl::ZeroDuration();
    bool retry = false;
    if (!r.ok()) {
      if (!IsRetryableTransport(r.status())) return r.status();
      retry = true;
    } else if (r->status >= 500 || r->status == 429) {
      retry = true;
    }
    if (retry && backoff.Wait(hint)) {
      ++retries_;
      continue;
    }
    if (!r.ok()) {
      return absl::UnavailableError(
          absl::StrCat("token server for ", host.label, ": ", r.status().message()));
    }
    if (r->status == 401 || r->status == 403) {
      return absl::UnauthenticatedError(absl::StrCat(
          "token server ", UrlOrigin(challenge.realm), " refused ",
          cred.has_value() ? "the configured credentials" : "anonymous access", " for ",
          absl::StrJoin(scopes, " "), " on ", host.label, " (HTTP ", r->status, ")"));
    }
    if (r->status != 200) {
      return absl::UnavailableError(absl::StrCat("token server ", UrlOrigin(challenge.realm),
                                                 " answered HTTP ", r->status, " for ",
                                                 host.label));
    }
    json doc = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
    std::string token;
    int64_t expires_in = 60;  // the token spec's default
    if (!doc.is_discarded() && doc.is_object()) {
      if (doc.contains("token") && doc["token"].is_string()) {
        token = doc["token"].get<std::string>();
      } else if (doc.contains("access_token") && doc["access_token"].is_string()) {
        token = doc["access_token"].get<std::string>();
      }
      if (doc.contains("expires_in") && doc["expires_in"].is_number_integer()) {
        expires_in = std::max<int64_t>(doc["expires_in"].get<int64_t>(), 1);
      }
    }
    if (token.empty()) {
      return absl::UnauthenticatedError(absl::StrCat("token server ", UrlOrigin(challenge.realm),
                                                     " returned no token for ", host.label));
    }
    // Renew a little early so a request never leaves with a token about to expire.
    absl::Duration life = absl::Seconds(expires_in);
    absl::Duration margin = std::min(absl::Seconds(10), life / 5);
    absl::MutexLock l(&host.mu);
    host.tokens[absl::StrJoin(scopes, " ")] = CachedToken{token, clock_->Now() + life - margin};
    return absl::OkStatus();
  }
}

// Send: auth and redirects on one host (SendToHosts, registry_fallback.cc, tries the hosts).

absl::StatusOr<RegistryClient::Response> RegistryClient::Send(const Request& original) {
  Request req = original;
  Host& host = *req.host;
  bool auth_retried = false;
  bool redirected = false;
  for (int hops = 0; hops <= kMaxRedirects;) {
    bool on_host = UrlOrigin(req.url) == host.origin;
    // Authorization never follows a redirect to another host (a storage backend).
    std::string authorization = on_host ? AuthorizationFor(host, req.scopes) : "";
    ASSIGN_OR_RETURN(Response r, Transport(req, req.url, authorization));
    r.host = &host;
    if (r.status == 401 && on_host && !auth_retried) {
      auth_retried = true;
      absl::Status s = Authenticate(host, r, req.scopes);
      if (!s.ok()) {
        if (s.code() == absl::StatusCode::kUnauthenticated) {
          r.redirected = redirected;
          r.auth_note = std::string(s.message());
          return r;  // the caller names the request that was refused
        }
        return s;
      }
      continue;
    }
    bool is_redirect = IsRedirectStatus(r.status);
    std::string location = r.Header("location");
    if (is_redirect && !location.empty()) {
      req.url = ResolveLocation(req.url, location);
      if (r.status == 303 && req.method != "HEAD") {
        req.method = "GET";
        req.body = nullptr;
        req.reader = nullptr;
      }
      redirected = true;
      ++hops;
      continue;
    }
    r.redirected = redirected;
    r.url = req.url;
    return r;
  }
  return absl::FailedPreconditionError(
      absl::StrCat("more than ", kMaxRedirects, " redirects from ", host.label));
}

}  // namespace modelfs
