// ModelTree without FUSE: names, attributes, listings, reads, inode numbers, refused paths and
// several models in one tree.
#include "fuse/model_tree.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/oci/path_safety.h"
#include "testsupport/fakes/fake_blob_reader.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::FakeBlobReader;
using ::modelfs::testing::IsOk;
using ::modelfs::testing::StatusIs;
using ::testing::_;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// One layer holding two files back to back ("tar-like"), plus a second layer.
class ModelTreeTest : public ::testing::Test {
 protected:
  ModelTreeTest() {
    layer_ = reader_.Add("HEADERconfig-bytes{weights-0123456789}TRAILER");
    other_ = reader_.Add("tokenizer data");
  }

  std::vector<TreeFile> Files() const {
    return {
        TreeFile{"config.json", layer_, 6, 12, ""},               // "config-bytes"
        TreeFile{"model.safetensors", layer_, 18, 20, ""},        // "{weights-0123456789}"
        TreeFile{"tokenizer/tokenizer.json", other_, 0, 14, ""},  // whole second layer
    };
  }

  std::unique_ptr<ModelTree> Single() {
    auto tree = ModelTree::SingleModel(&reader_, Files(), {{".modelinfo.json", "{\"a\":1}"}});
    EXPECT_THAT(tree, IsOk());
    return std::move(tree).value();
  }

  FakeBlobReader reader_;
  Digest layer_;
  Digest other_;
};

// The bytes read, or the error as text (so mismatches print both).
std::string ReadOr(const ModelTree& tree, uint64_t ino, uint64_t offset, uint64_t size) {
  absl::StatusOr<std::string> got = tree.Read(ino, offset, size);
  return got.ok() ? *got : "ERROR: " + got.status().ToString();
}

std::vector<std::string> Names(const std::vector<DirEntry>& entries) {
  std::vector<std::string> out;
  for (const DirEntry& e : entries) out.push_back(e.name);
  return out;
}

TEST_F(ModelTreeTest, LookupOfAFileGivesRootOwnedReadOnlyAttributes) {
  auto tree = Single();
  ASSERT_OK_AND_ASSIGN(NodeAttr a, tree->Lookup(ModelTree::kRootIno, "model.safetensors"));
  EXPECT_EQ(a.mode, static_cast<uint32_t>(S_IFREG | 0444));
  EXPECT_EQ(a.size, 20u);
  EXPECT_EQ(a.nlink, 1u);
  EXPECT_EQ(a.uid, 0u);
  EXPECT_EQ(a.gid, 0u);
  EXPECT_EQ(a.blocks, 1u);
  EXPECT_EQ(a.mtime_sec, 0);
}

TEST_F(ModelTreeTest, IntermediateDirectoriesAreCreatedWithMode0555) {
  auto tree = Single();
  ASSERT_OK_AND_ASSIGN(NodeAttr dir, tree->Lookup(ModelTree::kRootIno, "tokenizer"));
  EXPECT_EQ(dir.mode, static_cast<uint32_t>(S_IFDIR | 0555));
  EXPECT_EQ(dir.nlink, 2u);
  ASSERT_OK_AND_ASSIGN(NodeAttr f, tree->Lookup(dir.ino, "tokenizer.json"));
  EXPECT_EQ(f.size, 14u);
}

TEST_F(ModelTreeTest, RootNlinkCountsSubdirectories) {
  auto tree = Single();
  ASSERT_OK_AND_ASSIGN(NodeAttr root, tree->GetAttr(ModelTree::kRootIno));
  EXPECT_EQ(root.mode, static_cast<uint32_t>(S_IFDIR | 0555));
  EXPECT_EQ(root.nlink, 3u);
}

TEST_F(ModelTreeTest, LookupOfAMissingNameIsNotFound) {
  auto tree = Single();
  EXPECT_THAT(tree->Lookup(ModelTree::kRootIno, "nope.bin"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope.bin")));
  EXPECT_EQ(StatusToErrno(tree->Lookup(ModelTree::kRootIno, "nope.bin").status()), ENOENT);
}

TEST_F(ModelTreeTest, LookupInsideAFileIsNotADirectory) {
  auto tree = Single();
  ASSERT_OK_AND_ASSIGN(NodeAttr f, tree->Lookup(ModelTree::kRootIno, "config.json"));
  EXPECT_EQ(StatusToErrno(tree->Lookup(f.ino, "x").status()), ENOTDIR);
}

TEST_F(ModelTreeTest, ReadDirListsDotsThenChildrenSortedByName) {
  auto tree = Single();
  ASSERT_OK_AND_ASSIGN(auto entries, tree->ReadDir(ModelTree::kRootIno));
  EXPECT_THAT(Names(entries), ElementsAre(".", "..", ".modelinfo.json", "config.json",
                                          "model.safetensors", "tokenizer"));
  EXPECT_EQ(entries[0].ino, ModelTree::kRootIno);
  EXPECT_TRUE(entries[5].is_dir);
  EXPECT_FALSE(entries[4].is_dir);
  EXPECT_EQ(entries[5].next_offset, 6u);
}

TEST_F(ModelTreeTest, ReadDirFromAnOffsetContinuesAfterThatEntry) {
  auto tree = Single();
  ASSERT_OK_AND_ASSIGN(auto entries, tree->ReadDir(ModelTree::kRootIno, 4));
  EXPECT_THAT(Names(entries), ElementsAre("model.safetensors", "tokenizer"));
}

TEST_F(ModelTreeTest, ReadDirEntriesCarryTheInodesThatLookupReturns) {
  auto tree = Single();
  ASSERT_OK_AND_ASSIGN(auto entries, tree->ReadDir(ModelTree::kRootIno, 3));
  ASSERT_OK_AND_ASSIGN(NodeAttr a, tree->Lookup(ModelTree::kRootIno, "config.json"));
  EXPECT_EQ(entries[0].name, "config.json");
  EXPECT_EQ(entries[0].ino, a.ino);
}

TEST_F(ModelTreeTest, ReadReturnsTheFilesExtentOfTheLayer) {
  auto tree = Single();
  ASSERT_OK_AND_ASSIGN(NodeAttr a, tree->Lookup(ModelTree::kRootIno, "model.safetensors"));
  EXPECT_EQ(ReadOr(*tree, a.ino, 0, 20), "{weights-0123456789}");
  ASSERT_OK_AND_ASSIGN(std::string mid, tree->Read(a.ino, 9, 4));
  EXPECT_EQ(mid, "0123");
}

TEST_F(ModelTreeTest, ReadStopsAtTheEndOfTheFileNotTheLayer) {
  auto tree = Single();
  ASSERT_OK_AND_ASSIGN(NodeAttr a, tree->Lookup(ModelTree::kRootIno, "config.json"));
  ASSERT_OK_AND_ASSIGN(std::string tail, tree->Read(a.ino, 7, 100));
  EXPECT_EQ(tail, "bytes");
  ASSERT_OK_AND_ASSIGN(std::string past, tree->Read(a.ino, 12, 100));
  EXPECT_EQ(past, "");
}

TEST_F(ModelTreeTest, SyntheticFilesAreServedFromMemory) {
  auto tree = Single();
  ASSERT_OK_AND_ASSIGN(NodeAttr a, tree->Lookup(ModelTree::kRootIno, ".modelinfo.json"));
  EXPECT_EQ(a.size, 7u);
  int before = reader_.reads();
  ASSERT_OK_AND_ASSIGN(std::string bytes, tree->Read(a.ino, 0, 4096));
  EXPECT_EQ(bytes, "{\"a\":1}");
  EXPECT_EQ(reader_.reads(), before);
}

TEST_F(ModelTreeTest, ADataLossFromTheBlobReaderBecomesEioNamingTheFile) {
  auto tree = Single();
  ASSERT_OK_AND_ASSIGN(NodeAttr a, tree->Lookup(ModelTree::kRootIno, "model.safetensors"));
  reader_.Fail(layer_, absl::DataLossError("chunk 0 digest mismatch"));
  absl::StatusOr<std::string> got = tree->Read(a.ino, 4, 8);
  EXPECT_THAT(got, StatusIs(absl::StatusCode::kDataLoss,
                            HasSubstr("reading 'model.safetensors' at offset 4")));
  EXPECT_THAT(got.status().message(), HasSubstr("chunk 0 digest mismatch"));
  EXPECT_EQ(StatusToErrno(got.status()), EIO);
}

TEST_F(ModelTreeTest, AnUnknownBlobIsEioNotEnoent) {
  Digest missing = Digest::Of("never added");
  ASSERT_OK_AND_ASSIGN(auto tree,
                       ModelTree::SingleModel(&reader_, {TreeFile{"w.bin", missing, 0, 4, ""}}));
  ASSERT_OK_AND_ASSIGN(NodeAttr a, tree->Lookup(ModelTree::kRootIno, "w.bin"));
  absl::StatusOr<std::string> got = tree->Read(a.ino, 0, 4);
  EXPECT_THAT(got, StatusIs(absl::StatusCode::kNotFound, HasSubstr(missing.str())));
  EXPECT_EQ(StatusToErrno(got.status()), EIO);
}

TEST_F(ModelTreeTest, ALayerShorterThanTheFileIsDataLoss) {
  ASSERT_OK_AND_ASSIGN(auto tree,
                       ModelTree::SingleModel(&reader_, {TreeFile{"w.bin", other_, 10, 8, ""}}));
  ASSERT_OK_AND_ASSIGN(NodeAttr a, tree->Lookup(ModelTree::kRootIno, "w.bin"));
  EXPECT_THAT(tree->Read(a.ino, 0, 8),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("returned 4 bytes")));
}

TEST_F(ModelTreeTest, TimeoutsAndUnreachableRegistriesAreEio) {
  EXPECT_EQ(StatusToErrno(absl::DeadlineExceededError("slow")), EIO);
  EXPECT_EQ(StatusToErrno(absl::UnavailableError("down")), EIO);
  EXPECT_EQ(StatusToErrno(absl::OkStatus()), 0);
}

TEST_F(ModelTreeTest, OpeningForWritingIsReadOnlyFilesystem) {
  auto tree = Single();
  ASSERT_OK_AND_ASSIGN(NodeAttr a, tree->Lookup(ModelTree::kRootIno, "config.json"));
  EXPECT_THAT(tree->Open(a.ino, O_RDONLY), IsOk());
  EXPECT_EQ(StatusToErrno(tree->Open(a.ino, O_RDWR)), EROFS);
  EXPECT_EQ(StatusToErrno(tree->Open(a.ino, O_WRONLY)), EROFS);
  EXPECT_EQ(StatusToErrno(tree->Open(ModelTree::kRootIno, O_RDONLY)), EISDIR);
}

TEST_F(ModelTreeTest, InodeNumbersAreTheSameInTwoTreesOfTheSameModel) {
  auto a = Single();
  auto b = Single();
  for (const char* name : {"config.json", "model.safetensors", "tokenizer", ".modelinfo.json"}) {
    ASSERT_OK_AND_ASSIGN(NodeAttr x, a->Lookup(ModelTree::kRootIno, name));
    ASSERT_OK_AND_ASSIGN(NodeAttr y, b->Lookup(ModelTree::kRootIno, name));
    EXPECT_EQ(x.ino, y.ino) << name;
    EXPECT_GT(x.ino, ModelTree::kRootIno) << name;
  }
}

TEST_F(ModelTreeTest, InodeNumbersAreDistinctAcrossFiles) {
  auto tree = Single();
  ASSERT_OK_AND_ASSIGN(auto entries, tree->ReadDir(ModelTree::kRootIno, 2));
  std::set<uint64_t> inos;
  for (const DirEntry& e : entries) inos.insert(e.ino);
  EXPECT_EQ(inos.size(), entries.size());
  EXPECT_EQ(inos.count(ModelTree::kRootIno), 0u);
}

TEST_F(ModelTreeTest, AnAbsolutePathIsRefused) {
  EXPECT_THAT(ModelTree::SingleModel(&reader_, {TreeFile{"/etc/passwd", layer_, 0, 1, ""}}),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("'/etc/passwd'")));
}

TEST_F(ModelTreeTest, ADotDotComponentIsRefused) {
  EXPECT_THAT(ModelTree::SingleModel(&reader_, {TreeFile{"a/../../x", layer_, 0, 1, ""}}),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("'a/../../x'")));
  EXPECT_THAT(ModelTree::SingleModel(&reader_, {TreeFile{"./x", layer_, 0, 1, ""}}),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("'./x'")));
}

TEST_F(ModelTreeTest, EmptyPathsAndComponentsAreRefused) {
  EXPECT_THAT(ModelTree::SingleModel(&reader_, {TreeFile{"a//b", layer_, 0, 1, ""}}),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("'a//b'")));
  EXPECT_THAT(ModelTree::SingleModel(&reader_, {TreeFile{"dir/", layer_, 0, 1, ""}}),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("'dir/'")));
  EXPECT_THAT(ModelTree::SingleModel(&reader_, {TreeFile{"", layer_, 0, 1, ""}}),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("empty")));
}

// Mount and pull share core/oci/path_safety.h: a name pull refuses is refused here too, and
// one it accepts is accepted.
TEST_F(ModelTreeTest, ABackslashInAPathIsRefusedAsPullRefusesIt) {
  EXPECT_THAT(ModelTree::SingleModel(&reader_, {TreeFile{"a\\b.bin", layer_, 0, 1, ""}}),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("backslash")));
}

TEST_F(ModelTreeTest, AFourThousandNinetySixBytePathIsAcceptedAsPullAcceptsIt) {
  std::string path;
  while (path.size() + 201 <= 4096) path += std::string(200, 'd') + "/";
  path += std::string(4096 - path.size(), 'f');
  ASSERT_EQ(path.size(), 4096u);
  ASSERT_OK(CheckRelativePath(path));
  EXPECT_OK(ModelTree::SingleModel(&reader_, {TreeFile{path, layer_, 0, 1, ""}}).status());
}

TEST_F(ModelTreeTest, ADuplicatePathIsInvalid) {
  EXPECT_THAT(
      ModelTree::SingleModel(
          &reader_, {TreeFile{"w.bin", layer_, 0, 1, ""}, TreeFile{"w.bin", layer_, 1, 1, ""}}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("duplicate file path 'w.bin'")));
  EXPECT_THAT(
      ModelTree::SingleModel(&reader_, {TreeFile{"w.bin", layer_, 0, 1, ""}}, {{"w.bin", "x"}}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'w.bin'")));
}

TEST_F(ModelTreeTest, APathThatIsBothFileAndDirectoryIsInvalid) {
  EXPECT_THAT(ModelTree::SingleModel(
                  &reader_, {TreeFile{"a", layer_, 0, 1, ""}, TreeFile{"a/b", layer_, 0, 1, ""}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'a/b'")));
  EXPECT_THAT(ModelTree::SingleModel(
                  &reader_, {TreeFile{"a/b", layer_, 0, 1, ""}, TreeFile{"a", layer_, 0, 1, ""}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'a' is also a directory")));
}

TEST_F(ModelTreeTest, AFileWithoutALayerDigestIsInvalid) {
  EXPECT_THAT(ModelTree::SingleModel(&reader_, {TreeFile{"w.bin", Digest(), 0, 1, ""}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'w.bin' has no layer")));
}

TEST_F(ModelTreeTest, TwoModelsLiveInSeparateDirectoriesAtTheRoot) {
  ModelTree tree(&reader_);
  ASSERT_OK(tree.AddModel("sha256-aaaa", Files()));
  ASSERT_OK(tree.AddModel("sha256-bbbb", {TreeFile{"config.json", other_, 0, 9, ""}}));
  ASSERT_OK_AND_ASSIGN(auto entries, tree.ReadDir(ModelTree::kRootIno));
  EXPECT_THAT(Names(entries), ElementsAre(".", "..", "sha256-aaaa", "sha256-bbbb"));
  ASSERT_OK_AND_ASSIGN(NodeAttr a, tree.Lookup(ModelTree::kRootIno, "sha256-aaaa"));
  ASSERT_OK_AND_ASSIGN(NodeAttr b, tree.Lookup(ModelTree::kRootIno, "sha256-bbbb"));
  ASSERT_OK_AND_ASSIGN(NodeAttr ca, tree.Lookup(a.ino, "config.json"));
  ASSERT_OK_AND_ASSIGN(NodeAttr cb, tree.Lookup(b.ino, "config.json"));
  EXPECT_NE(ca.ino, cb.ino);
  EXPECT_EQ(ReadOr(tree, ca.ino, 0, 100), "config-bytes");
  EXPECT_EQ(ReadOr(tree, cb.ino, 0, 100), "tokenizer");
  ASSERT_OK_AND_ASSIGN(NodeAttr root, tree.GetAttr(ModelTree::kRootIno));
  EXPECT_EQ(root.nlink, 4u);
  EXPECT_THAT(tree.Models(), ElementsAre("sha256-aaaa", "sha256-bbbb"));
}

TEST_F(ModelTreeTest, AddingAModelTwiceIsAlreadyExists) {
  ModelTree tree(&reader_);
  ASSERT_OK(tree.AddModel("m", Files()));
  EXPECT_THAT(tree.AddModel("m", Files()),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("'m'")));
}

TEST_F(ModelTreeTest, AModelNameMustBeOneSafeComponent) {
  ModelTree tree(&reader_);
  EXPECT_THAT(tree.AddModel("..", Files()),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("'..'")));
  EXPECT_THAT(tree.AddModel("a/b", Files()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'a/b'")));
}

TEST_F(ModelTreeTest, ARefusedModelAddsNothing) {
  ModelTree tree(&reader_);
  std::vector<TreeFile> files = Files();
  files.push_back(TreeFile{"../escape", layer_, 0, 1, ""});
  EXPECT_THAT(tree.AddModel("m", files), StatusIs(absl::StatusCode::kPermissionDenied, _));
  EXPECT_FALSE(tree.HasModel("m"));
  EXPECT_EQ(tree.StatFs().files, 1u);
  ASSERT_OK_AND_ASSIGN(auto entries, tree.ReadDir(ModelTree::kRootIno));
  EXPECT_EQ(entries.size(), 2u);
}

TEST_F(ModelTreeTest, InodesOfAModelDoNotDependOnOtherModels) {
  ModelTree one(&reader_);
  ASSERT_OK(one.AddModel("m", Files()));
  ModelTree two(&reader_);
  ASSERT_OK(two.AddModel("other", {TreeFile{"x", other_, 0, 1, ""}}));
  ASSERT_OK(two.AddModel("m", Files()));
  ASSERT_OK_AND_ASSIGN(NodeAttr d1, one.Lookup(ModelTree::kRootIno, "m"));
  ASSERT_OK_AND_ASSIGN(NodeAttr d2, two.Lookup(ModelTree::kRootIno, "m"));
  EXPECT_EQ(d1.ino, d2.ino);
  ASSERT_OK_AND_ASSIGN(NodeAttr f1, one.Lookup(d1.ino, "model.safetensors"));
  ASSERT_OK_AND_ASSIGN(NodeAttr f2, two.Lookup(d2.ino, "model.safetensors"));
  EXPECT_EQ(f1.ino, f2.ino);
}

TEST_F(ModelTreeTest, RemovedModelDisappearsButLookedUpFilesStayReadableUntilForgotten) {
  ModelTree tree(&reader_);
  ASSERT_OK(tree.AddModel("m", Files()));
  ASSERT_OK_AND_ASSIGN(NodeAttr dir, tree.Lookup(ModelTree::kRootIno, "m"));
  ASSERT_OK_AND_ASSIGN(NodeAttr f, tree.Lookup(dir.ino, "config.json"));
  ASSERT_OK(tree.RemoveModel("m"));

  EXPECT_THAT(tree.Lookup(ModelTree::kRootIno, "m"), StatusIs(absl::StatusCode::kNotFound, _));
  EXPECT_THAT(tree.Lookup(dir.ino, "model.safetensors"), StatusIs(absl::StatusCode::kNotFound, _));
  EXPECT_EQ(ReadOr(tree, f.ino, 0, 6), "config");

  tree.Forget(f.ino, 1);
  EXPECT_THAT(tree.GetAttr(f.ino), StatusIs(absl::StatusCode::kNotFound, _));
}

TEST_F(ModelTreeTest, RemovingAnUnknownModelIsNotFound) {
  ModelTree tree(&reader_);
  EXPECT_THAT(tree.RemoveModel("m"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("'m'")));
}

TEST_F(ModelTreeTest, ASingleModelTreeRefusesAddAndRemove) {
  auto tree = Single();
  EXPECT_THAT(tree->AddModel("m", Files()), StatusIs(absl::StatusCode::kFailedPrecondition, _));
  EXPECT_THAT(tree->RemoveModel("m"), StatusIs(absl::StatusCode::kFailedPrecondition, _));
}

TEST_F(ModelTreeTest, LookupsAreCountedAndForgetUndoesThem) {
  auto tree = Single();
  ASSERT_OK_AND_ASSIGN(NodeAttr a, tree->Lookup(ModelTree::kRootIno, "config.json"));
  ASSERT_OK(tree->Lookup(ModelTree::kRootIno, "config.json"));
  ASSERT_OK(tree->Lookup(ModelTree::kRootIno, "config.json"));
  EXPECT_EQ(tree->LookupCount(a.ino), 3u);
  tree->Forget(a.ino, 2);
  EXPECT_EQ(tree->LookupCount(a.ino), 1u);
  tree->Forget(a.ino, 5);
  EXPECT_EQ(tree->LookupCount(a.ino), 0u);
  // An attached file stays after its last forget: it is still in the tree.
  EXPECT_THAT(tree->GetAttr(a.ino), IsOk());
}

TEST_F(ModelTreeTest, StatFsCountsFileBytesAndInodesOfAttachedModels) {
  ModelTree tree(&reader_);
  ASSERT_OK(tree.AddModel("m", Files(), {{".modelinfo.json", "{}"}}));
  FsStats s = tree.StatFs();
  EXPECT_EQ(s.total_bytes, 12u + 20u + 14u + 2u);
  EXPECT_EQ(s.files, 7u);  // root, m, tokenizer/, four files
  ASSERT_OK(tree.RemoveModel("m"));
  s = tree.StatFs();
  EXPECT_EQ(s.total_bytes, 0u);
  EXPECT_EQ(s.files, 1u);
}

TEST_F(ModelTreeTest, ModelMtimeAppliesToEveryNode) {
  ASSERT_OK_AND_ASSIGN(auto tree,
                       ModelTree::SingleModel(&reader_, Files(), {}, ModelOptions{1700000000}));
  ASSERT_OK_AND_ASSIGN(NodeAttr root, tree->GetAttr(ModelTree::kRootIno));
  ASSERT_OK_AND_ASSIGN(NodeAttr f, tree->Lookup(ModelTree::kRootIno, "config.json"));
  EXPECT_EQ(root.mtime_sec, 1700000000);
  EXPECT_EQ(f.mtime_sec, 1700000000);
}

TEST_F(ModelTreeTest, ConcurrentReadsAndLookupsReturnExactBytes) {
  auto tree = Single();
  ASSERT_OK_AND_ASSIGN(NodeAttr a, tree->Lookup(ModelTree::kRootIno, "model.safetensors"));
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        uint64_t off = static_cast<uint64_t>((t + i) % 20);
        absl::StatusOr<std::string> got = tree->Read(a.ino, off, 3);
        if (!got.ok() || *got != std::string("{weights-0123456789}").substr(off, 3)) ++bad;
        absl::StatusOr<NodeAttr> l = tree->Lookup(ModelTree::kRootIno, "config.json");
        if (!l.ok()) {
          ++bad;
          continue;
        }
        tree->Forget(l->ino, 1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

// A lazy synthetic file is made on its first lookup, exactly once, and not by listing the
// directory, registering the model or reading other files.
TEST_F(ModelTreeTest, LazySyntheticFileIsMadeOnFirstLookupOnly) {
  std::atomic<int> made{0};
  SyntheticFiles synthetic;
  synthetic[".modelinfo.json"] = SyntheticFile::Lazy([&] {
    ++made;
    return std::string("{\"lazy\":true}\n");
  });
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ModelTree> tree,
                       ModelTree::SingleModel(&reader_, Files(), std::move(synthetic)));
  ASSERT_OK_AND_ASSIGN(std::vector<DirEntry> entries, tree->ReadDir(ModelTree::kRootIno));
  ASSERT_OK_AND_ASSIGN(NodeAttr config, tree->Lookup(ModelTree::kRootIno, "config.json"));
  EXPECT_EQ(ReadOr(*tree, config.ino, 0, 100), "config-bytes");
  EXPECT_EQ(made.load(), 0);
  EXPECT_TRUE(tree->LookupWouldMake(ModelTree::kRootIno, ".modelinfo.json"));
  EXPECT_TRUE(tree->LookupWouldMake(ModelTree::kRootIno, ""));
  EXPECT_FALSE(tree->LookupWouldMake(ModelTree::kRootIno, "config.json"));

  ASSERT_OK_AND_ASSIGN(NodeAttr info, tree->Lookup(ModelTree::kRootIno, ".modelinfo.json"));
  EXPECT_EQ(made.load(), 1);
  EXPECT_FALSE(tree->LookupWouldMake(ModelTree::kRootIno, ".modelinfo.json"));
  EXPECT_FALSE(tree->LookupWouldMake(ModelTree::kRootIno, ""));
  EXPECT_EQ(info.size, 14u);
  EXPECT_EQ(ReadOr(*tree, info.ino, 0, 100), "{\"lazy\":true}\n");
  ASSERT_OK_AND_ASSIGN(NodeAttr again, tree->GetAttr(info.ino));
  EXPECT_EQ(again.size, 14u);
  EXPECT_EQ(made.load(), 1);
}

// Until it is made, a lazy file does not count as ready, so the FUSE layer keeps making it off
// the threads that must not block.
TEST_F(ModelTreeTest, LazySyntheticFileIsNotReadyUntilMade) {
  SyntheticFiles synthetic;
  synthetic["info"] = SyntheticFile::Lazy([] { return std::string("abc"); });
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ModelTree> tree,
                       ModelTree::SingleModel(&reader_, Files(), std::move(synthetic)));
  uint64_t ino = 0;
  ASSERT_OK_AND_ASSIGN(std::vector<DirEntry> entries, tree->ReadDir(ModelTree::kRootIno));
  for (const DirEntry& e : entries) {
    if (e.name == "info") ino = e.ino;
  }
  ASSERT_NE(ino, 0u);
  EXPECT_FALSE(tree->IsReady(ino, 0, 3));
  EXPECT_EQ(ReadOr(*tree, ino, 0, 3), "abc");
  EXPECT_TRUE(tree->IsReady(ino, 0, 3));
}

// The merged tree of a container image has symlinks and directories of its own (core/oci/
// image_tree.h): links answer readlink and are never opened or read, empty directories list.
TreeFile Link(const std::string& path, const std::string& target) {
  TreeFile f;
  f.path = path;
  f.kind = TreeFile::Kind::kSymlink;
  f.symlink_target = target;
  return f;
}
TreeFile Dir(const std::string& path) {
  TreeFile f;
  f.path = path;
  f.kind = TreeFile::Kind::kDirectory;
  return f;
}

TEST_F(ModelTreeTest, ASymlinkHasLinkAttributesAndAnswersReadlinkWithItsTarget) {
  std::vector<TreeFile> files = Files();
  files.push_back(Link("bin/sh", "busybox"));
  files.push_back(Link("escape", "../../../etc/shadow"));
  ASSERT_OK_AND_ASSIGN(auto tree, ModelTree::SingleModel(&reader_, files));
  ASSERT_OK_AND_ASSIGN(NodeAttr bin, tree->Lookup(ModelTree::kRootIno, "bin"));
  ASSERT_OK_AND_ASSIGN(NodeAttr sh, tree->Lookup(bin.ino, "sh"));
  EXPECT_EQ(sh.mode, static_cast<uint32_t>(S_IFLNK | 0777));
  EXPECT_EQ(sh.size, 7u);
  EXPECT_EQ(tree->ReadLink(sh.ino).value_or("error"), "busybox");
  ASSERT_OK_AND_ASSIGN(NodeAttr escape, tree->Lookup(ModelTree::kRootIno, "escape"));
  EXPECT_EQ(tree->ReadLink(escape.ino).value_or("error"), "../../../etc/shadow");
  ASSERT_OK_AND_ASSIGN(std::vector<DirEntry> entries, tree->ReadDir(bin.ino));
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_TRUE(entries[2].is_symlink);
  EXPECT_FALSE(entries[2].is_dir);
}

TEST_F(ModelTreeTest, ASymlinkIsNeverOpenedOrReadAndAFileHasNoLinkTarget) {
  std::vector<TreeFile> files = Files();
  files.push_back(Link("link", "config.json"));
  ASSERT_OK_AND_ASSIGN(auto tree, ModelTree::SingleModel(&reader_, files));
  ASSERT_OK_AND_ASSIGN(NodeAttr link, tree->Lookup(ModelTree::kRootIno, "link"));
  EXPECT_EQ(StatusToErrno(tree->Open(link.ino, O_RDONLY)), ELOOP);
  EXPECT_EQ(StatusToErrno(tree->Read(link.ino, 0, 10).status()), ELOOP);
  ASSERT_OK_AND_ASSIGN(NodeAttr file, tree->Lookup(ModelTree::kRootIno, "config.json"));
  EXPECT_EQ(StatusToErrno(tree->ReadLink(file.ino).status()), EINVAL);
}

TEST_F(ModelTreeTest, AnEmptyDirectoryOfItsOwnIsListedAndAFileThereIsRefused) {
  std::vector<TreeFile> files = Files();
  files.push_back(Dir("tmp"));
  files.push_back(Dir("tokenizer"));  // also implied by a file: one directory
  ASSERT_OK_AND_ASSIGN(auto tree, ModelTree::SingleModel(&reader_, files));
  ASSERT_OK_AND_ASSIGN(NodeAttr tmp, tree->Lookup(ModelTree::kRootIno, "tmp"));
  EXPECT_EQ(tmp.mode, static_cast<uint32_t>(S_IFDIR | 0555));
  ASSERT_OK_AND_ASSIGN(std::vector<DirEntry> entries, tree->ReadDir(tmp.ino));
  EXPECT_THAT(Names(entries), ElementsAre(".", ".."));
  files.push_back(Dir("config.json"));
  EXPECT_THAT(ModelTree::SingleModel(&reader_, files).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'config.json'")));
}

}  // namespace
}  // namespace modelfs
