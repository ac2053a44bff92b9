// BlobCache::SetLayerMembers and OpenVerifiedFile: a tar layer's larger members kept in files
// of their own (layer_segments.h), one copy on disk, each served by passthrough once sealed.
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/cache/blob_cache.h"
#include "core/cache/fs_verity.h"
#include "testsupport/fakes/fake_remote.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

using ::modelfs::testing::FakeRemote;
using ::modelfs::testing::IsOk;
using ::modelfs::testing::StatusIs;
using ::testing::HasSubstr;

constexpr uint64_t kChunk = 4096;

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

ChunkIndex MakeIndex(const Digest& digest, const std::string& blob) {
  ChunkIndex idx;
  idx.blob_digest = digest;
  idx.blob_size = blob.size();
  idx.chunk_size = kChunk;
  idx.algorithm = ChunkDigestAlgorithm::kBlake3;
  for (uint64_t off = 0; off < blob.size(); off += kChunk) {
    idx.chunks.push_back(HashChunkBytes(idx.algorithm, std::string_view(blob).substr(off, kChunk)));
  }
  return idx;
}

// The layer: 16 chunks and a bit. Members one and two meet inside chunk 2 ([8192, 12288)), so
// that chunk straddles both; member three is in the middle; the rest stays in the layer file.
const std::vector<std::pair<uint64_t, uint64_t>> kMembers = {
    {1000, 9000}, {10000, 8192}, {30000, 20000}};
constexpr uint64_t kLayerSize = 16 * kChunk + 5;

class LayerMembersTest : public ::testing::Test {
 protected:
  CacheOptions Options() {
    CacheOptions o;
    o.dir = dir_.Join("cache").string();
    o.fetch_threads = 2;
    o.read_deadline = absl::Seconds(20);
    o.whole_chunk_size = kChunk;
    o.verify_when_idle = absl::ZeroDuration();
    o.member_min_bytes = 4096;
    o.verity = verity_;
    o.log = [this](const log::Event& e) {
      absl::MutexLock lock(&log_mu_);
      log_ += absl::StrCat(log::FormatLine(e, absl::UnixEpoch(), log::Format::kLogfmt), "\n");
    };
    return o;
  }
  std::unique_ptr<BlobCache> Open(CacheOptions o) {
    auto cache = BlobCache::Open(std::move(o), &remote_);
    EXPECT_THAT(cache, IsOk());
    return cache.ok() ? std::move(*cache) : nullptr;
  }
  std::unique_ptr<BlobCache> Open() { return Open(Options()); }
  absl::Status Register(BlobCache& cache, const std::string& model = "m1") {
    return cache.RegisterLayer(
        LayerSpec{digest_, blob_.size(), MakeIndex(digest_, blob_), VerifyMode::kChunk, model});
  }
  static bool Idle(BlobCache& cache) { return cache.WaitIdle(absl::Now() + absl::Seconds(20)); }

  std::filesystem::path Blobs() { return dir_.Join("cache") / "blobs" / "sha256"; }
  std::filesystem::path MemberPath(uint64_t offset) {
    return Blobs() / absl::StrCat(std::string(digest_.hex()), ".members") / absl::StrCat(offset);
  }
  std::filesystem::path DataPath() {
    return Blobs() / absl::StrCat(std::string(digest_.hex()), ".data");
  }
  static std::string FileBytes(const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  // Whether every member's bytes are in its own file, and not in the layer file.
  void ExpectMembersApart() {
    const std::string data = FileBytes(DataPath());
    ASSERT_EQ(data.size(), blob_.size());
    for (const auto& [offset, length] : kMembers) {
      EXPECT_EQ(FileBytes(MemberPath(offset)), blob_.substr(offset, length)) << offset;
      EXPECT_EQ(data.substr(offset, length), std::string(length, '\0')) << offset;
    }
    // What no member holds is in the layer file.
    EXPECT_EQ(data.substr(0, 1000), blob_.substr(0, 1000));
    EXPECT_EQ(data.substr(18192, 30000 - 18192), blob_.substr(18192, 30000 - 18192));
    EXPECT_EQ(data.substr(50000), blob_.substr(50000));
  }
  // Caches all of the layer with its members, then closes the cache.
  void CacheWholeWithMembersAndClose() {
    auto cache = Open();
    ASSERT_OK(Register(*cache));
    ASSERT_OK(cache->SetLayerMembers(digest_, kMembers));
    ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(digest_, 0, blob_.size()));
    ASSERT_EQ(got, blob_);
    ASSERT_TRUE(Idle(*cache));
    ASSERT_TRUE(cache->GetLayerInfo(digest_)->whole_verified);
  }
  static std::string ReadFd(int fd, size_t n) {
    std::string out(n + 1, '\0');
    const ssize_t got = pread(fd, out.data(), out.size(), 0);
    out.resize(got < 0 ? 0 : static_cast<size_t>(got));
    return out;
  }
  std::string Logged() {
    absl::MutexLock lock(&log_mu_);
    return log_;
  }

  testing::TempDir dir_;
  FakeRemote remote_;
  VerityOps* verity_ = nullptr;
  const std::string blob_ = RandomBytes(kLayerSize, 7);
  const Digest digest_ = remote_.AddBlob(blob_);
  absl::Mutex log_mu_;
  std::string log_ ABSL_GUARDED_BY(log_mu_);
};

TEST_F(LayerMembersTest, AChunkStraddlingTwoMembersLandsInBothFiles) {
  auto cache = Open();
  ASSERT_OK(Register(*cache));
  ASSERT_OK(cache->SetLayerMembers(digest_, kMembers));
  ASSERT_OK_AND_ASSIGN(std::string chunk2, cache->Read(digest_, 2 * kChunk, kChunk));
  EXPECT_EQ(chunk2, blob_.substr(2 * kChunk, kChunk));
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(digest_, 0, blob_.size()));
  EXPECT_EQ(got, blob_);
  ASSERT_TRUE(Idle(*cache));
  ExpectMembersApart();
}

// Spans and chunks land out of order; a member file allocated up front keeps its blocks
// together for the warm loads to come (layer_store.cc, CreateMember).
TEST_F(LayerMembersTest, AMemberFileIsAllocatedWholeBeforeAnyByteLands) {
  auto cache = Open();
  ASSERT_OK(Register(*cache));
  ASSERT_OK(cache->SetLayerMembers(digest_, kMembers));
  // Where the file system cannot allocate ahead (no fallocate), the file stays sparse.
  const std::filesystem::path probe = dir_.Join("fallocate-probe");
  const int pfd = open(probe.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(pfd, 0);
  const bool can_allocate = fallocate(pfd, 0, 0, 4096) == 0;
  close(pfd);
  for (const auto& [offset, length] : kMembers) {
    struct stat st;
    ASSERT_EQ(stat(MemberPath(offset).c_str(), &st), 0) << offset;
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), length) << offset;
    if (can_allocate) {
      EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, length) << offset;
    }
  }
  // Allocated blocks read as zeros until their bytes land: nothing unverified is served.
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(digest_, 0, blob_.size()));
  EXPECT_EQ(got, blob_);
  ASSERT_TRUE(Idle(*cache));
  ExpectMembersApart();
}

TEST_F(LayerMembersTest, SpansOfAReadAcrossMembersNameEachFile) {
  auto cache = Open();
  ASSERT_OK(Register(*cache));
  ASSERT_OK(cache->SetLayerMembers(digest_, kMembers));
  ASSERT_OK_AND_ASSIGN(std::vector<BlobSpan> spans, cache->ReadSpans(digest_, 500, 20000));
  // Layer file [500, 1000), member one, member two, layer file [18192, 20500).
  ASSERT_EQ(spans.size(), 4u);
  EXPECT_EQ(spans[1].offset, 0u);
  EXPECT_EQ(spans[1].length, 9000u);
  EXPECT_EQ(spans[2].offset, 0u);
  EXPECT_EQ(spans[2].length, 8192u);
  EXPECT_EQ(spans[3].offset, 18192u);
  std::string got;
  for (const BlobSpan& s : spans) {
    std::string part(s.length, '\0');
    ASSERT_EQ(pread(s.fd, part.data(), s.length, static_cast<off_t>(s.offset)),
              static_cast<ssize_t>(s.length));
    got += part;
  }
  EXPECT_EQ(got, blob_.substr(500, 20000));
}

TEST_F(LayerMembersTest, BytesThatLandedBeforeTheMembersWereSetMoveIntoTheirFiles) {
  auto cache = Open();
  ASSERT_OK(Register(*cache));
  ASSERT_OK_AND_ASSIGN(std::string head, cache->Read(digest_, 0, 5 * kChunk));
  EXPECT_EQ(head, blob_.substr(0, 5 * kChunk));
  ASSERT_TRUE(Idle(*cache));
  const int before = remote_.requests();
  ASSERT_OK(cache->SetLayerMembers(digest_, kMembers));
  // Nothing moved is fetched again.
  ASSERT_OK_AND_ASSIGN(std::string again, cache->Read(digest_, 0, 5 * kChunk));
  EXPECT_EQ(again, blob_.substr(0, 5 * kChunk));
  EXPECT_EQ(remote_.requests(), before);
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(digest_, 0, blob_.size()));
  EXPECT_EQ(got, blob_);
  ASSERT_TRUE(Idle(*cache));
  ExpectMembersApart();
}

// Chunks that land while SetLayerMembers copies (into the old layout) are copied too.
TEST_F(LayerMembersTest, ChunksThatLandWhileTheMembersMoveAreMovedToo) {
  absl::Mutex mu;
  bool copying = false, go_on = false;
  const std::thread::id mover = std::this_thread::get_id();
  CacheOptions o = Options();
  o.write_data = [&](int fd, const char* data, uint64_t n, uint64_t offset) {
    if (std::this_thread::get_id() == mover) {
      // SetLayerMembers' first copy waits until the landing below is done.
      absl::MutexLock lock(&mu);
      copying = true;
      mu.Await(absl::Condition(&go_on));
    }
    return pwrite(fd, data, n, static_cast<off_t>(offset)) == static_cast<ssize_t>(n) ? 0 : EIO;
  };
  auto cache = Open(o);
  ASSERT_OK(Register(*cache));
  std::thread lander;
  {
    // The head lands before the move: the move has something to copy.
    absl::MutexLock lock(&mu);
    go_on = true;
  }
  ASSERT_OK(cache->Read(digest_, 0, 2 * kChunk));
  ASSERT_TRUE(Idle(*cache));
  {
    absl::MutexLock lock(&mu);
    go_on = false;
  }
  lander = std::thread([&] {
    {
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(&copying));
    }
    // Chunks 7 to 12 land in the old layout while the move is under way.
    EXPECT_OK(cache->Read(digest_, 30000, 20000));
    EXPECT_TRUE(Idle(*cache));
    absl::MutexLock lock(&mu);
    go_on = true;
  });
  ASSERT_OK(cache->SetLayerMembers(digest_, kMembers));
  lander.join();
  const int before = remote_.requests();
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(digest_, 30000, 20000));
  EXPECT_EQ(got, blob_.substr(30000, 20000));
  EXPECT_EQ(remote_.requests(), before);  // moved, not fetched again
  ASSERT_OK_AND_ASSIGN(got, cache->Read(digest_, 0, blob_.size()));
  EXPECT_EQ(got, blob_);
  ASSERT_TRUE(Idle(*cache));
  ExpectMembersApart();
}

// A chunk written into the old layout and marked after the switch is written again where the
// new layout says.
TEST_F(LayerMembersTest, AChunkWrittenBeforeTheSwitchAndMarkedAfterItLandsInTheNewLayout) {
  absl::Mutex mu;
  bool hold = true, held = false, go_on = false;
  CacheOptions o = Options();
  o.write_data = [&](int fd, const char* data, uint64_t n, uint64_t offset) {
    const bool ok = pwrite(fd, data, n, static_cast<off_t>(offset)) == static_cast<ssize_t>(n);
    absl::MutexLock lock(&mu);
    if (hold) {
      // The first landing write: done, then held before its chunk is marked.
      hold = false;
      held = true;
      mu.Await(absl::Condition(&go_on));
    }
    return ok ? 0 : EIO;
  };
  auto cache = Open(o);
  ASSERT_OK(Register(*cache));
  std::thread reader([&] {
    ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(digest_, 30000, 20000));
    EXPECT_EQ(got, blob_.substr(30000, 20000));
  });
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&held));
  }
  ASSERT_OK(cache->SetLayerMembers(digest_, kMembers));
  {
    absl::MutexLock lock(&mu);
    go_on = true;
  }
  reader.join();
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(digest_, 0, blob_.size()));
  EXPECT_EQ(got, blob_);
  ASSERT_TRUE(Idle(*cache));
  ExpectMembersApart();
}

TEST_F(LayerMembersTest, ASealedLayerMovesItsMembersAndIsSealedOverAllItsFiles) {
  auto cache = Open();
  ASSERT_OK(Register(*cache));
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(digest_, 0, blob_.size()));
  ASSERT_TRUE(Idle(*cache));
  ASSERT_OK(cache->SetLayerMembers(digest_, kMembers));
  ExpectMembersApart();
  const int fd = cache->OpenVerifiedFile(digest_, 30000, 20000);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(ReadFd(fd, 20000), blob_.substr(30000, 20000));
  close(fd);
  cache.reset();
  // The seal covers the member files: trusted after a restart with no byte fetched.
  remote_.ResetCounters();
  cache = Open();
  ASSERT_OK(Register(*cache));
  EXPECT_TRUE(cache->GetLayerInfo(digest_)->whole_verified);
  ASSERT_OK_AND_ASSIGN(got, cache->Read(digest_, 0, blob_.size()));
  EXPECT_EQ(got, blob_);
  EXPECT_EQ(remote_.requests(), 0);
}

TEST_F(LayerMembersTest, OpenVerifiedFileGivesAReadOnlyMemberFileOnceTheLayerIsSealed) {
  auto cache = Open();
  ASSERT_OK(Register(*cache));
  ASSERT_OK(cache->SetLayerMembers(digest_, kMembers));
  EXPECT_EQ(cache->OpenVerifiedFile(digest_, 1000, 9000), -1);  // nothing verified yet
  ASSERT_OK(cache->Read(digest_, 0, blob_.size()));
  ASSERT_TRUE(Idle(*cache));
  EXPECT_EQ(cache->OpenVerifiedFile(digest_, 1000, 8999), -1);       // not a whole member
  EXPECT_EQ(cache->OpenVerifiedFile(digest_, 0, 1000), -1);          // not a member
  EXPECT_EQ(cache->OpenVerifiedBlob(digest_, 0, blob_.size()), -1);  // the layer file has holes
  const int fd = cache->OpenVerifiedFile(digest_, 1000, 9000);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(ReadFd(fd, 9000), blob_.substr(1000, 9000));
  EXPECT_EQ(pwrite(fd, "x", 1, 0), -1);
  EXPECT_EQ(errno, EBADF);
  close(fd);
}

TEST_F(LayerMembersTest, AMemberIsHandedOutOnceItsOwnChunksAreVerifiedBeforeTheLayerIs) {
  auto cache = Open();
  ASSERT_OK(Register(*cache));
  ASSERT_OK(cache->SetLayerMembers(digest_, kMembers));
  ASSERT_OK(cache->Read(digest_, 30000, 20000));
  ASSERT_TRUE(Idle(*cache));  // flushed
  EXPECT_FALSE(cache->GetLayerInfo(digest_)->whole_verified);
  EXPECT_EQ(cache->OpenVerifiedFile(digest_, 1000, 9000), -1);  // its chunks are not here
  const int fd = cache->OpenVerifiedFile(digest_, 30000, 20000);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(ReadFd(fd, 20000), blob_.substr(30000, 20000));
  close(fd);
}

TEST_F(LayerMembersTest, SmallFilesStayInTheLayerFile) {
  CacheOptions o = Options();
  o.member_min_bytes = 10000;
  auto cache = Open(o);
  ASSERT_OK(Register(*cache));
  ASSERT_OK(cache->SetLayerMembers(digest_, kMembers));
  ASSERT_OK(cache->Read(digest_, 0, blob_.size()));
  ASSERT_TRUE(Idle(*cache));
  EXPECT_FALSE(std::filesystem::exists(MemberPath(1000)));
  EXPECT_FALSE(std::filesystem::exists(MemberPath(10000)));
  EXPECT_EQ(FileBytes(MemberPath(30000)), blob_.substr(30000, 20000));
  EXPECT_EQ(cache->OpenVerifiedFile(digest_, 1000, 9000), -1);
  const int fd = cache->OpenVerifiedFile(digest_, 30000, 20000);
  EXPECT_GE(fd, 0);
  if (fd >= 0) close(fd);
}

TEST_F(LayerMembersTest, ARestartKnowsTheLayoutBeforeTheFirstRead) {
  CacheWholeWithMembersAndClose();
  remote_.ResetCounters();
  auto cache = Open();
  ASSERT_OK(Register(*cache));
  // Set again by the loader at mount: the same layout is no change.
  ASSERT_OK(cache->SetLayerMembers(digest_, kMembers));
  const int fd = cache->OpenVerifiedFile(digest_, 10000, 8192);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(ReadFd(fd, 8192), blob_.substr(10000, 8192));
  close(fd);
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(digest_, 0, blob_.size()));
  EXPECT_EQ(got, blob_);
  EXPECT_EQ(remote_.requests(), 0);
  ExpectMembersApart();
}

TEST_F(LayerMembersTest, AnUnsealedLayerRestartedRehashesItsChunksThroughTheLayout) {
  {
    auto cache = Open();
    ASSERT_OK(Register(*cache));
    ASSERT_OK(cache->SetLayerMembers(digest_, kMembers));
    ASSERT_OK(cache->Read(digest_, 0, 6 * kChunk));  // chunks 0-5: part of the layer
    ASSERT_TRUE(Idle(*cache));
  }
  remote_.ResetCounters();
  auto cache = Open();
  ASSERT_OK(Register(*cache));
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(digest_, 0, 6 * kChunk));
  EXPECT_EQ(got, blob_.substr(0, 6 * kChunk));
  EXPECT_EQ(remote_.requests(), 0);
  EXPECT_EQ(cache->stats().verification_failures, 0u);
}

TEST_F(LayerMembersTest, AMemberFileTruncatedAfterTheSealIsFetchedAgainNotServed) {
  CacheWholeWithMembersAndClose();
  ASSERT_EQ(truncate(MemberPath(30000).c_str(), 100), 0);
  remote_.ResetCounters();
  auto cache = Open();
  ASSERT_OK(Register(*cache));
  EXPECT_EQ(cache->OpenVerifiedFile(digest_, 30000, 20000), -1);
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(digest_, 0, blob_.size()));
  EXPECT_EQ(got, blob_);
  EXPECT_GT(remote_.requests(), 0);
}

TEST_F(LayerMembersTest, AMemberFileSwappedForAnotherOfTheSameSizeIsFetchedAgainNotServed) {
  CacheWholeWithMembersAndClose();
  {
    const std::string other = MemberPath(10000).string() + ".other";
    std::ofstream(other, std::ios::binary) << RandomBytes(8192, 8);
    ASSERT_EQ(rename(other.c_str(), MemberPath(10000).c_str()), 0);
  }
  auto cache = Open();
  ASSERT_OK(Register(*cache));
  EXPECT_FALSE(cache->GetLayerInfo(digest_)->whole_verified);
  EXPECT_EQ(cache->OpenVerifiedFile(digest_, 10000, 8192), -1);
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(digest_, 0, blob_.size()));
  EXPECT_EQ(got, blob_);
  EXPECT_GT(cache->stats().verification_failures, 0u);
  ASSERT_TRUE(Idle(*cache));
  // Sealed again over the refetched bytes.
  const int fd = cache->OpenVerifiedFile(digest_, 10000, 8192);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(ReadFd(fd, 8192), blob_.substr(10000, 8192));
  close(fd);
}

TEST_F(LayerMembersTest, AMemberFileTruncatedWhileMountedIsFoundByTheScrubAndRenewed) {
  auto cache = Open();
  ASSERT_OK(Register(*cache));
  ASSERT_OK(cache->SetLayerMembers(digest_, kMembers));
  ASSERT_OK(cache->Read(digest_, 0, blob_.size()));
  ASSERT_TRUE(Idle(*cache));
  ASSERT_EQ(truncate(MemberPath(30000).c_str(), 100), 0);
  EXPECT_EQ(cache->ScrubOnce(), 1);
  EXPECT_EQ(cache->stats().scrub_failures, 1u);
  EXPECT_EQ(cache->stats().scrub_repairs, 1u);
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(digest_, 0, blob_.size()));
  EXPECT_EQ(got, blob_);
  ASSERT_TRUE(Idle(*cache));
  // Renewed with the same layout, in new member files, and sealed again.
  ExpectMembersApart();
  const int fd = cache->OpenVerifiedFile(digest_, 30000, 20000);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(ReadFd(fd, 20000), blob_.substr(30000, 20000));
  close(fd);
}

TEST_F(LayerMembersTest, EvictionRemovesTheMemberFiles) {
  CacheOptions o = Options();
  o.max_bytes = kLayerSize + 1000;
  auto cache = Open(o);
  ASSERT_OK(Register(*cache, "ma"));
  ASSERT_OK(cache->SetLayerMembers(digest_, kMembers));
  ASSERT_OK(cache->Read(digest_, 0, blob_.size()));
  ASSERT_TRUE(Idle(*cache));
  ASSERT_TRUE(std::filesystem::exists(MemberPath(30000)));
  cache->UnregisterModel("ma");
  const std::string other = RandomBytes(kLayerSize, 9);
  const Digest od = remote_.AddBlob(other);
  ASSERT_OK(cache->RegisterLayer(
      LayerSpec{od, other.size(), MakeIndex(od, other), VerifyMode::kChunk, "mb"}));
  ASSERT_OK(cache->Read(od, 0, other.size()));
  ASSERT_TRUE(Idle(*cache));
  EXPECT_EQ(cache->stats().evicted_layers, 1u);
  EXPECT_FALSE(std::filesystem::exists(DataPath()));
  EXPECT_FALSE(
      std::filesystem::exists(Blobs() / absl::StrCat(std::string(digest_.hex()), ".members")));
}

TEST_F(LayerMembersTest, ADiskFullWhileMovingLeavesTheLayerServedFromItsDataFile) {
  std::atomic<bool> full{false};
  CacheOptions o = Options();
  o.write_data = [&full](int fd, const char* data, uint64_t n, uint64_t offset) {
    if (full) return ENOSPC;
    return pwrite(fd, data, n, static_cast<off_t>(offset)) == static_cast<ssize_t>(n) ? 0 : EIO;
  };
  auto cache = Open(o);
  ASSERT_OK(Register(*cache));
  ASSERT_OK(cache->Read(digest_, 0, 5 * kChunk));
  ASSERT_TRUE(Idle(*cache));
  full = true;
  EXPECT_THAT(cache->SetLayerMembers(digest_, kMembers),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr(digest_.str())));
  EXPECT_FALSE(
      std::filesystem::exists(Blobs() / absl::StrCat(std::string(digest_.hex()), ".members")));
  EXPECT_THAT(Logged(), HasSubstr("its files stay in the layer's data file"));
  full = false;
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(digest_, 0, blob_.size()));
  EXPECT_EQ(got, blob_);
}

TEST_F(LayerMembersTest, ADiskFullWhileLandingInMembersServesFromMemory) {
  std::atomic<bool> full{false};
  CacheOptions o = Options();
  o.write_data = [&full](int fd, const char* data, uint64_t n, uint64_t offset) {
    if (full) return ENOSPC;
    return pwrite(fd, data, n, static_cast<off_t>(offset)) == static_cast<ssize_t>(n) ? 0 : EIO;
  };
  auto cache = Open(o);
  ASSERT_OK(Register(*cache));
  ASSERT_OK(cache->SetLayerMembers(digest_, kMembers));
  full = true;
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(digest_, 8000, 12000));
  EXPECT_EQ(got, blob_.substr(8000, 12000));
  EXPECT_TRUE(cache->disk_full());
}

TEST_F(LayerMembersTest, AWholeLayerModeLayerKeepsItsMembersApartToo) {
  auto cache = Open();
  ASSERT_OK(cache->RegisterLayer(
      LayerSpec{digest_, blob_.size(), std::nullopt, VerifyMode::kWholeLayer, "m1"}));
  ASSERT_OK(cache->SetLayerMembers(digest_, kMembers));
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(digest_, 0, blob_.size()));
  EXPECT_EQ(got, blob_);
  ASSERT_TRUE(Idle(*cache));
  ExpectMembersApart();
  const int fd = cache->OpenVerifiedFile(digest_, 1000, 9000);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(ReadFd(fd, 9000), blob_.substr(1000, 9000));
  close(fd);
}

TEST_F(LayerMembersTest, OverlappingOrOutOfRangeFilesAreRefused) {
  auto cache = Open();
  ASSERT_OK(Register(*cache));
  EXPECT_THAT(cache->SetLayerMembers(digest_, {{1000, 9000}, {9000, 8000}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("offset 9000")));
  EXPECT_THAT(cache->SetLayerMembers(digest_, {{kLayerSize - 10, 8000}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(digest_.str())));
  ASSERT_OK(cache->SetLayerMembers(digest_, kMembers));
  EXPECT_THAT(cache->SetLayerMembers(digest_, {{1000, 9000}}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("does not change")));
}

// fs-verity as the kernel does it, in memory: refused for a file open for writing.
class FakeVerity : public VerityOps {
 public:
  absl::Status Probe(const std::string&) override { return absl::OkStatus(); }
  absl::Status Enable(const std::string& path) override {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return absl::InternalError("stat " + path);
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
    digests_[st.st_ino] = absl::StrCat("sha256:fake-", st.st_ino);
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
  int enabled() {
    absl::MutexLock lock(&mu_);
    return enabled_;
  }
  // The file at `path` loses its fs-verity.
  void Drop(const std::filesystem::path& path) {
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    absl::MutexLock lock(&mu_);
    digests_.erase(st.st_ino);
  }

 private:
  absl::Mutex mu_;
  int enabled_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<ino_t, std::string> digests_ ABSL_GUARDED_BY(mu_);
};

class LayerMembersVerityTest : public LayerMembersTest {
 protected:
  LayerMembersVerityTest() { verity_ = &fake_; }
  FakeVerity fake_;
};

TEST_F(LayerMembersVerityTest, EveryFileOfASealedLayerGetsFsVerityAndIsTrustedByIt) {
  CacheWholeWithMembersAndClose();
  {
    auto cache = Open();  // protects the sealed files: three members and the data file
    EXPECT_EQ(fake_.enabled(), 4);
  }
  remote_.ResetCounters();
  auto cache = Open();
  ASSERT_OK(Register(*cache));
  EXPECT_TRUE(cache->GetLayerInfo(digest_)->whole_verified);
  EXPECT_EQ(fake_.enabled(), 4);  // not again
  const int fd = cache->OpenVerifiedFile(digest_, 10000, 8192);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(ReadFd(fd, 8192), blob_.substr(10000, 8192));
  close(fd);
  EXPECT_EQ(remote_.requests(), 0);
}

TEST_F(LayerMembersVerityTest, AMemberFileThatLostItsFsVerityIsNotTrusted) {
  CacheWholeWithMembersAndClose();
  { auto cache = Open(); }
  fake_.Drop(MemberPath(30000));
  auto cache = Open();
  ASSERT_OK(Register(*cache));
  EXPECT_FALSE(cache->GetLayerInfo(digest_)->whole_verified);
  EXPECT_THAT(Logged(), HasSubstr("fs-verity digests"));
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(digest_, 0, blob_.size()));
  EXPECT_EQ(got, blob_);
}

}  // namespace
}  // namespace modelfs
