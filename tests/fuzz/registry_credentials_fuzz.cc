// Fuzzes the credential parsers: whatever the bytes, a Status (never an abort), and an accepted
// answer holds what it must (a helper's credential is not empty; every auth entry of a plugin
// response is kept). The first byte picks the parser; matchImages is fuzzed on the rest split
// at the first newline.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/registry/credentials.h"
#include "core/registry/keychain.h"
#include "core/registry/kubelet_credential_provider.h"

using namespace modelfs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 5) {
    case 0: {
      auto c = ParseCredentialHelperOutput(rest, "fuzz");
      if (c.ok() && c->empty()) abort();
      break;
    }
    case 1:
      (void)ParseCredentialProviderResponse(rest, "credentialprovider.kubelet.k8s.io/v1", "fuzz");
      break;
    case 2:
      (void)ParseCredentialProviderConfig(rest, "fuzz.json");
      break;
    case 3: {
      auto s = CredentialStore::FromDockerConfigJson(rest, "fuzz.json");
      if (s.ok()) (void)s->HelperFor("reg.example:5000");
      break;
    }
    case 4: {
      size_t nl = rest.find('\n');
      if (nl == std::string::npos) break;
      (void)KubeletImageMatches(rest.substr(0, nl), rest.substr(nl + 1));
      break;
    }
  }
  return 0;
}
