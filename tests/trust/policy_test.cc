// containers-policy.json: what is read, what is refused by name, and which scope applies
// (c/image's order: exact reference, repository, namespaces, host, *.domain, "", default).
#include "core/trust/policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_replace.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"
#include "testsupport/trust/test_keys.h"

namespace modelfs {
namespace {

using ::modelfs::testing::GenerateKey;
using ::modelfs::testing::KeyKind;
using ::modelfs::testing::StatusIs;
using ::testing::HasSubstr;

class PolicyTest : public ::testing::Test {
 protected:
  void SetUp() override { key_ = dir_.WriteFile("team.pub", GenerateKey().public_pem).string(); }
  // `json` with $KEY replaced by the team key's path.
  absl::StatusOr<TrustPolicy> Parse(const std::string& json) {
    return TrustPolicy::Parse(absl::StrReplaceAll(json, {{"$KEY", key_}}), "policy.json");
  }
  std::string ScopeOf(const TrustPolicy& p, const std::string& ref) {
    return p.ScopeFor(*ImageReference::Parse(ref)).name;
  }
  modelfs::testing::TempDir dir_;
  std::string key_;
};

constexpr char kScopes[] = R"({
  "default": [{"type": "reject"}],
  "transports": {
    "docker": {
      "reg.example.com:5000/team/m:v1": [{"type": "insecureAcceptAnything"}],
      "reg.example.com:5000/team/m": [{"type": "sigstoreSigned", "keyPath": "$KEY"}],
      "reg.example.com:5000/team": [{"type": "sigstoreSigned", "keyPath": "$KEY"}],
      "reg.example.com:5000": [{"type": "reject"}],
      "*.example.com": [{"type": "reject"}],
      "": [{"type": "insecureAcceptAnything"}]
    },
    "docker-daemon": {"": [{"type": "insecureAcceptAnything"}]}
  }
})";

TEST_F(PolicyTest, ExactReferenceScopeComesFirst) {
  ASSERT_OK_AND_ASSIGN(TrustPolicy p, Parse(kScopes));
  EXPECT_EQ(ScopeOf(p, "reg.example.com:5000/team/m:v1"), "docker:reg.example.com:5000/team/m:v1");
}

TEST_F(PolicyTest, RepositoryScopeComesBeforeItsNamespace) {
  ASSERT_OK_AND_ASSIGN(TrustPolicy p, Parse(kScopes));
  EXPECT_EQ(ScopeOf(p, "reg.example.com:5000/team/m:v2"), "docker:reg.example.com:5000/team/m");
}

TEST_F(PolicyTest, NamespaceScopeCoversItsRepositories) {
  ASSERT_OK_AND_ASSIGN(TrustPolicy p, Parse(kScopes));
  EXPECT_EQ(ScopeOf(p, "reg.example.com:5000/team/other:v1"), "docker:reg.example.com:5000/team");
}

TEST_F(PolicyTest, HostScopeCoversOtherNamespaces) {
  ASSERT_OK_AND_ASSIGN(TrustPolicy p, Parse(kScopes));
  EXPECT_EQ(ScopeOf(p, "reg.example.com:5000/elsewhere/x:v1"), "docker:reg.example.com:5000");
}

TEST_F(PolicyTest, WildcardScopeCoversOtherHostsOfTheDomain) {
  ASSERT_OK_AND_ASSIGN(TrustPolicy p, Parse(kScopes));
  EXPECT_EQ(ScopeOf(p, "mirror.example.com/team/m:v1"), "docker:*.example.com");
}

TEST_F(PolicyTest, TransportDefaultComesBeforeTheGlobalDefault) {
  ASSERT_OK_AND_ASSIGN(TrustPolicy p, Parse(kScopes));
  EXPECT_EQ(ScopeOf(p, "other.org/x:v1"), "docker:");
}

TEST_F(PolicyTest, GlobalDefaultAppliesWithoutDockerScopes) {
  ASSERT_OK_AND_ASSIGN(TrustPolicy p, Parse(R"({"default":[{"type":"reject"}]})"));
  PolicyScope s = p.ScopeFor(*ImageReference::Parse("reg:5000/a/b:c"));
  EXPECT_EQ(s.name, "default");
  ASSERT_EQ(s.requirements->size(), 1u);
  EXPECT_EQ((*s.requirements)[0].type, PolicyRequirement::Type::kReject);
}

TEST_F(PolicyTest, DigestReferenceMatchesItsExactDigestScope) {
  const std::string d = Digest::Of("m").str();
  ASSERT_OK_AND_ASSIGN(
      TrustPolicy p,
      Parse(R"({"default":[{"type":"reject"}],"transports":{"docker":{"reg:5000/a/b@)" + d +
            R"(":[{"type":"insecureAcceptAnything"}]}}})"));
  EXPECT_EQ(ScopeOf(p, "reg:5000/a/b@" + d), "docker:reg:5000/a/b@" + d);
}

TEST_F(PolicyTest, SigstoreSignedReadsKeyAndSignedIdentity) {
  ASSERT_OK_AND_ASSIGN(TrustPolicy p,
                       Parse(R"({"default":[{"type":"sigstoreSigned","keyPath":"$KEY",
                "signedIdentity":{"type":"matchRepository"}}]})"));
  const PolicyRequirement& r = (*p.ScopeFor(*ImageReference::Parse("r:1/a:b")).requirements)[0];
  EXPECT_EQ(r.type, PolicyRequirement::Type::kSigstoreSigned);
  ASSERT_EQ(r.keys.size(), 1u);
  EXPECT_EQ(r.keys[0].name(), key_);
  EXPECT_EQ(r.identity, IdentityMatch::kMatchRepository);
}

TEST_F(PolicyTest, SignedIdentityDefaultsToMatchRepoDigestOrExact) {
  ASSERT_OK_AND_ASSIGN(TrustPolicy p,
                       Parse(R"({"default":[{"type":"sigstoreSigned","keyPath":"$KEY"}]})"));
  EXPECT_EQ((*p.ScopeFor(*ImageReference::Parse("r:1/a:b")).requirements)[0].identity,
            IdentityMatch::kMatchRepoDigestOrExact);
}

TEST_F(PolicyTest, KeyDataIsBase64OfThePem) {
  std::string pem = GenerateKey().public_pem;
  ASSERT_OK_AND_ASSIGN(TrustPolicy p, Parse(R"({"default":[{"type":"sigstoreSigned","keyData":")" +
                                            absl::Base64Escape(pem) + R"("}]})"));
  EXPECT_EQ((*p.ScopeFor(*ImageReference::Parse("r:1/a:b")).requirements)[0].keys.size(), 1u);
}

TEST_F(PolicyTest, KeyPathsAndKeyDatasReadEveryKey) {
  std::string second = dir_.WriteFile("second.pub", GenerateKey().public_pem).string();
  ASSERT_OK_AND_ASSIGN(
      TrustPolicy p,
      Parse(R"({"default":[{"type":"sigstoreSigned","keyPaths":["$KEY",")" + second + R"("]}],
                "transports":{"docker":{"r:1":[{"type":"sigstoreSigned","keyDatas":[")" +
            absl::Base64Escape(GenerateKey().public_pem) + R"(",")" +
            absl::Base64Escape(GenerateKey().public_pem) + R"(",")" +
            absl::Base64Escape(GenerateKey().public_pem) + R"("]}]}}})"));
  const auto& by_path = (*p.ScopeFor(*ImageReference::Parse("other:1/a:b")).requirements)[0];
  ASSERT_EQ(by_path.keys.size(), 2u);
  EXPECT_EQ(by_path.keys[1].name(), second);
  const auto& by_data = (*p.ScopeFor(*ImageReference::Parse("r:1/a:b")).requirements)[0];
  ASSERT_EQ(by_data.keys.size(), 3u);
  EXPECT_EQ(by_data.keys[2].name(), "policy.json: transports.docker[\"r:1\"][0].keyDatas[2]");
  EXPECT_THAT(p.files(), ::testing::ElementsAre(key_, second));
}

TEST_F(PolicyTest, UnknownRequirementTypeIsRefusedNamingIt) {
  EXPECT_THAT(Parse(R"({"default":[{"type":"signedBy","keyType":"GPGKeys","keyPath":"$KEY"}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("policy.json: default[0]: requirement type \"signedBy\" is not "
                                 "supported")));
}

TEST_F(PolicyTest, FulcioIsRefusedAsOutOfScope) {
  EXPECT_THAT(
      Parse(R"({"default":[{"type":"sigstoreSigned","fulcio":{}}]})"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"fulcio\" is not supported")));
}

TEST_F(PolicyTest, RekorPublicKeyPathIsRefused) {
  EXPECT_THAT(Parse(R"({"default":[{"type":"sigstoreSigned","keyPath":"$KEY",
                         "rekorPublicKeyPath":"$KEY"}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("\"rekorPublicKeyPath\" is not supported")));
}

TEST_F(PolicyTest, RemapIdentityIsRefusedNamingIt) {
  EXPECT_THAT(Parse(R"({"default":[{"type":"sigstoreSigned","keyPath":"$KEY",
                  "signedIdentity":{"type":"remapIdentity","prefix":"a","signedPrefix":"b"}}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("signedIdentity type \"remapIdentity\" is not supported")));
}

TEST_F(PolicyTest, UnknownKeyInARequirementIsRefused) {
  EXPECT_THAT(Parse(R"({"default":[{"type":"sigstoreSigned","keyPath":"$KEY","keyPth":"x"}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unexpected key \"keyPth\"")));
}

TEST_F(PolicyTest, TwoKeySourcesAreRefused) {
  EXPECT_THAT(
      Parse(R"({"default":[{"type":"sigstoreSigned","keyPath":"$KEY","keyPaths":["$KEY"]}]})"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("exactly one of keyPath")));
}

TEST_F(PolicyTest, RelativeKeyPathIsRefused) {
  EXPECT_THAT(Parse(R"({"default":[{"type":"sigstoreSigned","keyPath":"keys/team.pub"}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must be absolute")));
}

TEST_F(PolicyTest, MissingKeyFileIsNotFoundNamingIt) {
  EXPECT_THAT(Parse(R"({"default":[{"type":"sigstoreSigned","keyPath":"/nonexistent/k.pub"}]})"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/k.pub")));
}

TEST_F(PolicyTest, RsaKeyFileIsRefusedNamingTheFile) {
  std::string rsa = dir_.WriteFile("rsa.pub", GenerateKey(KeyKind::kRsa2048).public_pem).string();
  EXPECT_THAT(Parse(R"({"default":[{"type":"sigstoreSigned","keyPath":")" + rsa + R"("}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(rsa + ": key type RSA is not supported")));
}

TEST_F(PolicyTest, MissingDefaultIsRefused) {
  EXPECT_THAT(Parse(R"({"transports":{}})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"default\" is missing")));
}

TEST_F(PolicyTest, EmptyRequirementListIsRefused) {
  EXPECT_THAT(Parse(R"({"default":[{"type":"reject"}],"transports":{"docker":{"r:1/a":[]}}})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must not be empty")));
}

TEST_F(PolicyTest, UnknownRequirementInAnotherTransportIsStillRefused) {
  EXPECT_THAT(Parse(R"({"default":[{"type":"reject"}],
                       "transports":{"atomic":{"":[{"type":"signedBaseLayer"}]}}})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"signedBaseLayer\"")));
}

TEST_F(PolicyTest, FilesListThePolicyAndItsKeys) {
  std::string path =
      dir_.WriteFile(
              "policy.json",
              absl::StrReplaceAll(R"({"default":[{"type":"sigstoreSigned","keyPath":"$KEY"}]})",
                                  {{"$KEY", key_}}))
          .string();
  ASSERT_OK_AND_ASSIGN(TrustPolicy p, TrustPolicy::LoadFile(path));
  EXPECT_THAT(p.files(), ::testing::ElementsAre(path, key_));
}

TEST_F(PolicyTest, StampChangesWhenTheFileIsRewritten) {
  std::string path = dir_.WriteFile("policy.json", R"({"default":[{"type":"reject"}]})").string();
  PolicyStamp before = StampFiles({path});
  EXPECT_EQ(StampFiles({path}), before);
  dir_.WriteFile("policy.json", R"({"default":[{"type":"insecureAcceptAnything"}]})");
  EXPECT_NE(StampFiles({path}), before);
}

}  // namespace
}  // namespace modelfs
