// A model whose tar layers are indexed from header records nobody pinned (the lazy-image path):
// the tree comes from the records at once, and the filesystem serves no byte of it, nor a
// link's target, until every byte the records were read for matches the layer's verified
// bytes (core/model/tar_records_check.h). Forged records of each kind make every read fail
// with kDataLoss naming the layer and the entry; honest ones serve every file byte-equal.
#include "core/model/tar_records_check.h"

#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/cache/blob_cache.h"
#include "core/cache/decoding_blob_source.h"
#include "core/model/model_loader.h"
#include "core/oci/chunk_index.h"
#include "core/oci/media_types.h"
#include "core/oci/seek_index.h"
#include "core/oci/tar.h"
#include "core/oci/tar_headers.h"
#include "fuse/model_tree.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/model/cached_model_fixture.h"
#include "testsupport/testing/compress.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

struct Entry {
  std::string path;
  std::string content;
  std::string symlink;  // non-empty: a symbolic link to this
};

std::string TarOf(const std::vector<Entry>& entries, uint32_t mode = 0755) {
  TarWriter w;
  for (const Entry& e : entries) {
    absl::Status st =
        e.symlink.empty() ? w.AddFile(e.path, e.content, mode) : w.AddSymlink(e.path, e.symlink);
    EXPECT_OK(st);
  }
  return w.Finish();
}

std::string Pattern(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1664525 + 1013904223;
    s[i] = static_cast<char>(seed >> 24);
  }
  return s;
}

// The records of `tar`, named as if they were the records of `real` (what a forger writes
// into a volume image: the layer's digest and size, its own headers). `tar` may be shorter.
std::shared_ptr<const TarHeaders> RecordsAs(const std::string& tar, const std::string& real) {
  EXPECT_LE(tar.size(), real.size());
  TarHeaderRecorder r;
  r.Feed(tar);
  std::optional<TarHeaders> h = r.Finish(Digest::Of(tar), "forged");
  EXPECT_TRUE(h.has_value());
  if (!h) return nullptr;
  h->tar_digest = Digest::Of(real);
  h->tar_size = real.size();
  return std::make_shared<const TarHeaders>(*std::move(h));
}

// Sets the size field of the header block at `at` and its checksum, as a forger would.
void SetHeaderSize(std::string& tar, size_t at, uint64_t size) {
  char field[13];
  snprintf(field, sizeof(field), "%011llo", static_cast<unsigned long long>(size));
  memcpy(&tar[at + 124], field, 12);
  memset(&tar[at + 148], ' ', 8);
  unsigned sum = 0;
  for (size_t i = 0; i < 512; ++i) sum += static_cast<unsigned char>(tar[at + i]);
  char chk[8];
  snprintf(chk, sizeof(chk), "%06o", sum);
  memcpy(&tar[at + 148], chk, 7);
}

// An image of one uncompressed tar layer, as the lazy-image path resolves it: V's records of
// the layer, pinned by nobody.
class UnpinnedRecordsTest : public ::modelfs::testing::CachedModelTest {
 protected:
  void SetUp() override {
    CachedModelTest::SetUp();
    entries_ = {{"bin/sh", "", "busybox"},
                {"models/config.json", "{\"a\": 1}\n", ""},
                {"models/model.safetensors", Pattern(5000, 1), ""},
                {"models/tokenizer.json", Pattern(700, 2), ""},
                {"models/zz.bin", Pattern(64 << 10, 3), ""}};
    real_ = TarOf(entries_);
    layer_ = AddLayer(real_, LayerEncoding::kTar, "", std::string(kOciLayerTarMediaType));
    model_.image = true;
    model_.image_diff_ids = {layer_};
    model_.tar_headers_unpinned = true;
  }

  // Loads the model with `records` and serves it from a tree over the cache.
  void Load(std::shared_ptr<const TarHeaders> records) {
    ASSERT_NE(records, nullptr);
    model_.tar_headers[layer_] = std::move(records);
    LoadOptions o;
    o.on_records_checked = [this](const std::string& model, const absl::Status& st) {
      EXPECT_EQ(model, ModelRef());
      if (!st.ok()) refusals_.push_back(st);
      ++checks_;
    };
    ASSERT_OK_AND_ASSIGN(loaded_, LoadModel(model_, *cache_, o));
    ASSERT_NE(loaded_.records_check, nullptr);
    ASSERT_OK_AND_ASSIGN(tree_, ModelTree::SingleModel(cache_.get(), loaded_.files));
  }

  uint64_t Ino(const std::string& path) {
    uint64_t ino = ModelTree::kRootIno;
    size_t from = 0;
    while (true) {
      const size_t slash = path.find('/', from);
      absl::StatusOr<NodeAttr> a = tree_->Lookup(ino, path.substr(from, slash - from));
      EXPECT_OK(a.status()) << path;
      if (!a.ok()) return 0;
      ino = a->ino;
      if (slash == std::string::npos) return ino;
      from = slash + 1;
    }
  }

  // Every regular file the tree lists: each read fails with kDataLoss naming the layer and
  // `entry`, and returns no byte; links give no target.
  void ExpectNothingServed(const std::string& entry) {
    int files = 0;
    for (const TreeFile& f : loaded_.files) {
      if (f.kind == TreeFile::Kind::kDirectory) continue;
      const uint64_t ino = Ino(f.path);
      if (f.kind == TreeFile::Kind::kSymlink) {
        EXPECT_THAT(tree_->ReadLink(ino).status(),
                    StatusIs(absl::StatusCode::kDataLoss, HasSubstr(layer_.str())));
        continue;
      }
      ++files;
      absl::StatusOr<std::string> got = tree_->Read(ino, 0, 1 << 20);
      EXPECT_THAT(got.status(), StatusIs(absl::StatusCode::kDataLoss,
                                         AllOf(HasSubstr(f.path), HasSubstr(layer_.str()),
                                               HasSubstr("entry '" + entry + "'"))))
          << f.path;
      EXPECT_THAT(tree_->ReadSpans(ino, 0, 4096).status(), StatusIs(absl::StatusCode::kDataLoss));
      EXPECT_EQ(tree_->OpenVerifiedFile(ino).fd, -1);
      EXPECT_FALSE(tree_->IsReady(ino, 0, 4096));
    }
    EXPECT_GT(files, 0);
    ASSERT_EQ(refusals_.size(), 1u);  // reported once, however many reads fail
    EXPECT_THAT(refusals_[0], StatusIs(absl::StatusCode::kDataLoss, HasSubstr(layer_.str())));
  }

  std::vector<Entry> entries_;
  std::string real_;
  Digest layer_;
  LoadedModel loaded_;
  std::unique_ptr<ModelTree> tree_;
  std::vector<absl::Status> refusals_;
  int checks_ = 0;
};

TEST_F(UnpinnedRecordsTest, HonestRecordsServeEveryFileByteEqualAndTheLinkTarget) {
  Load(RecordsAs(real_, real_));
  for (const Entry& e : entries_) {
    const uint64_t ino = Ino(e.path);
    if (!e.symlink.empty()) {
      ASSERT_OK_AND_ASSIGN(std::string target, tree_->ReadLink(ino));
      EXPECT_EQ(target, e.symlink);
      continue;
    }
    ASSERT_OK_AND_ASSIGN(std::string got, tree_->Read(ino, 0, 1 << 20));
    EXPECT_TRUE(got == e.content) << e.path;
  }
  EXPECT_TRUE(loaded_.records_check->Passed());
  EXPECT_TRUE(refusals_.empty());
  EXPECT_EQ(checks_, 1);
}

TEST_F(UnpinnedRecordsTest, TheTreeIsBuiltFromTheRecordsWithoutReadingTheLayer) {
  Load(RecordsAs(real_, real_));
  EXPECT_EQ(remote_.requests(), 0);
  ASSERT_OK_AND_ASSIGN(NodeAttr attr, tree_->GetAttr(Ino("models/model.safetensors")));
  EXPECT_EQ(attr.size, 5000u);
  EXPECT_FALSE(loaded_.records_check->Passed());
}

TEST_F(UnpinnedRecordsTest, ACheckStartedInTheBackgroundPassesBeforeAnyRead) {
  Load(RecordsAs(real_, real_));
  loaded_.records_check->StartInBackground();
  EXPECT_OK(loaded_.records_check->Wait());
  EXPECT_TRUE(loaded_.records_check->Passed());
  EXPECT_TRUE(tree_->IsReady(Ino("models/config.json"), 0, 4096));
}

// Not reaching the registry is no verdict: that read fails, nothing is reported, and the next
// read checks again.
TEST_F(UnpinnedRecordsTest, ACheckThatCannotReadTheLayerIsRunAgainByTheNextRead) {
  CacheOptions o;
  o.dir = tmp_.Join("short-cache").string();
  o.log = [](const log::Event&) {};
  o.read_deadline = absl::Seconds(1);  // the failing read gives up soon
  // Retries stay short, so that the read after Heal does not wait out a backoff of up to 2 s
  // that began while the registry was down (that made this test fail 1 run in 8).
  o.retry.max_backoff = absl::Milliseconds(50);
  ASSERT_OK_AND_ASSIGN(cache_, BlobCache::Open(o, &remote_));
  Load(RecordsAs(real_, real_));
  remote_.Fail(absl::UnavailableError("registry down"));
  const uint64_t ino = Ino("models/config.json");
  absl::StatusOr<std::string> got = tree_->Read(ino, 0, 4096);
  EXPECT_FALSE(got.ok());
  EXPECT_NE(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr("cannot be checked"));
  EXPECT_EQ(checks_, 0);
  EXPECT_FALSE(loaded_.records_check->Passed());
  remote_.Heal();
  ASSERT_OK_AND_ASSIGN(std::string bytes, tree_->Read(ino, 0, 4096));
  EXPECT_EQ(bytes, entries_[1].content);
  EXPECT_EQ(checks_, 1);
  EXPECT_TRUE(refusals_.empty());
}

TEST_F(UnpinnedRecordsTest, AWrongSizeServesNoByte) {
  std::vector<Entry> forged = entries_;
  forged[2].content.resize(4000);
  Load(RecordsAs(TarOf(forged), real_));
  ASSERT_OK_AND_ASSIGN(NodeAttr attr, tree_->GetAttr(Ino("models/model.safetensors")));
  EXPECT_EQ(attr.size, 4000u);                      // the tree shows the lie...
  ExpectNothingServed("models/model.safetensors");  // ...and serves nothing of it
}

TEST_F(UnpinnedRecordsTest, AWrongPathServesNoByte) {
  std::vector<Entry> forged = entries_;
  forged[2].path = "models/modem.safetensors";
  Load(RecordsAs(TarOf(forged), real_));
  ExpectNothingServed("models/modem.safetensors");
}

TEST_F(UnpinnedRecordsTest, AWrongLinkTargetServesNoByte) {
  std::vector<Entry> forged = entries_;
  forged[0].symlink = "/etc";
  Load(RecordsAs(TarOf(forged), real_));
  ExpectNothingServed("bin/sh");
}

TEST_F(UnpinnedRecordsTest, AnInventedEntryServesNoByte) {
  std::vector<Entry> forged = entries_;
  forged.insert(forged.begin() + 4, Entry{"models/extra.json", "{}", ""});
  forged.back().content.resize(32 << 10);  // the forged tar no longer than the layer
  Load(RecordsAs(TarOf(forged), real_));
  ExpectNothingServed("models/extra.json");
}

TEST_F(UnpinnedRecordsTest, AnOmittedEntryServesNoByte) {
  std::vector<Entry> forged = entries_;
  forged.erase(forged.begin() + 3);  // models/tokenizer.json
  Load(RecordsAs(TarOf(forged), real_));
  // The records put zz.bin's header where the layer has tokenizer.json's.
  ExpectNothingServed("models/zz.bin");
}

TEST_F(UnpinnedRecordsTest, AWrongDataOffsetServesNoByte) {
  // The same paths and sizes, in another order: every file's bytes elsewhere in the layer.
  std::vector<Entry> forged = entries_;
  std::swap(forged[1], forged[3]);
  Load(RecordsAs(TarOf(forged), real_));
  ExpectNothingServed("models/tokenizer.json");
}

// The records of a header the layer really holds, reached by a lie before it: a file whose
// bytes are a tar entry, and a record of that file with size 0, so that the next "header" is
// the inner entry's. That header matches the layer byte for byte; only checking the headers
// before it too catches the lie.
TEST_F(UnpinnedRecordsTest, AHeaderInsideAFilesDataReachedByALieBeforeItServesNoByte) {
  const std::string inner = TarOf({{"models/evil.bin", "EVIL", ""}});
  entries_ = {{"models/a.bin", inner.substr(0, inner.size() - 1024), ""}};  // without its end
  real_ = TarOf(entries_);
  model_.layers.clear();
  layer_ = AddLayer(real_, LayerEncoding::kTar, "", std::string(kOciLayerTarMediaType));
  model_.image_diff_ids = {layer_};
  std::string forged = real_;
  SetHeaderSize(forged, 0, 0);
  Load(RecordsAs(forged, real_));
  ASSERT_EQ(loaded_.files.size(), 3u);  // models/, models/a.bin (empty), models/evil.bin
  EXPECT_EQ(loaded_.files[2].path, "models/evil.bin");
  EXPECT_THAT(tree_->Read(Ino("models/evil.bin"), 0, 4096).status(),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(layer_.str()), HasSubstr("entry 'models/a.bin'"))));
  ASSERT_EQ(refusals_.size(), 1u);
}

// The modelcar case: a gzip layer served span by span through V's seek index. The records list
// it without decoding anything; the first read checks them (decoding the spans their headers
// are in, every chunk verified) and then serves the file; forged records serve nothing.
class UnpinnedRecordsOfAGzipLayerTest : public ::modelfs::testing::CachedModelTest {
 protected:
  void SetUp() override {
    CachedModelTest::SetUp();
    weights_ = Pattern(6 << 20, 9);
    tar_ = TarOf({{"models/config.json", "{}", ""}, {"models/model.safetensors", weights_, ""}});
    const std::string gz = ::modelfs::testing::Gzip(tar_);
    gz_ = AddLayer(gz, LayerEncoding::kTarGzip, "", std::string(kOciLayerTarGzipMediaType));
    ASSERT_OK_AND_ASSIGN(SeekIndex seek,
                         BuildSeekIndex(LayerEncoding::kTarGzip, gz, nullptr, 1 << 20));
    ChunkIndex idx = BuildChunkIndex(tar_, 1 << 20, ChunkDigestAlgorithm::kBlake3);
    idx.content = ChunkIndex::Content::kUncompressed;
    model_.seek_indexes[gz_] = std::make_shared<const SeekIndex>(seek);
    model_.chunk_indexes[gz_] = idx;
    model_.image = true;
    model_.image_diff_ids = {Digest::Of(tar_)};
    model_.tar_headers_unpinned = true;
    CacheOptions o;
    o.dir = tmp_.Join("lazy-cache").string();
    o.log = [](const log::Event&) {};
    ASSERT_OK_AND_ASSIGN(lazy_cache_, BlobCache::Open(o, &decoding_));
  }
  // Loads the model with `records` and reads models/model.safetensors whole from its tree.
  absl::StatusOr<std::string> LoadAndRead(std::shared_ptr<const TarHeaders> records) {
    model_.tar_headers[gz_] = std::move(records);
    LoadOptions o;
    o.decoding = &decoding_;
    absl::StatusOr<LoadedModel> loaded = LoadModel(model_, *lazy_cache_, o);
    if (!loaded.ok()) return loaded.status();
    decoded_at_ready_ = decoding_.stats().compressed_bytes;
    absl::StatusOr<std::unique_ptr<ModelTree>> tree =
        ModelTree::SingleModel(lazy_cache_.get(), loaded->files);
    if (!tree.ok()) return tree.status();
    absl::StatusOr<NodeAttr> dir = (*tree)->Lookup(ModelTree::kRootIno, "models");
    if (!dir.ok()) return dir.status();
    absl::StatusOr<NodeAttr> file = (*tree)->Lookup(dir->ino, "model.safetensors");
    if (!file.ok()) return file.status();
    return (*tree)->Read(file->ino, 0, weights_.size());
  }
  DecodingBlobSource decoding_{&remote_};
  std::unique_ptr<BlobCache> lazy_cache_;
  std::string weights_, tar_;
  Digest gz_;
  uint64_t decoded_at_ready_ = 1;
};

TEST_F(UnpinnedRecordsOfAGzipLayerTest, HonestRecordsAreListedWithoutDecodingAndServedOnceChecked) {
  ASSERT_OK_AND_ASSIGN(std::string got, LoadAndRead(RecordsAs(tar_, tar_)));
  EXPECT_EQ(decoded_at_ready_, 0u);
  EXPECT_TRUE(got == weights_);
}

TEST_F(UnpinnedRecordsOfAGzipLayerTest, ForgedRecordsServeNoByte) {
  // Another mode: the same names, sizes and offsets, other header bytes.
  const std::string forged =
      TarOf({{"models/config.json", "{}", ""}, {"models/model.safetensors", weights_, ""}}, 0644);
  ASSERT_NE(forged, tar_);
  EXPECT_THAT(LoadAndRead(RecordsAs(forged, tar_)).status(),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("layer " + gz_.str()), HasSubstr(Digest::Of(tar_).str()),
                             HasSubstr("entry 'models/config.json'"))));
  EXPECT_EQ(decoded_at_ready_, 0u);
}

TEST(UsedRangesTest, GivesTheRangesSortedAndMerged) {
  UsedRanges used;
  used.Add(1024, 512);
  used.Add(0, 512);
  used.Add(512, 100);
  used.Add(2048, 10);
  used.Add(2050, 4);
  EXPECT_EQ(used.Merged(),
            (std::vector<std::pair<uint64_t, uint64_t>>{{0, 612}, {1024, 512}, {2048, 10}}));
}

}  // namespace
}  // namespace modelfs
