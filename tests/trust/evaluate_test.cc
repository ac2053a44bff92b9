// Evaluation without a registry: a fake SignatureStore returns prepared signatures or faults.
// signedIdentity cases follow c/image's policy_reference_match.go; the same cases are run
// against skopeo in integration/trust.
#include "core/trust/evaluate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/escaping.h"
#include "core/trust/simple_signing.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/trust/test_keys.h"

namespace modelfs {
namespace {

using ::modelfs::testing::GenerateKey;
using ::modelfs::testing::StatusIs;
using ::testing::HasSubstr;

class FakeStore : public SignatureStore {
 public:
  absl::StatusOr<SignatureSet> Fetch(const std::string& repository, const Digest& digest) override {
    ++fetches;
    last_repository = repository;
    return result;
  }
  absl::StatusOr<SignatureSet> result = SignatureSet{};
  int fetches = 0;
  std::string last_repository;
};

const Digest kManifest = Digest::Of("the manifest");

class EvaluateTest : public ::testing::Test {
 protected:
  EvaluateTest()
      : team_(*PrivateKey::FromPem(GenerateKey().private_pem, "team.key", "")),
        other_(*PrivateKey::FromPem(GenerateKey().private_pem, "other.key", "")) {}

  FetchedSignature Sign(const PrivateKey& key, const std::string& identity,
                        const Digest& digest = kManifest) {
    return SignRaw(key, BuildSimpleSigningPayload(identity, digest));
  }
  FetchedSignature SignRaw(const PrivateKey& key, const std::string& payload) {
    FetchedSignature s;
    s.payload = payload;
    s.layer_digest = Digest::Of(payload);
    s.signature_b64 = absl::Base64Escape(*key.Sign(payload));
    return s;
  }
  std::vector<PolicyRequirement> Requires(
      IdentityMatch match = IdentityMatch::kMatchRepoDigestOrExact) {
    PolicyRequirement r;
    r.type = PolicyRequirement::Type::kSigstoreSigned;
    r.keys.push_back(team_.public_key());
    r.identity = match;
    return {r};
  }
  void Store(std::vector<FetchedSignature> sigs) {
    SignatureSet set;
    set.found = true;
    set.sig_manifest_digest = Digest::Of("sig manifest");
    set.signatures = std::move(sigs);
    store_.result = set;
  }
  TrustVerdict Eval(const std::string& ref,
                    IdentityMatch match = IdentityMatch::kMatchRepoDigestOrExact) {
    return EvaluateRequirements(Requires(match), "docker:reg:5000", *ImageReference::Parse(ref),
                                kManifest, store_);
  }

  PrivateKey team_, other_;
  FakeStore store_;
};

TEST_F(EvaluateTest, SignatureByThePolicyKeyForThisTagIsAccepted) {
  Store({Sign(team_, "reg:5000/team/m:v1")});
  TrustVerdict v = Eval("reg:5000/team/m:v1");
  EXPECT_TRUE(v.accepted);
  EXPECT_EQ(v.reason, TrustReason::kAccepted);
  ASSERT_EQ(v.signatures.size(), 1u);
  EXPECT_EQ(v.signatures[0].key, "team.key");
  EXPECT_EQ(v.signatures[0].docker_reference, "reg:5000/team/m:v1");
  EXPECT_EQ(store_.last_repository, "team/m");
}

TEST_F(EvaluateTest, OneAcceptedSignatureAmongOthersIsEnough) {
  Store({Sign(other_, "reg:5000/team/m:v1"), Sign(team_, "reg:5000/team/m:v1")});
  TrustVerdict v = Eval("reg:5000/team/m:v1");
  EXPECT_TRUE(v.accepted);
  ASSERT_EQ(v.signatures.size(), 2u);
  EXPECT_EQ(v.signatures[0].outcome, TrustReason::kNoKeyMatched);
  EXPECT_EQ(v.signatures[1].outcome, TrustReason::kAccepted);
}

TEST_F(EvaluateTest, MissingSignatureTagIsNoSignature) {
  TrustVerdict v = Eval("reg:5000/team/m:v1");
  EXPECT_FALSE(v.accepted);
  EXPECT_EQ(v.reason, TrustReason::kNoSignature);
  EXPECT_THAT(v.message, HasSubstr(SignatureTag(kManifest)));
}

TEST_F(EvaluateTest, SignatureByAnotherKeyIsNoKeyMatched) {
  Store({Sign(other_, "reg:5000/team/m:v1")});
  TrustVerdict v = Eval("reg:5000/team/m:v1");
  EXPECT_FALSE(v.accepted);
  EXPECT_EQ(v.reason, TrustReason::kNoKeyMatched);
  EXPECT_EQ(v.signatures[0].key, "");
}

TEST_F(EvaluateTest, SignatureOfAnotherManifestIsIdentityMismatch) {
  Store({Sign(team_, "reg:5000/team/m:v1", Digest::Of("another manifest"))});
  TrustVerdict v = Eval("reg:5000/team/m:v1");
  EXPECT_EQ(v.reason, TrustReason::kIdentityMismatch);
  EXPECT_THAT(v.signatures[0].detail,
              HasSubstr("signs manifest " + Digest::Of("another manifest").str()));
}

TEST_F(EvaluateTest, SignedPayloadWithWrongTypeIsBadPayload) {
  std::string payload = BuildSimpleSigningPayload("reg:5000/team/m:v1", kManifest);
  payload.replace(payload.find("cosign container image signature"), 6, "atomic");
  Store({SignRaw(team_, payload)});
  TrustVerdict v = Eval("reg:5000/team/m:v1");
  EXPECT_EQ(v.reason, TrustReason::kBadPayload);
  EXPECT_THAT(v.signatures[0].detail, HasSubstr("critical.type"));
}

TEST_F(EvaluateTest, UnusableLayerIsBadPayloadAndDoesNotHideAGoodOne) {
  FetchedSignature broken;
  broken.status = absl::InvalidArgumentError("layers[0]: payload hashes to sha256:...");
  Store({broken});
  EXPECT_EQ(Eval("reg:5000/team/m:v1").reason, TrustReason::kBadPayload);
  Store({broken, Sign(team_, "reg:5000/team/m:v1")});
  EXPECT_TRUE(Eval("reg:5000/team/m:v1").accepted);
}

TEST_F(EvaluateTest, GarbledBase64SignatureIsNoKeyMatched) {
  FetchedSignature s = Sign(team_, "reg:5000/team/m:v1");
  s.signature_b64 = "!!!";
  Store({s});
  EXPECT_EQ(Eval("reg:5000/team/m:v1").reason, TrustReason::kNoKeyMatched);
}

TEST_F(EvaluateTest, FetchFailureRefusesAsFetchFailed) {
  store_.result = absl::UnavailableError("HTTP 500 from 127.0.0.1:1");
  TrustVerdict v = Eval("reg:5000/team/m:v1");
  EXPECT_FALSE(v.accepted);
  EXPECT_EQ(v.reason, TrustReason::kFetchFailed);
  EXPECT_THAT(v.message, HasSubstr("HTTP 500"));
}

TEST_F(EvaluateTest, MalformedSignatureManifestRefusesAsBadPayload) {
  store_.result = absl::InvalidArgumentError("signature manifest is an index");
  EXPECT_EQ(Eval("reg:5000/team/m:v1").reason, TrustReason::kBadPayload);
}

TEST_F(EvaluateTest, RejectRefusesWithoutFetching) {
  PolicyRequirement reject;
  reject.type = PolicyRequirement::Type::kReject;
  TrustVerdict v = EvaluateRequirements({reject}, "default", *ImageReference::Parse("r:1/a:b"),
                                        kManifest, store_);
  EXPECT_EQ(v.reason, TrustReason::kRejectedByPolicy);
  EXPECT_EQ(store_.fetches, 0);
}

TEST_F(EvaluateTest, InsecureAcceptAnythingAcceptsWithoutFetching) {
  PolicyRequirement any;
  any.type = PolicyRequirement::Type::kInsecureAcceptAnything;
  TrustVerdict v =
      EvaluateRequirements({any}, "default", *ImageReference::Parse("r:1/a:b"), kManifest, store_);
  EXPECT_TRUE(v.accepted);
  EXPECT_EQ(store_.fetches, 0);
}

TEST_F(EvaluateTest, EveryRequirementMustAcceptAndSignaturesAreFetchedOnce) {
  std::vector<PolicyRequirement> both = Requires();
  PolicyRequirement other_key = both[0];
  other_key.keys = {other_.public_key()};
  both.push_back(other_key);
  Store({Sign(team_, "reg:5000/team/m:v1")});
  TrustVerdict v = EvaluateRequirements(both, "s", *ImageReference::Parse("reg:5000/team/m:v1"),
                                        kManifest, store_);
  EXPECT_FALSE(v.accepted);
  EXPECT_EQ(v.reason, TrustReason::kNoKeyMatched);
  EXPECT_EQ(store_.fetches, 1);
  Store({Sign(team_, "reg:5000/team/m:v1"), Sign(other_, "reg:5000/team/m:v1")});
  EXPECT_TRUE(EvaluateRequirements(both, "s", *ImageReference::Parse("reg:5000/team/m:v1"),
                                   kManifest, store_)
                  .accepted);
}

TEST_F(EvaluateTest, VerdictStatusNamesReferenceDigestPolicyScopeAndReason) {
  Store({Sign(other_, "reg:5000/team/m:v1")});
  ImageReference ref = *ImageReference::Parse("reg:5000/team/m:v1");
  TrustVerdict v = Eval("reg:5000/team/m:v1");
  EXPECT_THAT(VerdictStatus(v, ref, kManifest, "/etc/containers/policy.json"),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("reg:5000/team/m:v1 (" + kManifest.str() +
                                 ") refused by policy /etc/containers/policy.json, scope "
                                 "docker:reg:5000 (sigstoreSigned): no_key_matched")));
}

// signedIdentity, c/image semantics. `image` is what is verified, `signed` the payload's identity.
struct IdentityCase {
  IdentityMatch match;
  std::string image;
  std::string signed_ref;
  bool matches;
};

const std::string kD = Digest::Of("the manifest").str();

class IdentityTest : public ::testing::TestWithParam<IdentityCase> {};

TEST_P(IdentityTest, MatchesAsContainersImageDoes) {
  const IdentityCase& c = GetParam();
  EXPECT_EQ(IdentityMatches(c.match, *ImageReference::Parse(c.image), c.signed_ref), c.matches)
      << IdentityMatchName(c.match) << " image " << c.image << " signed " << c.signed_ref;
}

INSTANTIATE_TEST_SUITE_P(
    SignedIdentity, IdentityTest,
    ::testing::Values(
        // matchRepoDigestOrExact: a tag needs the same tag; a digest any identity of the repo;
        // a repository-only identity (cosign's) never.
        IdentityCase{IdentityMatch::kMatchRepoDigestOrExact, "reg:5000/a/m:v1", "reg:5000/a/m:v1",
                     true},
        IdentityCase{IdentityMatch::kMatchRepoDigestOrExact, "reg:5000/a/m:v1", "reg:5000/a/m:v2",
                     false},
        IdentityCase{IdentityMatch::kMatchRepoDigestOrExact, "reg:5000/a/m:v1", "reg:5000/a/m",
                     false},
        IdentityCase{IdentityMatch::kMatchRepoDigestOrExact, "reg:5000/a/m@" + kD,
                     "reg:5000/a/m:v9", true},
        IdentityCase{IdentityMatch::kMatchRepoDigestOrExact, "reg:5000/a/m@" + kD, "reg:5000/a/m",
                     false},
        IdentityCase{IdentityMatch::kMatchRepoDigestOrExact, "reg:5000/a/m@" + kD,
                     "reg:5000/a/x:v1", false},
        IdentityCase{IdentityMatch::kMatchRepoDigestOrExact, "reg:5000/a/m:v1",
                     "reg:5000/a/m:v1@" + kD, false},
        // matchRepository: the repository, whatever the tag, repository-only included.
        IdentityCase{IdentityMatch::kMatchRepository, "reg:5000/a/m:v1", "reg:5000/a/m", true},
        IdentityCase{IdentityMatch::kMatchRepository, "reg:5000/a/m:v1", "reg:5000/a/m:v2", true},
        IdentityCase{IdentityMatch::kMatchRepository, "reg:5000/a/m:v1", "reg:5000/a/other:v1",
                     false},
        IdentityCase{IdentityMatch::kMatchRepository, "reg:5000/a/m:v1", "reg:5001/a/m:v1", false},
        // matchExact: identical, neither repository-only.
        IdentityCase{IdentityMatch::kMatchExact, "reg:5000/a/m:v1", "reg:5000/a/m:v1", true},
        IdentityCase{IdentityMatch::kMatchExact, "reg:5000/a/m:v1", "reg:5000/a/m", false},
        IdentityCase{IdentityMatch::kMatchExact, "reg:5000/a/m@" + kD, "reg:5000/a/m@" + kD, true},
        IdentityCase{IdentityMatch::kMatchExact, "reg:5000/a/m@" + kD, "reg:5000/a/m:v1", false},
        // docker.io names are normalised on both sides; garbage never matches.
        IdentityCase{IdentityMatch::kMatchExact, "docker.io/library/busybox:latest",
                     "busybox:latest", true},
        IdentityCase{IdentityMatch::kMatchRepository, "reg:5000/a/m:v1", "not a reference", false},
        IdentityCase{IdentityMatch::kMatchRepository, "reg:5000/a/m:v1", "", false}));

}  // namespace
}  // namespace modelfs
