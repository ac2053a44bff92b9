// ECDSA P-256 keys through OpenSSL's EVP API; cosign's encrypted private keys opened with
// OpenSSL's scrypt and libsodium's secretbox.
#include "core/trust/keys.h"

#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sodium.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/oci/digest.h"
#include "core/status/status_macros.h"
#include "core/trust/strict_json.h"

namespace modelfs {

using trust_internal::Json;
using trust_internal::S;

void trust_internal::PkeyDeleter::operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }

namespace {

constexpr size_t kMaxKeyFileSize = 64 * 1024;
constexpr char kEncryptedSigstoreHeader[] = "ENCRYPTED SIGSTORE PRIVATE KEY";
constexpr char kEncryptedCosignHeader[] = "ENCRYPTED COSIGN PRIVATE KEY";
// Bounds on the scrypt parameters of a key file: cosign writes N=32768, r=8, p=1. The memory
// scrypt needs is 128*N*r bytes; 2^20 * 8 * 128 = 1 GiB would be too much for a node, so
// maxmem below refuses before allocating.
constexpr uint64_t kMaxScryptN = 1u << 20;
constexpr uint64_t kMaxScryptMem = 256ull << 20;

struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

absl::StatusOr<std::string> ReadSmallFile(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(S(what), " ", path, ": cannot be read"));
  }
  std::string data;
  data.resize(kMaxKeyFileSize + 1);
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<size_t>(in.gcount()));
  if (data.size() > kMaxKeyFileSize) {
    return absl::InvalidArgumentError(
        absl::StrCat(S(what), " ", path, ": larger than ", kMaxKeyFileSize, " bytes"));
  }
  return data;
}

// Refuses anything but an EC key on P-256, naming what it is.
absl::Status CheckP256(EVP_PKEY* key, std::string_view source) {
  if (EVP_PKEY_get_base_id(key) != EVP_PKEY_EC) {
    const char* type = EVP_PKEY_get0_type_name(key);
    return absl::InvalidArgumentError(absl::StrCat(
        S(source), ": key type ", type ? type : "unknown", " is not supported (only ECDSA P-256)"));
  }
  char group[64] = {0};
  size_t len = 0;
  if (EVP_PKEY_get_group_name(key, group, sizeof(group), &len) != 1 ||
      std::string_view(group, len) != "prime256v1") {
    return absl::InvalidArgumentError(absl::StrCat(
        S(source), ": EC curve ", group[0] ? group : "unknown", " is not supported (only P-256)"));
  }
  return absl::OkStatus();
}

std::string FingerprintOf(EVP_PKEY* key) {
  unsigned char* der = nullptr;
  int n = i2d_PUBKEY(key, &der);
  if (n <= 0) return "";
  std::string out = Digest::Of(std::string_view(reinterpret_cast<char*>(der), n)).str();
  OPENSSL_free(der);
  return out;
}

// PEM password callback that never prompts: an encrypted PKCS#8 PEM is refused, not asked for.
int NoPassword(char*, int, int, void*) { return -1; }

std::string_view TrimLeft(std::string_view s) {
  while (!s.empty() && absl::ascii_isspace(static_cast<unsigned char>(s.front())))
    s.remove_prefix(1);
  return s;
}

// The base64 body between "-----BEGIN <label>-----" and "-----END <label>-----", decoded.
absl::StatusOr<std::string> PemBody(std::string_view pem, std::string_view label,
                                    std::string_view source) {
  std::string begin = absl::StrCat("-----BEGIN ", S(label), "-----");
  std::string end = absl::StrCat("-----END ", S(label), "-----");
  size_t b = pem.find(begin);
  size_t e = pem.find(end);
  if (b == std::string_view::npos || e == std::string_view::npos || e < b) {
    return absl::InvalidArgumentError(
        absl::StrCat(S(source), ": no complete ", S(label), " PEM block"));
  }
  std::string b64;
  for (char c : pem.substr(b + begin.size(), e - b - begin.size())) {
    if (!absl::ascii_isspace(static_cast<unsigned char>(c))) b64.push_back(c);
  }
  std::string raw;
  if (!absl::Base64Unescape(b64, &raw)) {
    return absl::InvalidArgumentError(
        absl::StrCat(S(source), ": ", S(label), " is not valid base64"));
  }
  return raw;
}

absl::StatusOr<std::string> B64Field(const Json& obj, const char* key, std::string_view where) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(S(where), ".", key, " is missing or not a string"));
  }
  std::string raw;
  if (!absl::Base64Unescape(it->get<std::string>(), &raw)) {
    return absl::InvalidArgumentError(absl::StrCat(S(where), ".", key, " is not valid base64"));
  }
  return raw;
}

absl::StatusOr<uint64_t> UintField(const Json& obj, const char* key, std::string_view where) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_unsigned()) {
    return absl::InvalidArgumentError(
        absl::StrCat(S(where), ".", key, " is missing or not a positive integer"));
  }
  return it->get<uint64_t>();
}

// Opens the JSON body of a cosign encrypted key; returns PKCS#8 DER.
absl::StatusOr<std::string> DecryptCosignKey(std::string_view body, std::string_view source,
                                             std::string_view passphrase) {
  std::string where = absl::StrCat(S(source), ": encrypted key");
  ASSIGN_OR_RETURN(Json doc, trust_internal::ParseStrictObject(body, where));
  auto kdf = doc.find("kdf");
  auto cipher = doc.find("cipher");
  if (kdf == doc.end() || !kdf->is_object() || cipher == doc.end() || !cipher->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": kdf or cipher missing"));
  }
  std::string kdf_name = kdf->value("name", "");
  std::string cipher_name = cipher->value("name", "");
  if (kdf_name != "scrypt") {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": kdf \"", kdf_name, "\" is not supported (only scrypt)"));
  }
  if (cipher_name != "nacl/secretbox") {
    return absl::InvalidArgumentError(absl::StrCat(where, ": cipher \"", cipher_name,
                                                   "\" is not supported (only nacl/secretbox)"));
  }
  auto params = kdf->find("params");
  if (params == kdf->end() || !params->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": kdf.params missing"));
  }
  ASSIGN_OR_RETURN(uint64_t n, UintField(*params, "N", where + " kdf.params"));
  ASSIGN_OR_RETURN(uint64_t r, UintField(*params, "r", where + " kdf.params"));
  ASSIGN_OR_RETURN(uint64_t p, UintField(*params, "p", where + " kdf.params"));
  if (n < 2 || n > kMaxScryptN || (n & (n - 1)) != 0 || r < 1 || r > 32 || p < 1 || p > 16 ||
      128 * n * r > kMaxScryptMem) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": scrypt parameters N=", n, " r=", r,
                                                   " p=", p, " are outside the accepted bounds"));
  }
  ASSIGN_OR_RETURN(std::string salt, B64Field(*kdf, "salt", where + " kdf"));
  ASSIGN_OR_RETURN(std::string nonce, B64Field(*cipher, "nonce", where + " cipher"));
  ASSIGN_OR_RETURN(std::string ciphertext, B64Field(doc, "ciphertext", where));
  if (nonce.size() != crypto_secretbox_NONCEBYTES) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": nonce is ", nonce.size(),
                                                   " bytes, not ", crypto_secretbox_NONCEBYTES));
  }
  if (ciphertext.size() < crypto_secretbox_MACBYTES) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ciphertext is too short"));
  }
  unsigned char key[crypto_secretbox_KEYBYTES];
  if (EVP_PBE_scrypt(passphrase.data(), passphrase.size(),
                     reinterpret_cast<const unsigned char*>(salt.data()), salt.size(), n, r, p,
                     kMaxScryptMem + (1 << 20), key, sizeof(key)) != 1) {
    return absl::InternalError(absl::StrCat(where, ": scrypt failed"));
  }
  if (sodium_init() < 0) {
    OPENSSL_cleanse(key, sizeof(key));
    return absl::InternalError("libsodium could not be initialised");
  }
  std::string plain(ciphertext.size() - crypto_secretbox_MACBYTES, '\0');
  int rc = crypto_secretbox_open_easy(reinterpret_cast<unsigned char*>(plain.data()),
                                      reinterpret_cast<const unsigned char*>(ciphertext.data()),
                                      ciphertext.size(),
                                      reinterpret_cast<const unsigned char*>(nonce.data()), key);
  OPENSSL_cleanse(key, sizeof(key));
  if (rc != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat(S(source), ": cannot decrypt the key: wrong passphrase (COSIGN_PASSWORD)"));
  }
  return plain;
}

}  // namespace

bool IsCosignEncryptedKey(std::string_view pem) {
  std::string_view t = TrimLeft(pem);
  auto starts = [&](const char* label) {
    std::string begin = absl::StrCat("-----BEGIN ", label, "-----");
    return t.substr(0, begin.size()) == begin;
  };
  return starts(kEncryptedSigstoreHeader) || starts(kEncryptedCosignHeader);
}

absl::StatusOr<PublicKey> PublicKey::FromPem(std::string_view pem, std::string_view source) {
  std::unique_ptr<BIO, BioDeleter> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) return absl::ResourceExhaustedError("BIO_new_mem_buf");
  EVP_PKEY* raw = PEM_read_bio_PUBKEY(bio.get(), nullptr, NoPassword, nullptr);
  if (raw == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(S(source), ": not a PEM \"PUBLIC KEY\" (SubjectPublicKeyInfo)"));
  }
  std::shared_ptr<EVP_PKEY> key(raw, trust_internal::PkeyDeleter());
  RETURN_IF_ERROR(CheckP256(key.get(), source));
  PublicKey out;
  out.key_ = std::move(key);
  out.name_ = std::string(source);
  out.fingerprint_ = FingerprintOf(out.key_.get());
  return out;
}

absl::StatusOr<PublicKey> PublicKey::FromFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string pem, ReadSmallFile(path, "public key"));
  return FromPem(pem, path);
}

absl::Status PublicKey::Verify(std::string_view payload, std::string_view der_signature) const {
  std::unique_ptr<EVP_MD_CTX, MdCtxDeleter> ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key_.get()) != 1) {
    return absl::InternalError("EVP_DigestVerifyInit failed");
  }
  int rc = EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(der_signature.data()),
                            der_signature.size(),
                            reinterpret_cast<const unsigned char*>(payload.data()), payload.size());
  if (rc != 1) {
    return absl::PermissionDeniedError(absl::StrCat("signature does not verify with key ", name_));
  }
  return absl::OkStatus();
}

std::string PublicKey::Pem() const {
  std::unique_ptr<BIO, BioDeleter> bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PUBKEY(bio.get(), key_.get()) != 1) return "";
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

absl::StatusOr<PrivateKey> PrivateKey::FromPem(std::string_view pem, std::string_view source,
                                               std::string_view passphrase) {
  EVP_PKEY* raw = nullptr;
  if (IsCosignEncryptedKey(pem)) {
    std::string_view label = pem.find(kEncryptedSigstoreHeader) != std::string_view::npos
                                 ? kEncryptedSigstoreHeader
                                 : kEncryptedCosignHeader;
    ASSIGN_OR_RETURN(std::string body, PemBody(pem, label, source));
    ASSIGN_OR_RETURN(std::string der, DecryptCosignKey(body, source, passphrase));
    const unsigned char* p = reinterpret_cast<const unsigned char*>(der.data());
    raw = d2i_AutoPrivateKey(nullptr, &p, static_cast<long>(der.size()));
    OPENSSL_cleanse(der.data(), der.size());
    if (raw == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(S(source), ": the decrypted key is not a PKCS#8 private key"));
    }
  } else {
    std::unique_ptr<BIO, BioDeleter> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
    if (!bio) return absl::ResourceExhaustedError("BIO_new_mem_buf");
    raw = PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassword, nullptr);
    if (raw == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          S(source), ": not an unencrypted PEM private key nor a cosign encrypted key"));
    }
  }
  std::shared_ptr<EVP_PKEY> key(raw, trust_internal::PkeyDeleter());
  RETURN_IF_ERROR(CheckP256(key.get(), source));
  // The public half as a key of its own, so verification never touches the private part.
  unsigned char* der = nullptr;
  int n = i2d_PUBKEY(key.get(), &der);
  if (n <= 0) return absl::InternalError(absl::StrCat(S(source), ": cannot derive the public key"));
  const unsigned char* p = der;
  EVP_PKEY* pub = d2i_PUBKEY(nullptr, &p, n);
  OPENSSL_free(der);
  if (pub == nullptr)
    return absl::InternalError(absl::StrCat(S(source), ": cannot derive the public key"));
  PublicKey public_key;
  public_key.key_ = std::shared_ptr<EVP_PKEY>(pub, trust_internal::PkeyDeleter());
  public_key.name_ = std::string(source);
  public_key.fingerprint_ = FingerprintOf(pub);
  PrivateKey out;
  out.key_ = std::move(key);
  out.public_key_ = std::make_shared<PublicKey>(std::move(public_key));
  return out;
}

absl::StatusOr<PrivateKey> PrivateKey::FromFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string pem, ReadSmallFile(path, "private key"));
  if (!IsCosignEncryptedKey(pem)) return FromPem(pem, path, "");
  const char* env = std::getenv("COSIGN_PASSWORD");
  if (env != nullptr) return FromPem(pem, path, env);
  auto key = FromPem(pem, path, "");
  if (key.status().code() == absl::StatusCode::kPermissionDenied) {
    return absl::PermissionDeniedError(absl::StrCat(
        path,
        ": the key is encrypted and COSIGN_PASSWORD is not set (the empty passphrase does "
        "not open it)"));
  }
  return key;
}

absl::StatusOr<std::string> PrivateKey::Sign(std::string_view payload) const {
  std::unique_ptr<EVP_MD_CTX, MdCtxDeleter> ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key_.get()) != 1) {
    return absl::InternalError("EVP_DigestSignInit failed");
  }
  size_t len = 0;
  const auto* data = reinterpret_cast<const unsigned char*>(payload.data());
  if (EVP_DigestSign(ctx.get(), nullptr, &len, data, payload.size()) != 1) {
    return absl::InternalError("EVP_DigestSign (size) failed");
  }
  std::string sig(len, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &len, data,
                     payload.size()) != 1) {
    return absl::InternalError("EVP_DigestSign failed");
  }
  sig.resize(len);
  return sig;
}

}  // namespace modelfs
