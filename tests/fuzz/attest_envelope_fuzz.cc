// Fuzzes what an attestation reader takes from a registry before and after the signature check:
// ParseDsseEnvelope (the envelope layer's bytes) and JudgeStatement (the payload, fuzzed as
// untrusted although it is judged only once a key verified it). Whatever the bytes, a value or
// a Status (never an abort); an accepted statement names the subject.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/attest/attestation.h"

using namespace modelfs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto env = ParseDsseEnvelope(bytes);
  static const Digest subject = Digest::Of("subject");
  nlohmann::json statement;
  std::string detail;
  for (std::string_view payload : {bytes, env.ok() ? std::string_view(env->payload) : bytes}) {
    const std::string reason =
        JudgeStatement(payload, subject, kEquivalencePredicateType, &statement, &detail);
    if (reason.empty() && statement.dump().find(std::string(subject.hex())) == std::string::npos) {
      abort();
    }
  }
  return 0;
}
