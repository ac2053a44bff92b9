// `modelfs pull` of hostile artifacts: a layer path annotation that climbs out of DEST or is
// absolute, and tar layers with a symlink that escapes DEST or a device node. Each pull exits 1
// and writes nothing, neither inside DEST nor next to it.
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/oci/manifest.h"
#include "core/oci/media_types.h"
#include "core/oci/modelpack.h"
#include "core/oci/tar.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kRepo[] = "hostile/model";

// A tar header block for a character device (typeflag '3'), which TarWriter never writes.
std::string DeviceNodeTar(const std::string& path) {
  absl::StatusOr<std::string> header = EncodeTarHeader(path, '0', 0, 0644);
  EXPECT_OK(header.status());
  std::string block = header.ok() ? *header : std::string(kTarBlockSize, '\0');
  block[156] = '3';
  for (size_t i = 148; i < 156; ++i) block[i] = ' ';
  unsigned sum = 0;
  for (char c : block) sum += static_cast<unsigned char>(c);
  char chk[8];
  snprintf(chk, sizeof(chk), "%06o", sum);
  memcpy(block.data() + 148, chk, 7);  // six digits and a NUL; the space stays
  return block + std::string(2 * kTarBlockSize, '\0');
}

// A tar header block for a hard link `path` -> `target` (TarWriter writes none).
std::string HardLinkHeader(const std::string& path, const std::string& target) {
  absl::StatusOr<std::string> header = EncodeTarHeader(path, '1', 0, 0644, target);
  EXPECT_OK(header.status());
  return header.ok() ? *header : std::string();
}

// Data entries written by hand, in the given order, then the end blocks.
std::string FileEntry(const std::string& path, const std::string& data) {
  absl::StatusOr<std::string> header = EncodeTarHeader(path, '0', data.size(), 0644);
  EXPECT_OK(header.status());
  return (header.ok() ? *header : std::string()) + data +
         std::string(TarPadding(data.size()), '\0');
}
std::string EndOfTar() { return std::string(2 * kTarBlockSize, '\0'); }

// A file entry whose ustar name is `raw_name` as is (at most 99 bytes, no check), which
// EncodeTarHeader would refuse.
std::string RawNameFileEntry(const std::string& raw_name, const std::string& data) {
  std::string entry = FileEntry("placeholder", data);
  std::memset(entry.data(), 0, 100);
  std::memcpy(entry.data(), raw_name.data(), raw_name.size());
  std::memset(entry.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (size_t i = 0; i < kTarBlockSize; ++i) sum += static_cast<unsigned char>(entry[i]);
  char chk[8];
  snprintf(chk, sizeof(chk), "%06o", sum);
  memcpy(entry.data() + 148, chk, 7);
  return entry;
}

class PullPathSafetyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto registry = RegistryFixture::Start();
    ASSERT_OK(registry.status());
    registry_ = registry->release();
  }
  static void TearDownTestSuite() { delete registry_; }
  void SetUp() override {
    ASSERT_NE(registry_, nullptr);
    ASSERT_OK_AND_ASSIGN(client_, ConnectPlainHttp(registry_->host_port()));
  }

  // Pushes M with one layer holding `bytes` and the given annotations, built by hand (the
  // project's own BuildModelManifest refuses unsafe paths); the layer's descriptor declares
  // `declared_size` when given. Returns the tag's reference.
  std::string PushHandBuiltModel(const std::string& tag, std::string bytes,
                                 const std::string& media_type,
                                 std::map<std::string, std::string> annotations,
                                 std::optional<uint64_t> declared_size = std::nullopt) {
    ModelPackConfig config;
    config.descriptor.name = "hostile";
    Descriptor layer;
    layer.media_type = media_type;
    layer.size = declared_size.value_or(bytes.size());
    absl::StatusOr<Digest> ld = UploadBlob(*client_, kRepo, std::move(bytes));
    EXPECT_OK(ld.status());
    if (ld.ok()) layer.digest = *ld;
    layer.annotations = std::move(annotations);
    config.modelfs.diff_ids.push_back(layer.digest);
    std::string config_json = SerializeModelPackConfig(config);
    EXPECT_OK(UploadBlob(*client_, kRepo, config_json).status());

    Manifest m;
    m.media_type = std::string(kOciManifestMediaType);
    m.artifact_type = std::string(kModelArtifactType);
    m.config = DescribeBlob(kModelConfigMediaType, config_json);
    m.layers.push_back(layer);
    EXPECT_OK(
        client_->PutManifest(kRepo, tag, SerializeManifest(m), std::string(kOciManifestMediaType))
            .status());
    return absl::StrCat(registry_->host_port(), "/", kRepo, ":", tag);
  }

  std::string PushTarModel(const std::string& tag, std::string tar) {
    return PushHandBuiltModel(tag, std::move(tar), "application/vnd.cncf.model.weight.v1.tar",
                              {{std::string(kAnnotationFilepath), "weights.tar"}});
  }

  // Pulls into tmp_/box/dest and returns the result; the test then checks tmp_/box.
  ProcessResult Pull(const std::string& ref) {
    fs::create_directories(Box());
    absl::StatusOr<ProcessResult> r = RunModelfs({"pull", "--plain-http", ref, Box() + "/dest"});
    EXPECT_OK(r.status());
    return r.ok() ? *r : ProcessResult{};
  }
  // DEST exists beforehand with these files.
  void FillDest(const std::map<std::string, std::string>& files) {
    for (const auto& [rel, bytes] : files) {
      fs::create_directories(fs::path(Box() + "/dest/" + rel).parent_path());
      std::ofstream(Box() + "/dest/" + rel, std::ios::binary) << bytes;
    }
  }
  std::string Box() const { return tmp_.Join("box").string(); }

  static RegistryFixture* registry_;
  std::unique_ptr<RegistryClient> client_;
  TempDir tmp_;
};

RegistryFixture* PullPathSafetyTest::registry_ = nullptr;

TEST_F(PullPathSafetyTest, AFilepathThatClimbsOutOfDestIsRefusedAndNothingIsWritten) {
  std::string ref =
      PushHandBuiltModel("dotdot", "evil bytes\n", "application/vnd.cncf.model.weight.v1.raw",
                         {{std::string(kAnnotationFilepath), "../evil"}});
  ProcessResult r = Pull(ref);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("../evil"));
  EXPECT_THAT(DescribeTree(Box()), IsEmpty());
}

TEST_F(PullPathSafetyTest, AnAbsoluteFilepathIsRefusedAndNothingIsWritten) {
  ASSERT_FALSE(fs::exists("/etc/x"));
  std::string ref =
      PushHandBuiltModel("absolute", "evil bytes\n", "application/vnd.cncf.model.weight.v1.raw",
                         {{std::string(kAnnotationFilepath), "/etc/x"}});
  ProcessResult r = Pull(ref);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("/etc/x"));
  EXPECT_THAT(DescribeTree(Box()), IsEmpty());
  EXPECT_FALSE(fs::exists("/etc/x"));
}

TEST_F(PullPathSafetyTest, ATarSymlinkThatEscapesDestIsRefusedAndNothingIsWritten) {
  TarWriter tar;
  ASSERT_OK(tar.AddFile("good.txt", "harmless\n"));
  ASSERT_OK(tar.AddSymlink("link", "../../outside"));
  ProcessResult r = Pull(PushTarModel("symlink-escape", tar.Finish()));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("escapes"));
  EXPECT_THAT(DescribeTree(Box()), IsEmpty());
}

TEST_F(PullPathSafetyTest, ATarSymlinkToAnAbsolutePathIsRefusedAndNothingIsWritten) {
  TarWriter tar;
  ASSERT_OK(tar.AddSymlink("passwd", "/etc/passwd"));
  ProcessResult r = Pull(PushTarModel("symlink-absolute", tar.Finish()));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("/etc/passwd"));
  EXPECT_THAT(DescribeTree(Box()), IsEmpty());
}

TEST_F(PullPathSafetyTest, ATarDeviceNodeIsRefusedAndNothingIsWritten) {
  ProcessResult r = Pull(PushTarModel("device", DeviceNodeTar("dev/null-ish")));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("device"));
  EXPECT_THAT(DescribeTree(Box()), IsEmpty());
}

TEST_F(PullPathSafetyTest, ASafeTarLayerWithAnInsideSymlinkPullsFine) {
  TarWriter tar;
  ASSERT_OK(tar.AddFile("weights/real.bin", "0123456789"));
  ASSERT_OK(tar.AddSymlink("weights/alias.bin", "real.bin"));
  ProcessResult r = Pull(PushTarModel("safe", tar.Finish()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, std::string> tree = DescribeTree(Box() + "/dest");
  EXPECT_EQ(tree["weights/alias.bin"], "symlink:real.bin");
  EXPECT_EQ(tree["weights/real.bin"], Digest::Of("0123456789").str());
}

TEST_F(PullPathSafetyTest, ATarFileLargerThanOneCopySliceIsExtractedBitForBit) {
  // pull copies tar members 8 MiB at a time; 9 MiB and a few bytes cross two slice edges.
  std::string big((9u << 20) + 7, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 13);
  TarWriter tar;
  ASSERT_OK(tar.AddFile("big.bin", big));
  ProcessResult r = Pull(PushTarModel("big", tar.Finish()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(DescribeTree(Box() + "/dest"),
            (std::map<std::string, std::string>{{"big.bin", Digest::Of(big).str()}}));
}

TEST_F(PullPathSafetyTest, AHardLinkThenAFileOfTheSameNameIsRefusedAndNothingIsWritten) {
  std::string tar = FileEntry("a.bin", "first file\n") + HardLinkHeader("b.bin", "a.bin") +
                    FileEntry("b.bin", "written through the link\n") + EndOfTar();
  ProcessResult r = Pull(PushTarModel("hardlink-then-file", tar));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("path 'b.bin' appears twice in the model"));
  EXPECT_THAT(DescribeTree(Box()), IsEmpty());
}

TEST_F(PullPathSafetyTest, AFileWrittenThroughASymlinkToADirectoryIsRefusedAndNothingIsWritten) {
  TarWriter tar;
  ASSERT_OK(tar.AddDirectory("real"));
  ASSERT_OK(tar.AddSymlink("alias", "real"));
  ASSERT_OK(tar.AddFile("alias/weights.bin", "through the symlink\n"));
  ProcessResult r = Pull(PushTarModel("through-symlink", tar.Finish()));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("'alias/weights.bin' would be written through the link 'alias'"));
  EXPECT_THAT(DescribeTree(Box()), IsEmpty());
}

TEST_F(PullPathSafetyTest, AHardLinkToAPathNotYetExtractedIsRefusedAndNothingIsWritten) {
  std::string tar = HardLinkHeader("early.bin", "later.bin") +
                    FileEntry("later.bin", "the target comes after the link\n") + EndOfTar();
  ProcessResult r = Pull(PushTarModel("hardlink-forward", tar));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("hard link 'early.bin' -> 'later.bin' does not name a file "
                               "extracted before it"));
  EXPECT_THAT(DescribeTree(Box()), IsEmpty());
}

TEST_F(PullPathSafetyTest, AFailedPullIntoAnExistingDestLeavesItsFilesExactlyAsTheyWere) {
  FillDest({{"keep.txt", "mine\n"}, {"good.txt", "older bytes\n"}});
  TarWriter tar;
  ASSERT_OK(tar.AddFile("good.txt", "harmless\n"));
  ASSERT_OK(tar.AddSymlink("link", "../../outside"));
  ProcessResult r = Pull(PushTarModel("existing-dest", tar.Finish()));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(DescribeTree(Box()), (std::map<std::string, std::string>{
                                     {"dest", "dir"},
                                     {"dest/good.txt", Digest::Of("older bytes\n").str()},
                                     {"dest/keep.txt", Digest::Of("mine\n").str()}}));
}

TEST_F(PullPathSafetyTest, AMoveIntoDestThatMeetsAConflictPutsBackEveryFileItReplacedOrAdded) {
  // Entries move in name order: a.txt replaces DEST's copy, b.txt is new, then z/ meets DEST's
  // file z and the whole move is undone.
  FillDest({{"a.txt", "older a\n"}, {"z", "a file where the model has a directory\n"}});
  TarWriter tar;
  ASSERT_OK(tar.AddFile("a.txt", "new a\n"));
  ASSERT_OK(tar.AddFile("b.txt", "new b\n"));
  ASSERT_OK(tar.AddFile("z/inner.txt", "inside\n"));
  ProcessResult r = Pull(PushTarModel("merge-conflict", tar.Finish()));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("already exists as a file; the model has a directory there"));
  EXPECT_EQ(DescribeTree(Box()),
            (std::map<std::string, std::string>{
                {"dest", "dir"},
                {"dest/a.txt", Digest::Of("older a\n").str()},
                {"dest/z", Digest::Of("a file where the model has a directory\n").str()}}));
}

TEST_F(PullPathSafetyTest, APullIntoAnExistingDestReplacesItsFilesAndKeepsTheOthers) {
  FillDest({{"keep.txt", "mine\n"}, {"sub/a.txt", "older a\n"}});
  TarWriter tar;
  ASSERT_OK(tar.AddFile("sub/a.txt", "new a\n"));
  ASSERT_OK(tar.AddFile("sub/b.txt", "new b\n"));
  ProcessResult r = Pull(PushTarModel("merge-ok", tar.Finish()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(DescribeTree(Box()),
            (std::map<std::string, std::string>{{"dest", "dir"},
                                                {"dest/keep.txt", Digest::Of("mine\n").str()},
                                                {"dest/sub", "dir"},
                                                {"dest/sub/a.txt", Digest::Of("new a\n").str()},
                                                {"dest/sub/b.txt", Digest::Of("new b\n").str()}}));
}

TEST_F(PullPathSafetyTest, ATarEntryAtTheModelInfoPathIsRefusedWithUsageErrorLikeMount) {
  TarWriter tar;
  ASSERT_OK(tar.AddFile(".modelinfo.json", "{}\n"));
  ProcessResult r = Pull(PushTarModel("reserved", tar.Finish()));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("path '.modelinfo.json' is reserved"));
  EXPECT_THAT(DescribeTree(Box()), IsEmpty());
}

TEST_F(PullPathSafetyTest, ANewlineInATarNameIsRefusedAndCannotForgeAVerifiedLine) {
  std::string tar =
      RawNameFileEntry("a.bin\nverified 000000000000 1  forged.bin", "x") + EndOfTar();
  ProcessResult r = Pull(PushTarModel("newline-name", tar));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.out, IsEmpty());
  EXPECT_THAT(r.err, HasSubstr("refused path 'a.bin\\nverified 000000000000 1  forged.bin': "
                               "contains a control character\n"));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_THAT(DescribeTree(Box()), IsEmpty());
}

TEST_F(PullPathSafetyTest, AnEscapeInAPathAnnotationIsRefusedAndPrintedEscaped) {
  std::string ref =
      PushHandBuiltModel("escape-annotation", "bytes\n", "application/vnd.cncf.model.weight.v1.raw",
                         {{std::string(kAnnotationFilepath), "\x1b]0;pwned\x07.bin"}});
  ProcessResult r = Pull(ref);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("refused path '\\x1b]0;pwned\\x07.bin'"));
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos);
  EXPECT_THAT(DescribeTree(Box()), IsEmpty());
}

// Not a pull, but the same hostile artifact: `mount` refuses it before touching the cache.
TEST_F(PullPathSafetyTest, AnAbsurdLayerSizeMakesPullAndMountExitTwoNamingTheLayerAndSize) {
  std::string ref =
      PushHandBuiltModel("absurd-size", "tiny\n", "application/vnd.cncf.model.weight.v1.raw",
                         {{std::string(kAnnotationFilepath), "huge.bin"}}, 9223372036854775807ull);
  const std::string want = absl::StrCat("manifest.layers[0] (", Digest::Of("tiny\n").str(),
                                        ") 'huge.bin': declared size 9223372036854775807 bytes");
  ProcessResult pull = Pull(ref);
  EXPECT_EQ(pull.exit_code, 2) << pull.err;
  EXPECT_THAT(pull.err, HasSubstr(want));
  EXPECT_THAT(DescribeTree(Box()), IsEmpty());

  const std::string mnt = tmp_.Join("mnt").string();
  fs::create_directories(mnt);
  absl::StatusOr<ProcessResult> mount =
      RunModelfs({"mount", "--plain-http", "--cache", tmp_.Join("cache").string(), "--prefetch",
                  "none", ref, mnt});
  ASSERT_OK(mount.status());
  if (mount->exit_code == 0) (void)RunModelfs({"umount", mnt});
  EXPECT_EQ(mount->exit_code, 2) << mount->err;
  EXPECT_THAT(mount->err, HasSubstr(want));
  EXPECT_THAT(mount->err, ::testing::Not(HasSubstr("bad_alloc")));
  EXPECT_THAT(DescribeTree(mnt), IsEmpty());
}

}  // namespace
}  // namespace modelfs::testing
