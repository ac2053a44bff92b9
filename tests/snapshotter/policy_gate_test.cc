// PolicyGate: verdicts kept per (policy content, reference, digest), refusals never kept, the
// policy read again when its file changes, and a policy that cannot be read refusing all.
// Signatures are real (a P-256 key made here, payloads built and signed as cosign does); the
// store is a fake that counts fetches and can fail.
#include "snapshotter/policy/policy_gate.h"

#include <openssl/evp.h>
#include <openssl/pem.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/trust/keys.h"
#include "core/trust/simple_signing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::snapshotter {
namespace {

using ::modelfs::testing::StatusIs;
using ::modelfs::testing::TempDir;
using ::testing::HasSubstr;

constexpr char kImage[] = "reg.example:5000/team/llama:v1-volume";
constexpr char kIdentity[] = "reg.example:5000/team/llama:v1-volume";

// A fresh P-256 private key, PEM.
std::string NewPrivateKeyPem() {
  EVP_PKEY* pkey = EVP_EC_gen("P-256");
  EXPECT_NE(pkey, nullptr);
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, pkey, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  std::string pem(data, n);
  BIO_free(bio);
  EVP_PKEY_free(pkey);
  return pem;
}

// Serves one signature set (or an error) and counts fetches.
class FakeStore final : public SignatureStore {
 public:
  absl::StatusOr<SignatureSet> Fetch(const std::string&, const Digest&) override {
    ++fetches;
    if (!error.ok()) return error;
    return set;
  }
  SignatureSet set;
  absl::Status error;
  int fetches = 0;
};

class PolicyGateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<PrivateKey> key = PrivateKey::FromPem(NewPrivateKeyPem(), "test key", "");
    ASSERT_OK(key.status());
    key_ = std::make_unique<PrivateKey>(*std::move(key));
    key_path_ = tmp_.WriteFile("team.pub", key_->public_key().Pem()).string();
    policy_path_ = tmp_.Join("policy.json").string();
    WritePolicy("sigstoreSigned");
    ASSERT_OK_AND_ASSIGN(image_, ImageReference::Parse(kImage));
    digest_ = Digest::Of("the volume image's manifest");
  }

  // default: reject; reg.example:5000/team: `type` (sigstoreSigned with the team's key).
  void WritePolicy(const std::string& type) {
    std::string requirement = absl::StrCat("{\"type\": \"", type, "\"");
    if (type == "sigstoreSigned")
      absl::StrAppend(&requirement, ", \"keyPath\": \"", key_path_, "\"");
    absl::StrAppend(&requirement, "}");
    std::ofstream(policy_path_, std::ios::trunc)
        << "{\"default\": [{\"type\": \"reject\"}], \"transports\": {\"docker\": "
           "{\"reg.example:5000/team\": ["
        << requirement << "]}}}\n";
  }

  // One signature by the team's key over `identity` at digest_.
  void Sign(const std::string& identity) {
    const std::string payload = BuildSimpleSigningPayload(identity, digest_);
    absl::StatusOr<std::string> der = key_->Sign(payload);
    ASSERT_OK(der.status());
    FetchedSignature sig;
    sig.layer_digest = Digest::Of(payload);
    sig.payload = payload;
    sig.signature_b64 = absl::Base64Escape(*der);
    store_.set.found = true;
    store_.set.signatures = {sig};
  }

  PolicyGate Gate() {
    return PolicyGate(policy_path_, [this](const std::string&) -> absl::StatusOr<SignatureStore*> {
      return &store_;
    });
  }

  TempDir tmp_;
  std::unique_ptr<PrivateKey> key_;
  std::string key_path_;
  std::string policy_path_;
  ImageReference image_;
  Digest digest_;
  FakeStore store_;
};

TEST_F(PolicyGateTest, AnAcceptedVerdictIsKeptSoASecondCheckFetchesNothing) {
  Sign(kIdentity);
  PolicyGate gate = Gate();
  PolicyGate::Outcome first = gate.Check(image_, digest_);
  EXPECT_OK(first.status);
  EXPECT_FALSE(first.kept);
  PolicyGate::Outcome second = gate.Check(image_, digest_);
  EXPECT_OK(second.status);
  EXPECT_TRUE(second.kept);
  EXPECT_EQ(second.reason, "accepted");
  EXPECT_EQ(store_.fetches, 1);
  EXPECT_EQ(gate.evaluations(), 1u);
}

TEST_F(PolicyGateTest, AVerdictIsKeptPerDigest) {
  Sign(kIdentity);
  PolicyGate gate = Gate();
  EXPECT_OK(gate.Check(image_, digest_).status);
  // Another digest under the same reference: evaluated (and refused: the signature is for
  // digest_).
  PolicyGate::Outcome other = gate.Check(image_, Digest::Of("another manifest"));
  EXPECT_THAT(other.status, StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(other.reason, "identity_mismatch");
  EXPECT_EQ(store_.fetches, 2);
}

TEST_F(PolicyGateTest, ARefusalIsNotKeptSoTheNextCheckAsksAgain) {
  PolicyGate gate = Gate();  // no .sig tag at all
  EXPECT_EQ(gate.Check(image_, digest_).reason, "no_signature");
  Sign(kIdentity);  // signed since
  EXPECT_OK(gate.Check(image_, digest_).status);
  EXPECT_EQ(store_.fetches, 2);
  EXPECT_EQ(gate.refusals(), (std::map<std::string, uint64_t>{{"no_signature", 1}}));
}

TEST_F(PolicyGateTest, TheRefusalNamesReferenceDigestPolicyScopeAndReason) {
  PolicyGate gate = Gate();
  PolicyGate::Outcome out = gate.Check(image_, digest_);
  EXPECT_THAT(out.status, StatusIs(absl::StatusCode::kPermissionDenied));
  const std::string message(out.status.message());
  EXPECT_THAT(message, HasSubstr(kImage));
  EXPECT_THAT(message, HasSubstr(digest_.str()));
  EXPECT_THAT(message, HasSubstr(policy_path_));
  EXPECT_THAT(message, HasSubstr("scope docker:reg.example:5000/team"));
  EXPECT_THAT(message, HasSubstr("no_signature"));
}

// Fail closed: signatures that cannot be fetched refuse, and the refusal is not kept.
TEST_F(PolicyGateTest, SignaturesThatCannotBeFetchedRefuse) {
  store_.error = absl::UnavailableError("registry down");
  PolicyGate gate = Gate();
  PolicyGate::Outcome out = gate.Check(image_, digest_);
  EXPECT_THAT(out.status, StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(out.reason, "fetch_failed");
  EXPECT_EQ(gate.refusals(), (std::map<std::string, uint64_t>{{"fetch_failed", 1}}));
}

TEST_F(PolicyGateTest, AChangedPolicyFileIsReadAgainAndItsVerdictsForgotten) {
  Sign(kIdentity);
  PolicyGate gate = Gate();
  EXPECT_OK(gate.Check(image_, digest_).status);
  WritePolicy("reject");
  PolicyGate::Outcome out = gate.Check(image_, digest_);
  EXPECT_THAT(out.status, StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(out.reason, "rejected_by_policy");
}

// Rewriting the same bytes changes the file's stamp, not its content: verdicts stay.
TEST_F(PolicyGateTest, ARewrittenButUnchangedPolicyKeepsItsVerdicts) {
  Sign(kIdentity);
  PolicyGate gate = Gate();
  EXPECT_OK(gate.Check(image_, digest_).status);
  std::stringstream bytes;
  bytes << std::ifstream(policy_path_).rdbuf();
  std::filesystem::remove(policy_path_);
  std::ofstream(policy_path_) << bytes.str();  // a new inode
  PolicyGate::Outcome out = gate.Check(image_, digest_);
  EXPECT_OK(out.status);
  EXPECT_TRUE(out.kept);
  EXPECT_EQ(store_.fetches, 1);
}

TEST_F(PolicyGateTest, APolicyThatCannotBeReadRefusesEverything) {
  std::ofstream(policy_path_, std::ios::trunc) << "{\"default\": [{\"type\": \"signedBy\"}]}";
  PolicyGate gate = Gate();
  PolicyGate::Outcome out = gate.Check(image_, digest_);
  EXPECT_THAT(out.status,
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("cannot be used")));
  EXPECT_EQ(out.reason, "policy_unreadable");
  EXPECT_EQ(store_.fetches, 0);
}

TEST_F(PolicyGateTest, AScopeThatNeedsNoSignatureFetchesNone) {
  WritePolicy("insecureAcceptAnything");
  PolicyGate gate = Gate();
  EXPECT_OK(gate.Check(image_, digest_).status);
  EXPECT_EQ(store_.fetches, 0);
}

}  // namespace
}  // namespace modelfs::snapshotter
