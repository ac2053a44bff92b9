// Which Hub files `fetch` takes by default, glob semantics, and the pickle and tokenizer names.
#include "core/hub/file_selection.h"

#include "gtest/gtest.h"

namespace modelfs {
namespace {

TEST(FileSelectionTest, DefaultsTakeConfigTokenizerWeightsAndDocs) {
  for (const char* p :
       {"config.json", "generation_config.json", "tokenizer.json", "tokenizer.model", "vocab.txt",
        "merges.txt", "spiece.model", "model.safetensors", "sub/model-00001-of-00002.safetensors",
        "model.Q4_K_M.gguf", "README.md", "notes.txt", "LICENSE", "chat_template.jinja",
        "USE_POLICY.md"}) {
    EXPECT_TRUE(MatchesDefaultFetchPatterns(p, false)) << p;
  }
}

TEST(FileSelectionTest, DefaultsNeverTakePickleCodeOrOtherFormats) {
  for (const char* p : {"pytorch_model.bin", "model.pt", "model.PTH", "weights.pkl", "model.ckpt",
                        "training_args.bin", "modeling_x.py", "model.onnx", "flax_model.msgpack",
                        ".gitattributes", "tf_model.h5"}) {
    EXPECT_FALSE(MatchesDefaultFetchPatterns(p, false)) << p;
  }
}

TEST(FileSelectionTest, AllowRemoteCodeAddsPythonFiles) {
  EXPECT_TRUE(MatchesDefaultFetchPatterns("modeling_x.py", true));
  EXPECT_FALSE(MatchesDefaultFetchPatterns("pytorch_model.bin", true));
}

TEST(FileSelectionTest, GlobStarCrossesDirectoriesLikeHuggingfaceHub) {
  EXPECT_TRUE(GlobMatch("*.json", "sub/dir/x.json"));
  EXPECT_TRUE(GlobMatch("onnx/", "onnx/model.onnx"));
  EXPECT_FALSE(GlobMatch("onnx/", "other/model.onnx"));
  EXPECT_TRUE(GlobMatch("model-0000?-of-00002.safetensors", "model-00001-of-00002.safetensors"));
  EXPECT_FALSE(GlobMatch("*.gguf", "model.safetensors"));
}

TEST(FileSelectionTest, PickleNamesAreCaseInsensitive) {
  EXPECT_TRUE(IsPickleFileName("a/B.BIN"));
  EXPECT_TRUE(IsPickleFileName("x.pickle"));
  EXPECT_FALSE(IsPickleFileName("model.safetensors"));
  EXPECT_FALSE(IsPickleFileName("binary.txt"));
}

TEST(FileSelectionTest, TokenizerFiles) {
  for (const char* p :
       {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
        "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model", "cl100k.tiktoken",
        "chat_template.jinja", "sub/tokenizer.model"}) {
    EXPECT_TRUE(IsTokenizerFile(p)) << p;
  }
  for (const char* p : {"config.json", "model.safetensors", "README.md", "sentencepiece.txt"}) {
    EXPECT_FALSE(IsTokenizerFile(p)) << p;
  }
}

}  // namespace
}  // namespace modelfs
