// Test keys generated with OpenSSL at run time: P-256 pairs to sign with, and keys of the types
// modelfs must refuse (RSA, P-384, Ed25519).
#pragma once

#include <string>

namespace modelfs::testing {

struct PemPair {
  std::string private_pem;  // PKCS#8 "PRIVATE KEY"
  std::string public_pem;   // "PUBLIC KEY"
};

enum class KeyKind { kP256, kP384, kRsa2048, kEd25519 };

// A fresh key of `kind`. CHECK-fails when OpenSSL cannot make one (a broken test machine).
PemPair GenerateKey(KeyKind kind = KeyKind::kP256);

}  // namespace modelfs::testing
