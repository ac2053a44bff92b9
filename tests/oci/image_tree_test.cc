#include "core/oci/image_tree.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Paths(const ImageTree& t) {
  std::vector<std::string> out;
  for (const auto& [path, node] : t.nodes) out.push_back(path);
  return out;
}

// The bytes a file node of the merged tree serves.
std::string Bytes(const std::vector<std::string>& tars, const ImageNode& n) {
  return tars[n.layer].substr(n.offset, n.size);
}

// A tar holding one special entry (typeflag `type`, e.g. '3' a character device), which
// TarWriter does not write: a file header with its typeflag and checksum rewritten.
std::string SpecialEntryTar(const std::string& path, char type) {
  TarWriter w;
  EXPECT_OK(w.AddFile(path, ""));
  std::string tar = w.Finish();
  tar[156] = type;
  std::memset(&tar[148], ' ', 8);
  unsigned sum = 0;
  for (size_t i = 0; i < 512; ++i) sum += static_cast<unsigned char>(tar[i]);
  char buf[8];
  std::snprintf(buf, sizeof buf, "%06o", sum);
  std::memcpy(&tar[148], buf, 7);
  return tar;
}

absl::StatusOr<ImageTree> Merge(const std::vector<std::string>& tars) {
  std::vector<std::string_view> views(tars.begin(), tars.end());
  return MergeImageTars(views);
}

TEST(ImageTreeTest, UpperLayerFileReplacesLowerOne) {
  TarWriter a, b;
  ASSERT_OK(a.AddFile("models/config.json", "{\"v\":1}"));
  ASSERT_OK(b.AddFile("models/config.json", "{\"v\":2}"));
  std::vector<std::string> tars = {a.Finish(), b.Finish()};
  ASSERT_OK_AND_ASSIGN(ImageTree t, Merge(tars));
  EXPECT_THAT(Paths(t), ElementsAre("models", "models/config.json"));
  const ImageNode& f = t.nodes.at("models/config.json");
  EXPECT_EQ(f.layer, 1u);
  EXPECT_EQ(Bytes(tars, f), "{\"v\":2}");
  EXPECT_EQ(t.nodes.at("models").type, ImageNodeType::kDirectory);
}

TEST(ImageTreeTest, WhiteoutRemovesALowerFileAndIsCounted) {
  TarWriter a, b;
  ASSERT_OK(a.AddFile("etc/motd", "hi"));
  ASSERT_OK(a.AddFile("etc/hosts", "x"));
  ASSERT_OK(b.AddFile("etc/.wh.motd", ""));
  std::vector<std::string> tars = {a.Finish(), b.Finish()};
  ASSERT_OK_AND_ASSIGN(ImageTree t, Merge(tars));
  EXPECT_THAT(Paths(t), ElementsAre("etc", "etc/hosts"));
  EXPECT_EQ(t.counts.whiteouts, 1u);
  EXPECT_EQ(t.counts.ignored_whiteouts, 0u);
}

TEST(ImageTreeTest, WhiteoutOfADirectoryRemovesItsSubtreeButNotASiblingPrefix) {
  TarWriter a, b;
  ASSERT_OK(a.AddFile("a/b/c", "1"));
  ASSERT_OK(a.AddFile("a/b0", "2"));
  ASSERT_OK(a.AddFile("a/b.txt", "3"));
  ASSERT_OK(b.AddFile("a/.wh.b", ""));
  std::vector<std::string> tars = {a.Finish(), b.Finish()};
  ASSERT_OK_AND_ASSIGN(ImageTree t, Merge(tars));
  EXPECT_THAT(Paths(t), ElementsAre("a", "a/b.txt", "a/b0"));
}

TEST(ImageTreeTest, WhiteoutDoesNotHideAnEntryOfItsOwnLayer) {
  TarWriter a, b;
  ASSERT_OK(a.AddFile("f", "old"));
  ASSERT_OK(b.AddFile("f", "new"));
  ASSERT_OK(b.AddFile(".wh.f", ""));
  std::vector<std::string> tars = {a.Finish(), b.Finish()};
  ASSERT_OK_AND_ASSIGN(ImageTree t, Merge(tars));
  ASSERT_THAT(Paths(t), ElementsAre("f"));
  EXPECT_EQ(Bytes(tars, t.nodes.at("f")), "new");
}

TEST(ImageTreeTest, WhiteoutOfAPathNoLowerLayerHadIsIgnoredAndCounted) {
  TarWriter a, b;
  ASSERT_OK(a.AddFile("keep", "k"));
  ASSERT_OK(b.AddFile("nowhere/.wh.ghost", ""));
  ASSERT_OK(b.AddFile(".wh.ghost", ""));
  std::vector<std::string> tars = {a.Finish(), b.Finish()};
  ASSERT_OK_AND_ASSIGN(ImageTree t, Merge(tars));
  EXPECT_THAT(Paths(t), ElementsAre("keep"));
  EXPECT_EQ(t.counts.whiteouts, 0u);
  EXPECT_EQ(t.counts.ignored_whiteouts, 2u);
}

TEST(ImageTreeTest, OpaqueDirectoryHidesLowerChildrenKeepsItsOwn) {
  TarWriter a, b;
  ASSERT_OK(a.AddFile("models/old.bin", "o"));
  ASSERT_OK(a.AddFile("other", "x"));
  ASSERT_OK(b.AddDirectory("models"));
  ASSERT_OK(b.AddFile("models/.wh..wh..opq", ""));
  ASSERT_OK(b.AddFile("models/new.bin", "n"));
  std::vector<std::string> tars = {a.Finish(), b.Finish()};
  ASSERT_OK_AND_ASSIGN(ImageTree t, Merge(tars));
  EXPECT_THAT(Paths(t), ElementsAre("models", "models/new.bin", "other"));
  EXPECT_EQ(t.counts.opaque_dirs, 1u);
}

TEST(ImageTreeTest, SymlinksAreKeptAsTargetsEvenWhenTheyPointOutside) {
  TarWriter a;
  ASSERT_OK(a.AddFile("bin/busybox", "BB"));
  ASSERT_OK(a.AddSymlink("bin/sh", "busybox"));
  ASSERT_OK(a.AddSymlink("escape", "../../../etc/shadow"));
  ASSERT_OK(a.AddSymlink("abs", "/etc/passwd"));
  std::vector<std::string> tars = {a.Finish()};
  ASSERT_OK_AND_ASSIGN(ImageTree t, Merge(tars));
  EXPECT_EQ(t.nodes.at("bin/sh").type, ImageNodeType::kSymlink);
  EXPECT_EQ(t.nodes.at("bin/sh").link_target, "busybox");
  EXPECT_EQ(t.nodes.at("escape").link_target, "../../../etc/shadow");
  EXPECT_EQ(t.nodes.at("abs").link_target, "/etc/passwd");
}

TEST(ImageTreeTest, EntryUnderASymlinkIsRefusedNotFollowed) {
  TarWriter a, b;
  ASSERT_OK(a.AddSymlink("lib", "/etc"));
  ASSERT_OK(b.AddFile("lib/passwd", "root::0:0"));
  std::vector<std::string> tars = {a.Finish(), b.Finish()};
  EXPECT_THAT(Merge(tars), StatusIs(absl::StatusCode::kPermissionDenied,
                                    HasSubstr("layer 1: entry 'lib/passwd' would be written "
                                              "through the symlink 'lib'")));
}

TEST(ImageTreeTest, HardLinkServesTheBytesOfItsTargetFromALowerLayer) {
  TarWriter a, b;
  ASSERT_OK(a.AddFile("models/w.safetensors", "WEIGHTS"));
  ASSERT_OK(b.AddHardLink("models/w2.safetensors", "models/w.safetensors"));
  ASSERT_OK(b.AddFile("models/.wh.w.safetensors", ""));
  std::vector<std::string> tars = {a.Finish(), b.Finish()};
  ASSERT_OK_AND_ASSIGN(ImageTree t, Merge(tars));
  // The whiteout hides the lower name only; the link, made in the upper layer, stays.
  EXPECT_THAT(Paths(t), ElementsAre("models", "models/w2.safetensors"));
  EXPECT_EQ(Bytes(tars, t.nodes.at("models/w2.safetensors")), "WEIGHTS");
  EXPECT_EQ(t.counts.hardlinks, 1u);
}

TEST(ImageTreeTest, HardLinkToAMissingFileIsRefused) {
  TarWriter a;
  ASSERT_OK(a.AddHardLink("x", "nothing"));
  std::vector<std::string> tars = {a.Finish()};
  EXPECT_THAT(Merge(tars), StatusIs(absl::StatusCode::kPermissionDenied,
                                    HasSubstr("layer 0: entry 'x': hard link to 'nothing'")));
}

TEST(ImageTreeTest, HardLinkToASymlinkOrDirectoryIsRefused) {
  for (bool dir : {false, true}) {
    TarWriter a;
    if (dir) {
      ASSERT_OK(a.AddDirectory("t"));
    } else {
      ASSERT_OK(a.AddSymlink("t", "/etc/shadow"));
    }
    ASSERT_OK(a.AddHardLink("x", "t"));
    std::vector<std::string> tars = {a.Finish()};
    EXPECT_THAT(Merge(tars),
                StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("not a regular file")));
  }
}

TEST(ImageTreeTest, HardLinkOutOfTheTreeIsRefusedByTheReader) {
  std::string tar = *EncodeTarHeader("x", '1', 0, 0644, "a");
  // Rewrite the link name to "../a" (the writer refuses to).
  std::memcpy(&tar[157], "../a", 4);
  std::memset(&tar[148], ' ', 8);
  unsigned sum = 0;
  for (size_t i = 0; i < 512; ++i) sum += static_cast<unsigned char>(tar[i]);
  char buf[8];
  std::snprintf(buf, sizeof buf, "%06o", sum);
  std::memcpy(&tar[148], buf, 7);
  tar.append(1024, '\0');
  std::vector<std::string> tars = {tar};
  EXPECT_THAT(Merge(tars), StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("layer 0")));
}

TEST(ImageTreeTest, DeviceNodeIsSkippedCountedAndHidesWhatWasBelow) {
  TarWriter a;
  ASSERT_OK(a.AddFile("dev/null", "not a device"));
  std::vector<std::string> tars = {a.Finish(), SpecialEntryTar("dev/null", '3'),
                                   SpecialEntryTar("fifo", '6')};
  ASSERT_OK_AND_ASSIGN(ImageTree t, Merge(tars));
  EXPECT_THAT(Paths(t), ElementsAre("dev"));
  EXPECT_EQ(t.counts.skipped_special, 2u);
}

TEST(ImageTreeTest, DirectoryReplacesAFileAndAFileReplacesADirectory) {
  TarWriter a, b;
  ASSERT_OK(a.AddFile("x", "file"));
  ASSERT_OK(a.AddFile("d/inner", "i"));
  ASSERT_OK(b.AddDirectory("x"));
  ASSERT_OK(b.AddFile("d", "now a file"));
  std::vector<std::string> tars = {a.Finish(), b.Finish()};
  ASSERT_OK_AND_ASSIGN(ImageTree t, Merge(tars));
  EXPECT_THAT(Paths(t), ElementsAre("d", "x"));
  EXPECT_EQ(t.nodes.at("x").type, ImageNodeType::kDirectory);
  EXPECT_EQ(Bytes(tars, t.nodes.at("d")), "now a file");
}

TEST(ImageTreeTest, EntryUnderAFileIsRefused) {
  TarWriter a, b;
  ASSERT_OK(a.AddFile("f", "file"));
  ASSERT_OK(b.AddFile("f/g", "x"));
  std::vector<std::string> tars = {a.Finish(), b.Finish()};
  EXPECT_THAT(Merge(tars), StatusIs(absl::StatusCode::kPermissionDenied,
                                    HasSubstr("needs 'f' to be a directory")));
}

TEST(ImageTreeTest, DotDotNameIsRefusedWithTheLayer) {
  TarWriter a;
  ASSERT_OK(a.AddFile("aa/evil", "x"));
  std::string tar = a.Finish();
  std::memcpy(&tar[0], "..", 2);  // "../evil"
  std::memset(&tar[148], ' ', 8);
  unsigned sum = 0;
  for (size_t i = 0; i < 512; ++i) sum += static_cast<unsigned char>(tar[i]);
  char buf[8];
  std::snprintf(buf, sizeof buf, "%06o", sum);
  std::memcpy(&tar[148], buf, 7);
  std::vector<std::string> tars = {tar};
  EXPECT_THAT(Merge(tars), StatusIs(absl::StatusCode::kPermissionDenied,
                                    HasSubstr("layer 0: tar: tar entry at offset 0")));
}

}  // namespace
}  // namespace modelfs
