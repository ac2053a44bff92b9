#include "core/formats/sharded_index.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/formats/safetensors.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::modelfs::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

struct Spec {
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;
};

void WriteShard(const TempDir& dir, const std::string& file, const std::vector<Spec>& tensors) {
  SafetensorsWriter w;
  for (const Spec& s : tensors) ASSERT_OK(w.AddSparseTensor(s.name, s.dtype, s.shape));
  ASSERT_OK(w.WriteFile(dir.Join(file).string()));
}

std::string Index(const std::string& total_size, const std::map<std::string, std::string>& map) {
  std::string json = "{\"metadata\":{\"total_size\":" + total_size + "},\"weight_map\":{";
  bool first = true;
  for (const auto& [t, f] : map) {
    if (!first) json += ",";
    first = false;
    json += "\"" + t + "\":\"" + f + "\"";
  }
  return json + "}}";
}

// Two shards: 4096x1024 BF16 + 1024 BF16 in the first (8,390,656 bytes, 4,195,328 params),
// 1024x1024 F32 + 8 I64 in the second (4,194,368 bytes, 1,048,584 params).
class ShardedIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteShard(dir_, "model-00001-of-00002.safetensors",
               {{"embed.weight", "BF16", {4096, 1024}}, {"norm.weight", "BF16", {1024}}});
    WriteShard(dir_, "model-00002-of-00002.safetensors",
               {{"lm_head.weight", "F32", {1024, 1024}}, {"positions", "I64", {8}}});
  }
  std::map<std::string, std::string> GoodMap() const {
    return {{"embed.weight", "model-00001-of-00002.safetensors"},
            {"norm.weight", "model-00001-of-00002.safetensors"},
            {"lm_head.weight", "model-00002-of-00002.safetensors"},
            {"positions", "model-00002-of-00002.safetensors"}};
  }
  std::string WriteIndex(const std::string& json) const {
    return dir_.WriteFile("model.safetensors.index.json", json).string();
  }
  TempDir dir_;
};

TEST_F(ShardedIndexTest, SumsParametersAndBytesAcrossShards) {
  const std::string index = WriteIndex(Index("12585024", GoodMap()));
  ASSERT_OK_AND_ASSIGN(ShardedCheckpoint c, InspectShardedIndex(index));
  EXPECT_EQ(c.index_location, index);
  EXPECT_EQ(c.tensors, 4u);
  EXPECT_EQ(c.parameters, 4096u * 1024 + 1024 + 1024 * 1024 + 8);
  EXPECT_EQ(c.tensor_bytes, 12585024u);
  EXPECT_EQ(c.declared_total_size, 12585024u);
  EXPECT_THAT(c.warnings, IsEmpty());
  ASSERT_EQ(c.by_dtype.size(), 3u);
  EXPECT_EQ(c.by_dtype.at("BF16").tensors, 2u);
  EXPECT_EQ(c.by_dtype.at("BF16").parameters, 4195328u);
  EXPECT_EQ(c.by_dtype.at("BF16").bytes, 8390656u);
  EXPECT_EQ(c.by_dtype.at("F32").bytes, 4194304u);
  EXPECT_EQ(c.by_dtype.at("I64").parameters, 8u);
  EXPECT_EQ(c.by_dtype.at("I64").bytes, 64u);
  ASSERT_EQ(c.shards.size(), 2u);
  EXPECT_EQ(c.shards[0].file, "model-00001-of-00002.safetensors");
  EXPECT_EQ(c.shards[0].location, dir_.Join("model-00001-of-00002.safetensors").string());
  EXPECT_EQ(c.shards[0].tensors, 2u);
  EXPECT_EQ(c.shards[0].tensor_bytes, 8390656u);
  EXPECT_EQ(c.shards[1].parameters, 1048584u);
  EXPECT_EQ(c.file_bytes, c.shards[0].file_size + c.shards[1].file_size);
  EXPECT_EQ(c.shards[0].file_size, 8 + c.shards[0].header_size + 8390656u);
}

TEST_F(ShardedIndexTest, WarnsButSucceedsWhenTotalSizeDiffers) {
  ASSERT_OK_AND_ASSIGN(ShardedCheckpoint c,
                       InspectShardedIndex(WriteIndex(Index("12585000", GoodMap()))));
  EXPECT_EQ(c.declared_total_size, 12585000u);
  EXPECT_EQ(c.tensor_bytes, 12585024u);
  EXPECT_THAT(c.warnings, ElementsAre("metadata.total_size is 12585000 but the tensors total "
                                      "12585024 bytes"));
}

TEST_F(ShardedIndexTest, AcceptsAnIntegralFloatTotalSize) {
  ASSERT_OK_AND_ASSIGN(ShardedCheckpoint c,
                       InspectShardedIndex(WriteIndex(Index("1.2585024e7", GoodMap()))));
  EXPECT_EQ(c.declared_total_size, 12585024u);
  EXPECT_THAT(c.warnings, IsEmpty());
}

TEST_F(ShardedIndexTest, RejectsATensorInTwoShards) {
  WriteShard(dir_, "model-00002-of-00002.safetensors",
             {{"lm_head.weight", "F32", {1024, 1024}},
              {"norm.weight", "BF16", {1024}},
              {"positions", "I64", {8}}});
  EXPECT_THAT(InspectShardedIndex(WriteIndex(Index("12587072", GoodMap()))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'norm.weight' appears in two shards: "
                                 "\"model-00001-of-00002.safetensors\" and "
                                 "\"model-00002-of-00002.safetensors\"")));
}

TEST_F(ShardedIndexTest, RejectsAWeightMapNamingTheWrongShard) {
  auto map = GoodMap();
  map["norm.weight"] = "model-00002-of-00002.safetensors";
  EXPECT_THAT(InspectShardedIndex(WriteIndex(Index("12585024", map))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'norm.weight' is in shard "
                                 "\"model-00001-of-00002.safetensors\" but the weight_map names "
                                 "\"model-00002-of-00002.safetensors\"")));
}

TEST_F(ShardedIndexTest, RejectsAShardTensorMissingFromTheWeightMap) {
  auto map = GoodMap();
  map.erase("positions");
  EXPECT_THAT(InspectShardedIndex(WriteIndex(Index("12585024", map))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'positions' in shard \"model-00002-of-00002.safetensors\" "
                                 "is missing from the weight_map")));
}

TEST_F(ShardedIndexTest, RejectsAWeightMapTensorNoShardHolds) {
  auto map = GoodMap();
  map["ghost"] = "model-00001-of-00002.safetensors";
  EXPECT_THAT(InspectShardedIndex(WriteIndex(Index("12585024", map))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("weight_map names tensor 'ghost' in shard "
                                 "\"model-00001-of-00002.safetensors\", which does not contain "
                                 "it")));
}

TEST_F(ShardedIndexTest, ReportsAMissingShardAsNotFound) {
  auto map = GoodMap();
  map["extra"] = "model-00003-of-00002.safetensors";
  EXPECT_THAT(InspectShardedIndex(WriteIndex(Index("1", map))),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("shard \"model-00003-of-00002.safetensors\"")));
}

TEST_F(ShardedIndexTest, PrefixesAShardParseErrorWithItsName) {
  dir_.WriteFile("model-00002-of-00002.safetensors", "junk");
  EXPECT_THAT(InspectShardedIndex(WriteIndex(Index("1", GoodMap()))),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("shard \"model-00002-of-00002.safetensors\": ")));
}

TEST_F(ShardedIndexTest, RefusesAShardNameWithDotDot) {
  auto map = GoodMap();
  map["positions"] = "../model-00002-of-00002.safetensors";
  EXPECT_THAT(InspectShardedIndex(WriteIndex(Index("1", map))),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("\"..\" component")));
}

TEST_F(ShardedIndexTest, RejectsADuplicateWeightMapKey) {
  EXPECT_THAT(
      InspectShardedIndex(WriteIndex(
          "{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\",\"a\":\"x.safetensors\"}}")),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("duplicate key \"a\"")));
}

TEST_F(ShardedIndexTest, OpensShardsThroughTheGivenOpener) {
  const std::string index_json = Index("12585024", GoodMap());
  std::vector<std::string> opened;
  ShardedIndexOptions options;
  options.open = [&](const std::string& location) -> absl::StatusOr<std::unique_ptr<RangeReader>> {
    opened.push_back(location);
    if (location == "https://hub.example/m/resolve/main/model.safetensors.index.json?x=1") {
      return MakeMemoryRangeReader(location, index_json);
    }
    const std::string prefix = "https://hub.example/m/resolve/main/";
    if (location.rfind(prefix, 0) != 0) return absl::NotFoundError(location);
    return OpenFileRangeReader(dir_.Join(location.substr(prefix.size())).string());
  };
  ASSERT_OK_AND_ASSIGN(
      ShardedCheckpoint c,
      InspectShardedIndex("https://hub.example/m/resolve/main/model.safetensors.index.json?x=1",
                          options));
  EXPECT_EQ(c.tensor_bytes, 12585024u);
  EXPECT_THAT(opened,
              ElementsAre("https://hub.example/m/resolve/main/model.safetensors.index.json?x=1",
                          "https://hub.example/m/resolve/main/model-00001-of-00002.safetensors",
                          "https://hub.example/m/resolve/main/model-00002-of-00002.safetensors"));
}

TEST(ShardLocationTest, ResolvesRelativeToTheIndexDirectory) {
  EXPECT_EQ(*ResolveShardLocation("/models/x/model.safetensors.index.json", "a.safetensors"),
            "/models/x/a.safetensors");
  EXPECT_EQ(*ResolveShardLocation("model.safetensors.index.json", "sub/a.safetensors"),
            "sub/a.safetensors");
  EXPECT_EQ(*ResolveShardLocation("http://h:5000/r/index.json", "a b+c.safetensors"),
            "http://h:5000/r/a%20b%2Bc.safetensors");
}

TEST(ShardLocationTest, RefusesEscapingNames) {
  for (const char* bad : {"/etc/passwd", "../x.safetensors", "a/../../x", "..", "a\\b",
                          "http://evil/x.safetensors", "C:x", ""}) {
    EXPECT_THAT(ResolveShardLocation("/m/index.json", bad),
                StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("refused")))
        << bad;
  }
}

TEST(ParseShardedIndexTest, RequiresAWeightMap) {
  EXPECT_THAT(ParseShardedIndex("{\"metadata\":{}}", "idx.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("idx.json: index has no \"weight_map\" object")));
}

TEST(ParseShardedIndexTest, WarnsAboutANonIntegerTotalSize) {
  ASSERT_OK_AND_ASSIGN(
      ShardedIndex idx,
      ParseShardedIndex("{\"metadata\":{\"total_size\":\"big\"},\"weight_map\":{}}", "idx.json"));
  EXPECT_EQ(idx.total_size, std::nullopt);
  EXPECT_THAT(idx.warnings, ElementsAre(HasSubstr("metadata.total_size is not a non-negative "
                                                  "integer (\"big\"); ignored")));
}

}  // namespace
}  // namespace modelfs
