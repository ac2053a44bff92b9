// Keys: P-256 only, cosign's encrypted format (a fixture written by an independent
// implementation, ../shared/tools/signing/cosign_keygen.py), sign and verify.
#include "core/trust/keys.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"
#include "testsupport/trust/test_keys.h"

namespace modelfs {
namespace {

using ::modelfs::testing::GenerateKey;
using ::modelfs::testing::KeyKind;
using ::modelfs::testing::StatusIs;
using ::testing::HasSubstr;

std::string TestData(const std::string& name) {
  const char* src = getenv("MODELFS_SOURCE_DIR");
  std::ifstream in(std::string(src ? src : ".") + "/tests/trust/testdata/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Keys, SignatureVerifiesWithTheMatchingPublicKey) {
  auto pair = GenerateKey();
  ASSERT_OK_AND_ASSIGN(PrivateKey priv, PrivateKey::FromPem(pair.private_pem, "priv.pem", ""));
  ASSERT_OK_AND_ASSIGN(PublicKey pub, PublicKey::FromPem(pair.public_pem, "pub.pem"));
  ASSERT_OK_AND_ASSIGN(std::string sig, priv.Sign("payload"));
  EXPECT_OK(pub.Verify("payload", sig));
  EXPECT_EQ(pub.fingerprint(), priv.public_key().fingerprint());
}

TEST(Keys, SignatureOverOtherBytesDoesNotVerify) {
  auto pair = GenerateKey();
  ASSERT_OK_AND_ASSIGN(PrivateKey priv, PrivateKey::FromPem(pair.private_pem, "priv.pem", ""));
  ASSERT_OK_AND_ASSIGN(std::string sig, priv.Sign("payload"));
  EXPECT_THAT(priv.public_key().Verify("payload!", sig),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("priv.pem")));
}

TEST(Keys, SignatureDoesNotVerifyWithAnotherKey) {
  ASSERT_OK_AND_ASSIGN(PrivateKey a, PrivateKey::FromPem(GenerateKey().private_pem, "a", ""));
  ASSERT_OK_AND_ASSIGN(PublicKey b, PublicKey::FromPem(GenerateKey().public_pem, "b"));
  ASSERT_OK_AND_ASSIGN(std::string sig, a.Sign("payload"));
  EXPECT_THAT(b.Verify("payload", sig), StatusIs(absl::StatusCode::kPermissionDenied));
}

TEST(Keys, RsaPublicKeyIsRefusedNamingSourceAndType) {
  EXPECT_THAT(PublicKey::FromPem(GenerateKey(KeyKind::kRsa2048).public_pem, "/keys/rsa.pub"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("/keys/rsa.pub: key type RSA is not supported")));
}

TEST(Keys, P384PublicKeyIsRefusedNamingTheCurve) {
  EXPECT_THAT(PublicKey::FromPem(GenerateKey(KeyKind::kP384).public_pem, "p384.pub"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("p384.pub: EC curve secp384r1 is not supported")));
}

TEST(Keys, Ed25519PrivateKeyIsRefused) {
  EXPECT_THAT(PrivateKey::FromPem(GenerateKey(KeyKind::kEd25519).private_pem, "ed.pem", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key type ED25519")));
}

TEST(Keys, PrivateKeyIsNotAPublicKey) {
  EXPECT_THAT(PublicKey::FromPem(GenerateKey().private_pem, "oops.pub"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("oops.pub: not a PEM")));
}

TEST(Keys, CosignEncryptedKeyOpensWithItsPassphrase) {
  ASSERT_OK_AND_ASSIGN(PrivateKey priv, PrivateKey::FromPem(TestData("cosign.key"), "cosign.key",
                                                            "test-passphrase"));
  ASSERT_OK_AND_ASSIGN(PublicKey pub, PublicKey::FromPem(TestData("cosign.pub"), "cosign.pub"));
  EXPECT_EQ(priv.public_key().fingerprint(), pub.fingerprint());
  ASSERT_OK_AND_ASSIGN(std::string sig, priv.Sign("payload"));
  EXPECT_OK(pub.Verify("payload", sig));
}

TEST(Keys, CosignEncryptedKeyWithTheWrongPassphraseIsRefused) {
  EXPECT_THAT(PrivateKey::FromPem(TestData("cosign.key"), "cosign.key", "wrong"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("wrong passphrase")));
}

TEST(Keys, CosignKeyFileWithoutCosignPasswordSaysToSetIt) {
  modelfs::testing::TempDir dir;
  std::string path = dir.WriteFile("cosign.key", TestData("cosign.key"));
  unsetenv("COSIGN_PASSWORD");
  EXPECT_THAT(PrivateKey::FromFile(path), StatusIs(absl::StatusCode::kPermissionDenied,
                                                   HasSubstr("COSIGN_PASSWORD is not set")));
  setenv("COSIGN_PASSWORD", "test-passphrase", 1);
  EXPECT_OK(PrivateKey::FromFile(path));
  unsetenv("COSIGN_PASSWORD");
}

TEST(Keys, EncryptedKeyAskingForHugeScryptMemoryIsRefusedBeforeDerivation) {
  std::string body =
      R"({"kdf":{"name":"scrypt","params":{"N":1073741824,"r":8,"p":1},"salt":"AAAA"},)"
      R"("cipher":{"name":"nacl/secretbox","nonce":"AAAA"},"ciphertext":"AAAA"})";
  std::string pem = "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n" + absl::Base64Escape(body) +
                    "\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n";
  EXPECT_THAT(
      PrivateKey::FromPem(pem, "huge.key", ""),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside the accepted bounds")));
}

TEST(Keys, EncryptedKeyWithAnotherCipherIsRefusedNamingIt) {
  std::string body = R"({"kdf":{"name":"scrypt","params":{"N":32768,"r":8,"p":1},"salt":"AAAA"},)"
                     R"("cipher":{"name":"aes-gcm","nonce":"AAAA"},"ciphertext":"AAAA"})";
  std::string pem = "-----BEGIN ENCRYPTED COSIGN PRIVATE KEY-----\n" + absl::Base64Escape(body) +
                    "\n-----END ENCRYPTED COSIGN PRIVATE KEY-----\n";
  EXPECT_THAT(PrivateKey::FromPem(pem, "gcm.key", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cipher \"aes-gcm\"")));
}

}  // namespace
}  // namespace modelfs
