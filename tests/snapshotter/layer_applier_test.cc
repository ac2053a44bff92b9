// ApplyOverlayLayer against the overlay diff containerd's applier writes: every entry kind with
// its metadata, whiteouts, opaque directories, and the hostile entries it refuses. Needs root
// (mknod, lchown, trusted.* xattrs).
#include "snapshotter/store/layer_applier.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::snapshotter {
namespace {

namespace fs = std::filesystem;
using ::modelfs::testing::StatusIs;
using ::modelfs::testing::TempDir;
using ::testing::HasSubstr;

// A tar of hand-written ustar headers (the project's TarWriter writes only what modelfs
// needs: no owners, times, devices or xattrs).
struct RawEntry {
  std::string name;
  char type = '0';
  uint32_t mode = 0644;
  uint32_t uid = 0;
  uint32_t gid = 0;
  int64_t mtime = 1'600'000'000;
  std::string content;
  std::string linkname;
  uint32_t devmajor = 0;
  uint32_t devminor = 0;
  std::vector<std::pair<std::string, std::string>> pax;  // records of an 'x' header before it
};

void PutOctal(std::string& b, size_t off, size_t len, uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*llo", static_cast<int>(len - 1),
                static_cast<unsigned long long>(v));
  std::memcpy(&b[off], buf, len - 1);
}

std::string Header(const std::string& name, char type, uint32_t mode, uint32_t uid, uint32_t gid,
                   int64_t mtime, uint64_t size, const std::string& linkname, uint32_t major,
                   uint32_t minor) {
  std::string b(512, '\0');
  std::memcpy(&b[0], name.data(), std::min<size_t>(name.size(), 100));
  PutOctal(b, 100, 8, mode);
  PutOctal(b, 108, 8, uid);
  PutOctal(b, 116, 8, gid);
  PutOctal(b, 124, 12, size);
  PutOctal(b, 136, 12, static_cast<uint64_t>(mtime));
  b[156] = type;
  std::memcpy(&b[157], linkname.data(), std::min<size_t>(linkname.size(), 100));
  std::memcpy(&b[257],
              "ustar\0"
              "00",
              8);
  PutOctal(b, 329, 8, major);
  PutOctal(b, 337, 8, minor);
  std::memset(&b[148], ' ', 8);
  unsigned sum = 0;
  for (char c : b) sum += static_cast<unsigned char>(c);
  PutOctal(b, 148, 7, sum);
  return b;
}

std::string Pad(std::string s) {
  s.append((512 - s.size() % 512) % 512, '\0');
  return s;
}

std::string PaxRecord(const std::string& key, const std::string& value) {
  const size_t body = key.size() + value.size() + 3;
  size_t len = body + 1;
  while (std::to_string(len).size() + body != len) len = std::to_string(len).size() + body;
  return std::to_string(len) + " " + key + "=" + value + "\n";
}

std::string MakeTar(const std::vector<RawEntry>& entries) {
  std::string tar;
  for (const RawEntry& e : entries) {
    if (!e.pax.empty()) {
      std::string records;
      for (const auto& [k, v] : e.pax) records += PaxRecord(k, v);
      tar += Header("PaxHeaders/x", 'x', 0644, 0, 0, 0, records.size(), "", 0, 0);
      tar += Pad(records);
    }
    tar += Header(e.name, e.type, e.mode, e.uid, e.gid, e.mtime, e.content.size(), e.linkname,
                  e.devmajor, e.devminor);
    tar += Pad(e.content);
  }
  return tar + std::string(1024, '\0');
}

absl::StatusOr<LayerApplyCounts> Apply(const std::vector<RawEntry>& entries, const fs::path& dir,
                                       const LayerApplyOptions& options = {}) {
  std::unique_ptr<RangeReader> r = MakeMemoryRangeReader("layer.tar", MakeTar(entries));
  return ApplyOverlayLayer(*r, dir, "layer sha256:test", options);
}

struct Node {
  mode_t mode = 0;  // type and permission bits
  uid_t uid = 0;
  gid_t gid = 0;
  int64_t mtime = 0;
  long mtime_nsec = 0;
  off_t size = 0;
  dev_t rdev = 0;
  ino_t ino = 0;
  std::string content;  // regular files; symlinks: the target
  std::map<std::string, std::string> xattrs;
};

Node Look(const fs::path& p) {
  Node n;
  struct stat st;
  EXPECT_EQ(lstat(p.c_str(), &st), 0) << p;
  n.mode = st.st_mode;
  n.uid = st.st_uid;
  n.gid = st.st_gid;
  n.mtime = st.st_mtim.tv_sec;
  n.mtime_nsec = st.st_mtim.tv_nsec;
  n.size = st.st_size;
  n.rdev = st.st_rdev;
  n.ino = st.st_ino;
  if (S_ISREG(st.st_mode)) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    n.content = ss.str();
  } else if (S_ISLNK(st.st_mode)) {
    n.content = fs::read_symlink(p).string();
  }
  char names[4096];
  ssize_t len = llistxattr(p.c_str(), names, sizeof names);
  for (ssize_t i = 0; i < len;) {
    std::string name(names + i);
    i += static_cast<ssize_t>(name.size()) + 1;
    char value[4096];
    ssize_t v = lgetxattr(p.c_str(), name.c_str(), value, sizeof value);
    if (v >= 0) n.xattrs[name] = std::string(value, static_cast<size_t>(v));
  }
  return n;
}

class LayerApplierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_OR_FAIL_IF_UNAVAILABLE(geteuid() == 0 ? "" : "needs root (mknod, lchown, trusted.*)");
    dir_ = tmp_.Join("fs");
    fs::create_directory(dir_);
  }
  TempDir tmp_;
  fs::path dir_;
};

TEST_F(LayerApplierTest, WritesEveryEntryKindWithItsOwnerModeTimeAndXattrs) {
  std::vector<RawEntry> layer = {
      {.name = "bin/", .type = '5', .mode = 0750, .uid = 1000, .gid = 1001, .mtime = 1'500'000'000},
      {.name = "bin/busybox",
       .mode = 04755,
       .uid = 1000,
       .gid = 1001,
       .content = "\x7f"
                  "ELF busybox",
       .pax = {{"SCHILY.xattr.user.origin", "buildah"},
               {"SCHILY.xattr.trusted.blob", std::string("\x01\0\0\x02", 4)},
               {"mtime", "1600000000.123456789"}}},
      {.name = "bin/sh",
       .type = '2',
       .mode = 0777,
       .uid = 7,
       .gid = 8,
       .mtime = 1'400'000'000,
       .linkname = "busybox"},
      {.name = "bin/ls",
       .type = '1',
       .mode = 04755,
       .uid = 1000,
       .gid = 1001,
       .linkname = "bin/busybox"},
      {.name = "dev/", .type = '5', .mode = 0755},
      {.name = "dev/null", .type = '3', .mode = 0666, .devmajor = 1, .devminor = 3},
      {.name = "dev/loop0", .type = '4', .mode = 0660, .gid = 6, .devmajor = 7, .devminor = 0},
      {.name = "run/fifo", .type = '6', .mode = 0600, .uid = 5},
      {.name = "big/uid", .content = "x", .pax = {{"uid", "3000000"}, {"gid", "70000"}}},
  };
  ASSERT_OK_AND_ASSIGN(LayerApplyCounts counts, Apply(layer, dir_));
  EXPECT_EQ(counts.entries, 9u);
  EXPECT_EQ(counts.files, 2u);
  EXPECT_EQ(counts.directories, 2u);
  EXPECT_EQ(counts.symlinks, 1u);
  EXPECT_EQ(counts.hardlinks, 1u);
  EXPECT_EQ(counts.devices, 3u);

  Node bin = Look(dir_ / "bin");
  EXPECT_EQ(bin.mode, S_IFDIR | 0750);
  EXPECT_EQ(bin.uid, 1000u);
  EXPECT_EQ(bin.gid, 1001u);
  EXPECT_EQ(bin.mtime, 1'500'000'000);  // set after its children were made

  Node busybox = Look(dir_ / "bin/busybox");
  // setuid survives the lchowns (of its own entry and of the hard link's, which then applies
  // its header's mode to the shared inode).
  EXPECT_EQ(busybox.mode, S_IFREG | 04755);
  EXPECT_EQ(busybox.uid, 1000u);
  EXPECT_EQ(busybox.gid, 1001u);
  EXPECT_EQ(busybox.content,
            "\x7f"
            "ELF busybox");
  EXPECT_EQ(busybox.size, 12);
  // The hard link ('1' header at mtime 1600000000) set the shared inode's time last.
  EXPECT_EQ(busybox.mtime, 1'600'000'000);
  EXPECT_EQ(busybox.xattrs.at("user.origin"), "buildah");
  EXPECT_EQ(busybox.xattrs.at("trusted.blob"), std::string("\x01\0\0\x02", 4));

  Node sh = Look(dir_ / "bin/sh");
  EXPECT_TRUE(S_ISLNK(sh.mode));
  EXPECT_EQ(sh.content, "busybox");
  EXPECT_EQ(sh.uid, 7u);
  EXPECT_EQ(sh.gid, 8u);
  EXPECT_EQ(sh.mtime, 1'400'000'000);

  Node ls = Look(dir_ / "bin/ls");
  EXPECT_EQ(ls.ino, busybox.ino);

  Node null = Look(dir_ / "dev/null");
  EXPECT_EQ(null.mode, S_IFCHR | 0666);
  EXPECT_EQ(null.rdev, makedev(1, 3));
  Node loop = Look(dir_ / "dev/loop0");
  EXPECT_EQ(loop.mode, S_IFBLK | 0660);
  EXPECT_EQ(loop.rdev, makedev(7, 0));
  EXPECT_EQ(loop.gid, 6u);
  Node fifo = Look(dir_ / "run/fifo");
  EXPECT_EQ(fifo.mode, S_IFIFO | 0600);
  EXPECT_EQ(fifo.uid, 5u);
  // `run/` was not in the layer and there is no parent layer: 0755 root.
  EXPECT_EQ(Look(dir_ / "run").mode, S_IFDIR | 0755);

  Node big = Look(dir_ / "big/uid");
  EXPECT_EQ(big.uid, 3'000'000u);
  EXPECT_EQ(big.gid, 70'000u);
}

TEST_F(LayerApplierTest, KeepsAPaxMtimesNanoseconds) {
  ASSERT_OK(Apply({{.name = "f", .pax = {{"mtime", "1600000000.123456789"}}}}, dir_).status());
  Node f = Look(dir_ / "f");
  EXPECT_EQ(f.mtime, 1'600'000'000);
  EXPECT_EQ(f.mtime_nsec, 123'456'789);
}

TEST_F(LayerApplierTest, TurnsWhiteoutsIntoOverlayWhiteoutsOnAParent) {
  std::vector<RawEntry> layer = {
      {.name = "etc/", .type = '5', .mode = 0755, .mtime = 1'234},
      {.name = "etc/.wh.motd", .uid = 11, .gid = 12},
      {.name = "usr/share/.wh..wh..opq"},
      {.name = "usr/share/doc", .content = "kept"},
  };
  ASSERT_OK_AND_ASSIGN(LayerApplyCounts counts, Apply(layer, dir_));
  EXPECT_EQ(counts.whiteouts, 1u);
  EXPECT_EQ(counts.opaque_dirs, 1u);
  Node motd = Look(dir_ / "etc/motd");
  EXPECT_EQ(motd.mode, static_cast<mode_t>(S_IFCHR));
  EXPECT_EQ(motd.rdev, makedev(0, 0));
  EXPECT_EQ(motd.uid, 11u);
  EXPECT_EQ(motd.gid, 12u);
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir_ / "etc/.wh.motd")));
  EXPECT_EQ(Look(dir_ / "etc").mtime, 1'234);
  Node share = Look(dir_ / "usr/share");
  EXPECT_EQ(share.xattrs.at("trusted.overlay.opaque"), "y");
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir_ / "usr/share/.wh..wh..opq")));
  EXPECT_EQ(Look(dir_ / "usr/share/doc").content, "kept");
}

TEST_F(LayerApplierTest, AppliesWhiteoutsOfAChainsFirstLayerAsContainerdsBindMountDoes) {
  LayerApplyOptions first;
  first.overlay_whiteouts = false;
  std::vector<RawEntry> layer = {
      {.name = "a", .content = "gone"},
      {.name = ".wh.a"},
      {.name = ".wh.never-there"},
      {.name = "d/.wh..wh..opq"},
  };
  ASSERT_OK(Apply(layer, dir_, first).status());
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir_ / "a")));
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir_ / "never-there")));
  EXPECT_TRUE(Look(dir_ / "d").xattrs.empty());
}

TEST_F(LayerApplierTest, GivesAMissingParentTheMetadataOfTheLowerLayersDirectory) {
  const fs::path lower = tmp_.Join("lower");
  fs::create_directories(lower / "opt/app");
  ASSERT_EQ(chown((lower / "opt").c_str(), 42, 43), 0);
  ASSERT_EQ(chmod((lower / "opt").c_str(), 0711), 0);
  LayerApplyOptions options;
  options.parents = {lower};
  ASSERT_OK(Apply({{.name = "opt/app/config", .content = "c"}}, dir_, options).status());
  Node opt = Look(dir_ / "opt");
  EXPECT_EQ(opt.mode, S_IFDIR | 0711);
  EXPECT_EQ(opt.uid, 42u);
  EXPECT_EQ(opt.gid, 43u);
}

TEST_F(LayerApplierTest, ReplacesAnEarlierEntryButMergesADirectoryIntoADirectory) {
  std::vector<RawEntry> layer = {
      {.name = "x", .content = "file first"},
      {.name = "x/", .type = '5', .mode = 0700},
      {.name = "x/child", .content = "c"},
      {.name = "x/", .type = '5', .mode = 0755, .uid = 9},
      {.name = "y", .type = '2', .linkname = "x"},
      {.name = "y", .content = "a file now"},
  };
  ASSERT_OK(Apply(layer, dir_).status());
  Node x = Look(dir_ / "x");
  EXPECT_EQ(x.mode, S_IFDIR | 0755);
  EXPECT_EQ(x.uid, 9u);
  EXPECT_EQ(Look(dir_ / "x/child").content, "c");
  EXPECT_EQ(Look(dir_ / "y").content, "a file now");
}

TEST_F(LayerApplierTest, RefusesDotDot) {
  EXPECT_THAT(Apply({{.name = "a/../../escape", .content = "x"}}, dir_).status(),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_FALSE(fs::exists(tmp_.Join("escape")));
}

TEST_F(LayerApplierTest, RefusesAnAbsoluteHardLinkTarget) {
  EXPECT_THAT(Apply({{.name = "passwd", .type = '1', .linkname = "/etc/passwd"}}, dir_).status(),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir_ / "passwd")));
}

TEST_F(LayerApplierTest, RefusesAHardLinkToWhatTheLayerDoesNotHave) {
  EXPECT_THAT(Apply({{.name = "passwd", .type = '1', .linkname = "shadow"}}, dir_).status(),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("layer sha256:test: entry 'passwd': hard link to 'shadow', "
                                 "which is not an entry of this layer")));
  EXPECT_THAT(Apply({{.name = "passwd", .type = '1', .linkname = "etc/passwd"}}, dir_).status(),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("through 'etc', which is not a directory of this layer")));
}

TEST_F(LayerApplierTest, RefusesAHardLinkThroughASymlink) {
  const fs::path outside = tmp_.Join("outside");
  fs::create_directory(outside);
  std::ofstream(outside / "secret") << "s";
  std::vector<RawEntry> layer = {
      {.name = "out", .type = '2', .linkname = outside.string()},
      {.name = "stolen", .type = '1', .linkname = "out/secret"},
  };
  EXPECT_THAT(Apply(layer, dir_).status(), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir_ / "stolen")));
}

TEST_F(LayerApplierTest, RefusesToWriteThroughASymlinkOfTheLayer) {
  const fs::path outside = tmp_.Join("outside");
  fs::create_directory(outside);
  std::vector<RawEntry> layer = {
      {.name = "etc", .type = '2', .linkname = outside.string()},
      {.name = "etc/evil", .content = "x"},
  };
  EXPECT_THAT(Apply(layer, dir_).status(),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("'etc' is a symlink")));
  EXPECT_TRUE(fs::is_empty(outside));
}

TEST_F(LayerApplierTest, RefusesAWhiteoutWithoutAName) {
  EXPECT_THAT(Apply({{.name = "d/.wh."}}, dir_).status(),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("invalid whiteout name")));
}

}  // namespace
}  // namespace modelfs::snapshotter
