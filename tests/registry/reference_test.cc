#include "core/registry/reference.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::testing::HasSubstr;

const char kHex[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

struct Case {
  std::string input;
  std::string registry;
  std::string repository;
  std::string tag;
  bool has_digest;
  std::string canonical;
};

class ParsesValidReference : public ::testing::TestWithParam<Case> {};

TEST_P(ParsesValidReference, IntoItsParts) {
  const Case& c = GetParam();
  ASSERT_OK_AND_ASSIGN(ImageReference ref, ImageReference::Parse(c.input));
  EXPECT_EQ(ref.registry(), c.registry);
  EXPECT_EQ(ref.repository(), c.repository);
  EXPECT_EQ(ref.tag(), c.tag);
  EXPECT_EQ(ref.digest().has_value(), c.has_digest);
  EXPECT_EQ(ref.String(), c.canonical);
}

const std::string kDigest = std::string("sha256:") + kHex;

INSTANTIATE_TEST_SUITE_P(
    Table, ParsesValidReference,
    ::testing::Values(
        Case{"ubuntu", "docker.io", "library/ubuntu", "latest", false,
             "docker.io/library/ubuntu:latest"},
        Case{"ubuntu:22.04", "docker.io", "library/ubuntu", "22.04", false,
             "docker.io/library/ubuntu:22.04"},
        Case{"myorg/model", "docker.io", "myorg/model", "latest", false,
             "docker.io/myorg/model:latest"},
        Case{"docker.io/ubuntu", "docker.io", "library/ubuntu", "latest", false,
             "docker.io/library/ubuntu:latest"},
        Case{"index.docker.io/library/ubuntu:1", "docker.io", "library/ubuntu", "1", false,
             "docker.io/library/ubuntu:1"},
        Case{"reg:5000/ns/repo:tag", "reg:5000", "ns/repo", "tag", false, "reg:5000/ns/repo:tag"},
        Case{"localhost/repo", "localhost", "repo", "latest", false, "localhost/repo:latest"},
        Case{"localhost:5000/a/b/c", "localhost:5000", "a/b/c", "latest", false,
             "localhost:5000/a/b/c:latest"},
        Case{"127.0.0.1:5000/models/llama@" + kDigest, "127.0.0.1:5000", "models/llama", "", true,
             "127.0.0.1:5000/models/llama@" + kDigest},
        Case{"reg.example.com/ns/repo:v1@" + kDigest, "reg.example.com", "ns/repo", "v1", true,
             "reg.example.com/ns/repo:v1@" + kDigest},
        Case{"reg:5000/a_b/c.d/e__f/g--h:T_1.x-y", "reg:5000", "a_b/c.d/e__f/g--h", "T_1.x-y",
             false, "reg:5000/a_b/c.d/e__f/g--h:T_1.x-y"},
        Case{"[::1]:5000/repo:t", "[::1]:5000", "repo", "t", false, "[::1]:5000/repo:t"}));

TEST(ImageReference, DigestWinsOverTagForFetching) {
  ASSERT_OK_AND_ASSIGN(ImageReference ref, ImageReference::Parse("reg:5000/ns/repo:v1@" + kDigest));
  EXPECT_EQ(ref.ManifestReference(), kDigest);
}

TEST(ImageReference, TagIsFetchedWithoutDigest) {
  ASSERT_OK_AND_ASSIGN(ImageReference ref, ImageReference::Parse("reg:5000/ns/repo:v1"));
  EXPECT_EQ(ref.ManifestReference(), "v1");
}

TEST(ImageReference, DockerHubApiHostIsRegistry1) {
  ASSERT_OK_AND_ASSIGN(ImageReference ref, ImageReference::Parse("ubuntu"));
  EXPECT_EQ(ref.api_host(), "registry-1.docker.io");
  ASSERT_OK_AND_ASSIGN(ImageReference other, ImageReference::Parse("reg:5000/x"));
  EXPECT_EQ(other.api_host(), "reg:5000");
}

TEST(ImageReference, RoundTripsThroughString) {
  ASSERT_OK_AND_ASSIGN(ImageReference ref, ImageReference::Parse("reg:5000/ns/repo:v1@" + kDigest));
  ASSERT_OK_AND_ASSIGN(ImageReference again, ImageReference::Parse(ref.String()));
  EXPECT_EQ(again, ref);
}

class RejectsReference : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(RejectsReference, WithInvalidArgumentNamingIt) {
  const auto& [input, why] = GetParam();
  EXPECT_THAT(ImageReference::Parse(input),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("\"" + input + "\""), HasSubstr(why))));
}

INSTANTIATE_TEST_SUITE_P(
    Table, RejectsReference,
    ::testing::Values(
        std::make_pair(std::string(""), std::string("empty")),
        std::make_pair(std::string("reg:5000/Ns/Repo"), std::string("lowercase")),
        std::make_pair(std::string("UPPER"), std::string("lowercase")),
        std::make_pair(std::string("reg:5000/ns/repo:"), std::string("invalid tag")),
        std::make_pair(std::string("reg:5000/ns/repo:-bad"), std::string("invalid tag")),
        std::make_pair(std::string("reg:5000/ns//repo"), std::string("invalid component")),
        std::make_pair(std::string("reg:5000/ns/repo-"), std::string("invalid component")),
        std::make_pair(std::string("reg:5000/ns/repo@sha256:abc"), std::string("sha256")),
        std::make_pair(std::string("reg:/repo"), std::string("invalid registry")),
        std::make_pair(std::string("reg:5000/"), std::string("missing repository"))));

TEST(ImageReference, RejectsTagLongerThan128Characters) {
  std::string ref = "reg:5000/repo:" + std::string(129, 'a');
  EXPECT_THAT(ImageReference::Parse(ref),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("invalid tag")));
}

}  // namespace
}  // namespace modelfs
