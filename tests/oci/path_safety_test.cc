#include "core/oci/path_safety.h"

#include <string>

#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::IsOk;
using ::modelfs::testing::StatusIs;
using ::testing::HasSubstr;

TEST(CheckRelativePathTest, AcceptsNestedCanonicalPaths) {
  EXPECT_THAT(CheckRelativePath("model.safetensors"), IsOk());
  EXPECT_THAT(CheckRelativePath("onnx/model..data"), IsOk());
  EXPECT_THAT(CheckRelativePath(".modelfs/chunks/ab.idx"), IsOk());
}

TEST(CheckRelativePathTest, RefusesEmpty) {
  EXPECT_THAT(CheckRelativePath(""),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("empty")));
}

TEST(CheckRelativePathTest, RefusesAbsolutePathsNamingThem) {
  EXPECT_THAT(CheckRelativePath("/etc/passwd"),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("refused path '/etc/passwd': absolute")));
}

TEST(CheckRelativePathTest, RefusesDotDotAnywhere) {
  for (const char* p : {"..", "../x", "a/../../x", "a/.."}) {
    EXPECT_THAT(CheckRelativePath(p),
                StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("'..'")))
        << p;
  }
}

TEST(CheckRelativePathTest, RefusesNulNamingThePathAsItIs) {
  EXPECT_THAT(CheckRelativePath(std::string("a\0b", 3)),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr(std::string("'a\0b': contains NUL", 19))));
}

TEST(CheckRelativePathTest, RefusesEveryControlCharacter) {
  EXPECT_THAT(CheckRelativePath("a.bin\nverified sha256:00 1 b.bin"),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("refused path 'a.bin\nverified sha256:00 1 b.bin': contains a "
                                 "control character")));
  EXPECT_THAT(CheckRelativePath("\x1b[2Jclear"),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("refused path '\x1b[2Jclear': contains a control character")));
  for (int c = 1; c < 0x20; ++c) {
    EXPECT_THAT(CheckRelativePath(std::string("dir/a") + static_cast<char>(c)),
                StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("control character")))
        << c;
  }
  EXPECT_THAT(CheckRelativePath("del\x7f"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("control character")));
}

TEST(NormalizeRelativePathTest, RefusesControlCharactersInsteadOfRewritingThem) {
  EXPECT_THAT(NormalizeRelativePath("./weights/a\tb"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("control character")));
}

TEST(CheckRelativePathTest, AcceptsUtf8Names) {
  EXPECT_THAT(CheckRelativePath("模型/权重.gguf"), IsOk());
}

TEST(CheckRelativePathTest, RefusesBackslashes) {
  EXPECT_THAT(CheckRelativePath("..\\..\\windows"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("backslash")));
}

TEST(CheckRelativePathTest, RefusesNonCanonicalSpellings) {
  EXPECT_THAT(CheckRelativePath("a//b"),
              StatusIs(absl::StatusCode::kPermissionDenied, ::testing::_));
  EXPECT_THAT(CheckRelativePath("./a"),
              StatusIs(absl::StatusCode::kPermissionDenied, ::testing::_));
  EXPECT_THAT(CheckRelativePath("a/"), StatusIs(absl::StatusCode::kPermissionDenied, ::testing::_));
}

TEST(CheckRelativePathTest, RefusesOverlongComponents) {
  EXPECT_THAT(CheckRelativePath(std::string(256, 'a')),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("255")));
  EXPECT_THAT(CheckRelativePath(std::string(255, 'a')), IsOk());
}

TEST(NormalizeRelativePathTest, DropsDotsAndRepeatedSlashes) {
  ASSERT_OK_AND_ASSIGN(std::string p, NormalizeRelativePath("./a//./b/"));
  EXPECT_EQ(p, "a/b");
}

TEST(NormalizeRelativePathTest, NeverRewritesAbsoluteOrParentPaths) {
  EXPECT_THAT(NormalizeRelativePath("/a"),
              StatusIs(absl::StatusCode::kPermissionDenied, ::testing::_));
  EXPECT_THAT(NormalizeRelativePath("a/../b"),
              StatusIs(absl::StatusCode::kPermissionDenied, ::testing::_));
}

TEST(NormalizeRelativePathTest, RefusesTheRootItself) {
  EXPECT_THAT(NormalizeRelativePath("./"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("root")));
}

TEST(IsRootPathTest, RecognisesRootSpellingsOnly) {
  EXPECT_TRUE(IsRootPath("."));
  EXPECT_TRUE(IsRootPath("./"));
  EXPECT_TRUE(IsRootPath(""));
  EXPECT_FALSE(IsRootPath("/"));
  EXPECT_FALSE(IsRootPath("./a"));
}

}  // namespace
}  // namespace modelfs
