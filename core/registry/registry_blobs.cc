// RegistryClient's blob calls: HEAD, the whole-blob GET that resumes after a dropped
// connection, range reads (one attempt, for the blob cache), uploads and cross-repository
// mounts.
#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/base/backoff.h"
#include "core/http/url.h"
#include "core/registry/registry_client.h"
#include "core/registry/registry_exchange.h"
#include "core/registry/registry_host.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

using registry_internal::AppendQuery;
using registry_internal::BlobWhat;
using registry_internal::BodyNeed;
using registry_internal::IsIgnoredRange;
using registry_internal::IsRetryableTransport;
using registry_internal::kIgnoredRangePayload;
using registry_internal::kWholeSizePayload;
using registry_internal::PercentEncode;
using registry_internal::PullScope;
using registry_internal::PushScope;

// A whole-blob answer to a range request is read (its range taken from it) when the blob is no
// larger than this: cutting it short and asking again would cost about as much.
constexpr uint64_t kSmallWholeAnswer = 4 << 20;

}  // namespace

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
  req.sink = [&](const Response& resp, std::string_view data) -> absl::StatusOr<BodyNeed> {
    uint64_t pos = resp.RangeStart() + resp.body_bytes;
    if (pos + data.size() <= delivered) return BodyNeed::kMore;
    if (pos < delivered) data.remove_prefix(delivered - pos);
    if (pos > delivered) {
      return absl::DataLossError(absl::StrCat(BlobWhat("GET", repo, digest), ": resumed at byte ",
                                              pos, ", expected ", delivered));
    }
    RETURN_IF_ERROR(sink(data));
    delivered += data.size();
    return BodyNeed::kMore;
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

absl::StatusOr<std::string> RegistryClient::GetSmallBlob(const std::string& repo,
                                                         const Digest& digest, size_t max_bytes) {
  std::string out;
  RETURN_IF_ERROR(GetBlob(repo, digest, [&](std::string_view chunk) -> absl::Status {
    if (out.size() + chunk.size() > max_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("blob ", digest.str(), " is larger than ", max_bytes, " bytes"));
    }
    out.append(chunk);
    return absl::OkStatus();
  }));
  return out;
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
  req.sink = [&](const Response& resp, std::string_view data) -> absl::StatusOr<BodyNeed> {
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
      // Once the range is in, the rest of the blob is not read.
      return delivered < length ? BodyNeed::kMore : BodyNeed::kDone;
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
    if (pos <= delivered) return BodyNeed::kMore;
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
    if (!s.ok()) return s;
    return BodyNeed::kMore;
  };
  absl::StatusOr<Response> got = GetBlobOnce(repo, digest, req);
  if (from_whole && delivered == length && got.ok()) return absl::OkStatus();
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

}  // namespace modelfs
