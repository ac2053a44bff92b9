// Internal to core/registry: what the RegistryClient knows about one host of the registry.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/registry/hosts.h"
#include "core/registry/registry_client.h"
#include "core/registry/registry_exchange.h"

namespace modelfs {

// One host of the registry: where to connect, how to verify it, what to present there, and
// what the client has learnt about it (auth challenge, tokens, recent failures).
class RegistryClient::Host {
 public:
  Host(const RegistryHost& h, const std::string& registry)
      : endpoint(h.endpoint),
        fixed_credential(h.credential),
        keychain(h.keychain),
        keychain_keys(h.keychain_keys),
        origin(absl::AsciiStrToLower(h.endpoint.BaseUrl())),
        ns_query(IsProxyFor(h.endpoint, registry)
                     ? "ns=" + registry_internal::PercentEncode(registry)
                     : "") {
    if (h.endpoint.host == DefaultHostEndpoint(registry).host) {
      label = absl::StrCat("registry ", registry);
    } else if (h.endpoint.mirror) {
      label = absl::StrCat("mirror ", h.endpoint.host, " of registry ", registry);
    } else {
      label = absl::StrCat(h.endpoint.host, " (server of registry ", registry, ")");
    }
  }

  const HostEndpoint endpoint;
  const std::optional<Credential> fixed_credential;  // when keychain is null
  const std::shared_ptr<Keychain> keychain;
  const std::vector<std::string> keychain_keys;
  const std::string origin;    // lowercase scheme://authority
  const std::string ns_query;  // "ns=<registry>" for a host of another name, else ""
  std::string label;           // how messages name it: "registry r", "mirror m of registry r"
  std::string ca_blob;         // concatenated PEM of endpoint.ca_files

  // Lock order: auth_mu (held across a token fetch or a credential refresh, so concurrent
  // requests make one) before mu.
  absl::Mutex auth_mu;
  absl::Mutex mu;
  // The keychain's last answer (tokens were fetched with it).
  std::optional<Credential> credential ABSL_GUARDED_BY(mu);
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

}  // namespace modelfs
