#include "testsupport/trust/test_keys.h"

#include <openssl/bio.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include <cstdlib>

namespace modelfs::testing {
namespace {

std::string BioString(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(n));
}

}  // namespace

PemPair GenerateKey(KeyKind kind) {
  EVP_PKEY* key = nullptr;
  switch (kind) {
    case KeyKind::kP256:
      key = EVP_EC_gen("P-256");
      break;
    case KeyKind::kP384:
      key = EVP_EC_gen("P-384");
      break;
    case KeyKind::kRsa2048:
      key = EVP_RSA_gen(2048);
      break;
    case KeyKind::kEd25519:
      key = EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519");
      break;
  }
  if (key == nullptr) abort();
  PemPair out;
  BIO* priv = BIO_new(BIO_s_mem());
  BIO* pub = BIO_new(BIO_s_mem());
  if (PEM_write_bio_PrivateKey(priv, key, nullptr, nullptr, 0, nullptr, nullptr) != 1 ||
      PEM_write_bio_PUBKEY(pub, key) != 1) {
    abort();
  }
  out.private_pem = BioString(priv);
  out.public_pem = BioString(pub);
  BIO_free(priv);
  BIO_free(pub);
  EVP_PKEY_free(key);
  return out;
}

}  // namespace modelfs::testing
