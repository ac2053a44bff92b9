// `modelfs mount` over a mount whose process was killed (kill -9): the dead FUSE mount answers
// ENOTCONN; the next mount at the same directory detaches it first, so after `umount` nothing
// is left in the mount table; a mount over a live mount, or with a live mount's cache, is
// refused. A small model pushed with `modelfs push` to a real registry, mounted through the
// kernel's FUSE.
#include <errno.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration/mount/mount_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Mount points in /proc/self/mountinfo that are `dir` (canonical), however many are stacked.
int MountsAt(const std::string& dir) {
  std::error_code ec;
  const std::string want = fs::weakly_canonical(dir, ec).string();
  std::ifstream in("/proc/self/mountinfo");
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    // "id parent major:minor root mount_point ..."; paths escape spaces as \040.
    std::istringstream fields(line);
    std::string id, parent, dev, root, point;
    fields >> id >> parent >> dev >> root >> point;
    if (point == want) ++n;
  }
  return n;
}

class StaleMountTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BecomeSubreaper();
    SKIP_OR_FAIL_IF_UNAVAILABLE(access("/dev/fuse", R_OK | W_OK) == 0 ? "" : "no usable /dev/fuse");
    setenv("DOCKER_CONFIG", "/nonexistent/modelfs-stale-mount-e2e", 1);
    ASSERT_OK_AND_ASSIGN(registry_, RegistryFixture::Start());
    const std::string model = tmp_.Join("model").string();
    fs::create_directories(model);
    std::ofstream(model + "/config.json") << R"({"model_type": "none"})"
                                          << "\n";
    std::ofstream(model + "/README.md") << "# a model mounted twice\n";
    ref_ = absl::StrCat(registry_->host_port(), "/stale/model:v1");
    ASSERT_OK_AND_ASSIGN(CommandResult push,
                         RunCommand({ModelfsBinary(), "push", "--plain-http", ref_, model}));
    ASSERT_EQ(push.exit_code, 0) << push.err;
    dir_ = tmp_.Join("mnt").string();
    fs::create_directories(dir_);
    options_.cache_dir = tmp_.Join("cache").string();
    options_.log_file = tmp_.Join("mount.log").string();
  }

  void TearDown() override {
    // Whatever a failed test left mounted here goes, so the temporary directory can go too.
    for (int i = 0; i < 8 && !dir_.empty() && MountsAt(dir_) > 0; ++i) {
      umount2(dir_.c_str(), MNT_DETACH);
    }
  }

  TempDir tmp_;
  std::unique_ptr<RegistryFixture> registry_;
  std::string ref_;
  std::string dir_;
  MountOptions options_;
};

TEST_F(StaleMountTest, AMountOverAKilledMountDetachesItAndUmountLeavesNothing) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ModelMount> killed, ModelMount::Start(ref_, dir_, options_));
  ASSERT_EQ(kill(killed->pid(), SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(killed->pid(), &status, 0), killed->pid());
  // statfs, not stat: the kernel may still answer stat from the attributes it cached.
  struct statfs st;
  ASSERT_NE(statfs(dir_.c_str(), &st), 0);
  ASSERT_EQ(errno, ENOTCONN);

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ModelMount> again, ModelMount::Start(ref_, dir_, options_));
  EXPECT_EQ(MountsAt(dir_), 1);
  ASSERT_OK_AND_ASSIGN(std::string readme, ReadWholeFile(dir_ + "/README.md"));
  EXPECT_EQ(readme, "# a model mounted twice\n");
  EXPECT_OK(again->Unmount());

  EXPECT_EQ(MountsAt(dir_), 0);
  EXPECT_FALSE(FindMount(dir_).has_value());
  EXPECT_OK(killed->Unmount());
}

TEST_F(StaleMountTest, AMountOverALiveMountIsRefusedWithExitTwoAndTheFirstKeepsServing) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ModelMount> first, ModelMount::Start(ref_, dir_, options_));
  ASSERT_OK_AND_ASSIGN(CommandResult again,
                       RunCommand({ModelfsBinary(), "mount", "--plain-http", "--cache",
                                   options_.cache_dir, ref_, dir_}));
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_THAT(again.err, HasSubstr("already mounted here"));
  EXPECT_EQ(MountsAt(dir_), 1);
  ASSERT_OK_AND_ASSIGN(std::string readme, ReadWholeFile(dir_ + "/README.md"));
  EXPECT_EQ(readme, "# a model mounted twice\n");
  EXPECT_OK(first->Unmount());
  EXPECT_EQ(MountsAt(dir_), 0);
}

// One process per cache directory (the cache's flock on <cache>/lock): a second mount that
// names the cache of a live one is a usage error naming the directory and its holder, and the
// first keeps serving. (AMountOverAKilledMount... shows that a killed holder frees it.)
TEST_F(StaleMountTest, AMountNamingTheCacheOfALiveMountExitsTwoNamingTheHolder) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ModelMount> first, ModelMount::Start(ref_, dir_, options_));
  const std::string other = tmp_.Join("other").string();
  fs::create_directories(other);
  ASSERT_OK_AND_ASSIGN(CommandResult again,
                       RunCommand({ModelfsBinary(), "mount", "--plain-http", "--cache",
                                   options_.cache_dir, ref_, other}));
  EXPECT_EQ(again.exit_code, 2) << again.err;
  EXPECT_THAT(again.err,
              HasSubstr(absl::StrCat("cache: ", options_.cache_dir, " is in use by modelfs (pid ",
                                     first->pid(), ") (", options_.cache_dir, "/lock is locked)")));
  EXPECT_EQ(MountsAt(other), 0);
  ASSERT_OK_AND_ASSIGN(std::string readme, ReadWholeFile(dir_ + "/README.md"));
  EXPECT_EQ(readme, "# a model mounted twice\n");
  EXPECT_OK(first->Unmount());
}

}  // namespace
}  // namespace modelfs::testing
