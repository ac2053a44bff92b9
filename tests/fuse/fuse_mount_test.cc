// FuseMount end to end: a real FUSE mount of a ModelTree over in-memory blobs, exercised with
// plain POSIX calls (stat, readdir, read, pread, mmap, statvfs) as a model loader would.
// Needs /dev/fuse and root (allow_other); skipped without /dev/fuse.
#include "fuse/fuse_adapter.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_split.h"
#include "tests/fuse/fake_blob_reader.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace modelfs {
namespace {

using ::modelfs::testing::FakeBlobReader;
using ::modelfs::testing::TempDir;
using ::testing::Contains;
using ::testing::UnorderedElementsAre;

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = rng();
    memcpy(out.data() + i, &v, std::min<size_t>(8, n - i));
  }
  return out;
}

// The fields of our line in /proc/self/mountinfo ("" when not mounted).
struct MountInfo {
  std::string mount_options;
  std::string fstype;
  std::string source;
  std::string super_options;
};

std::optional<MountInfo> FindMount(const std::string& dir) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    if (f.size() < 10 || f[4] != dir) continue;
    size_t dash = 6;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (dash + 3 >= f.size()) continue;
    return MountInfo{f[5], f[dash + 1], f[dash + 2], f[dash + 3]};
  }
  return std::nullopt;
}

std::set<std::string> Split(const std::string& csv) {
  std::vector<std::string> v = absl::StrSplit(csv, ',');
  return std::set<std::string>(v.begin(), v.end());
}

std::set<std::string> ListDir(const std::string& dir) {
  std::set<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) names.insert(e->d_name);
  closedir(d);
  return names;
}

class FuseMountTest : public ::testing::Test {
 protected:
  static constexpr size_t kLayerSize = 3 * 1024 * 1024 + 12345;
  static constexpr uint64_t kWeightsOffset = 4096 + 7;

  void SetUp() override {
    if (access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "no /dev/fuse";
    mnt_ = std::filesystem::canonical(tmp_.path()).string() + "/mnt";
    std::filesystem::create_directories(mnt_);

    layer_bytes_ = RandomBytes(kLayerSize, 42);
    weights_ = layer_bytes_.substr(kWeightsOffset, kLayerSize - kWeightsOffset - 100);
    layer_ = reader_.Add(layer_bytes_);
    config_ = reader_.Add("{\"architectures\":[\"LlamaForCausalLM\"]}");
    bad_bytes_ = RandomBytes(200000, 7);
    bad_ = reader_.Add(bad_bytes_);
  }

  void TearDown() override {
    if (mount_ != nullptr) {
      EXPECT_OK(mount_->Unmount());
      mount_.reset();
    }
    if (!mnt_.empty() && FindMount(mnt_).has_value()) {
      ADD_FAILURE() << mnt_ << " still mounted; forcing fusermount3 -u -z";
      std::string cmd = "fusermount3 -u -z '" + mnt_ + "'";
      if (system(cmd.c_str()) != 0) ADD_FAILURE() << cmd << " failed";
    }
  }

  std::vector<TreeFile> Files() const {
    return {
        TreeFile{"model.safetensors", layer_, kWeightsOffset, weights_.size(), ""},
        TreeFile{"config.json", config_, 0, 38, ""},
        TreeFile{"tokenizer/vocab.txt", layer_, 0, 16, ""},
        TreeFile{"broken.bin", bad_, 0, bad_bytes_.size(), ""},
    };
  }

  void MountSingle() {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<ModelTree> tree,
                         ModelTree::SingleModel(&reader_, Files(), {{".modelinfo.json", "{}\n"}}));
    ASSERT_OK_AND_ASSIGN(mount_, FuseMount::Mount(mnt_, std::move(tree)));
  }

  std::string Path(const std::string& rel) const { return mnt_ + "/" + rel; }

  // Declared first so that it is destroyed last, after the mount is gone.
  TempDir tmp_;
  FakeBlobReader reader_;
  std::string mnt_;
  std::string layer_bytes_;
  std::string weights_;
  std::string bad_bytes_;
  Digest layer_;
  Digest config_;
  Digest bad_;
  std::unique_ptr<FuseMount> mount_;
};

TEST_F(FuseMountTest, FilesAre0444AndDirectories0555OwnedByRoot) {
  ASSERT_NO_FATAL_FAILURE(MountSingle());
  struct stat st;
  ASSERT_EQ(stat(mnt_.c_str(), &st), 0) << strerror(errno);
  EXPECT_EQ(st.st_mode, static_cast<mode_t>(S_IFDIR | 0555));
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_gid, 0u);
  EXPECT_EQ(st.st_ino, 1u);
  ASSERT_EQ(stat(Path("model.safetensors").c_str(), &st), 0) << strerror(errno);
  EXPECT_EQ(st.st_mode, static_cast<mode_t>(S_IFREG | 0444));
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), weights_.size());
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_nlink, 1u);
  ASSERT_EQ(stat(Path("tokenizer").c_str(), &st), 0) << strerror(errno);
  EXPECT_EQ(st.st_mode, static_cast<mode_t>(S_IFDIR | 0555));
}

TEST_F(FuseMountTest, InodeNumbersSeenByStatAreTheTreesInodes) {
  ASSERT_NO_FATAL_FAILURE(MountSingle());
  ASSERT_OK_AND_ASSIGN(NodeAttr a, mount_->tree().Lookup(ModelTree::kRootIno, "config.json"));
  mount_->tree().Forget(a.ino, 1);
  struct stat st;
  ASSERT_EQ(stat(Path("config.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_ino, a.ino);
}

TEST_F(FuseMountTest, ReadDirListsTheModel) {
  ASSERT_NO_FATAL_FAILURE(MountSingle());
  EXPECT_THAT(ListDir(mnt_), UnorderedElementsAre(".", "..", ".modelinfo.json", "broken.bin",
                                                  "config.json", "model.safetensors", "tokenizer"));
  EXPECT_THAT(ListDir(Path("tokenizer")), UnorderedElementsAre(".", "..", "vocab.txt"));
}

TEST_F(FuseMountTest, ReadingAWholeFileGivesItsExactBytes) {
  ASSERT_NO_FATAL_FAILURE(MountSingle());
  std::ifstream in(Path("model.safetensors"), std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str().size(), weights_.size());
  EXPECT_TRUE(ss.str() == weights_);
  std::ifstream cfg(Path("config.json"), std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(cfg)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "{\"architectures\":[\"LlamaForCausalLM\"]}");
}

TEST_F(FuseMountTest, SyntheticFileReadsBack) {
  ASSERT_NO_FATAL_FAILURE(MountSingle());
  std::ifstream in(Path(".modelinfo.json"), std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "{}\n");
}

TEST_F(FuseMountTest, PreadAtRandomOffsetsGivesExactBytes) {
  ASSERT_NO_FATAL_FAILURE(MountSingle());
  int fd = open(Path("model.safetensors").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << strerror(errno);
  std::mt19937_64 rng(1);
  for (int i = 0; i < 300; ++i) {
    uint64_t off = rng() % (weights_.size() + 10);
    size_t len = 1 + rng() % (1536 * 1024);
    std::string buf(len, '\0');
    ssize_t n = pread(fd, buf.data(), len, static_cast<off_t>(off));
    size_t want = off >= weights_.size() ? 0 : std::min<uint64_t>(len, weights_.size() - off);
    ASSERT_EQ(n, static_cast<ssize_t>(want)) << "offset " << off << " len " << len;
    buf.resize(static_cast<size_t>(n));
    ASSERT_TRUE(buf == weights_.substr(std::min<uint64_t>(off, weights_.size()), want))
        << "offset " << off;
  }
  close(fd);
}

TEST_F(FuseMountTest, MmapOfAFileMatchesItsBytes) {
  ASSERT_NO_FATAL_FAILURE(MountSingle());
  int fd = open(Path("model.safetensors").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << strerror(errno);
  void* p = mmap(nullptr, weights_.size(), PROT_READ, MAP_PRIVATE, fd, 0);
  ASSERT_NE(p, MAP_FAILED) << strerror(errno);
  EXPECT_EQ(memcmp(p, weights_.data(), weights_.size()), 0);
  munmap(p, weights_.size());
  close(fd);
}

TEST_F(FuseMountTest, SixteenThreadsReadConcurrently) {
  ASSERT_NO_FATAL_FAILURE(MountSingle());
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      int fd = open(Path("model.safetensors").c_str(), O_RDONLY);
      if (fd < 0) {
        ++mismatches;
        return;
      }
      std::mt19937_64 rng(100 + t);
      for (int i = 0; i < 50; ++i) {
        uint64_t off = rng() % weights_.size();
        size_t len = std::min<uint64_t>(1 + rng() % (256 * 1024), weights_.size() - off);
        std::string buf(len, '\0');
        ssize_t n = pread(fd, buf.data(), len, static_cast<off_t>(off));
        if (n != static_cast<ssize_t>(len) || buf != weights_.substr(off, len)) ++mismatches;
      }
      close(fd);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST_F(FuseMountTest, AVerificationFailureIsEio) {
  ASSERT_NO_FATAL_FAILURE(MountSingle());
  reader_.Fail(bad_, absl::DataLossError("chunk 0 of layer failed verification"));
  int fd = open(Path("broken.bin").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << strerror(errno);
  char buf[4096];
  errno = 0;
  EXPECT_EQ(pread(fd, buf, sizeof(buf), 8192), -1);
  EXPECT_EQ(errno, EIO);
  close(fd);
}

TEST_F(FuseMountTest, StatfsReportsTheModelSizeReadOnly) {
  ASSERT_NO_FATAL_FAILURE(MountSingle());
  struct statvfs st;
  ASSERT_EQ(statvfs(mnt_.c_str(), &st), 0) << strerror(errno);
  uint64_t total = weights_.size() + 38 + 16 + bad_bytes_.size() + 3;
  EXPECT_EQ(st.f_frsize, 4096u);
  EXPECT_EQ(st.f_blocks, (total + 4095) / 4096);
  EXPECT_EQ(st.f_bfree, 0u);
  EXPECT_EQ(st.f_bavail, 0u);
  EXPECT_EQ(st.f_files, 7u);  // root, tokenizer/, five files
  EXPECT_NE(st.f_flag & ST_RDONLY, 0u);
}

TEST_F(FuseMountTest, MountinfoShowsReadOnlyNosuidNodevModelfs) {
  ASSERT_NO_FATAL_FAILURE(MountSingle());
  std::optional<MountInfo> info = FindMount(mnt_);
  ASSERT_TRUE(info.has_value()) << mnt_ << " not in /proc/self/mountinfo";
  std::set<std::string> opts = Split(info->mount_options);
  EXPECT_THAT(opts, Contains("ro"));
  EXPECT_THAT(opts, Contains("nosuid"));
  EXPECT_THAT(opts, Contains("nodev"));
  EXPECT_EQ(info->fstype, "fuse.modelfs");
  EXPECT_EQ(info->source, "modelfs");
  std::set<std::string> super = Split(info->super_options);
  EXPECT_THAT(super, Contains("allow_other"));
  EXPECT_THAT(super, Contains("default_permissions"));
  EXPECT_THAT(super, Contains("max_read=1048576"));
}

TEST_F(FuseMountTest, OpeningForWritingFailsReadOnly) {
  ASSERT_NO_FATAL_FAILURE(MountSingle());
  errno = 0;
  EXPECT_EQ(open(Path("config.json").c_str(), O_WRONLY), -1);
  EXPECT_EQ(errno, EROFS);
  errno = 0;
  EXPECT_EQ(open(Path("new-file").c_str(), O_WRONLY | O_CREAT, 0644), -1);
  EXPECT_EQ(errno, EROFS);
}

TEST_F(FuseMountTest, AMissingNameIsEnoent) {
  ASSERT_NO_FATAL_FAILURE(MountSingle());
  struct stat st;
  errno = 0;
  EXPECT_EQ(stat(Path("nope").c_str(), &st), -1);
  EXPECT_EQ(errno, ENOENT);
}

TEST_F(FuseMountTest, ExtendedAttributesAreAbsent) {
  ASSERT_NO_FATAL_FAILURE(MountSingle());
  char buf[64];
  errno = 0;
  EXPECT_EQ(getxattr(Path("config.json").c_str(), "user.test", buf, sizeof(buf)), -1);
  EXPECT_EQ(errno, ENODATA);
  EXPECT_EQ(listxattr(Path("config.json").c_str(), buf, sizeof(buf)), 0);
}

TEST_F(FuseMountTest, UnmountRemovesTheMountAndIsIdempotent) {
  ASSERT_NO_FATAL_FAILURE(MountSingle());
  ASSERT_TRUE(FindMount(mnt_).has_value());
  EXPECT_OK(mount_->Unmount());
  EXPECT_FALSE(FindMount(mnt_).has_value());
  EXPECT_OK(mount_->Unmount());
  EXPECT_OK(mount_->Wait());
}

TEST_F(FuseMountTest, UnmountSucceedsWhileAFileIsOpen) {
  ASSERT_NO_FATAL_FAILURE(MountSingle());
  int fd = open(Path("config.json").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::thread closer([fd] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    close(fd);
  });
  EXPECT_OK(mount_->Unmount());
  closer.join();
  EXPECT_FALSE(FindMount(mnt_).has_value());
}

TEST_F(FuseMountTest, AnExternalUnmountEndsTheSession) {
  ASSERT_NO_FATAL_FAILURE(MountSingle());
  std::string cmd = "fusermount3 -u '" + mnt_ + "'";
  ASSERT_EQ(system(cmd.c_str()), 0);
  EXPECT_OK(mount_->Wait());
  EXPECT_OK(mount_->Unmount());
}

TEST_F(FuseMountTest, TwoModelsShareOneMountAndARemovedModelVanishesAtOnce) {
  auto tree = std::make_shared<ModelTree>(&reader_);
  ASSERT_OK(tree->AddModel("sha256-aaaa", Files()));
  ASSERT_OK(tree->AddModel("sha256-bbbb", {TreeFile{"config.json", config_, 0, 38, ""}}));
  ASSERT_OK_AND_ASSIGN(mount_, FuseMount::Mount(mnt_, tree));
  EXPECT_THAT(ListDir(mnt_), UnorderedElementsAre(".", "..", "sha256-aaaa", "sha256-bbbb"));
  struct stat st;
  ASSERT_EQ(stat(Path("sha256-bbbb/config.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 38);
  ASSERT_EQ(stat(mnt_.c_str(), &st), 0);
  EXPECT_EQ(st.st_nlink, 4u);

  ASSERT_OK(mount_->RemoveModel("sha256-bbbb"));
  errno = 0;
  EXPECT_EQ(stat(Path("sha256-bbbb/config.json").c_str(), &st), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_THAT(ListDir(mnt_), UnorderedElementsAre(".", "..", "sha256-aaaa"));

  ASSERT_OK(tree->AddModel("sha256-cccc", {TreeFile{"w", layer_, 0, 16, ""}}));
  ASSERT_EQ(stat(Path("sha256-cccc/w").c_str(), &st), 0) << strerror(errno);
  EXPECT_EQ(st.st_size, 16);
}

}  // namespace
}  // namespace modelfs
