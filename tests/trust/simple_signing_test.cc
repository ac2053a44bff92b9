// The simple-signing payload: what modelfs writes, and what it accepts (c/image's strict rules).
#include "core/trust/simple_signing.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::testing::HasSubstr;

const Digest kDigest = Digest::Of("manifest");

std::string Payload(const std::string& critical_extra = "",
                    const std::string& type = kSimpleSigningType,
                    const std::string& optional = "null") {
  return R"({"critical":{"identity":{"docker-reference":"reg:5000/team/m:v1"},"image":{"docker-manifest-digest":")" +
         kDigest.str() + R"("},"type":")" + type + "\"" + critical_extra + R"(},"optional":)" +
         optional + "}";
}

TEST(SimpleSigningPayload, BuiltPayloadHasCosignsLayout) {
  EXPECT_EQ(BuildSimpleSigningPayload("reg:5000/team/m:v1", kDigest), Payload());
}

TEST(SimpleSigningPayload, BuiltPayloadParsesBackToItsFields) {
  ASSERT_OK_AND_ASSIGN(SimpleSigningPayload p,
                       ParseSimpleSigningPayload(BuildSimpleSigningPayload(
                           "reg:5000/team/m:v1", kDigest, std::string("modelfs 0.1"))));
  EXPECT_EQ(p.docker_reference, "reg:5000/team/m:v1");
  EXPECT_EQ(p.manifest_digest, kDigest);
  EXPECT_EQ(p.creator, "modelfs 0.1");
}

TEST(SimpleSigningPayload, OptionalObjectMayCarryKeysOfItsOwn) {
  ASSERT_OK_AND_ASSIGN(
      SimpleSigningPayload p,
      ParseSimpleSigningPayload(Payload(
          "", kSimpleSigningType, R"({"creator":"skopeo","timestamp":1700000000,"extra":[1,2]})")));
  EXPECT_EQ(p.creator, "skopeo");
  EXPECT_EQ(p.timestamp, 1700000000);
}

TEST(SimpleSigningPayload, WrongCriticalTypeIsRefusedNamingIt) {
  EXPECT_THAT(ParseSimpleSigningPayload(Payload("", "atomic container signature")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("critical.type is \"atomic container signature\"")));
}

TEST(SimpleSigningPayload, UnknownCriticalKeyIsRefused) {
  EXPECT_THAT(ParseSimpleSigningPayload(Payload(R"(,"extra":1)")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unexpected key \"extra\"")));
}

TEST(SimpleSigningPayload, DuplicateKeyIsRefusedNotLastOneWins) {
  EXPECT_THAT(ParseSimpleSigningPayload(Payload(R"(,"type":"cosign container image signature")")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("duplicate key \"type\"")));
}

TEST(SimpleSigningPayload, MissingOptionalIsRefused) {
  std::string p = Payload();
  p = p.substr(0, p.find(",\"optional\"")) + "}";
  EXPECT_THAT(ParseSimpleSigningPayload(p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("missing \"optional\"")));
}

TEST(SimpleSigningPayload, NonSha256DigestIsRefused) {
  std::string p = Payload();
  p.replace(p.find("sha256:"), 7, "sha512:");
  EXPECT_THAT(ParseSimpleSigningPayload(p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("docker-manifest-digest")));
}

TEST(SimpleSigningPayload, PayloadOverTheCapIsRefusedUnparsed) {
  std::string p = Payload("", kSimpleSigningType,
                          "{\"pad\":\"" + std::string(kMaxSimpleSigningPayloadSize, 'x') + "\"}");
  EXPECT_THAT(ParseSimpleSigningPayload(p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("over the cap of 65536")));
}

TEST(SimpleSigningPayload, DeepNestingIsRefused) {
  std::string p = Payload("", kSimpleSigningType,
                          "{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}");
  EXPECT_THAT(ParseSimpleSigningPayload(p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nested deeper")));
}

}  // namespace
}  // namespace modelfs
