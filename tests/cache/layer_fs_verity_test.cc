// fs-verity of sealed files (LayerScrub), with a fake kernel: the probe, enabling it at open and
// after a scrub, trusting a file by its digest.
#include "tests/cache/blob_cache_fixture.h"

namespace modelfs {
namespace {

// This kernel has no CONFIG_FS_VERITY: the cache says so once, and the scrub is still on.
TEST_F(BlobCacheTest, AFilesystemWithoutFsVerityIsDetectedAndReported) {
  CacheOptions o = Options();
  std::filesystem::create_directories(o.dir);
  const absl::Status probe = ProbeFsVerity(o.dir);
  if (probe.ok()) GTEST_SKIP() << "the filesystem of " << o.dir << " supports fs-verity";
  EXPECT_THAT(probe, StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("CONFIG_FS_VERITY")));
  auto cache = Open(o);
  EXPECT_FALSE(cache->stats().fs_verity);
  EXPECT_THAT(Logged(),
              HasSubstr("fs-verity: the filesystem of " + o.dir + " does not support fs-verity"));
}

TEST_F(BlobCacheTest, TheProbeLeavesNoFileInTheCacheDirectory) {
  CacheOptions o = Options();
  std::filesystem::create_directories(o.dir);
  (void)ProbeFsVerity(o.dir);
  EXPECT_TRUE(std::filesystem::is_empty(o.dir));
}

// --- fs-verity, with a fake kernel (this one has no CONFIG_FS_VERITY) ---

// Files are known by inode: Enable gives one a digest, which tests may change or take away.
class FakeVerity : public VerityOps {
 public:
  absl::Status Probe(const std::string&) override { return probe_; }
  absl::Status Enable(const std::string& path) override {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return absl::InternalError("stat " + path);
    // As the kernel: no fs-verity for a file open for writing (here, by this process).
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
      const int fd = std::atoi(entry.path().filename().c_str());
      struct stat fst;
      const int flags = fcntl(fd, F_GETFL);
      if (flags >= 0 && (flags & O_ACCMODE) != O_RDONLY && fstat(fd, &fst) == 0 &&
          fst.st_ino == st.st_ino && fst.st_dev == st.st_dev) {
        return absl::FailedPreconditionError("ETXTBSY");
      }
    }
    absl::MutexLock lock(&mu_);
    enabled_++;
    digests_.emplace(st.st_ino, absl::StrCat("sha256:fake-", st.st_ino));
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> Measure(int fd) override {
    struct stat st;
    if (fstat(fd, &st) != 0) return absl::InternalError("fstat");
    absl::MutexLock lock(&mu_);
    auto it = digests_.find(st.st_ino);
    if (it == digests_.end()) return absl::NotFoundError("ENODATA");
    return it->second;
  }
  void set_probe(absl::Status s) { probe_ = std::move(s); }
  int enabled() {
    absl::MutexLock lock(&mu_);
    return enabled_;
  }
  // The file at `path` now measures `digest` ("" : it has no fs-verity).
  void SetDigest(const std::filesystem::path& path, const std::string& digest) {
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    absl::MutexLock lock(&mu_);
    if (digest.empty()) {
      digests_.erase(st.st_ino);
    } else {
      digests_[st.st_ino] = digest;
    }
  }

 private:
  absl::Status probe_;
  absl::Mutex mu_;
  int enabled_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<ino_t, std::string> digests_ ABSL_GUARDED_BY(mu_);
};

class FsVerityTest : public BlobCacheTest {
 protected:
  FsVerityTest() { verity_ = &fake_; }
  std::filesystem::path DataFile(const Digest& d) {
    return dir_.Join("cache") / "blobs" / "sha256" / (std::string(d.hex()) + ".data");
  }
  FakeVerity fake_;
};

// A cache written before the verity column: its sealed layers stay trusted and the column is
// added.
TEST_F(BlobCacheTest, ACacheFromBeforeFsVerityGainsTheColumnAndKeepsItsSealedLayers) {
  const std::string blob = RandomBytes(8 * kChunk, 66);
  Digest d = CacheWholeAndClose(blob);
  const std::string db_path = (dir_.Join("cache") / "cache.db").string();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(db, "ALTER TABLE layers DROP COLUMN verity", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  {
    auto cache = Open();
    ASSERT_OK(RegisterChunked(*cache, d, blob));
    EXPECT_TRUE(cache->GetLayerInfo(d)->whole_verified);
  }
  ASSERT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(db, "SELECT verity FROM layers", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
}

TEST_F(FsVerityTest, ASealedLayerGetsFsVerityWhenTheCacheIsNextOpened) {
  const std::string blob = RandomBytes(8 * kChunk, 60);
  Digest d = CacheWholeAndClose(blob);
  EXPECT_EQ(fake_.enabled(), 0);  // the daemon held it open for writing until now
  auto cache = Open();
  EXPECT_EQ(fake_.enabled(), 1);
}

TEST_F(FsVerityTest, ALayerWhoseFsVerityDigestIsUnchangedIsTrustedWithoutARehash) {
  const std::string blob = RandomBytes(8 * kChunk, 61);
  Digest d = CacheWholeAndClose(blob);
  { auto cache = Open(); }  // enables and records it
  auto cache = Open();
  ASSERT_OK(RegisterChunked(*cache, d, blob));
  EXPECT_EQ(fake_.enabled(), 1);
  EXPECT_TRUE(cache->GetLayerInfo(d)->whole_verified);
  const int fd = cache->OpenVerifiedBlob(d, 0, blob.size());
  EXPECT_GE(fd, 0);
  if (fd >= 0) close(fd);
}

TEST_F(FsVerityTest, ASealedLayerWhoseFsVerityDigestDiffersIsNotTrusted) {
  const std::string blob = RandomBytes(8 * kChunk, 62);
  Digest d = CacheWholeAndClose(blob);
  { auto cache = Open(); }
  fake_.SetDigest(DataFile(d), "sha256:someone-else");
  auto cache = Open();
  ASSERT_OK(RegisterChunked(*cache, d, blob));
  EXPECT_FALSE(cache->GetLayerInfo(d)->whole_verified);
  EXPECT_EQ(cache->OpenVerifiedBlob(d, 0, blob.size()), -1);
  EXPECT_THAT(Logged(), AllOf(HasSubstr("digest=" + d.str()),
                              HasSubstr("fs-verity digest sha256:someone-else, recorded")));
}

TEST_F(FsVerityTest, ASealedLayerThatLostItsFsVerityIsNotTrusted) {
  const std::string blob = RandomBytes(8 * kChunk, 63);
  Digest d = CacheWholeAndClose(blob);
  { auto cache = Open(); }
  fake_.SetDigest(DataFile(d), "");
  auto cache = Open();
  ASSERT_OK(RegisterChunked(*cache, d, blob));
  EXPECT_FALSE(cache->GetLayerInfo(d)->whole_verified);
  EXPECT_THAT(Logged(), HasSubstr("lost its fs-verity"));
}

TEST_F(FsVerityTest, ALayerNoLongerTrustedIsStillServedWithItsRightBytes) {
  const std::string blob = RandomBytes(8 * kChunk, 64);
  Digest d = CacheWholeAndClose(blob);
  { auto cache = Open(); }
  fake_.SetDigest(DataFile(d), "sha256:someone-else");
  auto cache = Open();
  ASSERT_OK(RegisterChunked(*cache, d, blob));
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 2 * kChunk, kChunk));
  EXPECT_EQ(got, blob.substr(2 * kChunk, kChunk));
}

// Sealed in this process, the layer's file is held open for writing: the scrub moves the layer
// to a read-only fd and enables fs-verity then.
TEST_F(FsVerityTest, ALayerSealedInThisProcessGetsFsVerityFromTheNextScrub) {
  auto cache = Open();
  const std::string blob = RandomBytes(8 * kChunk, 67);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK(cache->Read(d, 0, blob.size()).status());
  ASSERT_TRUE(Idle(*cache));
  EXPECT_EQ(cache->ScrubOnce(), 1);
  EXPECT_EQ(fake_.enabled(), 1);
}

TEST_F(FsVerityTest, ALayerMovedToAReadOnlyFdStillServesAndPassesThrough) {
  auto cache = Open();
  const std::string blob = RandomBytes(8 * kChunk, 68);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK(cache->Read(d, 0, blob.size()).status());
  ASSERT_TRUE(Idle(*cache));
  cache->ScrubOnce();
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 3 * kChunk, 100));
  EXPECT_EQ(got, blob.substr(3 * kChunk, 100));
  const int fd = cache->OpenVerifiedBlob(d, 0, blob.size());
  EXPECT_GE(fd, 0);
  if (fd >= 0) close(fd);
  EXPECT_EQ(cache->stats().cached_bytes, blob.size());
}

TEST_F(FsVerityTest, TheDigestTheScrubEnabledIsTrustedAfterARestart) {
  const std::string blob = RandomBytes(8 * kChunk, 69);
  Digest d;
  {
    auto cache = Open();
    d = AddChunked(*cache, blob);
    ASSERT_OK(cache->Read(d, 0, blob.size()).status());
    ASSERT_TRUE(Idle(*cache));
    cache->ScrubOnce();
  }
  auto cache = Open();
  ASSERT_OK(RegisterChunked(*cache, d, blob));
  EXPECT_TRUE(cache->GetLayerInfo(d)->whole_verified);
  EXPECT_EQ(fake_.enabled(), 1);
}

// A read's span still holds the read-write fd: fs-verity waits for the next pass.
TEST_F(FsVerityTest, AReaderHoldingTheOldFdPutsFsVerityOffToTheNextScrub) {
  auto cache = Open();
  const std::string blob = RandomBytes(8 * kChunk, 70);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK(cache->Read(d, 0, blob.size()).status());
  ASSERT_TRUE(Idle(*cache));
  {
    ASSERT_OK_AND_ASSIGN(std::vector<BlobSpan> spans, cache->ReadSpans(d, 0, 100));
    cache->ScrubOnce();
    EXPECT_EQ(fake_.enabled(), 0);
  }
  cache->ScrubOnce();
  EXPECT_EQ(fake_.enabled(), 1);
}

TEST_F(FsVerityTest, WhereTheFilesystemHasNoFsVerityNoneIsEnabled) {
  fake_.set_probe(absl::UnimplementedError("no fs-verity here"));
  const std::string blob = RandomBytes(8 * kChunk, 65);
  Digest d = CacheWholeAndClose(blob);
  auto cache = Open();
  ASSERT_OK(RegisterChunked(*cache, d, blob));
  EXPECT_EQ(fake_.enabled(), 0);
  EXPECT_TRUE(cache->GetLayerInfo(d)->whole_verified);
}

}  // namespace
}  // namespace modelfs
