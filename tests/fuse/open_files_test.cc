// OpenFiles: the I/O mode of every open handle, and the state a successor process inherits.
// The kernel side (backing ids) is faked by /dev/null, whose ioctls fail: a test that reached
// the kernel where it should not would see passthrough switched off.
#include "fuse/passthrough.h"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

using Mode = OpenFiles::Mode;

class OpenFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dev_ = open("/dev/null", O_RDWR | O_CLOEXEC);
    ASSERT_GE(dev_, 0);
    file_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(file_, 0);
    state_ = tmp_.Join("open-files").string();
  }
  void TearDown() override {
    close(dev_);
    close(file_);
  }
  void WriteState(const std::string& text) { std::ofstream(state_) << text; }

  testing::TempDir tmp_;
  int dev_ = -1;
  int file_ = -1;
  std::string state_;
};

TEST_F(OpenFilesTest, WithoutPassthroughEveryOpenIsCachedWithItsOwnHandle) {
  OpenFiles files(dev_, "", /*passthrough=*/false);
  OpenFiles::Decision a = files.Open(5, file_, "sha256:aa");
  OpenFiles::Decision b = files.Open(5, file_, "sha256:aa");
  EXPECT_EQ(a.mode, Mode::kCached);
  EXPECT_EQ(b.mode, Mode::kCached);
  EXPECT_NE(a.fh, b.fh);
  EXPECT_EQ(files.open_count(Mode::kCached), 2u);
  files.Release(a.fh);
  files.Release(a.fh);  // a release resent after a restart is harmless
  EXPECT_EQ(files.open_count(Mode::kCached), 1u);
}

TEST_F(OpenFilesTest, AnInodeOpenCachedIsNotSwitchedToPassthrough) {
  OpenFiles files(dev_, "", /*passthrough=*/true);
  OpenFiles::Decision a = files.Open(5, -1, "");  // not verified yet: cached
  ASSERT_EQ(a.mode, Mode::kCached);
  OpenFiles::Decision b = files.Open(5, file_, "sha256:aa");  // verified now
  EXPECT_EQ(b.mode, Mode::kCached);
  // No backing file was registered for it (that ioctl would have failed and turned it off).
  EXPECT_TRUE(files.passthrough());
}

TEST_F(OpenFilesTest, AFailingBackingRegistrationTurnsPassthroughOffForGood) {
  OpenFiles files(dev_, "", /*passthrough=*/true);
  OpenFiles::Decision a = files.Open(5, file_, "sha256:aa");  // /dev/null refuses the ioctl
  EXPECT_EQ(a.mode, Mode::kCached);
  EXPECT_FALSE(files.passthrough());
}

TEST_F(OpenFilesTest, ASuccessorInheritsTheHandlesAndTheirModes) {
  {
    OpenFiles first(dev_, state_, /*passthrough=*/false);
    first.StartFresh();
    first.Open(5, -1, "");
    first.Open(6, -1, "");
  }
  OpenFiles next(dev_, state_, /*passthrough=*/true);
  next.Inherit();
  EXPECT_EQ(next.open_count(Mode::kCached), 2u);
  // The predecessor's connection had no passthrough: the successor has none either.
  EXPECT_FALSE(next.passthrough());
}

TEST_F(OpenFilesTest, AnInheritedPassthroughInodeKeepsItsBackingId) {
  WriteState(
      "modelfs-open-files 1\npassthrough 1\nbacking 7 sha256:aa\nhandle 100 5 p sha256:aa\n");
  OpenFiles files(dev_, state_, /*passthrough=*/false);
  files.Inherit();
  EXPECT_TRUE(files.passthrough());
  EXPECT_EQ(files.open_count(Mode::kPassthrough), 1u);
  // A new open of that inode must use the same backing file, even with none offered now.
  OpenFiles::Decision d = files.Open(5, -1, "");
  EXPECT_EQ(d.mode, Mode::kPassthrough);
  EXPECT_EQ(d.backing_id, 7);
  EXPECT_GT(d.fh, 100u);  // never one of the predecessor's handles
  // And one on a layer already registered reuses its id without the kernel.
  OpenFiles::Decision e = files.Open(9, file_, "sha256:aa");
  EXPECT_EQ(e.mode, Mode::kPassthrough);
  EXPECT_EQ(e.backing_id, 7);
  EXPECT_TRUE(files.passthrough());
  files.Release(100);
  files.Release(d.fh);
  files.Release(e.fh);
  EXPECT_EQ(files.open_count(Mode::kPassthrough), 0u);
  // The id left the state with its last handle.
  std::ifstream in(state_);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, ::testing::Not(::testing::HasSubstr("backing 7")));
}

TEST_F(OpenFilesTest, ADamagedStateIsIgnoredAndPassthroughStaysOff) {
  WriteState("modelfs-open-files 1\npassthrough 1\nhandle x y z\n");
  OpenFiles files(dev_, state_, /*passthrough=*/false);
  files.Inherit();
  EXPECT_FALSE(files.passthrough());
  EXPECT_EQ(files.open_count(Mode::kCached) + files.open_count(Mode::kPassthrough), 0u);
}

}  // namespace
}  // namespace modelfs
