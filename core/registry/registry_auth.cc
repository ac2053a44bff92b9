// RegistryClient's authentication (anonymous, Basic, the Bearer token flow with tokens
// cached per scope) and Send: one request on one host with its auth and redirects, where
// Authorization never follows a redirect to another host. Credentials and tokens never appear
// in a Status message.
#include <algorithm>
#include <cstring>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
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

namespace {

bool SameCredential(const std::optional<Credential>& a, const std::optional<Credential>& b) {
  if (a.has_value() != b.has_value()) return false;
  if (!a.has_value()) return true;
  return a->username == b->username && a->password == b->password &&
         a->identity_token == b->identity_token && a->registry_token == b->registry_token;
}

}  // namespace

absl::StatusOr<std::optional<Credential>> RegistryClient::CurrentCredential(Host& host) {
  if (host.keychain == nullptr) return host.fixed_credential;
  std::optional<Credential> cred;
  for (const std::string& key : host.keychain_keys) {
    absl::StatusOr<std::optional<Credential>> c = host.keychain->Get(key);
    if (!c.ok()) {
      return absl::Status(c.status().code(),
                          absl::StrCat("credentials for ", host.label, ": ", c.status().message()));
    }
    if (c->has_value()) {
      cred = *std::move(c);
      break;
    }
  }
  absl::MutexLock l(&host.mu);
  if (!SameCredential(cred, host.credential)) {
    // Tokens were granted to the credential replaced: the next request fetches new ones.
    host.credential = cred;
    host.tokens.clear();
  }
  return cred;
}

absl::StatusOr<bool> RegistryClient::RefreshCredential(Host& host,
                                                       const std::optional<Credential>& refused) {
  if (host.keychain == nullptr) return false;
  absl::MutexLock auth(&host.auth_mu);
  bool replaced;
  {
    absl::MutexLock l(&host.mu);
    replaced = !SameCredential(host.credential, refused);
  }
  if (!replaced) {
    for (const std::string& key : host.keychain_keys) host.keychain->Invalidate(key);
  }
  ASSIGN_OR_RETURN(std::optional<Credential> now, CurrentCredential(host));
  return !SameCredential(now, refused);
}

absl::StatusOr<std::string> RegistryClient::AuthorizationFor(
    Host& host, const std::vector<std::string>& scopes) {
  ASSIGN_OR_RETURN(std::optional<Credential> cred, CurrentCredential(host));
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
      return std::string();
    }
  }
  // The host already told us where tokens come from: fetch one for this scope now rather
  // than paying a 401 round trip. On failure the request goes out bare and the 401 path
  // reports the error.
  if (!EnsureToken(host, *challenge, scopes, "").ok()) return std::string();
  absl::MutexLock l(&host.mu);
  auto it = host.tokens.find(key);
  return it == host.tokens.end() ? std::string() : "Bearer " + it->second.token;
}

absl::Status RegistryClient::Authenticate(Host& host, const Response& unauthorized,
                                          const std::vector<std::string>& scopes,
                                          const std::string& sent) {
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
  ASSIGN_OR_RETURN(std::optional<Credential> cred, CurrentCredential(host));
  if (bearer.has_value()) {
    std::string refused_token =
        absl::StartsWith(sent, "Bearer ") ? sent.substr(strlen("Bearer ")) : std::string();
    {
      absl::MutexLock l(&host.mu);
      host.challenge = bearer;
    }
    if (cred.has_value() && !cred->registry_token.empty()) {
      // Another request replaced the token refused meanwhile: retry with the new one.
      if (sent != "Bearer " + cred->registry_token) return absl::OkStatus();
      // A registry token from the keychain was refused: ask for another one.
      ASSIGN_OR_RETURN(bool other, RefreshCredential(host, cred));
      if (other) return absl::OkStatus();
      return absl::UnauthenticatedError(
          absl::StrCat(host.label, " refused the configured registry token"));
    }
    return EnsureToken(host, *bearer, scopes, refused_token);
  }
  if (basic && cred.has_value() && !cred->username.empty()) {
    bool already;
    {
      absl::MutexLock l(&host.mu);
      already = host.basic_auth;
      host.basic_auth = true;
    }
    if (!already) return absl::OkStatus();
    if (sent != "Basic " + absl::Base64Escape(cred->username + ":" + cred->password)) {
      return absl::OkStatus();  // replaced meanwhile: retry with the new one
    }
    if (!sent.empty()) {
      // The registry refused the username and password sent: ask the keychain again.
      ASSIGN_OR_RETURN(bool other, RefreshCredential(host, cred));
      if (other) return absl::OkStatus();
    }
    return absl::UnauthenticatedError(
        absl::StrCat(host.label, " refused the configured username and password"));
  }
  return absl::UnauthenticatedError(
      absl::StrCat(host.label, " requires authentication",
                   cred.has_value() ? " and refused the configured credentials"
                                    : " and no credentials are configured for it"));
}

absl::Status RegistryClient::EnsureToken(Host& host, const Challenge& challenge,
                                         const std::vector<std::string>& scopes,
                                         const std::string& refused_token) {
  std::string key = absl::StrJoin(scopes, " ");
  absl::MutexLock auth(&host.auth_mu);
  std::optional<Credential> cred;
  {
    absl::MutexLock l(&host.mu);
    auto it = host.tokens.find(key);
    if (it != host.tokens.end()) {
      if (it->second.token != refused_token && it->second.expires > clock_->Now()) {
        return absl::OkStatus();  // fetched by another request while this one waited
      }
      host.tokens.erase(it);  // the token the host refused, or an expired one
    }
  }
  // auth_mu is held: CurrentCredential takes only mu and the keychain's own locks.
  ASSIGN_OR_RETURN(cred, CurrentCredential(host));
  absl::Status st = FetchToken(host, challenge, scopes, cred);
  if (st.code() != absl::StatusCode::kUnauthenticated || host.keychain == nullptr ||
      !cred.has_value()) {
    return st;
  }
  // The token server refused the keychain's credential (a rotated password, an expired
  // identity token): make the keychain ask its source again, and try once more.
  {
    absl::MutexLock l(&host.mu);
    if (!SameCredential(host.credential, cred)) {
      // replaced while the token was fetched: fall through with the new one
    } else {
      for (const std::string& k : host.keychain_keys) host.keychain->Invalidate(k);
    }
  }
  ASSIGN_OR_RETURN(std::optional<Credential> fresh, CurrentCredential(host));
  if (SameCredential(fresh, cred)) return st;
  return FetchToken(host, challenge, scopes, fresh);
}

absl::Status RegistryClient::FetchToken(Host& host, const Challenge& challenge,
                                        const std::vector<std::string>& scopes,
                                        const std::optional<Credential>& cred) {
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
    std::string authorization;
    if (on_host) {
      ASSIGN_OR_RETURN(authorization, AuthorizationFor(host, req.scopes));
    }
    ASSIGN_OR_RETURN(Response r, Transport(req, req.url, authorization));
    r.host = &host;
    if (r.status == 401 && on_host && !auth_retried) {
      auth_retried = true;
      absl::Status s = Authenticate(host, r, req.scopes, authorization);
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
