// .modelinfo.json: built from real safetensors and GGUF bytes read through a BlobReader.
#include "core/model/modelinfo.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/formats/gguf.h"
#include "core/formats/safetensors.h"
#include "core/model/blob_range_reader.h"
#include "testsupport/fakes/fake_blob_reader.h"
#include "testsupport/synth/synthetic_models.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::FakeBlobReader;
using ::modelfs::testing::StatusIs;
using nlohmann::json;
using ::testing::HasSubstr;

constexpr char kConfig[] = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16",
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "hidden_size": 128, "max_position_embeddings": 4096, "vocab_size": 1000
})";

std::string SafetensorsBytes() {
  SafetensorsWriter w;
  EXPECT_OK(w.AddTensor("model.embed.weight", "BF16", {4, 8}, std::string(64, '\x01')));
  EXPECT_OK(w.AddTensor("model.norm.weight", "F32", {8}, std::string(32, '\x02')));
  w.SetMetadata("format", "pt");
  return w.Serialize();
}

// A safetensors checkpoint: config.json and the weights packed into one layer, like a tar.
class SafetensorsModelInfoTest : public ::testing::Test {
 protected:
  SafetensorsModelInfoTest() {
    st_ = SafetensorsBytes();
    std::string layer = std::string(kConfig) + st_;
    layer_ = reader_.Add(layer);
    files_ = {
        TreeFile{"model.safetensors", layer_, sizeof(kConfig) - 1, st_.size(),
                 "sha256:" + std::string(64, 'a')},
        TreeFile{"config.json", layer_, 0, sizeof(kConfig) - 1, ""},
    };
    context_.reference = "registry.local/models/tiny@sha256:" + std::string(64, 'b');
    context_.verification = "chunk-index";
    context_.digests = {{"manifest", "sha256:" + std::string(64, 'b')}};
    context_.provenance = {{"org.opencontainers.image.source", "https://example.test/tiny"}};
  }

  json Build() {
    std::string text = MakeModelInfoFile(reader_, files_, context_);
    return json::parse(text);
  }

  FakeBlobReader reader_;
  std::string st_;
  Digest layer_;
  std::vector<TreeFile> files_;
  ModelInfoContext context_;
};

TEST_F(SafetensorsModelInfoTest, ChunkDigestNamesTheIndexesAlgorithms) {
  context_.chunk_digests = {"blake3"};
  EXPECT_EQ(Build()["chunkDigest"], "blake3");
  context_.chunk_digests = {"blake3", "sha256"};
  EXPECT_EQ(Build()["chunkDigest"], "blake3,sha256");
}

TEST_F(SafetensorsModelInfoTest, DocumentCarriesSchemaVersionAndContext) {
  json j = Build();
  EXPECT_EQ(j["schemaVersion"], 1);
  EXPECT_EQ(j["reference"], context_.reference);
  EXPECT_EQ(j["verification"], "chunk-index");
  EXPECT_EQ(j["chunkDigest"], nullptr);  // the context names none
  EXPECT_EQ(j["digests"]["manifest"], "sha256:" + std::string(64, 'b'));
  EXPECT_EQ(j["provenance"]["annotations"]["org.opencontainers.image.source"],
            "https://example.test/tiny");
  EXPECT_EQ(j["provenance"]["config"]["model_type"], "llama");
  EXPECT_EQ(j["provenance"]["config"]["torch_dtype"], "bfloat16");
}

TEST_F(SafetensorsModelInfoTest, AWeightFileInATarLayerShowsItsTensorIndexByItsOffset) {
  context_.tar_tensor_indexes[{layer_.str(), sizeof(kConfig) - 1}] = {
      "sha256:" + std::string(64, 'c'), 2};
  context_.tar_tensor_indexes[{layer_.str(), 12345}] = {"sha256:" + std::string(64, 'd'), 9};
  json j = Build();
  ASSERT_EQ(j["files"].size(), 2u);
  int weight_files = 0;
  for (const json& f : j["files"]) {
    if (f["path"] == "model.safetensors") {
      ++weight_files;
      EXPECT_EQ(f["tensorIndex"]["digest"], "sha256:" + std::string(64, 'c'));
      EXPECT_EQ(f["tensorIndex"]["tensors"], 2);
    } else {
      EXPECT_FALSE(f.contains("tensorIndex")) << f.dump();
    }
  }
  EXPECT_EQ(weight_files, 1);
}

TEST_F(SafetensorsModelInfoTest, FilesAreListedInPathOrderWithSizeDigestAndFormat) {
  json j = Build();
  ASSERT_EQ(j["files"].size(), 2u);
  EXPECT_EQ(j["files"][0]["path"], "config.json");
  EXPECT_EQ(j["files"][0]["format"], "config");
  EXPECT_EQ(j["files"][0]["digest"], nullptr);
  EXPECT_EQ(j["files"][1]["path"], "model.safetensors");
  EXPECT_EQ(j["files"][1]["format"], "safetensors");
  EXPECT_EQ(j["files"][1]["size"], st_.size());
  EXPECT_EQ(j["files"][1]["digest"], "sha256:" + std::string(64, 'a'));
  EXPECT_EQ(j["files"][1]["layer"], layer_.str());
}

TEST_F(SafetensorsModelInfoTest, PerFileTensorsParametersAndDtypeBreakdown) {
  json f = Build()["files"][1];
  EXPECT_EQ(f["tensors"], 2);
  EXPECT_EQ(f["parameters"], 40);
  EXPECT_EQ(f["tensorBytes"], 96);
  EXPECT_EQ(f["dtypes"]["BF16"], (json{{"tensors", 1}, {"parameters", 32}, {"bytes", 64}}));
  EXPECT_EQ(f["dtypes"]["F32"], (json{{"tensors", 1}, {"parameters", 8}, {"bytes", 32}}));
  EXPECT_EQ(f["quantization"], nullptr);
  EXPECT_EQ(f["precision"], "BF16");
}

TEST_F(SafetensorsModelInfoTest, TotalsSumTheModel) {
  json t = Build()["totals"];
  EXPECT_EQ(t["files"], 2);
  EXPECT_EQ(t["modelFiles"], 1);
  EXPECT_EQ(t["bytes"], st_.size() + sizeof(kConfig) - 1);
  EXPECT_EQ(t["tensors"], 2);
  EXPECT_EQ(t["parameters"], 40);
  EXPECT_EQ(t["tensorBytes"], 96);
}

TEST_F(SafetensorsModelInfoTest, ShapeAndKvBytesPerTokenComeFromConfigJson) {
  json j = Build();
  EXPECT_EQ(j["shapeSource"], "config.json");
  EXPECT_EQ(j["architecture"], "llama");
  EXPECT_EQ(j["shape"]["layers"], 2);
  // 2 layers x 2 KV heads x (32 + 32) dims: f16 2 bytes, fp8 1 byte, q8_0 34 bytes per 32.
  EXPECT_EQ(j["kvCacheBytesPerToken"]["f16"], 512);
  EXPECT_EQ(j["kvCacheBytesPerToken"]["fp8"], 256);
  EXPECT_EQ(j["kvCacheBytesPerToken"]["q8_0"], 272);
}

// A container image keeps its model under a directory (a KServe modelcar's /models): the
// config.json beside the weights gives the shape; one elsewhere in the image does not.
TEST_F(SafetensorsModelInfoTest, TheConfigJsonBesideTheWeightsGivesTheShapeInASubdirectory) {
  for (TreeFile& f : files_) f.path = "models/" + f.path;
  files_.push_back(
      TreeFile{"etc/config.json", reader_.Add("{\"model_type\": \"bert\"}"), 0, 22, ""});
  json j = Build();
  EXPECT_EQ(j["architecture"], "llama");
  EXPECT_EQ(j["shape"]["layers"], 2);
}

TEST_F(SafetensorsModelInfoTest, HeaderBytesAreReadThroughTheBlobReader) {
  int before = reader_.reads();
  Build();
  EXPECT_GE(reader_.reads(), before + 2);  // the safetensors header and config.json
}

TEST_F(SafetensorsModelInfoTest, AnUnverifiableHeaderIsReportedNotFatal) {
  reader_.Fail(layer_, absl::DataLossError("chunk 0 failed verification"));
  json j = Build();
  EXPECT_EQ(j["files"][1]["format"], "safetensors");
  EXPECT_THAT(j["files"][1]["error"].get<std::string>(), HasSubstr("failed verification"));
  EXPECT_EQ(j["files"][1].contains("tensors"), false);
  EXPECT_EQ(j["shape"], nullptr);
  EXPECT_EQ(j["kvCacheBytesPerToken"], nullptr);
  ASSERT_GE(j["warnings"].size(), 1u);
}

TEST_F(SafetensorsModelInfoTest, TheFileIsDeterministicJsonEndingInNewline) {
  std::string a = MakeModelInfoFile(reader_, files_, context_);
  std::string b = MakeModelInfoFile(reader_, files_, context_);
  EXPECT_EQ(a, b);
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a.back(), '\n');
  EXPECT_TRUE(json::accept(a));
}

TEST(GgufModelInfoTest, QuantizedGgufReportsTypesQuantizationAndShape) {
  ASSERT_OK_AND_ASSIGN(GgufWriter writer, MakeTinyLlamaWriter());
  ASSERT_OK_AND_ASSIGN(std::string bytes, writer.Serialize());
  FakeBlobReader reader;
  Digest layer = reader.Add(bytes);
  std::vector<TreeFile> files = {TreeFile{"tiny.gguf", layer, 0, bytes.size(), layer.str()}};

  // The expected numbers come from the GGUF parser directly.
  auto mem = MakeMemoryRangeReader("tiny.gguf", bytes);
  ASSERT_OK_AND_ASSIGN(GgufFile g, ParseGguf(*mem));

  json j = json::parse(MakeModelInfoFile(reader, files, ModelInfoContext{}));
  json f = j["files"][0];
  EXPECT_EQ(f["format"], "gguf");
  EXPECT_EQ(f["ggufVersion"], 3);
  EXPECT_EQ(f["tensors"], g.tensors.size());
  EXPECT_EQ(f["parameters"], g.TotalElements());
  EXPECT_EQ(f["tensorBytes"], g.TotalTensorBytes());
  EXPECT_EQ(f["architecture"], "llama");
  EXPECT_TRUE(f["dtypes"].contains("Q8_0"));
  EXPECT_TRUE(f["dtypes"].contains("Q4_0"));
  EXPECT_TRUE(f["dtypes"].contains("F32"));
  EXPECT_TRUE(f["quantization"].is_string());
  EXPECT_EQ(j["shapeSource"], "gguf");
  EXPECT_EQ(j["shape"]["layers"], 4);
  // 4 layers x 4 KV heads x (32 + 32) dims.
  EXPECT_EQ(j["kvCacheBytesPerToken"]["f16"], 2048);
  EXPECT_EQ(j["kvCacheBytesPerToken"]["fp8"], 1024);
  EXPECT_EQ(j["kvCacheBytesPerToken"]["q8_0"], 1088);
  EXPECT_EQ(j["provenance"]["gguf"]["general.architecture"], "llama");
  EXPECT_EQ(j["verification"], "whole-layer");
}

TEST(BlobRangeReaderTest, ReadsAreRelativeToTheFilesExtent) {
  FakeBlobReader reader;
  Digest layer = reader.Add("0123456789abcdef");
  BlobRangeReader r(&reader, layer, 4, 8, "f.bin");
  ASSERT_OK_AND_ASSIGN(uint64_t size, r.Size());
  EXPECT_EQ(size, 8u);
  ASSERT_OK_AND_ASSIGN(std::string got, r.ReadAt(2, 3));
  EXPECT_EQ(got, "678");
  EXPECT_EQ(r.stats().requests, 1u);
  EXPECT_EQ(r.stats().bytes, 3u);
}

TEST(BlobRangeReaderTest, ReadingPastTheFileIsOutOfRange) {
  FakeBlobReader reader;
  Digest layer = reader.Add("0123456789abcdef");
  BlobRangeReader r(&reader, layer, 4, 8, "f.bin");
  EXPECT_THAT(r.ReadAt(6, 3), StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("f.bin")));
}

TEST(BlobRangeReaderTest, ALayerShorterThanTheExtentIsDataLoss) {
  FakeBlobReader reader;
  Digest layer = reader.Add("0123");
  BlobRangeReader r(&reader, layer, 2, 8, "f.bin");
  EXPECT_THAT(r.ReadAt(0, 8), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("f.bin")));
}

TEST(BlobRangeReaderTest, BlobReaderErrorsKeepTheirCode) {
  FakeBlobReader reader;
  Digest layer = reader.Add("0123456789");
  reader.Fail(layer, absl::UnavailableError("registry down"));
  BlobRangeReader r(&reader, layer, 0, 10, "f.bin");
  EXPECT_THAT(r.ReadAt(0, 4), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("registry down")));
}

}  // namespace
}  // namespace modelfs
