// StoreAttestation and VerifyAttestations against a fake registry that has the OCI 1.1 referrers
// API (testsupport/fakes/referrers_registry.py; docker-registry 2.8 has none, so the e2e test
// cannot reach this path): the .att tag and the referrer are both written, the referrer lists
// under its subject with the envelope's artifactType; every refusal reason of the verdict; and
// the node's AttestationGate (snapshotter.toml require_equivalence) over the same registry.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/attest/attestation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "snapshotter/policy/attestation_gate.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"
#include "testsupport/trust/test_keys.h"

namespace modelfs {
namespace {

using ::testing::HasSubstr;

class AttestationStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* src = std::getenv("MODELFS_SOURCE_DIR");
    ASSERT_NE(src, nullptr) << "MODELFS_SOURCE_DIR is set by modelfs_test";
    const std::string port_file = dir_.Join("port").string();
    ASSERT_OK_AND_ASSIGN(
        server_,
        testing::ChildProcess::Spawn(
            {"python3", absl::StrCat(src, "/testsupport/fakes/referrers_registry.py"), port_file},
            dir_.Join("log").string()));
    std::string port;
    for (int i = 0; i < 200 && port.empty(); ++i) {
      std::ifstream in(port_file);
      std::getline(in, port);
      if (port.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_FALSE(port.empty()) << "the fake registry did not start";
    RegistryClientOptions o;
    o.registry = absl::StrCat("127.0.0.1:", port);
    o.endpoint.scheme = "http";
    o.endpoint.host = o.registry;
    ASSERT_OK_AND_ASSIGN(client_, RegistryClient::Create(o));
    auto pair = testing::GenerateKey();
    ASSERT_OK_AND_ASSIGN(PrivateKey key, PrivateKey::FromPem(pair.private_pem, "k.pem", ""));
    key_ = std::make_unique<PrivateKey>(key);
    ASSERT_OK_AND_ASSIGN(PublicKey stranger,
                         PublicKey::FromPem(testing::GenerateKey().public_pem, "stranger.pub"));
    stranger_ = std::make_unique<PublicKey>(stranger);
    // The subject: a manifest in the repository.
    subject_bytes_ =
        R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.empty.v1+json","digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","size":2},"layers":[]})";
    ASSERT_OK_AND_ASSIGN(
        subject_, client_->PutManifest("team/m", "q8", subject_bytes_, kMediaTypeOciManifest));
  }

  std::string Envelope(const Digest& subject, bool equivalent,
                       const char* type = kEquivalencePredicateType) {
    nlohmann::json s = {
        {"_type", kInTotoStatementType},
        {"subject", {{{"name", "r/team/m"}, {"digest", {{"sha256", std::string(subject.hex())}}}}}},
        {"predicateType", type},
        {"predicate", {{"equivalent", equivalent}}}};
    auto env = SignDsseEnvelope(kInTotoPayloadType, s.dump(), *key_);
    EXPECT_OK(env.status());
    return env.ok() ? *env : "";
  }
  absl::StatusOr<StoredAttestation> Store(const std::string& envelope) {
    return StoreAttestation(*client_, "team/m", subject_, kMediaTypeOciManifest,
                            subject_bytes_.size(), envelope, kEquivalencePredicateType);
  }
  AttestationVerdict Verify(const PublicKey& key) {
    auto v = VerifyAttestations(*client_, "team/m", subject_, {key}, kEquivalencePredicateType);
    EXPECT_OK(v.status());
    return v.ok() ? *v : AttestationVerdict{};
  }

  testing::TempDir dir_;
  std::unique_ptr<testing::ChildProcess> server_;
  std::unique_ptr<RegistryClient> client_;
  std::unique_ptr<PrivateKey> key_;
  std::unique_ptr<PublicKey> stranger_;
  std::string subject_bytes_;
  Digest subject_;
};

TEST_F(AttestationStoreTest, WithTheReferrersApiTheEnvelopeIsAlsoAReferrerOfTheSubject) {
  ASSERT_OK_AND_ASSIGN(StoredAttestation stored, Store(Envelope(subject_, true)));
  EXPECT_EQ(stored.tag, AttestationTag(subject_));
  EXPECT_EQ(stored.envelopes, 1u);
  ASSERT_TRUE(stored.referrer.has_value());
  ASSERT_OK_AND_ASSIGN(std::string index,
                       client_->GetReferrers("team/m", subject_, kMediaTypeDsseEnvelope));
  nlohmann::json j = nlohmann::json::parse(index);
  ASSERT_EQ(j["manifests"].size(), 1u);
  EXPECT_EQ(j["manifests"][0]["digest"], stored.referrer->str());
  EXPECT_EQ(j["manifests"][0]["artifactType"], kMediaTypeDsseEnvelope);
  EXPECT_EQ(j["manifests"][0]["annotations"]["predicateType"], kEquivalencePredicateType);
  ASSERT_OK_AND_ASSIGN(ManifestResult referrer,
                       client_->GetManifest("team/m", stored.referrer->str()));
  nlohmann::json r = nlohmann::json::parse(referrer.bytes);
  EXPECT_EQ(r["subject"]["digest"], subject_.str());
  EXPECT_EQ(r["subject"]["size"], subject_bytes_.size());
  EXPECT_EQ(r["layers"][0]["mediaType"], kMediaTypeDsseEnvelope);
  EXPECT_TRUE(Verify(key_->public_key()).accepted);
}

TEST_F(AttestationStoreTest, AttestingAgainAddsALayerAndKeepsTheFirst) {
  ASSERT_OK(Store(Envelope(subject_, true)).status());
  ASSERT_OK_AND_ASSIGN(StoredAttestation second, Store(Envelope(subject_, true)));
  EXPECT_EQ(second.envelopes, 2u);
  ASSERT_OK_AND_ASSIGN(ManifestResult att, client_->GetManifest("team/m", second.tag));
  nlohmann::json m = nlohmann::json::parse(att.bytes);
  ASSERT_EQ(m["layers"].size(), 2u);
  EXPECT_EQ(m["layers"][1]["annotations"]["dev.cosignproject.cosign/signature"], "");
  EXPECT_EQ(m["layers"][1]["annotations"]["predicateType"], kEquivalencePredicateType);
  EXPECT_TRUE(Verify(key_->public_key()).accepted);  // the first envelope that verifies counts
}

TEST_F(AttestationStoreTest, EachRefusalHasItsReason) {
  EXPECT_EQ(Verify(key_->public_key()).reason, "no_attestation");
  ASSERT_OK(Store(Envelope(subject_, false)).status());
  EXPECT_EQ(Verify(key_->public_key()).reason, "not_equivalent");
  EXPECT_EQ(Verify(*stranger_).reason, "no_key_matched");
  ASSERT_OK(Store(Envelope(Digest::Of("another manifest"), true)).status());
  AttestationVerdict v = Verify(key_->public_key());
  EXPECT_FALSE(v.accepted);
  EXPECT_EQ(v.reason, "not_equivalent");  // the most telling of the two
  ASSERT_OK(Store(Envelope(subject_, true, "https://example.com/other/v1")).status());
  EXPECT_FALSE(Verify(key_->public_key()).accepted);
  ASSERT_OK(Store(Envelope(subject_, true)).status());
  v = Verify(key_->public_key());
  EXPECT_TRUE(v.accepted);
  EXPECT_THAT(v.detail, HasSubstr("verified with key k.pem"));
}

TEST_F(AttestationStoreTest, AnIndexInPlaceOfTheAttManifestIsARefusalNotAnError) {
  ASSERT_OK(
      client_
          ->PutManifest(
              "team/m", AttestationTag(subject_),
              R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]})",
              "application/vnd.oci.image.index.v1+json")
          .status());
  AttestationVerdict v = Verify(key_->public_key());
  EXPECT_FALSE(v.accepted);
  EXPECT_EQ(v.reason, "bad_payload");
}

TEST_F(AttestationStoreTest, TheNodeRefusesAnUnattestedModelOfARequiredRepositoryNamingIt) {
  dir_.WriteFile("team.pub", key_->public_key().Pem());
  auto client_for = [this](const std::string&) -> absl::StatusOr<RegistryClient*> {
    return client_.get();
  };
  ASSERT_OK_AND_ASSIGN(auto gate, snapshotter::AttestationGate::Create(
                                      {absl::StrCat(client_->registry(), "/team/*")},
                                      {dir_.Join("team.pub").string()}, client_for));
  ASSERT_OK_AND_ASSIGN(ImageReference ref,
                       ImageReference::Parse(absl::StrCat(client_->registry(), "/team/m:q8")));
  ASSERT_OK_AND_ASSIGN(ImageReference other,
                       ImageReference::Parse(absl::StrCat(client_->registry(), "/free/m:q8")));
  EXPECT_TRUE(gate->Applies(ref));
  EXPECT_FALSE(gate->Applies(other));
  EXPECT_OK(gate->Check(other, subject_).status);  // not required there
  snapshotter::AttestationGate::Outcome refused = gate->Check(ref, subject_);
  EXPECT_THAT(refused.status, ::modelfs::testing::StatusIs(absl::StatusCode::kPermissionDenied,
                                                           HasSubstr("team/m:q8")));
  EXPECT_EQ(refused.reason, "no_attestation");
  ASSERT_OK(Store(Envelope(subject_, true)).status());
  snapshotter::AttestationGate::Outcome accepted = gate->Check(ref, subject_);
  EXPECT_OK(accepted.status);
  EXPECT_FALSE(accepted.kept);
  EXPECT_TRUE(gate->Check(ref, subject_).kept);  // the second pod costs no request
  EXPECT_EQ(gate->refusals()["no_attestation"], 1u);
}

TEST_F(AttestationStoreTest, ARequirementWithoutKeysOrWithABadRepositoryIsRefusedAtLoad) {
  auto none = [](const std::string&) -> absl::StatusOr<RegistryClient*> { return nullptr; };
  EXPECT_THAT(snapshotter::AttestationGate::Create({"reg.example/team/*"}, {}, none).status(),
              ::modelfs::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("equivalence_keys is empty")));
  EXPECT_THAT(snapshotter::AttestationGate::Create({"reg.example/te*m"}, {"/k.pub"}, none).status(),
              ::modelfs::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("require_equivalence")));
}

}  // namespace
}  // namespace modelfs
