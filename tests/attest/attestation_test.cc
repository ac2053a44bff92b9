// The equivalence statement and its DSSE envelope: what the statement records, PAE signing that
// verifies with the key's public half, and the refusals (another key, a changed payload, the
// wrong payloadType).
#include "core/attest/attestation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/escaping.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/trust/test_keys.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::testing::HasSubstr;

EquivalenceReport OneTensorReport(bool pass) {
  EquivalenceReport r;
  r.name_map = "llama";
  r.arch_params = {4, 2, 0};
  TensorComparison t;
  t.source = {"model.layers.0.self_attn.q_proj.weight"};
  t.derived = "blk.0.attn_q.weight";
  t.source_type = "BF16";
  t.derived_type = "Q8_0";
  t.shape = {64, 64};
  t.elements = 4096;
  t.transform = "permute_rows";
  t.rel_l2 = pass ? 0.004 : 1.3;
  t.cosine = pass ? 0.99999 : 0.1;
  t.pass = pass;
  if (!pass) t.reason = "relative L2 error 1.3 > 0.02";
  r.tensors.push_back(t);
  r.tolerances["BF16->Q8_0"] = DefaultTolerance("BF16", "Q8_0");
  r.equivalent = pass;
  return r;
}

AttestedModel Model(const std::string& ref, const std::string& bytes) {
  return {ref, ref.substr(0, ref.rfind(':')), Digest::Of(bytes), ""};
}

TEST(Attestation, TheStatementNamesTheDerivedManifestAndRecordsTheComparison) {
  const AttestedModel src = Model("reg.example/team/llama:bf16", "m1");
  const AttestedModel dst = Model("reg.example/team/llama:q8", "m2");
  nlohmann::json s = EquivalenceStatement(src, dst, OneTensorReport(true), "1.2.3");
  EXPECT_EQ(s["_type"], "https://in-toto.io/Statement/v1");
  EXPECT_EQ(s["predicateType"], "https://modelfs.dev/attestations/equivalence/v1");
  EXPECT_EQ(s["subject"][0]["name"], "reg.example/team/llama");
  EXPECT_EQ(s["subject"][0]["digest"]["sha256"], std::string(dst.digest.hex()));
  const auto& p = s["predicate"];
  EXPECT_EQ(p["source"]["digest"], src.digest.str());
  EXPECT_EQ(p["derived"]["reference"], "reg.example/team/llama:q8");
  EXPECT_EQ(p["nameMap"]["map"], "llama");
  EXPECT_EQ(p["nameMap"]["nHeadKv"], 2);
  EXPECT_EQ(p["tolerances"]["BF16->Q8_0"]["maxRelL2"], 0.02);
  EXPECT_EQ(p["tensors"][0]["derived"], "blk.0.attn_q.weight");
  EXPECT_EQ(p["tensors"][0]["transform"], "permute_rows");
  EXPECT_EQ(p["summary"]["tensors"], 1);
  EXPECT_EQ(p["summary"]["failed"], 0);
  EXPECT_EQ(p["equivalent"], true);
  EXPECT_EQ(p["tool"]["version"], "1.2.3");
}

TEST(Attestation, ThePaeIsDssesEncoding) {
  EXPECT_EQ(DssePae("application/vnd.in-toto+json", "{}"),
            "DSSEv1 28 application/vnd.in-toto+json 2 {}");
}

TEST(Attestation, AnEnvelopeVerifiesWithTheKeyThatSignedIt) {
  auto pair = testing::GenerateKey();
  ASSERT_OK_AND_ASSIGN(PrivateKey key, PrivateKey::FromPem(pair.private_pem, "k.pem", ""));
  ASSERT_OK_AND_ASSIGN(std::string env, SignDsseEnvelope(kInTotoPayloadType, "{\"a\":1}", key));
  auto j = nlohmann::json::parse(env);
  EXPECT_EQ(j["payloadType"], "application/vnd.in-toto+json");
  EXPECT_EQ(j["payload"], absl::Base64Escape("{\"a\":1}"));
  EXPECT_EQ(j["signatures"][0]["keyid"], "");
  ASSERT_OK_AND_ASSIGN(std::string payload,
                       VerifyDsseEnvelope(env, kInTotoPayloadType, key.public_key()));
  EXPECT_EQ(payload, "{\"a\":1}");
}

TEST(Attestation, AnotherKeyATamperedPayloadAndAnotherPayloadTypeAreRefused) {
  auto pair = testing::GenerateKey();
  auto other = testing::GenerateKey();
  ASSERT_OK_AND_ASSIGN(PrivateKey key, PrivateKey::FromPem(pair.private_pem, "k.pem", ""));
  ASSERT_OK_AND_ASSIGN(PublicKey other_pub, PublicKey::FromPem(other.public_pem, "other.pub"));
  ASSERT_OK_AND_ASSIGN(std::string env,
                       SignDsseEnvelope(kInTotoPayloadType, "{\"equivalent\":false}", key));
  EXPECT_THAT(VerifyDsseEnvelope(env, kInTotoPayloadType, other_pub),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("other.pub")));
  auto j = nlohmann::json::parse(env);
  j["payload"] = absl::Base64Escape("{\"equivalent\":true}");
  EXPECT_THAT(VerifyDsseEnvelope(j.dump(), kInTotoPayloadType, key.public_key()),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(VerifyDsseEnvelope(env, "application/json", key.public_key()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("payloadType")));
}

TEST(Attestation, TheTagIsCosignsAttTag) {
  const Digest d = Digest::Of("x");
  EXPECT_EQ(AttestationTag(d), absl::StrCat("sha256-", std::string(d.hex()), ".att"));
}

}  // namespace
}  // namespace modelfs
