// RegistryClient's hosts and fallback: which hosts may serve a request and in which order
// (failure backoff and cooldown, hosts demoted for a blob), the one-request-at-a-time gate of
// a mirror that is filling a blob, and SendToHosts, which tries the hosts in turn and retries
// rounds with backoff.
#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/registry/registry_client.h"
#include "core/registry/registry_exchange.h"
#include "core/registry/registry_host.h"

namespace modelfs {
namespace {

using registry_internal::IsIgnoredRange;
using registry_internal::IsRetryableTransport;
using registry_internal::kIgnoredRangePayload;
using registry_internal::kRetryablePayload;
using registry_internal::kWholeSizePayload;

// How fast a mirror is assumed at most to fetch a blob from upstream (10 Gbit/s), for its first
// wait: the fill of a 1 GiB blob takes at least 0.86 s, so it is not asked again before then.
constexpr double kFastestFillBytesPerSecond = 1.25e9;

// What one host's answer means for a request that other hosts could serve.
enum class Verdict {
  kAccept,        // the answer (2xx, or a status the caller interprets)
  kStop,          // an error from our own side (a sink, a source): no other host helps
  kNext,          // this host cannot serve it: try the next (404, other 4xx, ignored Range)
  kNextRetryable  // a connection error, 5xx or 429: the next host, and later this one again
};

}  // namespace

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

}  // namespace modelfs
