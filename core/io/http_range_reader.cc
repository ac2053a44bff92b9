// The http(s) RangeReader: Range GETs over one reused HttpHandle (core/http; keep-alive).
//
// Size() costs one request that also fetches the first HeaderCursor::kInitialChunk bytes, so a
// parser that asks Size() and then reads a header of under 64 KiB touches the network once.
// There are no retries here: a transient failure is kUnavailable and the caller, which knows
// its deadline, decides whether to try again.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "core/http/content_range.h"
#include "core/http/transport.h"
#include "core/io/header_cursor.h"
#include "core/io/range_reader.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

// Bodies of error responses are not kept; this bounds how much of one we sit through.
constexpr uint64_t kMaxErrorBody = 64 * 1024;

// "https://user:pass@host/p?sig=x" -> "https://host/p?<query redacted>": userinfo and query
// strings (pre-signed URLs carry signatures there) must never reach a message or a log.
std::string RedactUrl(const std::string& url) {
  size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return url;
  size_t authority_start = scheme_end + 3;
  size_t authority_end = url.find_first_of("/?#", authority_start);
  if (authority_end == std::string::npos) authority_end = url.size();
  std::string out = url.substr(0, authority_start);
  size_t at = url.rfind('@', authority_end == 0 ? 0 : authority_end - 1);
  size_t host_start = (at != std::string::npos && at >= authority_start) ? at + 1 : authority_start;
  out += url.substr(host_start, authority_end - host_start);
  size_t rest_end = url.find_first_of("?#", authority_end);
  if (rest_end == std::string::npos) rest_end = url.size();
  out += url.substr(authority_end, rest_end - authority_end);
  if (rest_end < url.size() && url[rest_end] == '?') out += "?<query redacted>";
  return out;
}

// State of one transfer, filled by the transport's header and body callbacks. With redirects the
// header callback sees several responses; each status line starts a new one.
struct Transfer {
  uint64_t cap = 0;         // most body bytes accepted from a 206
  bool accept_200 = false;  // a 200 may fill the body too (up to cap), else it is aborted
  long status = 0;
  std::string content_range;
  std::string body;
  uint64_t discarded = 0;  // bytes of an error body
  bool over_cap = false;   // we aborted because the server sent more than asked for
  bool refused_200 = false;
};

class HttpRangeReader final : public RangeReader {
 public:
  HttpRangeReader(std::string url, HttpReaderOptions options, std::unique_ptr<HttpHandle> handle)
      : url_(std::move(url)),
        name_(RedactUrl(url_)),
        options_(std::move(options)),
        handle_(std::move(handle)) {}

  const std::string& name() const override { return name_; }
  RangeReadStats stats() const override { return stats_; }

  absl::StatusOr<uint64_t> Size() override {
    if (size_.has_value()) return *size_;
    // One ranged GET learns the size (Content-Range total) and keeps the first bytes, which
    // is what a header parser asks for next.
    const uint64_t want = HeaderCursor::kInitialChunk;
    Transfer t;
    t.cap = want;
    t.accept_200 = true;  // a small file sent whole still tells us everything
    ASSIGN_OR_RETURN(std::string body, Fetch(0, want, t));
    if (t.status == 200) {
      size_ = body.size();
    } else if (t.status == 416) {
      // Nothing at byte 0: an empty file ("bytes */0").
      std::optional<ContentRange> cr = ParseContentRange(t.content_range);
      if (!cr.has_value() || cr->total != uint64_t{0}) {
        size_.reset();
        return absl::InvalidArgumentError(absl::StrCat(
            name_, " answered 416 to a request for its first bytes with Content-Range '",
            t.content_range, "'"));
      }
      size_ = 0;
    }
    // A 206 set size_ in Fetch.
    prefix_ = std::move(body);
    return *size_;
  }

  absl::StatusOr<std::string> ReadAt(uint64_t offset, uint64_t length) override {
    if (length == 0) {
      // An empty read cannot be expressed as a Range; check it against the size instead.
      ASSIGN_OR_RETURN(uint64_t size, Size());
      (void)size;
      RETURN_IF_ERROR(CheckBounds(offset, length));
      return std::string();
    }
    if (length > UINT64_MAX - offset) return OutOfRange(offset, length);
    RETURN_IF_ERROR(CheckBounds(offset, length));
    if (offset + length <= prefix_.size()) return prefix_.substr(offset, length);
    Transfer t;
    t.cap = length;
    ASSIGN_OR_RETURN(std::string body, Fetch(offset, length, t));
    if (t.status == 416) return OutOfRange(offset, length);
    return body;
  }

 private:
  absl::Status OutOfRange(uint64_t offset, uint64_t length) const {
    return absl::OutOfRangeError(absl::StrCat(
        name_, ": truncated: wants ", length, " bytes at byte ", offset, " but the source has ",
        size_.has_value() ? absl::StrCat(*size_) : std::string("fewer")));
  }

  absl::Status IgnoresRange() const {
    return absl::InvalidArgumentError(absl::StrCat(
        name_,
        " answered 200 to a Range request (the server ignores Range); download the file and "
        "inspect it locally"));
  }

  absl::Status CheckBounds(uint64_t offset, uint64_t length) const {
    if (size_.has_value() && (offset > *size_ || length > *size_ - offset)) {
      return OutOfRange(offset, length);
    }
    return absl::OkStatus();
  }

  absl::Status LearnTotal(uint64_t total) {
    if (size_.has_value() && *size_ != total) {
      return absl::InvalidArgumentError(absl::StrCat(name_, " changed size from ", *size_, " to ",
                                                     total, " bytes between requests"));
    }
    size_ = total;
    return absl::OkStatus();
  }

  // One Range GET for [offset, offset+length). Returns the body of a 206 that covers exactly
  // that range, the whole body of an accepted 200, or an empty body for a 416 (the caller
  // decides what a 416 means); every other outcome is an error.
  absl::StatusOr<std::string> Fetch(uint64_t offset, uint64_t length, Transfer& t) {
    const uint64_t last = offset + length - 1;
    std::string range = absl::StrCat(offset, "-", last);
    HttpRequest req;
    req.url = url_;
    if (!options_.bearer_token.empty()) {
      // The transport follows redirects with Authorization dropped on a redirect to another
      // host, so a token never follows a redirect to a CDN.
      req.headers.push_back("Authorization: Bearer " + options_.bearer_token);
    }
    req.user_agent = options_.user_agent;
    req.range = range;
    req.follow_redirects = true;
    req.max_redirects = 10;
    req.connect_timeout = absl::Milliseconds(options_.connect_timeout_ms);
    req.total_timeout = absl::Milliseconds(options_.request_timeout_ms);
    req.tls.verify = options_.verify_tls;
    // With redirects followed, each response's status line starts a new one.
    req.on_response = [&t] {
      t.status = 0;
      t.content_range.clear();
      t.body.clear();
      t.discarded = 0;
    };
    req.on_header = [&t](std::string name, std::string value) {
      if (absl::StripAsciiWhitespace(name) == "content-range") t.content_range = std::move(value);
    };
    req.on_body = [&t](long status, std::string_view data) -> bool {
      t.status = status;
      const size_t n = data.size();
      if (t.status == 206 || (t.status == 200 && t.accept_200)) {
        if (t.body.size() + n > t.cap) {
          t.over_cap = true;
          return false;  // aborts the transfer
        }
        t.body.append(data.data(), n);
        return true;
      }
      if (t.status == 200) {
        t.refused_200 = true;
        return false;
      }
      t.discarded += n;
      return t.discarded <= kMaxErrorBody;
    };
    HttpResult done = handle_->Perform(req);
    ++stats_.requests;
    stats_.bytes += t.body.size();
    const std::string what = absl::StrCat(name_, " (bytes ", range, ")");

    if (t.refused_200 || (t.status == 200 && t.over_cap)) return IgnoresRange();
    if (t.over_cap) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": the server sent more than the ", length, " bytes asked for"));
    }
    if (!done.ok() && !(done.error == HttpError::kWriteAborted && t.discarded > 0)) {
      const std::string msg = absl::StrCat(what, ": ", done.Message());
      if (done.error == HttpError::kBadUrl || done.error == HttpError::kTooManyRedirects) {
        return absl::InvalidArgumentError(msg);
      }
      return absl::UnavailableError(msg);
    }
    const long status = done.status;
    t.status = status;

    switch (status) {
      case 206:
        break;
      case 200:
        if (!t.accept_200) return IgnoresRange();
        return std::move(t.body);  // accepted and complete: the whole file
      case 416: {
        std::optional<ContentRange> cr = ParseContentRange(t.content_range);
        if (cr.has_value() && cr->total.has_value()) RETURN_IF_ERROR(LearnTotal(*cr->total));
        return std::string();
      }
      case 404:
      case 410:
        return absl::NotFoundError(absl::StrCat(what, ": HTTP ", status, " not found"));
      case 401:
      case 403:
        return absl::PermissionDeniedError(
            absl::StrCat(what, ": HTTP ", status, " (credentials missing or refused)"));
      case 408:
      case 429:
        return absl::UnavailableError(absl::StrCat(what, ": HTTP ", status));
      default:
        if (status >= 500) return absl::UnavailableError(absl::StrCat(what, ": HTTP ", status));
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": unexpected HTTP status ", status, " to a Range request"));
    }

    std::optional<ContentRange> cr = ParseContentRange(t.content_range);
    if (!cr.has_value() || !cr->first.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": 206 response with a missing or malformed Content-Range '",
                       t.content_range, "'"));
    }
    if (!cr->total.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": the server does not report the total size (Content-Range '",
                       t.content_range, "')"));
    }
    RETURN_IF_ERROR(LearnTotal(*cr->total));
    const bool clipped_at_end = *cr->last < last && *cr->last + 1 == *cr->total;
    if (*cr->first != offset || (*cr->last != last && !clipped_at_end)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": the server answered Content-Range '", t.content_range, "'"));
    }
    if (t.body.size() != *cr->last - *cr->first + 1) {
      return absl::UnavailableError(absl::StrCat(
          what, ": got ", t.body.size(), " body bytes for Content-Range '", t.content_range, "'"));
    }
    // The prefix probe asks for more than a small file holds; a short answer is its whole tail.
    if (clipped_at_end && !t.accept_200) return OutOfRange(offset, length);
    return std::move(t.body);
  }

  const std::string url_;  // may hold credentials: never put it in a message
  const std::string name_;
  const HttpReaderOptions options_;
  const std::unique_ptr<HttpHandle> handle_;  // one handle: its connection is kept alive
  std::optional<uint64_t> size_;
  std::string prefix_;  // bytes [0, prefix_.size()) from the Size() probe
  RangeReadStats stats_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RangeReader>> OpenHttpRangeReader(const std::string& url,
                                                                 const HttpReaderOptions& options) {
  if (!IsHttpUrl(url)) {
    return absl::InvalidArgumentError(absl::StrCat(RedactUrl(url), ": not an http(s) URL"));
  }
  std::unique_ptr<HttpHandle> handle = HttpHandle::Create();
  if (handle == nullptr) return absl::ResourceExhaustedError("curl_easy_init failed");
  return std::unique_ptr<RangeReader>(
      std::make_unique<HttpRangeReader>(url, options, std::move(handle)));
}

}  // namespace modelfs
