// LoadModel against a real BlobCache over an in-memory remote: what it registers, and that a
// failed load leaves no cache reference behind whatever step failed.
#include "core/model/model_loader.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/cache/blob_cache.h"
#include "core/cache/decoding_blob_source.h"
#include "core/oci/chunk_index.h"
#include "core/oci/media_types.h"
#include "core/oci/seek_index.h"
#include "core/oci/tar.h"
#include "core/oci/tar_headers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/model/cached_model_fixture.h"
#include "testsupport/testing/compress.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

using ModelLoaderTest = ::modelfs::testing::CachedModelTest;

TEST_F(ModelLoaderTest, ASuccessfulLoadKeepsOneReferencePerLayer) {
  Digest a = AddRawLayer("first file\n", "a.txt");
  Digest b = AddRawLayer("second file\n", "b.txt");
  ASSERT_OK_AND_ASSIGN(LoadedModel loaded, LoadModel(model_, *cache_, {}));
  EXPECT_EQ(loaded.layers, (std::vector<Digest>{a, b}));
  EXPECT_EQ(References(a), 1);
  EXPECT_EQ(References(b), 1);
}

TEST_F(ModelLoaderTest, ACorruptCompressedLayerAfterARegisteredOneLeavesNoReference) {
  Digest raw = AddRawLayer("registered before the failure\n", "a.txt");
  Digest gz = AddLayer("not really gzip", LayerEncoding::kTarGzip, "",
                       "application/vnd.cncf.model.weight.v1.tar+gzip");
  EXPECT_THAT(LoadModel(model_, *cache_, {}).status(),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(gz.str()), HasSubstr("not a gzip header"))));
  EXPECT_EQ(References(raw), 0);
  EXPECT_EQ(References(gz), 0);
}

TEST_F(ModelLoaderTest, AGzipTarLayerServesItsFilesFromTheDecompressedLayer) {
  TarWriter tar;
  ASSERT_OK(tar.AddFile("weights/model.bin", "the weights\n"));
  const std::string bytes = tar.Finish();
  AddLayer(::modelfs::testing::Gzip(bytes), LayerEncoding::kTarGzip, "",
           "application/vnd.cncf.model.weight.v1.tar+gzip");
  ASSERT_OK_AND_ASSIGN(LoadedModel loaded, LoadModel(model_, *cache_, {}));
  const Digest decoded = Digest::Of(bytes);
  EXPECT_EQ(loaded.layers, std::vector<Digest>{decoded});
  EXPECT_EQ(loaded.verification, "whole-layer");
  ASSERT_EQ(loaded.files.size(), 1u);
  EXPECT_EQ(loaded.files[0].path, "weights/model.bin");
  EXPECT_EQ(loaded.files[0].layer, decoded);
  ASSERT_OK_AND_ASSIGN(std::string got, cache_->Read(decoded, loaded.files[0].offset_in_layer,
                                                     loaded.files[0].size));
  EXPECT_EQ(got, "the weights\n");
  EXPECT_EQ(References(decoded), 1);
}

TEST_F(ModelLoaderTest, AZstdTarLayerWhoseDiffIdDiffersIsDataLossAndLeavesNoReference) {
  TarWriter tar;
  ASSERT_OK(tar.AddFile("model.bin", "the weights\n"));
  const std::string bytes = tar.Finish();
  Digest raw = AddRawLayer("a raw file\n", "a.txt");
  Digest zst = AddLayer(::modelfs::testing::ZstdFrames(bytes, 1 << 20), LayerEncoding::kTarZstd, "",
                        "application/vnd.cncf.model.weight.v1.tar+zstd");
  ModelPackConfig config;
  const Digest lie = Digest::Of("some other tar");
  config.modelfs.diff_ids = {raw, lie};
  model_.config = config;
  EXPECT_THAT(
      LoadModel(model_, *cache_, {}).status(),
      StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr(zst.str()), HasSubstr(lie.str()),
                                                  HasSubstr(Digest::Of(bytes).str()))));
  EXPECT_EQ(References(raw), 0);
  EXPECT_EQ(References(Digest::Of(bytes)), 0);
}

TEST_F(ModelLoaderTest, ADiffIdThatIsTheCompressedLayersOwnDigestIsAccepted) {
  TarWriter tar;
  ASSERT_OK(tar.AddFile("model.bin", "the weights\n"));
  const std::string bytes = tar.Finish();
  Digest gz = AddLayer(::modelfs::testing::Gzip(bytes), LayerEncoding::kTarGzip, "",
                       "application/vnd.cncf.model.weight.v1.tar+gzip");
  ModelPackConfig config;
  config.modelfs.diff_ids = {gz};
  model_.config = config;
  ASSERT_OK_AND_ASSIGN(LoadedModel loaded, LoadModel(model_, *cache_, {}));
  EXPECT_EQ(loaded.layers, std::vector<Digest>{Digest::Of(bytes)});
}

// V's records of a tar's headers, as convert writes them.
std::shared_ptr<const TarHeaders> RecordsOf(const std::string& tar) {
  TarHeaderRecorder r;
  r.Feed(tar);
  std::optional<TarHeaders> h = r.Finish(Digest::Of(tar), "layer");
  EXPECT_TRUE(h.has_value());
  return h ? std::make_shared<const TarHeaders>(*h) : nullptr;
}

// A gzip tar layer with V's seek index and the chunk index of its tar, loaded with a cache
// whose source decodes: the diffId is registered as a chunk-mode layer, served span by span.
class LazyCompressedLoaderTest : public ModelLoaderTest {
 protected:
  void SetUp() override {
    ModelLoaderTest::SetUp();
    std::string weights(8 << 20, '\0');
    uint32_t x = 7;
    for (size_t i = 0; i < weights.size(); ++i) {
      x = x * 1664525 + 1013904223;
      weights[i] = static_cast<char>(i % 2 ? 0x3c + (x >> 24) % 3 : x >> 24);
    }
    weights_ = weights;
    TarWriter tar;
    ASSERT_OK(tar.AddFile("weights/model.bin", weights_));
    tar_ = tar.Finish();
    const std::string gz = ::modelfs::testing::Gzip(tar_);
    gz_ =
        AddLayer(gz, LayerEncoding::kTarGzip, "", "application/vnd.cncf.model.weight.v1.tar+gzip");
    ASSERT_OK_AND_ASSIGN(SeekIndex seek,
                         BuildSeekIndex(LayerEncoding::kTarGzip, gz, nullptr, 1 << 20));
    ChunkIndex idx = BuildChunkIndex(tar_, 1 << 20, ChunkDigestAlgorithm::kBlake3);
    idx.content = ChunkIndex::Content::kUncompressed;
    model_.seek_indexes[gz_] = std::make_shared<const SeekIndex>(seek);
    model_.chunk_indexes[gz_] = idx;
    CacheOptions o;
    o.dir = tmp_.Join("lazy-cache").string();
    o.log = [](const log::Event&) {};
    ASSERT_OK_AND_ASSIGN(lazy_cache_, BlobCache::Open(o, &decoding_));
  }
  DecodingBlobSource decoding_{&remote_};
  std::unique_ptr<BlobCache> lazy_cache_;
  std::string weights_, tar_;
  Digest gz_;
};

TEST_F(LazyCompressedLoaderTest, ALayerWithASeekIndexIsServedLazilyAsItsDiffId) {
  LoadOptions o;
  o.decoding = &decoding_;
  ASSERT_OK_AND_ASSIGN(LoadedModel loaded, LoadModel(model_, *lazy_cache_, o));
  const Digest diff_id = Digest::Of(tar_);
  EXPECT_EQ(loaded.layers, std::vector<Digest>{diff_id});
  EXPECT_EQ(loaded.verification, "chunk-index");
  EXPECT_EQ(loaded.layer_serving.at(gz_.str()), "lazy-seek-index");
  ASSERT_EQ(loaded.files.size(), 1u);
  EXPECT_EQ(loaded.files[0].layer, diff_id);
  ASSERT_OK_AND_ASSIGN(
      std::string got,
      lazy_cache_->Read(diff_id, loaded.files[0].offset_in_layer + (2 << 20), 4096));
  EXPECT_TRUE(got == weights_.substr(2 << 20, 4096));
  EXPECT_TRUE(decoding_.Serves(diff_id));
  EXPECT_GT(decoding_.stats().compressed_bytes, 0u);
  // The spans of the tar headers (its start and end) and of the read: 3 of 8.
  EXPECT_LT(decoding_.stats().compressed_bytes, tar_.size() / 2);
}

TEST_F(LazyCompressedLoaderTest, WithVsTarHeaderRecordsTheLayerIsListedWithoutDecodingAnything) {
  model_.tar_headers[gz_] = RecordsOf(tar_);
  ASSERT_NE(model_.tar_headers[gz_], nullptr);
  LoadOptions o;
  o.decoding = &decoding_;
  ASSERT_OK_AND_ASSIGN(LoadedModel loaded, LoadModel(model_, *lazy_cache_, o));
  EXPECT_EQ(decoding_.stats().compressed_bytes, 0u);
  ASSERT_EQ(loaded.files.size(), 1u);
  EXPECT_EQ(loaded.files[0].path, "weights/model.bin");
  EXPECT_EQ(loaded.files[0].offset_in_layer, 512u);
  EXPECT_EQ(loaded.files[0].size, weights_.size());
  ASSERT_OK_AND_ASSIGN(std::string got, lazy_cache_->Read(Digest::Of(tar_), 512 + 4096, 4096));
  EXPECT_TRUE(got == weights_.substr(4096, 4096));
}

TEST_F(LazyCompressedLoaderTest, TarHeaderRecordsOfAnotherTarAreNotUsed) {
  TarWriter other;
  ASSERT_OK(other.AddFile("weights/other.bin", std::string(weights_.size(), 'x')));
  const std::string other_tar = other.Finish();
  ASSERT_EQ(other_tar.size(), tar_.size());
  model_.tar_headers[gz_] = RecordsOf(other_tar);
  ASSERT_NE(model_.tar_headers[gz_], nullptr);
  LoadOptions o;
  o.decoding = &decoding_;
  ASSERT_OK_AND_ASSIGN(LoadedModel loaded, LoadModel(model_, *lazy_cache_, o));
  ASSERT_EQ(loaded.files.size(), 1u);
  EXPECT_EQ(loaded.files[0].path, "weights/model.bin");  // read from the layer itself
  EXPECT_GT(decoding_.stats().compressed_bytes, 0u);
}

TEST_F(LazyCompressedLoaderTest, ASmallLayerWithOnePointIsServedFromItsStart) {
  // Points 64 MiB apart: the 8 MiB tar has only its first, as a busybox layer's gzip has.
  ASSERT_OK_AND_ASSIGN(SeekIndex one,
                       BuildSeekIndex(LayerEncoding::kTarGzip, ::modelfs::testing::Gzip(tar_),
                                      nullptr, 64ull << 20));
  ASSERT_EQ(one.points.size(), 1u);
  ASSERT_TRUE(one.served_by_range());
  model_.seek_indexes[gz_] = std::make_shared<const SeekIndex>(one);
  LoadOptions o;
  o.decoding = &decoding_;
  ASSERT_OK_AND_ASSIGN(LoadedModel loaded, LoadModel(model_, *lazy_cache_, o));
  EXPECT_EQ(loaded.layer_serving.at(gz_.str()), "lazy-seek-index");
  ASSERT_OK_AND_ASSIGN(
      std::string got,
      lazy_cache_->Read(Digest::Of(tar_), loaded.files[0].offset_in_layer + (6 << 20), 4096));
  EXPECT_TRUE(got == weights_.substr(6 << 20, 4096));
}

TEST_F(LazyCompressedLoaderTest, WithoutADecodingSourceTheLayerIsDecodedWhole) {
  ASSERT_OK_AND_ASSIGN(LoadedModel loaded, LoadModel(model_, *lazy_cache_, {}));
  EXPECT_EQ(loaded.layer_serving.at(gz_.str()), "decoded-whole");
  EXPECT_EQ(loaded.verification, "whole-layer");
}

TEST_F(LazyCompressedLoaderTest, ASeekIndexWhoseDiffIdIsNotTheConfigsIsDataLoss) {
  ModelPackConfig config;
  const Digest lie = Digest::Of("another tar");
  config.modelfs.diff_ids = {lie};
  model_.config = config;
  LoadOptions o;
  o.decoding = &decoding_;
  EXPECT_THAT(
      LoadModel(model_, *lazy_cache_, o).status(),
      StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr(gz_.str()), HasSubstr(lie.str()))));
  EXPECT_FALSE(lazy_cache_->GetLayerInfo(Digest::Of(tar_)).ok() &&
               lazy_cache_->GetLayerInfo(Digest::Of(tar_))->references > 0);
}

TEST_F(ModelLoaderTest, DiffIdsThatAreNotOnePerLayerAreInvalidArgument) {
  AddLayer(::modelfs::testing::Gzip("x"), LayerEncoding::kTarGzip, "",
           "application/vnd.cncf.model.weight.v1.tar+gzip");
  ModelPackConfig config;
  config.modelfs.diff_ids = {Digest::Of("a"), Digest::Of("b")};
  model_.config = config;
  EXPECT_THAT(
      LoadModel(model_, *cache_, {}).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lists 2 diffIds for 1 layers")));
}

TEST_F(ModelLoaderTest, ATarLayerRepeatingARawPathLeavesNoReferenceOnEitherLayer) {
  Digest raw = AddRawLayer("raw bytes\n", "weights.bin");
  TarWriter tar;
  ASSERT_OK(tar.AddFile("weights.bin", "tar bytes\n"));
  Digest tar_layer =
      AddLayer(tar.Finish(), LayerEncoding::kTar, "", "application/vnd.cncf.model.weight.v1.tar");
  EXPECT_THAT(LoadModel(model_, *cache_, {}).status(),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("path 'weights.bin' appears twice in the model")));
  EXPECT_EQ(References(raw), 0);
  EXPECT_EQ(References(tar_layer), 0);
}

TEST_F(ModelLoaderTest, AnAbsurdLayerSizeIsInvalidArgumentNamingTheLayerAndLeavesNoReference) {
  Digest raw = AddRawLayer("a sane layer\n", "a.txt");
  const uint64_t absurd = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  Digest huge = AddRawLayer("declares far more than it has\n", "huge.bin");
  model_.layers.back().descriptor.size = absurd;
  EXPECT_THAT(LoadModel(model_, *cache_, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(huge.str()), HasSubstr("9223372036854775807"))));
  EXPECT_EQ(References(raw), 0);
}

TEST_F(ModelLoaderTest, AFailedLoadCanBeRetriedAndThenHoldsItsReferences) {
  Digest raw = AddRawLayer("kept after the retry\n", "a.txt");
  AddLayer("not really zstd", LayerEncoding::kTarZstd, "",
           "application/vnd.cncf.model.weight.v1.tar+zstd");
  ASSERT_FALSE(LoadModel(model_, *cache_, {}).ok());
  model_.layers.pop_back();
  ASSERT_OK(LoadModel(model_, *cache_, {}).status());
  EXPECT_EQ(References(raw), 1);
}

// An ordinary image: a gzip base with a symlink and a file the next (uncompressed) layer
// whites out, and /models. LoadModel shows the merged tree, checked against the diff_ids.
TEST_F(ModelLoaderTest, AnImageShowsItsMergedTreeWithLinksAndWithoutWhitedOutFiles) {
  TarWriter base, models;
  ASSERT_OK(base.AddFile("bin/busybox", "BB"));
  ASSERT_OK(base.AddSymlink("bin/sh", "busybox"));
  ASSERT_OK(base.AddFile("etc/motd", "hi"));
  ASSERT_OK(base.AddDirectory("tmp"));
  ASSERT_OK(models.AddFile("models/config.json", "{}"));
  ASSERT_OK(models.AddFile("etc/.wh.motd", ""));
  const std::string base_tar = base.Finish(), models_tar = models.Finish();
  AddLayer(::modelfs::testing::Gzip(base_tar), LayerEncoding::kTarGzip, "",
           std::string(kOciLayerTarGzipMediaType));
  const Digest upper =
      AddLayer(models_tar, LayerEncoding::kTar, "", std::string(kOciLayerTarMediaType));
  model_.image = true;
  model_.image_diff_ids = {Digest::Of(base_tar), upper};
  ASSERT_OK_AND_ASSIGN(LoadedModel loaded, LoadModel(model_, *cache_, {}));
  std::vector<std::string> got;
  for (const TreeFile& f : loaded.files) {
    got.push_back(f.path + (f.kind == TreeFile::Kind::kSymlink     ? " -> " + f.symlink_target
                            : f.kind == TreeFile::Kind::kDirectory ? "/"
                                                                   : ""));
  }
  EXPECT_EQ(got, (std::vector<std::string>{"bin/", "bin/busybox", "bin/sh -> busybox", "etc/",
                                           "models/", "models/config.json", "tmp/"}));
  const TreeFile& busybox = loaded.files[1];
  EXPECT_EQ(busybox.layer, Digest::Of(base_tar));
  ASSERT_OK_AND_ASSIGN(std::string bytes,
                       cache_->Read(busybox.layer, busybox.offset_in_layer, busybox.size));
  EXPECT_EQ(bytes, "BB");
}

TEST_F(ModelLoaderTest, AnImageLayerWhoseDecompressedBytesMissTheConfigsDiffIdIsDataLoss) {
  TarWriter base;
  ASSERT_OK(base.AddFile("models/w.safetensors", "W"));
  const Digest gz = AddLayer(::modelfs::testing::Gzip(base.Finish()), LayerEncoding::kTarGzip, "",
                             std::string(kDockerLayerTarGzipMediaType));
  model_.image = true;
  model_.image_diff_ids = {Digest::Of("another tar")};
  EXPECT_THAT(LoadModel(model_, *cache_, {}).status(),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(gz.str()), HasSubstr(Digest::Of("another tar").str()))));
  EXPECT_EQ(References(gz), 0);
}

TEST_F(ModelLoaderTest, AnImageEntryWrittenThroughASymlinkIsRefusedNamingTheLayer) {
  TarWriter a, b;
  ASSERT_OK(a.AddSymlink("models", "/etc"));
  ASSERT_OK(b.AddFile("models/passwd", "x"));
  const std::string ta = a.Finish(), tb = b.Finish();
  const Digest da = AddLayer(ta, LayerEncoding::kTar, "", std::string(kOciLayerTarMediaType));
  const Digest db = AddLayer(tb, LayerEncoding::kTar, "", std::string(kOciLayerTarMediaType));
  model_.image = true;
  model_.image_diff_ids = {da, db};
  EXPECT_THAT(LoadModel(model_, *cache_, {}).status(),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("layer " + db.str() +
                                 ": entry 'models/passwd' would be written through the symlink")));
  EXPECT_EQ(References(da), 0);
}

// V's tar header records give the tree the layers' own headers give, refusals included (the
// records are the same header bytes; ApplyImageLayer judges them alike).
TEST_F(ModelLoaderTest, AnImageIndexedFromTarHeaderRecordsGetsTheSameTreeAndRefusals) {
  TarWriter a, b;
  ASSERT_OK(a.AddSymlink("models", "/etc"));
  ASSERT_OK(a.AddFile("bin/busybox", "BB"));
  ASSERT_OK(b.AddFile("models/passwd", "x"));
  const std::string ta = a.Finish(), tb = b.Finish();
  const Digest da = AddLayer(::modelfs::testing::Gzip(ta), LayerEncoding::kTarGzip, "",
                             std::string(kOciLayerTarGzipMediaType));
  const Digest db = AddLayer(tb, LayerEncoding::kTar, "", std::string(kOciLayerTarMediaType));
  model_.image = true;
  model_.image_diff_ids = {Digest::Of(ta), db};
  model_.tar_headers[da] = RecordsOf(ta);
  model_.tar_headers[db] = RecordsOf(tb);
  EXPECT_THAT(LoadModel(model_, *cache_, {}).status(),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("layer " + db.str() +
                                 ": entry 'models/passwd' would be written through the symlink")));
  // Without the second layer: the tree of the first, its file read from the decoded layer.
  model_.layers.pop_back();
  model_.image_diff_ids.pop_back();
  ASSERT_OK_AND_ASSIGN(LoadedModel loaded, LoadModel(model_, *cache_, {}));
  ASSERT_EQ(loaded.files.size(), 3u);
  EXPECT_EQ(loaded.files[0].path, "bin");
  EXPECT_EQ(loaded.files[1].path, "bin/busybox");
  EXPECT_EQ(loaded.files[2].path, "models");
  EXPECT_EQ(loaded.files[2].symlink_target, "/etc");
  ASSERT_OK_AND_ASSIGN(
      std::string bytes,
      cache_->Read(loaded.files[1].layer, loaded.files[1].offset_in_layer, loaded.files[1].size));
  EXPECT_EQ(bytes, "BB");
}

// V published with `--path-prefix models`: M's files under models/, and .modelinfo.json both at
// the root (as before) and inside models/ (what a pod mounting the subPath `models` sees), the
// same document, listing paths relative to models/, made once for both.
TEST_F(ModelLoaderTest, APathPrefixServesTheModelinfoAtTheRootAndInsideThePrefix) {
  AddRawLayer("{\"hidden_size\": 64}\n", "config.json");
  AddRawLayer("tokens\n", "tokenizer/vocab.txt");
  model_.path_prefix = "models";
  ASSERT_OK_AND_ASSIGN(LoadedModel loaded, LoadModel(model_, *cache_, {}));
  std::vector<std::string> paths;
  for (const TreeFile& f : loaded.files) paths.push_back(f.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"models/config.json", "models/tokenizer/vocab.txt"}));
  std::vector<std::string> synthetic;
  for (const auto& [path, file] : loaded.synthetic) {
    synthetic.push_back(path);
    EXPECT_TRUE(file.lazy()) << path;
  }
  EXPECT_EQ(synthetic, (std::vector<std::string>{".modelinfo.json", "models/.modelinfo.json"}));
  const std::string inside = loaded.synthetic["models/.modelinfo.json"].make()();
  const uint64_t served = cache_->stats().bytes_served;
  EXPECT_GT(served, 0u);  // config.json, read for the architecture shape
  EXPECT_EQ(loaded.synthetic[".modelinfo.json"].make()(), inside);
  EXPECT_EQ(cache_->stats().bytes_served, served);  // made once: nothing read again
  const nlohmann::json info = nlohmann::json::parse(inside);
  std::vector<std::string> listed;
  for (const auto& f : info["files"]) listed.push_back(f["path"]);
  EXPECT_EQ(listed, (std::vector<std::string>{"config.json", "tokenizer/vocab.txt"}));
}

TEST_F(ModelLoaderTest, WithoutAPathPrefixTheModelinfoIsOnlyAtTheRoot) {
  AddRawLayer("{}\n", "config.json");
  ASSERT_OK_AND_ASSIGN(LoadedModel loaded, LoadModel(model_, *cache_, {}));
  ASSERT_EQ(loaded.synthetic.size(), 1u);
  EXPECT_EQ(loaded.synthetic.begin()->first, ".modelinfo.json");
  ASSERT_EQ(loaded.files.size(), 1u);
  EXPECT_EQ(loaded.files[0].path, "config.json");
}

}  // namespace
}  // namespace modelfs
