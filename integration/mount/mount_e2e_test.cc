// End-to-end tests of `modelfs mount`: a real docker-registry on loopback, models pushed with
// `modelfs push`, the modelfs binary mounting them through the kernel's FUSE, and reads checked
// byte for byte against the files that were pushed. Needs root (or fuse permissions) and
// /dev/fuse; skipped where FUSE cannot mount (failed under CI=true). A setup step that fails
// (registry, push) fails every test.
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/oci/digest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration/mount/mount_test_env.h"
#include "nlohmann/json.hpp"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/synth/synth_model.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kChunk = kMiB;  // push's default chunk size (V's chunk indexes)

// A model written with testsupport/synth/synth_model.h and pushed as M (tag) and V (tag-volume).
struct PushedModel {
  std::string dir;
  std::string model_ref;                       // M: whole-layer verification
  std::string volume_ref;                      // V: chunk verification
  std::map<std::string, std::string> digests;  // relative path -> "sha256:..."
  std::map<std::string, uint64_t> sizes;
  std::string weights;  // relative path of the largest file
  uint64_t parameters = 0;
  uint64_t total_bytes = 0;
};

// Shared by every test: one registry and two models, pushed once (pushing 256 MiB is the
// slowest step of the suite).
struct SuiteEnv {
  std::unique_ptr<TempDir> work;
  std::unique_ptr<RegistryFixture> registry;
  PushedModel big;  // 256 MiB
  PushedModel bad;  // 24 MiB, other bytes (its blobs are tampered with; none shared with big)
};
SuiteEnv* env = nullptr;
std::string suite_unavailable;  // a missing component: each test skips (fails under CI=true)
std::string suite_error;        // a setup step that failed: each test fails

absl::StatusOr<PushedModel> WriteAndPush(const std::string& dir, uint64_t mib, uint64_t seed,
                                         const std::string& repo_tag) {
  SynthModelSpec spec;
  spec.target_mib = mib;
  spec.seed = seed;
  auto written = WriteSynthSafetensorsModel(dir, spec);
  if (!written.ok()) return written.status();
  PushedModel m;
  m.dir = dir;
  m.parameters = written->parameters;
  for (const std::string& rel : written->files) {
    uint64_t size = 0;
    auto d = DigestFile(dir + "/" + rel, &size);
    if (!d.ok()) return d.status();
    m.digests[rel] = d->str();
    m.sizes[rel] = size;
    m.total_bytes += size;
    if (m.weights.empty() || size > m.sizes[m.weights]) m.weights = rel;
  }
  m.model_ref = absl::StrCat(env->registry->host_port(), "/", repo_tag);
  m.volume_ref = m.model_ref + "-volume";
  auto r =
      RunCommand({ModelfsBinary(), "push", "--plain-http", m.model_ref, dir}, absl::Seconds(180));
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return absl::InternalError(
        absl::StrCat("modelfs push ", m.model_ref, " exited ", r->exit_code, ": ", r->err));
  }
  return m;
}

// Flips one byte of a file (the registry's copy of a blob) and puts it back when destroyed.
class ByteFlip {
 public:
  ByteFlip(std::string path, uint64_t offset) : path_(std::move(path)), offset_(offset) {
    int fd = open(path_.c_str(), O_RDWR);
    if (fd < 0) return;
    if (pread(fd, &original_, 1, static_cast<off_t>(offset_)) == 1) {
      char flipped = static_cast<char>(original_ ^ 0xff);
      flipped_ = pwrite(fd, &flipped, 1, static_cast<off_t>(offset_)) == 1;
    }
    close(fd);
  }
  ~ByteFlip() { Restore(); }
  bool flipped() const { return flipped_; }
  void Restore() {
    if (!flipped_) return;
    int fd = open(path_.c_str(), O_RDWR);
    if (fd < 0) return;
    if (pwrite(fd, &original_, 1, static_cast<off_t>(offset_)) == 1) flipped_ = false;
    close(fd);
  }

 private:
  std::string path_;
  uint64_t offset_;
  char original_ = 0;
  bool flipped_ = false;
};

class MountE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    BecomeSubreaper();
    if (access("/dev/fuse", R_OK | W_OK) != 0) {
      suite_unavailable = "no usable /dev/fuse";
      return;
    }
    // A developer's ~/.docker never leaks into the test.
    setenv("DOCKER_CONFIG", "/nonexistent/modelfs-mount-e2e", 1);
    env = new SuiteEnv();
    env->work = std::make_unique<TempDir>();
    RegistryFixtureOptions ro;
    ro.access_log = true;
    auto reg = RegistryFixture::Start(ro);
    if (!reg.ok()) {
      suite_error = absl::StrCat("the registry did not start: ", reg.status().message());
      return;
    }
    env->registry = std::move(*reg);
    auto big = WriteAndPush(env->work->Join("big").string(), 256, 7, "models/big:v1");
    if (!big.ok()) {
      suite_error = absl::StrCat("pushing the 256 MiB model: ", big.status().message());
      return;
    }
    env->big = std::move(*big);
    auto bad = WriteAndPush(env->work->Join("bad").string(), 24, 11, "models/bad:v1");
    if (!bad.ok()) {
      suite_error = absl::StrCat("pushing the 24 MiB model: ", bad.status().message());
      return;
    }
    env->bad = std::move(*bad);
  }

  static void TearDownTestSuite() {
    delete env;
    env = nullptr;
  }

  void SetUp() override {
    SKIP_OR_FAIL_IF_UNAVAILABLE(suite_unavailable);
    ASSERT_EQ(suite_error, "") << "suite setup failed";
    tmp_ = std::make_unique<TempDir>();
    mnt_ = tmp_->Join("mnt").string();
    cache_ = tmp_->Join("cache").string();
    fs::create_directories(mnt_);
  }

  void TearDown() override {
    for (auto& m : mounts_) {
      EXPECT_OK(m->Unmount());
    }
    if (HasFailure()) {
      std::ifstream in(tmp_ ? tmp_->Join("mount.log").string() : "");
      std::stringstream ss;
      ss << in.rdbuf();
      if (!ss.str().empty()) std::cerr << "mount daemon log:\n" << ss.str();
    }
    mounts_.clear();
    tmp_.reset();
  }

  // Mounts `ref` at mnt_ with the test's cache; fails the test when it does not mount.
  ModelMount* Mount(const std::string& ref, double read_deadline_s = 0,
                    const std::string& cache = "", std::vector<std::string> extra_args = {}) {
    MountOptions o;
    o.cache_dir = cache.empty() ? cache_ : cache;
    o.read_deadline_s = read_deadline_s;
    o.extra_args = std::move(extra_args);
    o.log_file = tmp_->Join("mount.log").string();
    auto m = ModelMount::Start(ref, mnt_, o);
    EXPECT_OK(m.status());
    if (!m.ok()) return nullptr;
    mounts_.push_back(std::move(*m));
    return mounts_.back().get();
  }

  std::string InMount(const std::string& rel) const { return mnt_ + "/" + rel; }

  std::unique_ptr<TempDir> tmp_;
  std::string mnt_;
  std::string cache_;
  std::vector<std::unique_ptr<ModelMount>> mounts_;
};

// fd of a file through the mount with kernel readahead off, so a pread asks FUSE for exactly
// the pages it covers (the corruption tests must not drag a bad chunk into a good read).
int OpenNoReadahead(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
  return fd;
}

std::string SourceRange(const std::string& path, uint64_t offset, uint64_t length) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  auto r = PreadExact(fd, offset, length);
  close(fd);
  return r.ok() ? *r : std::string();
}

// 1. Ready cheaply.
TEST_F(MountE2eTest, VolumeMountIsReadyWithModelInfoAfterFetchingUnderOnePercent) {
  ModelMount* m = Mount(env->big.volume_ref);
  ASSERT_NE(m, nullptr);
  ASSERT_OK_AND_ASSIGN(std::string text, ReadWholeFile(InMount(".modelinfo.json")));
  nlohmann::json info = nlohmann::json::parse(text, nullptr, false);
  ASSERT_FALSE(info.is_discarded()) << text;
  EXPECT_EQ(info["schemaVersion"], 1);
  EXPECT_EQ(info["verification"], "chunk-index");
  EXPECT_EQ(info["chunkDigest"], "blake3");  // push's default
  EXPECT_EQ(info["format"], "safetensors");
  EXPECT_EQ(info["totals"]["parameters"].get<uint64_t>(), env->big.parameters);
  EXPECT_EQ(info["warnings"], nlohmann::json::array());

  ASSERT_OK_AND_ASSIGN(nlohmann::json stats, m->FreshStats());
  const uint64_t fetched = stats["bytes_fetched"].get<uint64_t>();
  RecordProperty("bytes_fetched_at_ready", std::to_string(fetched));
  EXPECT_LT(fetched, env->big.total_bytes / 100) << stats.dump();
  EXPECT_EQ(stats["verification_failures"], 0);
}

// 2. Reads give exactly the source bytes.
TEST_F(MountE2eTest, FullReadsOfEveryFileEqualTheSource) {
  ASSERT_NE(Mount(env->big.volume_ref), nullptr);
  for (const auto& [rel, digest] : env->big.digests) {
    uint64_t size = 0;
    ASSERT_OK_AND_ASSIGN(Digest got, DigestFile(InMount(rel), &size));
    EXPECT_EQ(got.str(), digest) << rel;
    EXPECT_EQ(size, env->big.sizes[rel]) << rel;
  }
}

TEST_F(MountE2eTest, RandomPreadsEqualTheSource) {
  ASSERT_NE(Mount(env->big.volume_ref), nullptr);
  const std::string src = env->big.dir + "/" + env->big.weights;
  const uint64_t size = env->big.sizes[env->big.weights];
  int fd = open(InMount(env->big.weights).c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  std::vector<std::pair<uint64_t, uint64_t>> reads = {
      {0, 1},                        // first byte
      {size - 1, 1},                 // last byte
      {kChunk - 7, 14},              // across the first chunk boundary
      {3 * kChunk - 1, kChunk + 2},  // three chunks, one byte of each end
      {size - 100, 4096},            // past the end: a short read
  };
  std::mt19937_64 rng(42);
  for (int i = 0; i < 200; ++i) {
    uint64_t off = rng() % size;
    uint64_t len = 1 + rng() % (3 * kChunk);
    reads.emplace_back(off, len);
  }
  for (const auto& [off, len] : reads) {
    ASSERT_OK_AND_ASSIGN(std::string got, PreadExact(fd, off, len));
    ASSERT_EQ(got.size(), std::min(len, size - off)) << "offset " << off;
    ASSERT_TRUE(got == SourceRange(src, off, len))
        << "bytes differ at offset " << off << ", length " << len;
  }
  close(fd);
}

TEST_F(MountE2eTest, MmapOfTheWeightsEqualsTheSource) {
  ASSERT_NE(Mount(env->big.volume_ref), nullptr);
  const uint64_t size = env->big.sizes[env->big.weights];
  int fd = open(InMount(env->big.weights).c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  void* p = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(p, MAP_FAILED) << strerror(errno);
  // Touch pages out of order first (page faults at random offsets), then hash it all.
  const char* bytes = static_cast<const char*>(p);
  const std::string src = env->big.dir + "/" + env->big.weights;
  std::mt19937_64 rng(9);
  for (int i = 0; i < 32; ++i) {
    uint64_t off = rng() % (size - 64);
    EXPECT_EQ(std::string(bytes + off, 64), SourceRange(src, off, 64)) << "offset " << off;
  }
  Sha256 h;
  h.Update(bytes, size);
  EXPECT_EQ(h.Finish().str(), env->big.digests[env->big.weights]);
  munmap(p, size);
}

TEST_F(MountE2eTest, SixteenConcurrentReadersOfAColdMountAllSeeTheSource) {
  ASSERT_NE(Mount(env->big.volume_ref), nullptr);
  const std::string path = InMount(env->big.weights);
  const std::string src = env->big.dir + "/" + env->big.weights;
  const uint64_t size = env->big.sizes[env->big.weights];
  const uint64_t block = kMiB;
  const uint64_t blocks = (size + block - 1) / block;
  constexpr int kThreads = 16;
  std::atomic<int> mismatches{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      int sfd = open(src.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0 || sfd < 0) {
        errors++;
      } else {
        // Every thread reads the whole file, each starting at a different block, so the cold
        // fetches overlap (single flight) and land in every order.
        for (uint64_t i = 0; i < blocks; ++i) {
          uint64_t b = (i + static_cast<uint64_t>(t) * blocks / kThreads) % blocks;
          auto got = PreadExact(fd, b * block, block);
          auto want = PreadExact(sfd, b * block, block);
          if (!got.ok() || !want.ok()) {
            errors++;
            break;
          }
          if (*got != *want) mismatches++;
        }
      }
      if (fd >= 0) close(fd);
      if (sfd >= 0) close(sfd);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
}

// 3. Corruption.
TEST_F(MountE2eTest, ChunkModeFailsOnlyReadsTouchingTheTamperedChunk) {
  const PushedModel& bad = env->bad;
  const uint64_t size = bad.sizes.at(bad.weights);
  ASSERT_GT(size, 7 * kChunk);
  ASSERT_OK_AND_ASSIGN(Digest layer, Digest::Parse(bad.digests.at(bad.weights)));
  ByteFlip flip(env->registry->BlobDataPath(layer), 5 * kChunk + 123);
  ASSERT_TRUE(flip.flipped());

  ModelMount* m = Mount(bad.volume_ref);
  ASSERT_NE(m, nullptr);
  const std::string src = bad.dir + "/" + bad.weights;
  int fd = OpenNoReadahead(InMount(bad.weights));
  ASSERT_GE(fd, 0);
  int err = 0;
  EXPECT_FALSE(PreadExact(fd, 5 * kChunk + 100, 64, &err).ok());
  EXPECT_EQ(err, EIO);
  EXPECT_FALSE(PreadExact(fd, 6 * kChunk - 4096, 4096, &err).ok());
  EXPECT_EQ(err, EIO);
  ASSERT_OK_AND_ASSIGN(std::string head, PreadExact(fd, 0, 5 * kChunk));
  EXPECT_TRUE(head == SourceRange(src, 0, 5 * kChunk)) << "bytes [0, 5 MiB) differ";
  ASSERT_OK_AND_ASSIGN(std::string tail, PreadExact(fd, 6 * kChunk, size - 6 * kChunk));
  EXPECT_TRUE(tail == SourceRange(src, 6 * kChunk, size - 6 * kChunk))
      << "bytes [6 MiB, end) differ";
  close(fd);
  ASSERT_OK_AND_ASSIGN(nlohmann::json stats, m->FreshStats());
  EXPECT_GT(stats["verification_failures"].get<uint64_t>(), 0u) << stats.dump();
}

TEST_F(MountE2eTest, ChunkModeCachesNothingBadSoARemountAfterTheFixReadsTheSource) {
  const PushedModel& bad = env->bad;
  const uint64_t size = bad.sizes.at(bad.weights);
  ASSERT_OK_AND_ASSIGN(Digest layer, Digest::Parse(bad.digests.at(bad.weights)));
  ByteFlip flip(env->registry->BlobDataPath(layer), 5 * kChunk + 123);
  ASSERT_TRUE(flip.flipped());
  ModelMount* first = Mount(bad.volume_ref);
  ASSERT_NE(first, nullptr);
  {
    int fd = OpenNoReadahead(InMount(bad.weights));
    ASSERT_GE(fd, 0);
    EXPECT_OK(PreadExact(fd, 0, 5 * kChunk).status());
    EXPECT_FALSE(PreadExact(fd, 5 * kChunk, kChunk).ok());
    EXPECT_OK(PreadExact(fd, 6 * kChunk, size - 6 * kChunk).status());
    close(fd);
  }
  ASSERT_OK(first->Unmount());
  flip.Restore();
  ASSERT_FALSE(flip.flipped());

  ModelMount* second = Mount(bad.volume_ref);
  ASSERT_NE(second, nullptr);
  ASSERT_OK_AND_ASSIGN(Digest got, DigestFile(InMount(bad.weights)));
  EXPECT_EQ(got.str(), bad.digests.at(bad.weights));
  ASSERT_OK_AND_ASSIGN(nlohmann::json stats, second->FreshStats());
  // Only the chunk that failed was fetched again: every other chunk came from the cache.
  EXPECT_EQ(stats["bytes_fetched"].get<uint64_t>(), kChunk) << stats.dump();
  EXPECT_EQ(stats["verification_failures"], 0);
}

TEST_F(MountE2eTest, WholeLayerModeFailsTheWholeTamperedFileAndRecoversAfterTheFix) {
  const PushedModel& bad = env->bad;
  const uint64_t size = bad.sizes.at(bad.weights);
  ASSERT_OK_AND_ASSIGN(Digest layer, Digest::Parse(bad.digests.at(bad.weights)));
  ByteFlip flip(env->registry->BlobDataPath(layer), 5 * kChunk + 123);
  ASSERT_TRUE(flip.flipped());

  ModelMount* m = Mount(bad.model_ref);
  ASSERT_NE(m, nullptr);
  {
    int fd = OpenNoReadahead(InMount(bad.weights));
    ASSERT_GE(fd, 0);
    int err = 0;
    EXPECT_FALSE(PreadExact(fd, 0, 4096, &err).ok());
    EXPECT_EQ(err, EIO);
    EXPECT_FALSE(PreadExact(fd, size - 4096, 4096, &err).ok());
    EXPECT_EQ(err, EIO);
    close(fd);
  }
  ASSERT_OK_AND_ASSIGN(nlohmann::json stats, m->FreshStats());
  EXPECT_EQ(stats["verification"], "whole-layer");
  EXPECT_GT(stats["verification_failures"].get<uint64_t>(), 0u) << stats.dump();
  EXPECT_GE(stats["quarantined_layers"].get<uint64_t>(), 1u) << stats.dump();
  ASSERT_OK(m->Unmount());
  flip.Restore();

  ModelMount* again = Mount(bad.model_ref);
  ASSERT_NE(again, nullptr);
  ASSERT_OK_AND_ASSIGN(Digest got, DigestFile(InMount(bad.weights)));
  EXPECT_EQ(got.str(), bad.digests.at(bad.weights));
}

// 4. Registry stopped mid-read.
// The cache file of a sealed layer changed while mounted, after every chunk of it was verified
// in this process (as bit rot, a bad disk or a process writing to the cache would), its pages
// dropped: the scrub finds it within an interval, and reads after that get the right bytes,
// fetched again, never the changed ones. (The audit is off, so that the scrub, not the audit,
// is what finds it.)
TEST_F(MountE2eTest, TheScrubFindsACacheFileChangedWhileMountedAndLaterReadsGetTheRightBytes) {
  const PushedModel& bad = env->bad;
  ModelMount* m = Mount(bad.volume_ref, 0, "", {"--scrub-interval", "1s", "--no-audit"});
  ASSERT_NE(m, nullptr);
  ASSERT_OK_AND_ASSIGN(Digest got, DigestFile(InMount(bad.weights)));
  ASSERT_EQ(got.str(), bad.digests.at(bad.weights));
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  nlohmann::json stats;
  do {
    ASSERT_OK_AND_ASSIGN(stats, m->FreshStats());
  } while (stats["sealed_layers"].get<uint64_t>() == 0 && absl::Now() < give_up);
  ASSERT_GE(stats["sealed_layers"].get<uint64_t>(), 1u) << stats.dump();

  ASSERT_OK_AND_ASSIGN(Digest layer, Digest::Parse(bad.digests.at(bad.weights)));
  const std::string data = cache_ + "/blobs/sha256/" + std::string(layer.hex()) + ".data";
  ByteFlip flip(data, 5 * kChunk + 123);
  ASSERT_TRUE(flip.flipped());
  if (int fd = open(data.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
  }
  do {
    ASSERT_OK_AND_ASSIGN(stats, m->FreshStats());
  } while (stats["scrub_failures"].get<uint64_t>() == 0 && absl::Now() < give_up);
  EXPECT_EQ(stats["scrub_failures"], 1) << stats.dump();
  EXPECT_GE(stats["scrubbed_bytes"].get<uint64_t>(), 5 * kChunk) << stats.dump();

  EXPECT_EQ(stats["scrub_repairs"], 1) << stats.dump();

  const int src = open((bad.dir + "/" + bad.weights).c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(src, 0);
  absl::StatusOr<std::string> want = PreadExact(src, 5 * kChunk, kChunk);
  close(src);
  ASSERT_OK(want.status());
  int fd = OpenNoReadahead(InMount(bad.weights));
  ASSERT_GE(fd, 0);
  absl::StatusOr<std::string> now = PreadExact(fd, 5 * kChunk, kChunk);
  close(fd);
  ASSERT_OK(now.status());
  EXPECT_TRUE(*now == *want) << "the chunk read after the finding";
  ASSERT_OK_AND_ASSIGN(std::string log, ReadWholeFile(tmp_->Join("mount.log").string()));
  EXPECT_THAT(log, HasSubstr("component=cache msg=\"the scrub found the layer changed on disk"));
  // One structured event naming the layer, the changed chunk's bytes and the registry that
  // serves it again.
  EXPECT_THAT(log, HasSubstr(absl::StrCat("digest=", layer.str(), " range=", 5 * kChunk, "-",
                                          6 * kChunk - 1, " registry=", env->registry->host_port(),
                                          " reason=")));
  EXPECT_THAT(log, HasSubstr(absl::StrCat("(bytes [", 5 * kChunk, ", ", 6 * kChunk, "))")));
}

// What the scrub cannot do (cache-format.md, "The scrub"): a file opened by passthrough before
// the change is read by the kernel from the cache file, so that open keeps seeing the changed
// byte after the scrub found it; opens made after the finding read the right bytes, fetched
// again into a new cache file.
TEST_F(MountE2eTest, APassthroughOpenMadeBeforeTheScrubsFindingStillReadsTheChangedFile) {
  const PushedModel& bad = env->bad;
  ModelMount* m = Mount(bad.volume_ref, 0, "", {"--scrub-interval", "1s", "--no-audit"});
  ASSERT_NE(m, nullptr);
  ASSERT_OK(DigestFile(InMount(bad.weights)).status());
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  nlohmann::json stats;
  do {
    ASSERT_OK_AND_ASSIGN(stats, m->FreshStats());
  } while (stats["sealed_layers"].get<uint64_t>() == 0 && absl::Now() < give_up);
  ASSERT_GE(stats["sealed_layers"].get<uint64_t>(), 1u) << stats.dump();
  // Opened once sealed: served by passthrough.
  int held = OpenNoReadahead(InMount(bad.weights));
  ASSERT_GE(held, 0);
  const uint64_t at = 5 * kChunk + 123;
  ASSERT_OK_AND_ASSIGN(std::string before, PreadExact(held, at, 1));

  ASSERT_OK_AND_ASSIGN(Digest layer, Digest::Parse(bad.digests.at(bad.weights)));
  const std::string data = cache_ + "/blobs/sha256/" + std::string(layer.hex()) + ".data";
  ByteFlip flip(data, at);
  ASSERT_TRUE(flip.flipped());
  do {
    ASSERT_OK_AND_ASSIGN(stats, m->FreshStats());
  } while (stats["scrub_failures"].get<uint64_t>() == 0 && absl::Now() < give_up);
  ASSERT_EQ(stats["scrub_failures"], 1) << stats.dump();

  ASSERT_OK_AND_ASSIGN(std::string after, PreadExact(held, at, 1));
  EXPECT_EQ(static_cast<unsigned char>(after[0]), static_cast<unsigned char>(before[0] ^ 0xff))
      << "the open made before the finding";
  close(held);
  int fresh = OpenNoReadahead(InMount(bad.weights));
  ASSERT_GE(fresh, 0);
  ASSERT_OK_AND_ASSIGN(std::string now, PreadExact(fresh, at, 1));
  close(fresh);
  EXPECT_EQ(now, before) << "an open made after the finding";
}

TEST_F(MountE2eTest, ReadFailsWithEioNearTheDeadlineWhileTheRegistryIsDownAndWorksAfterRestart) {
  ModelMount* m = Mount(env->big.volume_ref, /*read_deadline_s=*/3);
  ASSERT_NE(m, nullptr);
  const std::string src = env->big.dir + "/" + env->big.weights;
  int fd = OpenNoReadahead(InMount(env->big.weights));
  ASSERT_GE(fd, 0);
  ASSERT_OK(PreadExact(fd, 0, kMiB).status());

  env->registry->Stop();
  struct RestartOnExit {
    ~RestartOnExit() {
      if (!env->registry->running()) (void)env->registry->Restart();
    }
  } restart_on_exit;
  const uint64_t off = 200 * kMiB + 4096;
  int err = 0;
  auto start = std::chrono::steady_clock::now();
  auto failed = PreadExact(fd, off, 65536, &err);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(err, EIO);
  // EIO arrives about one deadline (3 s) after the read began, not one per kernel retry.
  EXPECT_GT(seconds, 0.0);
  EXPECT_LT(seconds, 4.5) << "EIO after " << seconds << " s";
  RecordProperty("eio_after_seconds", std::to_string(seconds));

  ASSERT_OK(env->registry->Restart());
  ASSERT_OK_AND_ASSIGN(std::string got, PreadExact(fd, off, 65536));
  EXPECT_TRUE(got == SourceRange(src, off, 65536)) << "bytes differ after the restart";
  close(fd);
}

// 5. A warm cache.
TEST_F(MountE2eTest, SecondMountWithTheSameCacheReadsEveryFileWithoutRegistryBytes) {
  ModelMount* first = Mount(env->big.volume_ref);
  ASSERT_NE(first, nullptr);
  for (const auto& [rel, digest] : env->big.digests) {
    ASSERT_OK(DigestFile(InMount(rel)).status()) << rel;
  }
  ASSERT_OK(first->Unmount());

  std::vector<Digest> layer_digests;
  for (const auto& [rel, digest] : env->big.digests)
    layer_digests.push_back(*Digest::Parse(digest));
  ASSERT_OK_AND_ASSIGN(std::string log_before, ReadWholeFile(env->registry->log_path()));
  // The access log does show layer fetches (the first mount's), so its silence below counts.
  ASSERT_THAT(log_before, HasSubstr(absl::StrCat("GET /v2/models/big/blobs/",
                                                 env->big.digests.at(env->big.weights))));

  ModelMount* second = Mount(env->big.volume_ref);
  ASSERT_NE(second, nullptr);
  for (const auto& [rel, digest] : env->big.digests) {
    ASSERT_OK_AND_ASSIGN(Digest got, DigestFile(InMount(rel)));
    EXPECT_EQ(got.str(), digest) << rel;
  }
  // Verified whole layers are read by the kernel from the cache (passthrough), past modelfs's
  // counters; .modelinfo.json, made on its first lookup, reads the headers through the cache.
  ASSERT_OK(DigestFile(InMount(".modelinfo.json")).status());
  ASSERT_OK_AND_ASSIGN(nlohmann::json stats, second->FreshStats());
  EXPECT_EQ(stats["bytes_fetched"], 0) << stats.dump();
  EXPECT_EQ(stats["requests"], 0) << stats.dump();
  EXPECT_EQ(stats["cache_misses"], 0) << stats.dump();
  EXPECT_GT(stats["cache_hits"].get<uint64_t>(), 0u) << stats.dump();

  // The registry agrees: no GET of any file's layer since the second mount began.
  ASSERT_OK_AND_ASSIGN(std::string log_after, ReadWholeFile(env->registry->log_path()));
  std::string since = log_after.substr(std::min(log_before.size(), log_after.size()));
  for (const Digest& d : layer_digests) {
    EXPECT_THAT(since,
                ::testing::Not(HasSubstr(absl::StrCat("GET /v2/models/big/blobs/", d.str()))))
        << "layer " << d.str() << " was fetched again";
  }
}

// Pages of `path` in the page cache (its own inode's: for a FUSE file, not the cache file's);
// nullopt when it cannot be mapped or asked, so that a failure never reads as "no pages".
std::optional<uint64_t> ResidentPages(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || st.st_size == 0) {
    if (fd >= 0) close(fd);
    return std::nullopt;
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* p = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return std::nullopt;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((size + page - 1) / page);
  std::optional<uint64_t> n;
  if (mincore(p, size, vec.data()) == 0) {
    n = 0;
    for (unsigned char v : vec) *n += v & 1;
  }
  munmap(p, size);
  return n;
}

TEST_F(MountE2eTest, WithTheReadPathSwitchesOffEveryFileStillEqualsTheSource) {
  // Cold: cached opens (no direct_io) and the cache file's pages kept after they are served.
  ModelMount* cold = Mount(env->big.volume_ref, 0, "", {"--no-direct-io", "--keep-served-pages"});
  ASSERT_NE(cold, nullptr);
  uint64_t total = 0;
  for (const auto& [rel, digest] : env->big.digests) {
    ASSERT_OK_AND_ASSIGN(Digest got, DigestFile(InMount(rel)));
    EXPECT_EQ(got.str(), digest) << rel;
    total += env->big.sizes[rel];
  }
  // Without direct_io the FUSE file keeps the pages read() brought in; with it, none.
  std::optional<uint64_t> resident = ResidentPages(InMount(env->big.weights));
  ASSERT_TRUE(resident.has_value()) << "cannot map or mincore " << env->big.weights;
  EXPECT_GT(*resident, 0u);
  ASSERT_OK_AND_ASSIGN(nlohmann::json stats, cold->FreshStats());
  EXPECT_EQ(stats["page_cache_bytes_dropped"], 0) << stats.dump();
  ASSERT_OK(cold->Unmount());

  // Warm, passthrough off: the daemon serves every byte from the cache, none from the registry.
  ModelMount* warm = Mount(env->big.volume_ref, 0, "", {"--no-passthrough"});
  ASSERT_NE(warm, nullptr);
  for (const auto& [rel, digest] : env->big.digests) {
    ASSERT_OK_AND_ASSIGN(Digest got, DigestFile(InMount(rel)));
    EXPECT_EQ(got.str(), digest) << rel;
  }
  resident = ResidentPages(InMount(env->big.weights));
  ASSERT_TRUE(resident.has_value()) << "cannot map or mincore " << env->big.weights;
  EXPECT_EQ(*resident, 0u);  // direct_io again
  ASSERT_OK_AND_ASSIGN(stats, warm->FreshStats());
  EXPECT_EQ(stats["bytes_fetched"], 0) << stats.dump();
  EXPECT_GE(stats["bytes_served"].get<uint64_t>(), total) << stats.dump();
}

// 6. Mount options and permissions.
// Every node shows the model's creation time: `modelfs push` records the newest mtime of the
// pushed files as M's createdAt (and V's created annotation), the same on every mount.
TEST_F(MountE2eTest, EveryFileAndDirectoryShowsTheModelsCreationTimeOnEveryMount) {
  int64_t newest = 0;
  for (const auto& [rel, digest] : env->big.digests) {
    struct stat st;
    ASSERT_EQ(stat((env->big.dir + "/" + rel).c_str(), &st), 0) << rel;
    newest = std::max<int64_t>(newest, st.st_mtim.tv_sec);
  }
  ASSERT_GT(newest, 0);
  for (int mount = 0; mount < 2; ++mount) {
    ModelMount* m = Mount(env->big.volume_ref);
    ASSERT_NE(m, nullptr);
    std::vector<std::string> paths = {mnt_, InMount(".modelinfo.json")};
    for (const auto& [rel, digest] : env->big.digests) paths.push_back(InMount(rel));
    for (const std::string& p : paths) {
      struct stat st;
      ASSERT_EQ(stat(p.c_str(), &st), 0) << p;
      EXPECT_EQ(st.st_mtim.tv_sec, newest) << p << " on mount " << mount;
      EXPECT_EQ(st.st_ctim.tv_sec, newest) << p << " on mount " << mount;
    }
    ASSERT_OK(m->Unmount());
  }
}

TEST_F(MountE2eTest, MountIsReadOnlyNosuidNodevWithRootOwnedReadOnlyModes) {
  ASSERT_NE(Mount(env->big.volume_ref), nullptr);
  std::optional<MountInfoEntry> e = FindMount(mnt_);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->fs_type, "fuse.modelfs");
  EXPECT_TRUE(HasOption(e->mount_options, "ro")) << e->mount_options;
  EXPECT_TRUE(HasOption(e->mount_options, "nosuid")) << e->mount_options;
  EXPECT_TRUE(HasOption(e->mount_options, "nodev")) << e->mount_options;

  std::vector<std::string> paths = {mnt_};
  for (const auto& entry : fs::recursive_directory_iterator(mnt_)) {
    paths.push_back(entry.path().string());
  }
  EXPECT_EQ(paths.size(), env->big.digests.size() + 2);  // + the root + .modelinfo.json
  for (const std::string& p : paths) {
    struct stat st;
    ASSERT_EQ(lstat(p.c_str(), &st), 0) << p;
    EXPECT_EQ(st.st_uid, 0u) << p;
    EXPECT_EQ(st.st_gid, 0u) << p;
    if (S_ISDIR(st.st_mode)) {
      EXPECT_EQ(st.st_mode & 07777, 0555u) << p;
    } else {
      EXPECT_TRUE(S_ISREG(st.st_mode)) << p;
      EXPECT_EQ(st.st_mode & 07777, 0444u) << p;
    }
  }
}

// 7. Bad input.
TEST_F(MountE2eTest, MountingANonexistentTagFailsNamingItAndLeavesNoMount) {
  const std::string ref = absl::StrCat(env->registry->host_port(), "/models/big:no-such-tag");
  ASSERT_OK_AND_ASSIGN(CommandResult r,
                       RunCommand({ModelfsBinary(), "mount", "--plain-http", "--cache", cache_,
                                   "--prefetch", "none", ref, mnt_}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("no-such-tag"));
  EXPECT_FALSE(FindMount(mnt_).has_value());
}

TEST_F(MountE2eTest, MountingOntoARegularFileExitsWithUsageError) {
  const std::string file = tmp_->WriteFile("not-a-dir", "x").string();
  ASSERT_OK_AND_ASSIGN(CommandResult r,
                       RunCommand({ModelfsBinary(), "mount", "--plain-http", "--cache", cache_,
                                   "--prefetch", "none", env->big.volume_ref, file}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("not-a-dir"));
  EXPECT_FALSE(FindMount(file).has_value());
}

}  // namespace
}  // namespace modelfs::testing
