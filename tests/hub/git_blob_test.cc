// Git blob ids, checked against what `git hash-object` prints.
#include "core/hub/git_blob.h"

#include "gtest/gtest.h"

namespace modelfs {
namespace {

TEST(GitBlobTest, EmptyBlobHasGitsWellKnownId) {
  EXPECT_EQ(GitBlobSha1Hex(""), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
}

TEST(GitBlobTest, HelloNewlineMatchesGitHashObject) {
  EXPECT_EQ(GitBlobSha1Hex("hello\n"), "ce013625030ba8dba906f756967f9e9ca394464a");
}

TEST(GitBlobTest, StreamingInPiecesGivesTheSameId) {
  GitBlobHasher h(23);
  h.Update("{\"model_type\"");
  h.Update(":\"llama\"}\n");
  EXPECT_EQ(h.FinishHex(), "479e18224e7827e7909c8a78f287e3306c1de8bb");
}

}  // namespace
}  // namespace modelfs
