#include "core/registry/registry_client.h"

#include "core/oci/descriptor.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/http/content_range.h"
#include "core/http/transport.h"
#include "core/http/url.h"
#include "core/status/status_macros.h"
#include "nlohmann/json.hpp"

namespace modelfs {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxManifestBytes = 4 << 20;
constexpr size_t kMaxErrorBodyBytes = 64 << 10;
constexpr size_t kMaxJsonBodyBytes = 8 << 20;
constexpr int kMaxRedirects = 10;
constexpr char kRetryablePayload[] = "modelfs.dev/retryable-transport";
constexpr char kIgnoredRangePayload[] = "modelfs.dev/ignored-range";
// On an ignored-range status: the size of the whole blob the host offered instead (decimal).
constexpr char kWholeSizePayload[] = "modelfs.dev/whole-size";
// A range read served from a whole-blob answer stops it once it has its bytes.
constexpr char kRangeCompletePayload[] = "modelfs.dev/range-complete";
// A whole-blob answer to a range request is read (its range taken from it) when the blob is no
// larger than this: cutting it short and asking again would cost about as much.
constexpr uint64_t kSmallWholeAnswer = 4 << 20;
// How fast a mirror is assumed at most to fetch a blob from upstream (10 Gbit/s), for its first
// wait: the fill of a 1 GiB blob takes at least 0.86 s, so it is not asked again before then.
constexpr double kFastestFillBytesPerSecond = 1.25e9;

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Transport failures (connection refused, reset, timeouts) carry this payload so retry
// loops can tell them from a sink or source error that happens to share a status code.
absl::Status TransportError(std::string message) {
  absl::Status s = absl::UnavailableError(message);
  s.SetPayload(kRetryablePayload, absl::Cord("1"));
  return s;
}
bool IsRetryableTransport(const absl::Status& s) {
  return s.GetPayload(kRetryablePayload).has_value();
}
// A host answered a range request with the whole blob: the next host may serve the range.
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

std::string MediaTypeOf(const std::string& content_type) {
  std::string mt = content_type.substr(0, content_type.find(';'));
  return std::string(absl::StripAsciiWhitespace(mt));
}

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

BlobReadAt BlobReadAtString(std::shared_ptr<const std::string> bytes) {
  return [bytes](uint64_t offset, char* buf, size_t n) -> absl::StatusOr<size_t> {
    if (offset >= bytes->size()) return size_t{0};
    size_t k = std::min<uint64_t>(n, bytes->size() - offset);
    std::memcpy(buf, bytes->data() + offset, k);
    return k;
  };
}

BlobReadAt BlobReadAtFd(int fd) {
  return [fd](uint64_t offset, char* buf, size_t n) -> absl::StatusOr<size_t> {
    while (true) {
      ssize_t r = ::pread(fd, buf, n, static_cast<off_t>(offset));
      if (r >= 0) return static_cast<size_t>(r);
      if (errno == EINTR) continue;
      return absl::InternalError(
          absl::StrCat("pread at offset ", offset, ": ", std::strerror(errno)));
    }
  };
}

// ---------------------------------------------------------------------------------------------

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
  // Receives 2xx bodies (otherwise buffered in Response::body up to max_body).
  std::function<absl::Status(const Response&, std::string_view)> sink;
  size_t max_body = kMaxJsonBodyBytes;
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
  // Start offset of a 206 body ("Content-Range: bytes 100-199/1000"); 0 otherwise.
  uint64_t RangeStart() const {
    if (status != 206) return 0;
    std::optional<ContentRange> cr = ParseContentRange(Header("content-range"));
    return cr.has_value() && cr->first.has_value() ? *cr->first : 0;
  }
};

absl::Duration StallTimeoutForReads(absl::Duration stall_timeout, absl::Duration read_deadline) {
  return std::min(stall_timeout,
                  std::max(absl::Seconds(1), absl::Ceil(read_deadline / 3, absl::Seconds(1))));
}

// The client's retry loops use the project's one policy (core/base/backoff.h), bounded by
// retry_deadline and the caller's deadline.
Backoff RegistryClient::MakeBackoff(absl::Time deadline) const {
  BackoffPolicy policy;
  policy.max_attempts = options_.max_attempts;
  policy.initial_backoff = options_.initial_backoff;
  policy.max_backoff = options_.max_backoff;
  return Backoff(policy, clock_, std::min(clock_->Now() + options_.retry_deadline, deadline));
}

// ---------------------------------------------------------------------------------------------

// One host of the registry: where to connect, how to verify it, what to present there, and
// what the client has learnt about it (auth challenge, tokens, recent failures).
class RegistryClient::Host {
 public:
  Host(const RegistryHost& h, const std::string& registry)
      : endpoint(h.endpoint),
        credential(h.credential),
        origin(absl::AsciiStrToLower(h.endpoint.BaseUrl())),
        ns_query(IsProxyFor(h.endpoint, registry) ? "ns=" + PercentEncode(registry) : "") {
    if (h.endpoint.host == DefaultHostEndpoint(registry).host) {
      label = absl::StrCat("registry ", registry);
    } else if (h.endpoint.mirror) {
      label = absl::StrCat("mirror ", h.endpoint.host, " of registry ", registry);
    } else {
      label = absl::StrCat(h.endpoint.host, " (server of registry ", registry, ")");
    }
  }

  const HostEndpoint endpoint;
  const std::optional<Credential> credential;
  const std::string origin;    // lowercase scheme://authority
  const std::string ns_query;  // "ns=<registry>" for a host of another name, else ""
  std::string label;           // how messages name it: "registry r", "mirror m of registry r"
  std::string ca_blob;         // concatenated PEM of endpoint.ca_files

  absl::Mutex mu;
  std::optional<Challenge> challenge ABSL_GUARDED_BY(mu);
  bool basic_auth ABSL_GUARDED_BY(mu) = false;
  std::map<std::string, CachedToken> tokens ABSL_GUARDED_BY(mu);
  // Tried after the other hosts until then (a connection error, 5xx or 429), and how many
  // such failures in a row (the backoff doubles with each).
  absl::Time failing_until ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  int failures ABSL_GUARDED_BY(mu) = 0;
  // Blobs it answered a range request for with the whole blob, or wrongly, and until when to
  // prefer other hosts for them.
  std::map<std::string, absl::Time> demoted ABSL_GUARDED_BY(mu);
  // A mirror's state per blob: whether it serves ranges of it yet (AwaitMirrorTurn).
  struct Fill {
    bool holds = false;   // answered a range request with 206: every request may go
    bool asking = false;  // the one request allowed in flight is; the others wait
    absl::Time filling_since = absl::InfinitePast();  // its first whole-blob answer
    absl::Time next = absl::InfinitePast();           // when the next request may go
    absl::Duration interval;                          // the wait after a whole-blob answer
  };
  std::map<std::string, Fill> fills ABSL_GUARDED_BY(mu);  // never erased: nodes stay put
};

absl::StatusOr<std::unique_ptr<RegistryClient>> RegistryClient::Create(
    RegistryClientOptions options) {
  if (options.registry.empty()) {
    return absl::InvalidArgumentError("RegistryClient needs a registry name");
  }
  if (options.hosts.empty()) {
    if (options.endpoint.host.empty()) options.endpoint = DefaultHostEndpoint(options.registry);
    options.hosts.push_back(RegistryHost{options.endpoint, options.credential});
  }
  if (options.upload_chunk_size == 0) options.upload_chunk_size = 16ull << 20;
  std::unique_ptr<RegistryClient> c(new RegistryClient(std::move(options)));
  for (const RegistryHost& rh : c->options_.hosts) {
    if (rh.endpoint.host.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("a host of registry ", c->options_.registry, " has no host name"));
    }
    auto h = std::make_unique<Host>(rh, c->options_.registry);
    for (const std::string& f : rh.endpoint.ca_files) {
      std::ifstream in(f, std::ios::binary);
      if (!in) {
        return absl::InternalError(absl::StrCat("cannot read CA file ", f, " for ", h->label));
      }
      std::stringstream ss;
      ss << in.rdbuf();
      absl::StrAppend(&h->ca_blob, ss.str(), "\n");
    }
    c->hosts_.push_back(std::move(h));
  }
  return c;
}

absl::StatusOr<std::unique_ptr<RegistryClient>> RegistryClient::ForRegistry(
    const std::string& registry, HostCapability capability, const HostsOptions& hosts,
    const CredentialStore& credentials, RegistryClientOptions base) {
  ASSIGN_OR_RETURN(std::vector<HostEndpoint> all, ResolveHosts(registry, hosts));
  base.registry = registry;
  base.hosts.clear();
  for (HostEndpoint& ep : all) {
    if (capability == HostCapability::kPush) {
      if (!ep.push) continue;
      // The pusher's one host also answers the reads a push makes (blob and manifest HEADs).
      ep.pull = ep.resolve = true;
    } else if (!ep.pull) {
      continue;
    }
    RegistryHost rh;
    rh.credential = ep.mirror ? credentials.Lookup(ep.host) : credentials.Lookup(registry);
    if (!rh.credential && !ep.mirror) rh.credential = credentials.Lookup(ep.host);
    rh.endpoint = std::move(ep);
    base.hosts.push_back(std::move(rh));
    if (capability == HostCapability::kPush) break;
  }
  if (base.hosts.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no configured host for registry ", registry, " allows ",
                     capability == HostCapability::kPush ? "push" : "pull"));
  }
  return Create(std::move(base));
}

RegistryClient::RegistryClient(RegistryClientOptions options)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : Clock::Real()),
      pool_(std::make_unique<HttpHandlePool>()) {}

RegistryClient::~RegistryClient() = default;

RegistryStats RegistryClient::stats() const {
  RegistryStats s;
  s.requests = requests_.load();
  s.bytes_sent = bytes_sent_.load();
  s.bytes_received = bytes_received_.load();
  s.retries = retries_.load();
  s.token_requests = token_requests_.load();
  return s;
}

std::vector<HostEndpoint> RegistryClient::endpoints() const {
  std::vector<HostEndpoint> out;
  for (const auto& h : hosts_) out.push_back(h->endpoint);
  return out;
}

std::string RegistryClient::Url(const Host& h, const std::string& path) const {
  std::string url = absl::StrCat(h.endpoint.ApiRoot(), "/", path);
  return h.ns_query.empty() ? url : AppendQuery(url, h.ns_query);
}

RegistryClient::Host* RegistryClient::HostOf(const std::string& url) const {
  std::string origin = UrlOrigin(url);
  for (const auto& h : hosts_) {
    if (h->origin == origin) return h.get();
  }
  return nullptr;
}

std::vector<RegistryClient::Host*> RegistryClient::Candidates(Op op, const std::string& blob) {
  std::vector<Host*> preferred, later;
  const absl::Time now = clock_->Now();
  for (const auto& hp : hosts_) {
    Host* h = hp.get();
    const HostEndpoint& ep = h->endpoint;
    bool ok = op == Op::kPush ? ep.push : op == Op::kResolve ? ep.pull && ep.resolve : ep.pull;
    if (!ok) continue;
    if (op == Op::kPush) return {h};
    bool demoted = false;
    {
      absl::MutexLock l(&h->mu);
      demoted = h->failing_until > now;
      if (!blob.empty()) {
        auto it = h->demoted.find(blob);
        if (it != h->demoted.end()) {
          if (it->second > now) {
            demoted = true;
          } else {
            h->demoted.erase(it);
          }
        }
      }
    }
    (demoted ? later : preferred).push_back(h);
  }
  preferred.insert(preferred.end(), later.begin(), later.end());
  return preferred;
}

void RegistryClient::HostFailed(Host& h) {
  absl::MutexLock l(&h.mu);
  absl::Duration backoff = options_.host_failure_backoff;
  for (int i = 0; i < h.failures && backoff < options_.host_failure_cooldown; ++i) backoff *= 2;
  h.failures++;
  h.failing_until = clock_->Now() + std::min(backoff, options_.host_failure_cooldown);
}

void RegistryClient::DemoteForBlob(Host& h, const std::string& blob, absl::Duration cooldown) {
  if (blob.empty() || hosts_.size() < 2) return;
  absl::MutexLock l(&h.mu);
  h.demoted[blob] = clock_->Now() + cooldown;
}

bool RegistryClient::AwaitMirrorTurn(Host& h, const std::string& blob, absl::Time until) {
  absl::MutexLock l(&h.mu);
  Host::Fill& f = h.fills[blob];
  while (true) {
    const absl::Time now = clock_->Now();
    // It failed (a request before this one found it down): the next host, without waiting.
    if (h.failing_until > now) return false;
    if (f.holds) return true;
    if (f.filling_since != absl::InfinitePast() &&
        now - f.filling_since >= options_.mirror_fill_wait) {
      return true;  // waited long enough: it is asked like any host again
    }
    if (!f.asking && now >= f.next) {
      f.asking = true;
      return true;
    }
    if (now >= until) return false;
    // Until the request in flight is answered, or until the next may go.
    const bool asking = f.asking;
    auto changed = [&f, asking]() { return f.holds || f.asking != asking; };
    clock_->AwaitWithDeadline(h.mu, absl::Condition(&changed),
                              asking ? until : std::min(until, f.next));
  }
}

bool RegistryClient::MirrorAnswered(Host& h, const std::string& blob,
                                    const absl::StatusOr<Response>& r) {
  absl::MutexLock l(&h.mu);
  Host::Fill& f = h.fills[blob];
  f.asking = false;
  if (r.ok() && r->status == 206) {
    f.holds = true;
    return false;
  }
  if (r.ok() || !IsIgnoredRange(r.status())) return false;  // no word on the blob: as before
  // A whole blob: it is storing it from upstream (or it never serves ranges: mirror_fill_wait).
  // Each time it is asked before it has stored the blob costs its upstream a few MB more (the
  // answer is cut at its first byte, but the upstream sends until the cut reaches it), so the
  // waits are as long as a fill can last: the first as long as the fastest fill of the blob,
  // then doubling to 2 s, and beyond that a quarter of the time already waited.
  const absl::Time now = clock_->Now();
  f.holds = false;
  if (f.filling_since == absl::InfinitePast()) {
    f.filling_since = now;
    uint64_t size = 0;
    absl::optional<absl::Cord> whole = r.status().GetPayload(kWholeSizePayload);
    if (whole.has_value()) (void)absl::SimpleAtoi(std::string(*whole), &size);
    f.interval =
        std::clamp(absl::Seconds(size / kFastestFillBytesPerSecond), options_.mirror_probe_interval,
                   std::max(options_.mirror_probe_interval, absl::Seconds(2)));
  } else {
    f.interval = std::min(f.interval * 2, std::max(absl::Seconds(2), (now - f.filling_since) / 4));
  }
  f.next = now + f.interval;
  return now - f.filling_since < options_.mirror_fill_wait;
}

// ---------------------------------------------------------------------------------------------
// Transport: one exchange through core/http.

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
      absl::Status s = req.sink(resp, data);
      resp.body_bytes += n;
      if (!s.ok()) {
        callback_error = s;
        return false;
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
  // Blob bodies arrive in 512 KiB pieces (curl's largest) rather than 16 KiB: 32 times fewer
  // recv calls and callbacks on the read path.
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
  HttpResult done = handle->Perform(http);
  resp.status = done.status;
  bytes_sent_ += done.bytes_uploaded;

  if (!callback_error.ok()) return callback_error;
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

// ---------------------------------------------------------------------------------------------
// Authentication.

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

// ---------------------------------------------------------------------------------------------
// Send: auth and redirects on one host; SendToHosts: the hosts in turn.

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

namespace {

// What one host's answer means for a request that other hosts could serve.
enum class Verdict {
  kAccept,        // the answer (2xx, or a status the caller interprets)
  kStop,          // an error from our own side (a sink, a source): no other host helps
  kNext,          // this host cannot serve it: try the next (404, other 4xx, ignored Range)
  kNextRetryable  // a connection error, 5xx or 429: the next host, and later this one again
};

}  // namespace

absl::StatusOr<RegistryClient::Response> RegistryClient::SendToHosts(const Request& base, Op op) {
  static constexpr const char* kOpNames[] = {"resolve tags", "pull", "push"};
  auto candidates = [&] {
    return base.host != nullptr ? std::vector<Host*>{base.host} : Candidates(op, base.range_blob);
  };
  std::vector<Host*> hosts = candidates();
  if (hosts.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no host of registry ", options_.registry, " is configured to ",
                     kOpNames[static_cast<int>(op)], " (hosts.toml capabilities)"));
  }
  Backoff backoff = MakeBackoff(base.deadline);
  // Range reads wait for a mirror that is filling the blob at most half of their time left.
  const absl::Time start = clock_->Now();
  const absl::Time mirror_until =
      base.deadline == absl::InfiniteFuture()
          ? start + options_.mirror_fill_wait
          : start + std::min(options_.mirror_fill_wait, (base.deadline - start) / 2);
  while (true) {
    // The failure to report: the first that is not a 404, else the first 404 (containerd's
    // firstErr), with what every other host said.
    std::optional<absl::StatusOr<Response>> best;
    bool best_is_404 = false;
    std::vector<std::pair<const Host*, std::string>> failures;
    bool all_retryable = true;
    absl::Duration hint = absl::ZeroDuration();
    for (Host* h : hosts) {
      Request one = base;
      one.host = h;
      if (base.path.has_value()) one.url = Url(*h, *base.path);
      const bool gated = h->endpoint.mirror && !base.range_blob.empty() && base.host == nullptr;
      absl::StatusOr<Response> r = absl::UnknownError("not sent");
      bool waited_out = false;
      while (true) {
        if (gated && !AwaitMirrorTurn(*h, base.range_blob, mirror_until)) {
          waited_out = true;
          break;
        }
        r = Send(one);
        if (!gated || !MirrorAnswered(*h, base.range_blob, r)) break;
      }
      if (waited_out) {
        failures.emplace_back(h, "still storing the blob from its upstream");
        all_retryable = false;
        continue;
      }
      Verdict v;
      if (!r.ok()) {
        v = IsRetryableTransport(r.status()) ? Verdict::kNextRetryable
            : IsIgnoredRange(r.status())     ? Verdict::kNext
                                             : Verdict::kStop;
      } else if (r->status >= 500 || r->status == 429) {
        v = Verdict::kNextRetryable;
      } else if (r->status >= 400) {
        v = Verdict::kNext;
      } else {
        v = Verdict::kAccept;
      }
      if (v == Verdict::kAccept || v == Verdict::kStop) {
        if (v == Verdict::kAccept) {
          absl::MutexLock l(&h->mu);
          h->failing_until = absl::InfinitePast();
          h->failures = 0;
        }
        if (r.ok()) r->attempts = backoff.attempts();
        return r;
      }
      if (v == Verdict::kNextRetryable) HostFailed(*h);
      if (!r.ok() && IsIgnoredRange(r.status())) {
        DemoteForBlob(*h, base.range_blob, options_.ignored_range_cooldown);
      }
      if (v != Verdict::kNextRetryable) all_retryable = false;
      if (r.ok() && (r->status == 429 || r->status == 503)) {
        int64_t secs = 0;
        if (absl::SimpleAtoi(r->Header("retry-after"), &secs) && secs > 0) {
          hint = std::max(hint, absl::Seconds(secs));
        }
      }
      failures.emplace_back(
          h, r.ok() ? absl::StrCat("HTTP ", r->status) : std::string(r.status().message()));
      bool is_404 = r.ok() && r->status == 404;
      if (!best.has_value() || (best_is_404 && !is_404)) {
        best = std::move(r);
        best_is_404 = is_404;
      }
    }
    bool give_up = base.single_attempt || !all_retryable || !backoff.Wait(hint);
    if (give_up && !best.has_value()) {
      // Every host was a mirror still storing the blob.
      return absl::UnavailableError(absl::StrCat("every host of registry ", options_.registry,
                                                 " is still storing the blob from upstream"));
    }
    if (give_up) {
      absl::StatusOr<Response> r = std::move(*best);
      const Host* reported = r.ok() ? r->host : nullptr;
      std::string others;
      if (hosts.size() > 1) {
        for (const auto& [h, what] : failures) {
          if (r.ok() && h == reported) continue;
          absl::StrAppend(&others, others.empty() ? "" : "; ", h->label, ": ", what);
        }
      }
      if (r.ok()) {
        r->attempts = backoff.attempts();
        if (!others.empty()) r->tried = absl::StrCat("also tried ", others);
        return r;
      }
      std::string msg(r.status().message());
      if (hosts.size() > 1) msg = absl::StrCat("every host failed: ", others);
      if (backoff.attempts() > 1)
        absl::StrAppend(&msg, " (after ", backoff.attempts(), " attempts)");
      absl::Status s(r.status().code(), msg);
      if (IsRetryableTransport(r.status())) s.SetPayload(kRetryablePayload, absl::Cord("1"));
      if (IsIgnoredRange(r.status())) s.SetPayload(kIgnoredRangePayload, absl::Cord("1"));
      return s;
    }
    ++retries_;
    hosts = candidates();
  }
}

// ---------------------------------------------------------------------------------------------
// Errors.

namespace {

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

}  // namespace

#define MODELFS_HTTP_ERROR(what, r)                                                   \
  StatusFromResponse((what), HostLabel((r).host), (r).status, (r).body, (r).attempts, \
                     (r).auth_note, (r).tried)

// ---------------------------------------------------------------------------------------------
// API calls.

namespace {
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
}  // namespace

std::string RegistryClient::HostLabel(const Host* h) const {
  return h != nullptr ? h->label : absl::StrCat("registry ", options_.registry);
}

absl::Status RegistryClient::Ping() {
  Request req;
  req.path = "";
  ASSIGN_OR_RETURN(Response r, SendToHosts(req, Op::kPull));
  if (r.status == 200) return absl::OkStatus();
  return MODELFS_HTTP_ERROR("GET /v2/", r);
}

absl::StatusOr<std::optional<uint64_t>> RegistryClient::HeadBlob(const std::string& repo,
                                                                 const Digest& digest) {
  Request req;
  req.method = "HEAD";
  req.path = absl::StrCat(repo, "/blobs/", digest.str());
  req.scopes = PullScope(repo);
  ASSIGN_OR_RETURN(Response r, SendToHosts(req, Op::kPull));
  if (r.status == 404) return std::optional<uint64_t>();
  if (r.status != 200) return MODELFS_HTTP_ERROR(BlobWhat("HEAD", repo, digest), r);
  uint64_t size = 0;
  if (!absl::SimpleAtoi(r.Header("content-length"), &size)) {
    return absl::FailedPreconditionError(absl::StrCat(
        BlobWhat("HEAD", repo, digest), ": ", HostLabel(r.host), " sent no Content-Length"));
  }
  return std::optional<uint64_t>(size);
}

absl::StatusOr<bool> RegistryClient::BlobExists(const std::string& repo, const Digest& digest) {
  ASSIGN_OR_RETURN(std::optional<uint64_t> size, HeadBlob(repo, digest));
  return size.has_value();
}

// One attempt through the remembered redirect target (if any), then the hosts with retries.
// The redirect target is remembered when a host sent us elsewhere.
absl::StatusOr<RegistryClient::Response> RegistryClient::GetBlobOnce(const std::string& repo,
                                                                     const Digest& digest,
                                                                     Request& req) {
  std::string cached;
  {
    absl::MutexLock l(&mu_);
    auto it = redirects_.find(digest.str());
    if (it != redirects_.end()) {
      if (it->second.expires > clock_->Now()) {
        cached = it->second.url;
      } else {
        redirects_.erase(it);
      }
    }
  }
  if (!cached.empty()) {
    absl::StatusOr<Response> r = Transport(req, cached, "");
    if (r.ok() && r->status >= 200 && r->status < 300) return r;
    if (!r.ok() && !IsRetryableTransport(r.status()) && !IsIgnoredRange(r.status())) {
      return r;  // the sink refused
    }
    // Expired presigned URL or a storage hiccup: ask the registry for a fresh location.
    absl::MutexLock l(&mu_);
    redirects_.erase(digest.str());
  }
  req.path = absl::StrCat(repo, "/blobs/", digest.str());
  absl::StatusOr<Response> r = SendToHosts(req, Op::kPull);
  if (r.ok() && r->redirected && r->status >= 200 && r->status < 300 && HostOf(r->url) == nullptr) {
    absl::MutexLock l(&mu_);
    redirects_[digest.str()] = CachedRedirect{r->url, clock_->Now() + options_.redirect_cache_ttl};
  }
  return r;
}

absl::Status RegistryClient::GetBlob(const std::string& repo, const Digest& digest,
                                     const BlobSink& sink) {
  uint64_t delivered = 0;
  Request req;
  req.scopes = PullScope(repo);
  req.long_transfer = true;
  req.dynamic_header = [&delivered]() -> std::string {
    return delivered == 0 ? "" : absl::StrCat("Range: bytes=", delivered, "-");
  };
  // Bytes at absolute offsets below `delivered` were already handed over: skip them, so a
  // resumed transfer (206 from `delivered`, or a 200 from 0, from any host) continues
  // seamlessly.
  req.sink = [&](const Response& resp, std::string_view data) -> absl::Status {
    uint64_t pos = resp.RangeStart() + resp.body_bytes;
    if (pos + data.size() <= delivered) return absl::OkStatus();
    if (pos < delivered) data.remove_prefix(delivered - pos);
    if (pos > delivered) {
      return absl::DataLossError(absl::StrCat(BlobWhat("GET", repo, digest), ": resumed at byte ",
                                              pos, ", expected ", delivered));
    }
    RETURN_IF_ERROR(sink(data));
    delivered += data.size();
    return absl::OkStatus();
  };
  // GetBlobOnce retries (resuming from `delivered`) until the deadline.
  absl::StatusOr<Response> r = GetBlobOnce(repo, digest, req);
  if (r.ok() && (r->status == 200 || r->status == 206)) return absl::OkStatus();
  if (r.ok()) return MODELFS_HTTP_ERROR(BlobWhat("GET", repo, digest), *r);
  if (IsRetryableTransport(r.status()) || absl::IsUnavailable(r.status())) {
    return absl::UnavailableError(absl::StrCat(BlobWhat("GET", repo, digest), " from registry ",
                                               options_.registry, ": ", r.status().message(), " (",
                                               delivered, " bytes received)"));
  }
  return r.status();
}

absl::StatusOr<std::string> RegistryClient::GetBlobRange(const std::string& repo,
                                                         const Digest& digest, uint64_t offset,
                                                         uint64_t length, absl::Time deadline) {
  std::string out;
  out.reserve(length);
  RETURN_IF_ERROR(
      StreamBlobRange(repo, digest, offset, length, deadline, [&out](absl::string_view data) {
        out.append(data.data(), data.size());
        return absl::OkStatus();
      }));
  return out;
}

absl::Status RegistryClient::StreamBlobRange(
    const std::string& repo, const Digest& digest, uint64_t offset, uint64_t length,
    absl::Time deadline, const std::function<absl::Status(absl::string_view)>& sink) {
  if (length == 0) return absl::OkStatus();
  uint64_t delivered = 0;  // handed to `sink`
  uint64_t pos = 0;        // in the current response
  Request req;
  req.deadline = deadline;
  req.scopes = PullScope(repo);
  req.long_transfer = true;
  req.headers.push_back(absl::StrCat("Range: bytes=", offset, "-", offset + length - 1));
  req.single_attempt = true;
  req.range_blob = digest.str();
  std::string what =
      absl::StrCat(BlobWhat("GET", repo, digest), " range [", offset, ", ", offset + length, ")");
  bool from_whole = false;  // the bytes came from a whole small blob (a 200)
  req.sink = [&](const Response& resp, std::string_view data) -> absl::Status {
    uint64_t whole = 0;
    if (resp.status == 200 && absl::SimpleAtoi(resp.Header("content-length"), &whole) &&
        whole <= kSmallWholeAnswer && offset + length <= whole) {
      // The whole (small) blob from its first byte: take the range out of it.
      from_whole = true;
      const uint64_t at = resp.body_bytes;  // blob offset of data[0]
      const uint64_t want = offset + delivered;
      if (at + data.size() > want && at <= want) {
        const uint64_t n = std::min<uint64_t>(at + data.size() - want, length - delivered);
        RETURN_IF_ERROR(sink(absl::string_view(data.data() + (want - at), n)));
        delivered += n;
      }
      if (delivered < length) return absl::OkStatus();
      absl::Status done = absl::CancelledError("range complete");
      done.SetPayload(kRangeCompletePayload, absl::Cord("1"));
      return done;
    }
    if (resp.status != 206) {
      absl::Status s = absl::FailedPreconditionError(
          absl::StrCat(what, ": registry ignored Range (HTTP ", resp.status, " from ",
                       UrlOrigin(resp.url), ")"));
      s.SetPayload(kIgnoredRangePayload, absl::Cord("1"));
      if (whole > 0) s.SetPayload(kWholeSizePayload, absl::Cord(absl::StrCat(whole)));
      return s;
    }
    if (resp.body_bytes == 0) {
      pos = 0;  // a retried response, or another host's, starts over
      if (resp.RangeStart() != offset) {
        Host* from = HostOf(resp.url);
        if (from != nullptr) DemoteForBlob(*from, req.range_blob, options_.bad_answer_cooldown);
        return MarkBadAnswer(absl::FailedPreconditionError(
            absl::StrCat(what, ": ", from != nullptr ? from->label : UrlOrigin(resp.url),
                         " answered with Content-Range ", resp.Header("content-range"))));
      }
    }
    if (pos + data.size() > length) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": server sent more than ", length, " bytes"));
    }
    const uint64_t start = pos;
    pos += data.size();
    if (pos <= delivered) return absl::OkStatus();
    // Bytes already handed on are not handed on again (the blob is addressed by its digest:
    // any host's bytes at an offset are the same bytes, and the caller verifies them).
    const uint64_t skip = delivered > start ? delivered - start : 0;
    delivered = pos;
    absl::Status s = sink(absl::string_view(data.data() + skip, data.size() - skip));
    if (IsBadAnswer(s)) {
      // The caller found these bytes wrong: its refetch goes to the next host.
      if (Host* from = HostOf(resp.url); from != nullptr) {
        DemoteForBlob(*from, req.range_blob, options_.bad_answer_cooldown);
      }
    }
    return s;
  };
  absl::StatusOr<Response> got = GetBlobOnce(repo, digest, req);
  if (from_whole && delivered == length &&
      (got.ok() || got.status().GetPayload(kRangeCompletePayload).has_value())) {
    return absl::OkStatus();
  }
  if (!got.ok()) {
    // Name the blob and range; keep the code and the payloads the cache classifies by.
    const absl::Status& e = got.status();
    if (absl::StartsWith(e.message(), what)) return e;
    absl::Status s(e.code(), absl::StrCat(what, ": ", e.message()));
    e.ForEachPayload(
        [&](absl::string_view key, const absl::Cord& value) { s.SetPayload(key, value); });
    return s;
  }
  Response& r = *got;
  if (r.status == 416) {
    return absl::OutOfRangeError(absl::StrCat(what, ": past the end of the blob (HTTP 416)"));
  }
  if (r.status != 206) return MODELFS_HTTP_ERROR(what, r);
  if (delivered != length) {
    return absl::OutOfRangeError(
        absl::StrCat(what, ": got ", delivered, " bytes; the blob ends earlier"));
  }
  return absl::OkStatus();
}

absl::Status RegistryClient::PushBlobOnce(const std::string& repo, const Digest& digest,
                                          uint64_t size, const BlobReadAt& source, bool* retryable,
                                          absl::Duration* hint) {
  *retryable = false;
  auto fail = [&](const std::string& what, const Response& r) {
    *retryable = r.status >= 500 || r.status == 429;
    int64_t secs = 0;
    if (absl::SimpleAtoi(r.Header("retry-after"), &secs) && secs > 0) *hint = absl::Seconds(secs);
    return MODELFS_HTTP_ERROR(what, r);
  };
  auto transport = [&](absl::StatusOr<Response> r) -> absl::StatusOr<Response> {
    if (!r.ok() && IsRetryableTransport(r.status())) *retryable = true;
    return r;
  };
  std::string what = BlobWhat("upload", repo, digest);

  std::vector<Host*> push_hosts = Candidates(Op::kPush, "");
  if (push_hosts.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": no host of registry ", options_.registry, " is configured to push"));
  }
  Host* host = push_hosts.front();
  Request post;
  post.method = "POST";
  post.host = host;
  post.url = Url(*host, absl::StrCat(repo, "/blobs/uploads/"));
  post.scopes = PushScope(repo);
  ASSIGN_OR_RETURN(Response started, transport(Send(post)));
  if (started.status != 202 || started.Header("location").empty()) return fail(what, started);
  std::string location = ResolveLocation(started.url, started.Header("location"));

  Request put;
  put.method = "PUT";
  put.host = host;
  put.scopes = post.scopes;
  put.long_transfer = true;
  put.headers.push_back("Content-Type: application/octet-stream");
  if (size <= options_.monolithic_upload_limit) {
    put.reader = &source;
    put.reader_offset = 0;
    put.reader_length = size;
  } else {
    uint64_t offset = 0;
    while (offset < size) {
      uint64_t n = std::min(options_.upload_chunk_size, size - offset);
      Request patch;
      patch.method = "PATCH";
      patch.host = host;
      patch.url = location;
      patch.scopes = post.scopes;
      patch.long_transfer = true;
      patch.headers = {"Content-Type: application/octet-stream",
                       absl::StrCat("Content-Range: ", offset, "-", offset + n - 1)};
      patch.reader = &source;
      patch.reader_offset = offset;
      patch.reader_length = n;
      ASSIGN_OR_RETURN(Response r, transport(Send(patch)));
      if (r.status != 202) {
        return fail(absl::StrCat(what, " chunk at offset ", offset), r);
      }
      if (!r.Header("location").empty()) location = ResolveLocation(r.url, r.Header("location"));
      offset += n;
    }
  }
  put.url = AppendQuery(location, "digest=" + PercentEncode(digest.str()));
  ASSIGN_OR_RETURN(Response done, transport(Send(put)));
  if (done.status != 201) return fail(what, done);
  std::string reported = done.Header("docker-content-digest");
  if (!reported.empty() && reported != digest.str()) {
    return absl::DataLossError(absl::StrCat(what, ": ", host->label, " stored it as ", reported));
  }
  return absl::OkStatus();
}

absl::Status RegistryClient::PushBlob(const std::string& repo, const Digest& digest, uint64_t size,
                                      const BlobReadAt& source) {
  Backoff backoff = MakeBackoff(absl::InfiniteFuture());
  while (true) {
    bool retryable = false;
    absl::Duration hint = absl::ZeroDuration();
    absl::Status s = PushBlobOnce(repo, digest, size, source, &retryable, &hint);
    if (s.ok() || !retryable) return s;
    if (!backoff.Wait(hint)) {
      return absl::Status(s.code(), absl::StrCat(s.message(), " (gave up after ",
                                                 backoff.attempts(), " upload attempts)"));
    }
    ++retries_;
  }
}

absl::StatusOr<bool> RegistryClient::MountBlob(const std::string& repo, const Digest& digest,
                                               const std::string& from_repo) {
  Request req;
  req.method = "POST";
  req.path = absl::StrCat(repo, "/blobs/uploads/?mount=", PercentEncode(digest.str()),
                          "&from=", PercentEncode(from_repo));
  req.scopes = PushScope(repo);
  req.scopes.push_back(absl::StrCat("repository:", from_repo, ":pull"));
  ASSIGN_OR_RETURN(Response r, SendToHosts(req, Op::kPush));
  if (r.status == 201) return true;
  if (r.status == 202) {
    // The registry could not mount (the source repo lacks the blob, or we may not read it)
    // and opened an upload session instead. Cancel it; the caller pushes normally.
    std::string location = r.Header("location");
    if (!location.empty()) {
      Request del;
      del.method = "DELETE";
      del.host = r.host;
      del.url = ResolveLocation(r.url, location);
      del.scopes = req.scopes;
      (void)Send(del);  // best effort: sessions also expire on their own
    }
    return false;
  }
  return MODELFS_HTTP_ERROR(
      absl::StrCat("mount blob ", digest.str(), " from repository ", from_repo, " into ", repo), r);
}

namespace {
std::string AcceptHeader(const std::vector<std::string>& accept) {
  if (!accept.empty()) return "Accept: " + absl::StrJoin(accept, ", ");
  return absl::StrCat("Accept: ", kMediaTypeOciManifest, ", ", kMediaTypeOciIndex, ", ",
                      kMediaTypeDockerManifest, ", ", kMediaTypeDockerManifestList);
}
}  // namespace

absl::StatusOr<ManifestResult> RegistryClient::GetManifest(const std::string& repo,
                                                           const std::string& reference,
                                                           const std::vector<std::string>& accept) {
  Request req;
  req.path = absl::StrCat(repo, "/manifests/", reference);
  req.scopes = PullScope(repo);
  req.headers.push_back(AcceptHeader(accept));
  req.max_body = kMaxManifestBytes;
  std::string what = absl::StrCat("GET manifest ", reference, " in repository ", repo);
  // A tag is resolved only by hosts trusted with `resolve`; a digest is checked here.
  absl::StatusOr<Response> sent =
      SendToHosts(req, IsDigestReference(reference) ? Op::kPull : Op::kResolve);
  if (!sent.ok() && absl::IsOutOfRange(sent.status())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": manifest larger than ", kMaxManifestBytes, " bytes"));
  }
  ASSIGN_OR_RETURN(Response r, std::move(sent));
  if (r.status != 200) return MODELFS_HTTP_ERROR(what, r);
  ManifestResult out;
  out.digest = Digest::Of(r.body);
  if (absl::StartsWith(reference, "sha256:") && out.digest.str() != reference) {
    return absl::DataLossError(absl::StrCat(what, ": ", HostLabel(r.host),
                                            " returned bytes with digest ", out.digest.str()));
  }
  std::string reported = r.Header("docker-content-digest");
  if (!reported.empty() && absl::StartsWith(reported, "sha256:") && reported != out.digest.str()) {
    return absl::DataLossError(absl::StrCat(what, ": bytes hash to ", out.digest.str(), " but ",
                                            HostLabel(r.host), " says Docker-Content-Digest ",
                                            reported));
  }
  out.media_type = MediaTypeOf(r.Header("content-type"));
  if (out.media_type.empty() || out.media_type == "application/json" ||
      out.media_type == "text/plain" || out.media_type == "application/octet-stream") {
    json doc = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_discarded() && doc.is_object() && doc.contains("mediaType") &&
        doc["mediaType"].is_string()) {
      out.media_type = doc["mediaType"].get<std::string>();
    }
  }
  out.bytes = std::move(r.body);
  return out;
}

absl::StatusOr<ManifestHead> RegistryClient::HeadManifest(const std::string& repo,
                                                          const std::string& reference,
                                                          const std::vector<std::string>& accept) {
  Request req;
  req.method = "HEAD";
  req.path = absl::StrCat(repo, "/manifests/", reference);
  req.scopes = PullScope(repo);
  req.headers.push_back(AcceptHeader(accept));
  std::string what = absl::StrCat("HEAD manifest ", reference, " in repository ", repo);
  ASSIGN_OR_RETURN(Response r,
                   SendToHosts(req, IsDigestReference(reference) ? Op::kPull : Op::kResolve));
  if (r.status != 200) return MODELFS_HTTP_ERROR(what, r);
  ManifestHead out;
  absl::StatusOr<Digest> d = Digest::Parse(r.Header("docker-content-digest"));
  if (!d.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": ", HostLabel(r.host), " sent no usable Docker-Content-Digest"));
  }
  if (absl::StartsWith(reference, "sha256:") && d->str() != reference) {
    return absl::DataLossError(
        absl::StrCat(what, ": ", HostLabel(r.host), " reports digest ", d->str()));
  }
  out.digest = *d;
  out.media_type = MediaTypeOf(r.Header("content-type"));
  (void)absl::SimpleAtoi(r.Header("content-length"), &out.size);
  return out;
}

absl::StatusOr<Digest> RegistryClient::PutManifest(const std::string& repo,
                                                   const std::string& reference,
                                                   const std::string& bytes,
                                                   const std::string& media_type) {
  Request req;
  req.method = "PUT";
  req.path = absl::StrCat(repo, "/manifests/", reference);
  req.scopes = PushScope(repo);
  req.headers.push_back("Content-Type: " + media_type);
  req.body = &bytes;
  std::string what = absl::StrCat("PUT manifest ", reference, " in repository ", repo);
  ASSIGN_OR_RETURN(Response r, SendToHosts(req, Op::kPush));
  if (r.status != 201 && r.status != 200) return MODELFS_HTTP_ERROR(what, r);
  Digest d = Digest::Of(bytes);
  std::string reported = r.Header("docker-content-digest");
  if (!reported.empty() && reported != d.str()) {
    return absl::DataLossError(absl::StrCat(what, ": ", HostLabel(r.host), " stored it as ",
                                            reported, ", expected ", d.str()));
  }
  return d;
}

namespace {

absl::StatusOr<json> ParseIndex(const std::string& bytes, const std::string& what) {
  json doc = json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not a JSON object"));
  }
  if (!doc.contains("manifests")) doc["manifests"] = json::array();
  if (!doc["manifests"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": \"manifests\" is not an array"));
  }
  return doc;
}

json EmptyIndex() {
  return json{
      {"schemaVersion", 2}, {"mediaType", kMediaTypeOciIndex}, {"manifests", json::array()}};
}

void FilterByArtifactType(json* index, const std::string& artifact_type) {
  if (artifact_type.empty()) return;
  json kept = json::array();
  for (const json& d : (*index)["manifests"]) {
    if (d.is_object() && d.value("artifactType", "") == artifact_type) kept.push_back(d);
  }
  (*index)["manifests"] = std::move(kept);
}

}  // namespace

absl::StatusOr<std::string> RegistryClient::GetReferrers(const std::string& repo,
                                                         const Digest& subject,
                                                         const std::string& artifact_type) {
  Request req;
  std::string path = absl::StrCat(repo, "/referrers/", subject.str());
  if (!artifact_type.empty()) {
    path = AppendQuery(path, "artifactType=" + PercentEncode(artifact_type));
  }
  req.path = path;
  req.scopes = PullScope(repo);
  req.headers.push_back(absl::StrCat("Accept: ", kMediaTypeOciIndex));
  std::string what = absl::StrCat("GET referrers of ", subject.str(), " in repository ", repo);
  ASSIGN_OR_RETURN(Response r, SendToHosts(req, Op::kPull));
  if (r.status == 200) {
    ASSIGN_OR_RETURN(json index, ParseIndex(r.body, what));
    if (!absl::StrContains(r.Header("oci-filters-applied"), "artifactType")) {
      FilterByArtifactType(&index, artifact_type);
    }
    return index.dump();
  }
  if (r.status != 404) return MODELFS_HTTP_ERROR(what, r);

  // No referrers API (Distribution 2.8): the referrers tag schema.
  std::string tag = ::modelfs::ReferrersFallbackTag(subject);
  absl::StatusOr<ManifestResult> m = GetManifest(repo, tag, {kMediaTypeOciIndex});
  if (absl::IsNotFound(m.status())) return EmptyIndex().dump();
  if (!m.ok()) return m.status();
  ASSIGN_OR_RETURN(json index,
                   ParseIndex(m->bytes, absl::StrCat("referrers tag ", tag, " in ", repo)));
  FilterByArtifactType(&index, artifact_type);
  return index.dump();
}

absl::Status RegistryClient::PutReferrersFallback(const std::string& repo, const Digest& subject,
                                                  const std::string& descriptor_json) {
  json desc = json::parse(descriptor_json, nullptr, /*allow_exceptions=*/false);
  if (desc.is_discarded() || !desc.is_object() || !desc.contains("digest") ||
      !desc["digest"].is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("referrer descriptor for ", subject.str(), " is not a descriptor object"));
  }
  std::string tag = ::modelfs::ReferrersFallbackTag(subject);
  json index = EmptyIndex();
  absl::StatusOr<ManifestResult> m = GetManifest(repo, tag, {kMediaTypeOciIndex});
  if (m.ok()) {
    ASSIGN_OR_RETURN(index,
                     ParseIndex(m->bytes, absl::StrCat("referrers tag ", tag, " in ", repo)));
  } else if (!absl::IsNotFound(m.status())) {
    return m.status();
  }
  for (const json& d : index["manifests"]) {
    if (d.is_object() && d.value("digest", "") == desc["digest"].get<std::string>()) {
      return absl::OkStatus();
    }
  }
  index["manifests"].push_back(desc);
  index["mediaType"] = kMediaTypeOciIndex;
  ASSIGN_OR_RETURN(Digest d, PutManifest(repo, tag, index.dump(), kMediaTypeOciIndex));
  (void)d;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> RegistryClient::ListTags(const std::string& repo) {
  std::vector<std::string> tags;
  const std::string what = absl::StrCat("GET tags of repository ", repo);
  // The first page from the hosts trusted with tags; the next pages from the one that answered.
  Request req;
  req.path = absl::StrCat(repo, "/tags/list");
  req.scopes = PullScope(repo);
  for (int page = 0; page < 10000; ++page) {
    ASSIGN_OR_RETURN(Response r, SendToHosts(req, Op::kResolve));
    if (r.status != 200) return MODELFS_HTTP_ERROR(what, r);
    json doc = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded() || !doc.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": not a JSON object"));
    }
    if (doc.contains("tags") && doc["tags"].is_array()) {
      for (const json& t : doc["tags"]) {
        if (t.is_string()) tags.push_back(t.get<std::string>());
      }
    }
    // Link: </v2/repo/tags/list?last=x&n=100>; rel="next"
    std::string link = r.Header("link");
    size_t lt = link.find('<');
    size_t gt = link.find('>');
    if (lt == std::string::npos || gt == std::string::npos || gt <= lt ||
        !absl::StrContains(link, "rel=\"next\"")) {
      break;
    }
    req.path.reset();
    req.host = r.host;
    req.url = ResolveLocation(r.url, link.substr(lt + 1, gt - lt - 1));
  }
  return tags;
}

}  // namespace modelfs
