// FuseMount end to end: a real FUSE mount of a ModelTree over in-memory blobs, exercised with
// plain POSIX calls (stat, readdir, read, pread, mmap, statvfs) as a model loader would.
// Needs /dev/fuse and root (allow_other); skipped without /dev/fuse.
//
// The restart tests (FuseRestartTest) play the daemon, systemd's fd store and a pod with
// processes: servers run in freshly forked children (never FuseMount work in a process that
// has threads), the test process keeps a dup of /dev/fuse as the fd store would and reads
// through the mount as a pod would, and a "crash" is SIGKILL.
#include "fuse/fuse_adapter.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
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

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "testsupport/fakes/fake_blob_reader.h"
#include "testsupport/fakes/fake_clock.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

using ::modelfs::testing::FakeBlobReader;
using ::modelfs::testing::FakeClock;
using ::modelfs::testing::StatusIs;
using ::modelfs::testing::TempDir;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::Pair;
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
    SKIP_OR_FAIL_IF_UNAVAILABLE(access("/dev/fuse", R_OK | W_OK) != 0 ? "no /dev/fuse" : "");
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

// Pages of `fd`'s page cache (its own mapping, not a backing file's), by cachestat(2) (Linux
// 6.5), which unlike mincore does not map the file (an mmap of a direct_io file would drop
// them first); -1 where the kernel lacks it.
int64_t CachedPages(int fd) {
  struct {
    uint64_t off, len;
  } range{0, 0};  // len 0: to the end of the file
  struct {
    uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
  } cs{};
  constexpr long kCachestat = 451;  // x86-64 and arm64 alike
  if (syscall(kCachestat, fd, &range, &cs, 0) != 0) return -1;
  return static_cast<int64_t>(cs.nr_cache);
}

// The node should hold one copy of the weights, the cache file's pages. A file not served by
// passthrough is direct_io, so reading it leaves nothing in its page cache; a shared mapping
// still works. The same read through a cached open fills the page cache.
TEST_F(FuseMountTest, ReadsOfADirectIoFileLeaveNoCopyInItsPageCacheAndSharedMmapWorks) {
  for (bool direct : {true, false}) {
    SCOPED_TRACE(direct ? "direct_io reads" : "cached reads");
    FuseMountOptions options;
    options.direct_io_reads = direct;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<ModelTree> tree,
                         ModelTree::SingleModel(&reader_, Files(), {{".modelinfo.json", "{}\n"}}));
    ASSERT_OK_AND_ASSIGN(mount_, FuseMount::Mount(mnt_, std::move(tree), options));
    SKIP_OR_FAIL_IF_UNAVAILABLE(!direct || mount_->direct_io_reads()
                                    ? ""
                                    : "a kernel with FUSE_DIRECT_IO_ALLOW_MMAP (Linux 6.6)");
    EXPECT_EQ(mount_->direct_io_reads(), direct);
    int fd = open(Path("model.safetensors").c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << strerror(errno);
    std::string got(weights_.size(), '\0');
    size_t done = 0;
    while (done < got.size()) {
      ssize_t n = read(fd, got.data() + done, std::min<size_t>(got.size() - done, 16 << 20));
      ASSERT_GT(n, 0) << strerror(errno);
      done += static_cast<size_t>(n);
    }
    EXPECT_TRUE(got == weights_);
    const int64_t cached = CachedPages(fd);
    SKIP_OR_FAIL_IF_UNAVAILABLE(cached >= 0 ? "" : "cachestat(2) (Linux 6.5)");
    if (direct) {
      EXPECT_EQ(cached, 0);
    } else {
      EXPECT_GT(cached, static_cast<int64_t>(weights_.size() / 4096 / 2));
    }
    void* map = mmap(nullptr, weights_.size(), PROT_READ, MAP_SHARED, fd, 0);
    ASSERT_NE(map, MAP_FAILED) << strerror(errno);
    EXPECT_EQ(memcmp(map, weights_.data(), weights_.size()), 0);
    munmap(map, weights_.size());
    close(fd);
    ASSERT_OK(mount_->Unmount());
    mount_.reset();
  }
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

// A BlobReader whose every read takes `step` on a fake clock: a fetch of known duration.
class SlowOnFakeClockBlobReader : public BlobReader {
 public:
  SlowOnFakeClockBlobReader(BlobReader* inner, FakeClock* clock, absl::Duration step)
      : inner_(inner), clock_(clock), step_(step) {}
  absl::StatusOr<std::string> Read(const Digest& digest, uint64_t offset,
                                   uint64_t length) override {
    clock_->Advance(step_);
    return inner_->Read(digest, offset, length);
  }

 private:
  BlobReader* inner_;
  FakeClock* clock_;
  absl::Duration step_;
};

TEST_F(FuseMountTest, OnReadReportsTheDurationOfAReadOnTheMountsClock) {
  FakeClock clock;
  SlowOnFakeClockBlobReader slow(&reader_, &clock, absl::Milliseconds(250));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ModelTree> tree, ModelTree::SingleModel(&slow, Files(), {}));
  absl::Mutex mu;
  std::vector<std::pair<absl::Duration, bool>> reads;
  FuseMountOptions options;
  options.clock = &clock;
  options.on_read = [&](absl::Duration latency, bool ok) {
    absl::MutexLock lock(&mu);
    reads.emplace_back(latency, ok);
  };
  ASSERT_OK_AND_ASSIGN(mount_, FuseMount::Mount(mnt_, std::move(tree), options));

  int fd = open(Path("config.json").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << strerror(errno);
  char buf[38];
  EXPECT_EQ(pread(fd, buf, sizeof(buf), 0), 38);
  close(fd);
  ASSERT_OK(mount_->Unmount());  // no read request, so no on_read, after this

  absl::MutexLock lock(&mu);
  EXPECT_THAT(reads, ElementsAre(Pair(absl::Milliseconds(250), true)));
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
  EXPECT_THAT(super, Contains("max_read=1032192"));  // 252 pages: replies fit a 1 MiB pipe
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

TEST_F(FuseMountTest, FuseFdIsTheOpenDeviceUntilUnmount) {
  ASSERT_NO_FATAL_FAILURE(MountSingle());
  int fd = mount_->fuse_fd();
  ASSERT_GE(fd, 0);
  struct stat st;
  ASSERT_EQ(fstat(fd, &st), 0) << strerror(errno);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(st.st_rdev, makedev(10, 229));
  EXPECT_OK(mount_->Unmount());
  EXPECT_EQ(mount_->fuse_fd(), -1);
}

TEST_F(FuseMountTest, AdoptRejectsAnFdThatIsNotTheFuseDevice) {
  auto tree = std::make_shared<ModelTree>(&reader_);
  int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_THAT(FuseMount::Adopt(fd, mnt_, tree).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  close(fd);
  EXPECT_THAT(FuseMount::Adopt(fd, mnt_, tree).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(FindMount(mnt_).has_value());
}

TEST_F(FuseMountTest, DetachLeavesNothingForUnmountToDo) {
  ASSERT_NO_FATAL_FAILURE(MountSingle());
  // Nobody else holds the device: closing ours ends the connection, as a crash would.
  EXPECT_OK(mount_->Detach());
  EXPECT_EQ(mount_->fuse_fd(), -1);
  EXPECT_OK(mount_->Detach());
  EXPECT_OK(mount_->Unmount());
  EXPECT_TRUE(FindMount(mnt_).has_value());  // still listed, but dead
  struct stat st;
  errno = 0;
  EXPECT_EQ(stat(Path("config.json").c_str(), &st), -1);
  EXPECT_EQ(errno, ENOTCONN);
  ASSERT_EQ(umount2(mnt_.c_str(), MNT_DETACH), 0) << strerror(errno);
}

// --- Restart: crash or detach, then adopt ---------------------------------------------------

void SendFd(int sock, int fd) {
  char byte = 'F';
  iovec iov = {&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof(int));
  if (sendmsg(sock, &msg, 0) != 1) _exit(4);
}

// -1 on failure.
int ReceiveFd(int sock) {
  char byte;
  iovec iov = {&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != 1) return -1;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (c == nullptr || c->cmsg_type != SCM_RIGHTS) return -1;
  int fd;
  memcpy(&fd, CMSG_DATA(c), sizeof(int));
  return fd;
}

// Whether `fd` has something to read (or hung up) within `timeout_ms`.
bool WaitReadable(int fd, int timeout_ms) {
  pollfd p = {fd, POLLIN, 0};
  return poll(&p, 1, timeout_ms) == 1;
}

// Reads one byte; '\0' on EOF or error.
char ReadByte(int fd) {
  char c = 0;
  return read(fd, &c, 1) == 1 ? c : '\0';
}

bool KernelAtLeast(int major, int minor) {
  utsname u;
  if (uname(&u) != 0) return false;
  int ma = 0, mi = 0;
  if (sscanf(u.release, "%d.%d", &ma, &mi) != 2) return false;
  return ma > major || (ma == major && mi >= minor);
}

// A BlobReader that, for one blob, says so on a pipe and then never returns: a server caught
// in the middle of a request when it dies.
class HangingBlobReader : public BlobReader {
 public:
  HangingBlobReader(BlobReader* inner, Digest hang, int notify_fd)
      : inner_(inner), hang_(std::move(hang)), notify_fd_(notify_fd) {}
  absl::StatusOr<std::string> Read(const Digest& digest, uint64_t offset,
                                   uint64_t length) override {
    if (digest == hang_) {
      if (write(notify_fd_, "H", 1) != 1) _exit(5);
      for (;;) pause();
    }
    return inner_->Read(digest, offset, length);
  }

 private:
  BlobReader* inner_;
  Digest hang_;
  int notify_fd_;
};

// A BlobReader whose reads of one blob wait until released, and say they would (IsReady):
// reads stalled on a registry.
class StallingBlobReader : public BlobReader {
 public:
  StallingBlobReader(BlobReader* inner, Digest slow) : inner_(inner), slow_(std::move(slow)) {}
  absl::StatusOr<std::string> Read(const Digest& digest, uint64_t offset,
                                   uint64_t length) override {
    if (digest == slow_) {
      waiting_++;
      release_.WaitForNotification();
    }
    return inner_->Read(digest, offset, length);
  }
  bool IsReady(const Digest& digest, uint64_t offset, uint64_t length) override {
    return digest != slow_;
  }
  void Release() { release_.Notify(); }
  int waiting() const { return waiting_.load(); }

 private:
  BlobReader* inner_;
  Digest slow_;
  absl::Notification release_;
  std::atomic<int> waiting_{0};
};

// However many reads wait on the network, cached reads, stat and readdir answer: the stalled
// reads wait on the read pool's threads, not on the session's workers.
TEST_F(FuseMountTest, CachedReadsStatAndReaddirAnswerWhileFortyReadsAreStalled) {
  const std::string slow_bytes = RandomBytes(64 * 4096, 91);
  const Digest slow = reader_.Add(slow_bytes);
  StallingBlobReader stalling(&reader_, slow);
  std::vector<TreeFile> files = Files();
  constexpr int kStalled = 40;
  for (int i = 0; i < kStalled; ++i) {
    files.push_back(
        TreeFile{absl::StrCat("slow/", i), slow, static_cast<uint64_t>(i) * 4096, 4096, ""});
  }
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ModelTree> tree,
                       ModelTree::SingleModel(&stalling, std::move(files)));
  ASSERT_OK_AND_ASSIGN(mount_, FuseMount::Mount(mnt_, std::move(tree)));
  std::vector<std::thread> stalled;
  for (int i = 0; i < kStalled; ++i) {
    stalled.emplace_back([this, i] {
      std::ifstream in(Path(absl::StrCat("slow/", i)), std::ios::binary);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    });
  }
  for (int i = 0; i < 1000 && stalling.waiting() < kStalled; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(stalling.waiting(), kStalled);
  // All forty are held; these must still be answered (before the release below, or never).
  std::ifstream in(Path("config.json"), std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "{\"architectures\":[\"LlamaForCausalLM\"]}");
  struct stat st;
  EXPECT_EQ(stat(Path("model.safetensors").c_str(), &st), 0);
  EXPECT_EQ(ListDir(mnt_ + "/slow").size(), static_cast<size_t>(kStalled + 2));
  EXPECT_EQ(stalling.waiting(), kStalled);  // nothing was released to get here
  stalling.Release();
  for (auto& t : stalled) t.join();
}

// FUSE passthrough: a file whose whole layer is verified and sealed is read by the kernel from
// the backing file, without a request to the server.
class FusePassthroughTest : public FuseMountTest {
 protected:
  void SetUp() override {
    FuseMountTest::SetUp();
    whole_bytes_ = RandomBytes(2 * 1024 * 1024 + 333, 77);
    whole_ = reader_.Add(whole_bytes_);
    backing_ = tmp_.path().string() + "/whole.data";
    std::ofstream(backing_, std::ios::binary) << whole_bytes_;
  }
  void MountWithWhole() {
    std::vector<TreeFile> files = Files();
    files.push_back(TreeFile{"whole.bin", whole_, 0, whole_bytes_.size(), ""});
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<ModelTree> tree,
                         ModelTree::SingleModel(&reader_, std::move(files)));
    ASSERT_OK_AND_ASSIGN(mount_, FuseMount::Mount(mnt_, std::move(tree)));
    SKIP_OR_FAIL_IF_UNAVAILABLE(mount_->passthrough() ? "" : "a kernel with FUSE passthrough");
  }
  static std::string ReadFd(int fd, size_t size) {
    std::string got(size, '\0');
    size_t done = 0;
    while (done < size) {
      ssize_t n = pread(fd, got.data() + done, size - done, static_cast<off_t>(done));
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    got.resize(done);
    return got;
  }
  // RELEASE reaches the server after close(2) returns.
  bool WaitForNoOpens() {
    for (int i = 0; i < 500; ++i) {
      if (mount_->cached_opens() == 0 && mount_->passthrough_opens() == 0) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }
  std::string whole_bytes_;
  Digest whole_;
  std::string backing_;
};

TEST_F(FusePassthroughTest, AVerifiedWholeLayerIsReadAndMappedWithoutTheServer) {
  reader_.SetVerifiedFile(whole_, backing_);
  ASSERT_NO_FATAL_FAILURE(MountWithWhole());
  const int reads_before = reader_.reads();
  int fd = open(Path("whole.bin").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(mount_->passthrough_opens(), 1u);
  EXPECT_TRUE(ReadFd(fd, whole_bytes_.size()) == whole_bytes_);
  void* map = mmap(nullptr, whole_bytes_.size(), PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  EXPECT_EQ(memcmp(map, whole_bytes_.data(), whole_bytes_.size()), 0);
  munmap(map, whole_bytes_.size());
  close(fd);
  EXPECT_EQ(reader_.reads(), reads_before);  // no byte went through the server
  EXPECT_TRUE(WaitForNoOpens());
}

TEST_F(FusePassthroughTest, AFileOpenBeforeItsLayerWasVerifiedKeepsItsInodeServedByTheDaemon) {
  ASSERT_NO_FATAL_FAILURE(MountWithWhole());
  int first = open(Path("whole.bin").c_str(), O_RDONLY);
  ASSERT_GE(first, 0);
  EXPECT_EQ(mount_->cached_opens(), 1u);
  reader_.SetVerifiedFile(whole_, backing_);  // verified while the first open is held
  // The kernel refuses a passthrough open of an inode open in cached mode (ETXTBSY): the
  // second open must stay cached, and both must read.
  int second = open(Path("whole.bin").c_str(), O_RDONLY);
  ASSERT_GE(second, 0) << strerror(errno);
  EXPECT_EQ(mount_->cached_opens(), 2u);
  EXPECT_EQ(mount_->passthrough_opens(), 0u);
  EXPECT_TRUE(ReadFd(second, whole_bytes_.size()) == whole_bytes_);
  EXPECT_TRUE(ReadFd(first, whole_bytes_.size()) == whole_bytes_);
  close(first);
  close(second);
  ASSERT_TRUE(WaitForNoOpens());
  // Once nobody holds it cached, the next open goes through the kernel.
  int third = open(Path("whole.bin").c_str(), O_RDONLY);
  ASSERT_GE(third, 0) << strerror(errno);
  EXPECT_EQ(mount_->passthrough_opens(), 1u);
  EXPECT_TRUE(ReadFd(third, whole_bytes_.size()) == whole_bytes_);
  close(third);
}

TEST_F(FusePassthroughTest, PartOfALayerIsNeverServedByPassthrough) {
  reader_.SetVerifiedFile(layer_, backing_);  // model.safetensors is an extent of layer_
  ASSERT_NO_FATAL_FAILURE(MountWithWhole());
  int fd = open(Path("model.safetensors").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(mount_->passthrough_opens(), 0u);
  EXPECT_TRUE(ReadFd(fd, weights_.size()) == weights_);
  close(fd);
}

TEST_F(FusePassthroughTest, AFileInsideALayerKeptInAFileOfItsOwnIsServedByPassthrough) {
  const std::string member = tmp_.path().string() + "/member.data";
  std::ofstream(member, std::ios::binary) << weights_;
  reader_.SetVerifiedMember(layer_, kWeightsOffset, weights_.size(), member);
  ASSERT_NO_FATAL_FAILURE(MountWithWhole());
  const int reads_before = reader_.reads();
  int fd = open(Path("model.safetensors").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(mount_->passthrough_opens(), 1u);
  EXPECT_TRUE(ReadFd(fd, weights_.size()) == weights_);
  void* map = mmap(nullptr, weights_.size(), PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  EXPECT_EQ(memcmp(map, weights_.data(), weights_.size()), 0);
  munmap(map, weights_.size());
  close(fd);
  EXPECT_EQ(reader_.reads(), reads_before);  // no byte went through the server
  ASSERT_TRUE(WaitForNoOpens());
  // Another file of the same layer is not the member: served by the daemon.
  fd = open(Path("tokenizer/vocab.txt").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(mount_->passthrough_opens(), 0u);
  EXPECT_EQ(mount_->cached_opens(), 1u);
  close(fd);
  EXPECT_TRUE(WaitForNoOpens());
}

class FuseRestartTest : public FuseMountTest {
 protected:
  struct Server {
    pid_t pid = -1;
    int sock = -1;  // our end: the fd comes back over it, commands go out
  };

  void TearDown() override {
    // A process that dies with a file open on the mount flushes it on the way out, and the
    // kernel waits for that answer without timeout or signal. So once the servers are gone,
    // end the connection (our kept fd is the last device fd: children close theirs) before
    // reaping the pod processes and closing our own files.
    for (Server& s : servers_) {
      if (s.pid > 0) kill(s.pid, SIGKILL);
    }
    for (Server& s : servers_) {
      if (s.pid > 0) waitpid(s.pid, nullptr, 0);
      if (s.sock >= 0) close(s.sock);
    }
    for (pid_t pid : helpers_) kill(pid, SIGKILL);
    if (kept_fd_ >= 0) close(kept_fd_);
    for (pid_t pid : helpers_) waitpid(pid, nullptr, 0);
    for (int fd : open_fds_) close(fd);
    if (!mnt_.empty() && FindMount(mnt_).has_value()) umount2(mnt_.c_str(), MNT_DETACH);
    FuseMountTest::TearDown();
  }

  // In a freshly forked child: the fds it inherited, but stdio and `keep`. The child must close
  // them: files open on the mount would be flushed when it dies (and a server must be serving
  // by then, or the flush waits forever), and a copy of the device fd would keep alive a
  // connection that TearDown means to end.
  static std::vector<int> InheritedFds(const std::vector<int>& keep) {
    std::vector<int> fds;
    DIR* d = opendir("/proc/self/fd");
    if (d == nullptr) _exit(9);
    while (dirent* e = readdir(d)) {
      int fd = atoi(e->d_name);
      if (fd > 2 && fd != dirfd(d) && std::find(keep.begin(), keep.end(), fd) == keep.end()) {
        fds.push_back(fd);
      }
    }
    closedir(d);
    return fds;
  }

  static void CloseAll(const std::vector<int>& fds) {
    for (int fd : fds) close(fd);
  }

  // Forks a daemon: it serves the fixture's files through `reader`, by Mount (adopt_fd < 0;
  // it then sends us a dup of its fuse_fd, which we keep like an fd store) or by Adopt of
  // adopt_fd (it then says 'R'). Afterwards it obeys 'D' (Detach, answer 'd' and exit) and
  // 'U' (Unmount and exit).
  Server StartServer(int adopt_fd, BlobReader* reader) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return {};
    pid_t pid = fork();
    if (pid == 0) {
      ServeInChild(sv[1], adopt_fd, reader, InheritedFds({sv[1], hang_notify_fd_}));
    }
    close(sv[1]);
    Server s{pid, sv[0]};
    servers_.push_back(s);
    return s;
  }

  [[noreturn]] void ServeInChild(int sock, int adopt_fd, BlobReader* reader,
                                 const std::vector<int>& inherited) {
    absl::StatusOr<std::unique_ptr<ModelTree>> tree =
        ModelTree::SingleModel(reader, Files(), {{".modelinfo.json", "{}\n"}});
    if (!tree.ok()) _exit(2);
    absl::StatusOr<std::unique_ptr<FuseMount>> m =
        adopt_fd < 0 ? FuseMount::Mount(mnt_, std::move(*tree), options_)
                     : FuseMount::Adopt(adopt_fd, mnt_, std::move(*tree), options_);
    if (!m.ok()) {
      fprintf(stderr, "server: %s\n", std::string(m.status().ToString()).c_str());
      _exit(3);
    }
    CloseAll(inherited);  // adopt_fd too: Adopt serves its own duplicate
    if (adopt_fd < 0) {
      SendFd(sock, (*m)->fuse_fd());
    } else if (write(sock, "R", 1) != 1) {
      _exit(4);
    }
    for (;;) {
      char cmd = ReadByte(sock);
      if (cmd == 'D') {
        absl::Status s = (*m)->Detach();
        if (!s.ok()) fprintf(stderr, "server: %s\n", std::string(s.ToString()).c_str());
        _exit(write(sock, s.ok() ? "d" : "e", 1) == 1 && s.ok() ? 0 : 6);
      }
      if (cmd == 'U') _exit((*m)->Unmount().ok() ? 0 : 7);
      if (cmd == '\0') _exit(8);  // the test is gone; the kernel closes our fd
    }
  }

  // The first daemon: mounts, and we keep its fd.
  void StartFirst(BlobReader* reader) {
    first_ = StartServer(-1, reader);
    ASSERT_GT(first_.pid, 0);
    ASSERT_TRUE(WaitReadable(first_.sock, 10000)) << "first server did not start";
    kept_fd_ = ReceiveFd(first_.sock);
    ASSERT_GE(kept_fd_, 0) << "first server failed (see stderr)";
  }

  void CrashFirst() {
    ASSERT_EQ(kill(first_.pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(first_.pid, &status, 0), first_.pid);
    ASSERT_TRUE(WIFSIGNALED(status));
    first_.pid = -1;
    servers_.front().pid = -1;
  }

  // The successor: adopts the kept fd.
  void StartSecond() {
    second_ = StartServer(kept_fd_, &reader_);
    ASSERT_GT(second_.pid, 0);
    ASSERT_TRUE(WaitReadable(second_.sock, 10000)) << "adopting server did not start";
    ASSERT_EQ(ReadByte(second_.sock), 'R') << "adopting server failed (see stderr)";
  }

  // Forks a pod process that reads all of `rel` (opening it: lookup and open go through the
  // mount too) and reports on the returned pipe 'Y' when it got exactly `want`, else 'N'.
  int ReadInChild(const std::string& rel, const std::string& want) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
      CloseAll(InheritedFds({p[1]}));
      int fd = open(Path(rel).c_str(), O_RDONLY);
      std::string got(want.size() + 1, '\0');
      ssize_t n = fd < 0 ? -1 : pread(fd, got.data(), got.size(), 0);
      bool same = n == static_cast<ssize_t>(want.size()) && got.substr(0, want.size()) == want;
      if (fd >= 0) close(fd);  // its flush is answered while the server still runs
      _exit(write(p[1], same ? "Y" : "N", 1) == 1 ? 0 : 1);
    }
    close(p[1]);
    helpers_.push_back(pid);
    open_fds_.push_back(p[0]);
    return p[0];
  }

  int OpenTracked(const std::string& rel) {
    int fd = open(Path(rel).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) open_fds_.push_back(fd);
    return fd;
  }

  std::string PreadString(int fd, uint64_t offset, size_t size) {
    std::string buf(size, '\0');
    size_t done = 0;
    while (done < size) {
      ssize_t n = pread(fd, buf.data() + done, size - done, static_cast<off_t>(offset + done));
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    buf.resize(done);
    return buf;
  }

  Server first_;
  Server second_;
  int kept_fd_ = -1;         // the fd store's dup
  int hang_notify_fd_ = -1;  // kept open in servers for HangingBlobReader
  std::vector<Server> servers_;
  std::vector<pid_t> helpers_;
  std::vector<int> open_fds_;
  FuseMountOptions options_;  // both servers mount or adopt with these
};

TEST_F(FuseRestartTest, AMountAdoptedByANewProcessKeepsServingTheSameFiles) {
  ASSERT_NO_FATAL_FAILURE(StartFirst(&reader_));
  int model = OpenTracked("model.safetensors");
  ASSERT_GE(model, 0) << strerror(errno);
  ASSERT_TRUE(PreadString(model, 0, 4096) == weights_.substr(0, 4096));
  struct stat before_model, before_vocab;
  ASSERT_EQ(stat(Path("model.safetensors").c_str(), &before_model), 0);
  ASSERT_EQ(stat(Path("tokenizer/vocab.txt").c_str(), &before_vocab), 0);

  ASSERT_NO_FATAL_FAILURE(CrashFirst());
  ASSERT_TRUE(FindMount(mnt_).has_value());
  ASSERT_NO_FATAL_FAILURE(StartSecond());

  // The file opened before the crash: bytes never read yet (past any readahead), then the whole
  // file again after dropping its cached pages, so that every byte comes from the new process.
  const uint64_t off = 2 * 1024 * 1024;
  EXPECT_TRUE(PreadString(model, off, 65536) == weights_.substr(off, 65536));
  ASSERT_EQ(posix_fadvise(model, 0, 0, POSIX_FADV_DONTNEED), 0);
  EXPECT_TRUE(PreadString(model, 0, weights_.size() + 1) == weights_);

  struct stat after_model, after_vocab;
  ASSERT_EQ(stat(Path("model.safetensors").c_str(), &after_model), 0) << strerror(errno);
  ASSERT_EQ(stat(Path("tokenizer/vocab.txt").c_str(), &after_vocab), 0) << strerror(errno);
  EXPECT_EQ(after_model.st_ino, before_model.st_ino);
  EXPECT_EQ(after_model.st_dev, before_model.st_dev);
  EXPECT_EQ(after_vocab.st_ino, before_vocab.st_ino);
  EXPECT_EQ(static_cast<uint64_t>(after_model.st_size), weights_.size());

  int config = OpenTracked("config.json");
  ASSERT_GE(config, 0) << strerror(errno);
  EXPECT_EQ(PreadString(config, 0, 100), "{\"architectures\":[\"LlamaForCausalLM\"]}");
  EXPECT_EQ(PreadString(OpenTracked("tokenizer/vocab.txt"), 0, 100), layer_bytes_.substr(0, 16));
  EXPECT_THAT(ListDir(mnt_), UnorderedElementsAre(".", "..", ".modelinfo.json", "broken.bin",
                                                  "config.json", "model.safetensors", "tokenizer"));
  struct statvfs vfs;
  ASSERT_EQ(statvfs(mnt_.c_str(), &vfs), 0) << strerror(errno);
  EXPECT_EQ(vfs.f_files, 7u);
}

TEST_F(FuseRestartTest, AdoptingAfterTheKernelsCachedAttributesExpiredDoesNotBlock) {
  // With attributes expired, any stat of the mount root is a request that only the adopter
  // can answer: Adopt must not make one before it serves.
  options_.attr_timeout_s = 0.1;
  options_.entry_timeout_s = 0.1;
  ASSERT_NO_FATAL_FAILURE(StartFirst(&reader_));
  ASSERT_NO_FATAL_FAILURE(CrashFirst());
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_NO_FATAL_FAILURE(StartSecond());
  int config = OpenTracked("config.json");
  ASSERT_GE(config, 0) << strerror(errno);
  EXPECT_EQ(PreadString(config, 0, 100), "{\"architectures\":[\"LlamaForCausalLM\"]}");
}

TEST_F(FuseRestartTest, AnAdoptedMountUnmountsLikeAMountedOne) {
  ASSERT_NO_FATAL_FAILURE(StartFirst(&reader_));
  ASSERT_NO_FATAL_FAILURE(CrashFirst());
  ASSERT_NO_FATAL_FAILURE(StartSecond());
  ASSERT_EQ(write(second_.sock, "U", 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(second_.pid, &status, 0), second_.pid);
  servers_.back().pid = -1;
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_FALSE(FindMount(mnt_).has_value());
}

TEST_F(FuseRestartTest, ARequestIssuedWhileNobodyServesCompletesAfterTheAdopt) {
  ASSERT_NO_FATAL_FAILURE(StartFirst(&reader_));
  ASSERT_NO_FATAL_FAILURE(CrashFirst());
  int result = ReadInChild("config.json", "{\"architectures\":[\"LlamaForCausalLM\"]}");
  ASSERT_GE(result, 0);
  // It waits in the kernel's queue: neither an answer nor an error (ENOTCONN) while nobody
  // serves.
  EXPECT_FALSE(WaitReadable(result, 500));
  ASSERT_NO_FATAL_FAILURE(StartSecond());
  ASSERT_TRUE(WaitReadable(result, 10000)) << "the queued read never completed";
  EXPECT_EQ(ReadByte(result), 'Y');
}

TEST_F(FuseRestartTest, ARequestInFlightWhenTheServerDiesIsResentToTheAdopter) {
  SKIP_OR_FAIL_IF_UNAVAILABLE(KernelAtLeast(6, 9) ? "" : "FUSE_NOTIFY_RESEND needs Linux 6.9");
  int hung[2];
  ASSERT_EQ(pipe2(hung, O_CLOEXEC), 0);
  open_fds_.push_back(hung[0]);
  open_fds_.push_back(hung[1]);
  hang_notify_fd_ = hung[1];
  HangingBlobReader hanging(&reader_, layer_, hung[1]);
  ASSERT_NO_FATAL_FAILURE(StartFirst(&hanging));
  // The first server takes the read and hangs in it; then it dies without answering.
  int result = ReadInChild("tokenizer/vocab.txt", layer_bytes_.substr(0, 16));
  ASSERT_GE(result, 0);
  ASSERT_TRUE(WaitReadable(hung[0], 10000)) << "the read never reached the first server";
  ASSERT_NO_FATAL_FAILURE(CrashFirst());
  EXPECT_FALSE(WaitReadable(result, 200));
  ASSERT_NO_FATAL_FAILURE(StartSecond());
  ASSERT_TRUE(WaitReadable(result, 10000)) << "the read taken by the dead server was lost";
  EXPECT_EQ(ReadByte(result), 'Y');
}

TEST_F(FuseRestartTest, ADetachedMountStaysMountedAndIsAdoptedByTheNextProcess) {
  ASSERT_NO_FATAL_FAILURE(StartFirst(&reader_));
  struct stat before;
  ASSERT_EQ(stat(Path("config.json").c_str(), &before), 0);
  ASSERT_EQ(write(first_.sock, "D", 1), 1);
  ASSERT_TRUE(WaitReadable(first_.sock, 10000)) << "Detach did not return";
  EXPECT_EQ(ReadByte(first_.sock), 'd');
  int status = 0;
  ASSERT_EQ(waitpid(first_.pid, &status, 0), first_.pid);
  servers_.front().pid = -1;
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  ASSERT_TRUE(FindMount(mnt_).has_value());

  int result = ReadInChild("config.json", "{\"architectures\":[\"LlamaForCausalLM\"]}");
  ASSERT_GE(result, 0);
  EXPECT_FALSE(WaitReadable(result, 300));
  ASSERT_NO_FATAL_FAILURE(StartSecond());
  ASSERT_TRUE(WaitReadable(result, 10000));
  EXPECT_EQ(ReadByte(result), 'Y');
  struct stat after;
  ASSERT_EQ(stat(Path("config.json").c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
}

TEST_F(FuseRestartTest, ADirectoryOpenAcrossTheRestartListsAgain) {
  ASSERT_NO_FATAL_FAILURE(StartFirst(&reader_));
  DIR* d = opendir(Path("tokenizer").c_str());
  ASSERT_NE(d, nullptr) << strerror(errno);
  std::set<std::string> before;
  while (dirent* e = readdir(d)) before.insert(e->d_name);
  ASSERT_NO_FATAL_FAILURE(CrashFirst());
  ASSERT_NO_FATAL_FAILURE(StartSecond());
  // The kernel now sends the new process a directory handle the old one made.
  rewinddir(d);
  std::set<std::string> after;
  while (dirent* e = readdir(d)) after.insert(e->d_name);
  closedir(d);
  EXPECT_THAT(before, UnorderedElementsAre(".", "..", "vocab.txt"));
  EXPECT_EQ(after, before);
}

}  // namespace
}  // namespace modelfs
