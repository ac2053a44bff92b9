#include "core/text/base_name.h"

#include "gtest/gtest.h"

namespace modelfs {
namespace {

TEST(BaseNameTest, APathGivesItsLastComponent) {
  EXPECT_EQ(BaseName("models/llama/model-00001-of-00002.safetensors"),
            "model-00001-of-00002.safetensors");
  EXPECT_EQ(BaseName("/abs/config.json"), "config.json");
}

TEST(BaseNameTest, ANameWithoutASlashIsItsOwnBaseName) {
  EXPECT_EQ(BaseName("model.gguf"), "model.gguf");
}

TEST(BaseNameTest, APathEndingInASlashHasAnEmptyBaseName) {
  EXPECT_EQ(BaseName("models/llama/"), "");
  EXPECT_EQ(BaseName("/"), "");
}

TEST(BaseNameTest, AnEmptyPathHasAnEmptyBaseName) { EXPECT_EQ(BaseName(""), ""); }

TEST(LocationBaseNameTest, AUrlsQueryAndFragmentAreNotPartOfTheName) {
  EXPECT_EQ(LocationBaseName("https://example.com/m/model.gguf?download=1"), "model.gguf");
  EXPECT_EQ(LocationBaseName("https://example.com/m/model.gguf#part"), "model.gguf");
}

TEST(LocationBaseNameTest, APlainPathIsNamedAsBaseNameNamesIt) {
  EXPECT_EQ(LocationBaseName("dir/a.safetensors"), "a.safetensors");
  EXPECT_EQ(LocationBaseName("dir/"), "");
  EXPECT_EQ(LocationBaseName(""), "");
}

}  // namespace
}  // namespace modelfs
