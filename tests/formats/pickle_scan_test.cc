// The pickle scanner over checkpoints assembled the way torch.save and pickle write them: what
// it lists, what it flags, and that hostile streams end in a flagged result, never a crash.
#include "core/formats/pickle_scan.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testsupport/hub/pickle_test_files.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::vector<std::string> Globals(const PickleStream& s) {
  std::vector<std::string> out;
  for (const PickleImport& i : s.imports) out.push_back(i.Qualified());
  return out;
}
std::vector<std::string> Calls(const PickleStream& s) {
  std::vector<std::string> out;
  for (const PickleCall& c : s.calls) out.push_back(c.opcode + " " + c.target);
  return out;
}

TEST(PickleScanTest, AStateDictImportsOnlyAllowedGlobals) {
  PickleStream s = ScanPickleStream(TorchStateDictPickle());
  EXPECT_EQ(s.error, "");
  EXPECT_EQ(s.protocol, 2);
  EXPECT_EQ(s.size, TorchStateDictPickle().size());
  EXPECT_THAT(Globals(s), ElementsAre("collections.OrderedDict", "torch._utils._rebuild_tensor_v2",
                                      "torch.FloatStorage"));
  for (const PickleImport& i : s.imports) EXPECT_TRUE(i.allowed) << i.Qualified();
  // The second OrderedDict() comes back from the memo (BINGET 0) and is still resolved.
  EXPECT_THAT(Calls(s),
              ElementsAre("REDUCE collections.OrderedDict", "REDUCE collections.OrderedDict",
                          "REDUCE torch._utils._rebuild_tensor_v2"));
}

TEST(PickleScanTest, OsSystemThroughGlobalIsFlaggedAsDangerous) {
  ASSERT_OK_AND_ASSIGN(PickleScan scan, ScanPickleBytes(OsSystemPickle(2), "evil.pkl"));
  EXPECT_EQ(scan.kind, "pickle");
  EXPECT_FALSE(scan.safe());
  EXPECT_THAT(scan.flagged, ElementsAre("posix.system"));
  ASSERT_EQ(scan.streams.size(), 1u);
  ASSERT_EQ(scan.streams[0].imports.size(), 1u);
  const PickleImport& i = scan.streams[0].imports[0];
  EXPECT_EQ(i.opcode, "GLOBAL");
  EXPECT_EQ(i.offset, 2u);
  EXPECT_TRUE(i.dangerous);
  EXPECT_THAT(Calls(scan.streams[0]), ElementsAre("REDUCE posix.system"));
}

TEST(PickleScanTest, OsSystemThroughStackGlobalAndTheMemoIsResolved) {
  ASSERT_OK_AND_ASSIGN(PickleScan scan, ScanPickleBytes(OsSystemPickle(4), "evil.pkl"));
  EXPECT_THAT(scan.flagged, ElementsAre("posix.system"));
  EXPECT_EQ(scan.streams[0].protocol, 4);
  EXPECT_EQ(scan.streams[0].imports[0].opcode, "STACK_GLOBAL");
  EXPECT_EQ(scan.streams[0].imports[0].offset, 28u);
  EXPECT_THAT(Calls(scan.streams[0]), ElementsAre("REDUCE posix.system"));
}

TEST(PickleScanTest, InstImportsAndCallsInProtocolZero) {
  ASSERT_OK_AND_ASSIGN(PickleScan scan, ScanPickleBytes("(S'id'\nios\nsystem\n.", "p0.pkl"));
  EXPECT_THAT(scan.flagged, ElementsAre("os.system"));
  EXPECT_THAT(Calls(scan.streams[0]), ElementsAre("INST os.system"));
}

TEST(PickleScanTest, AStackGlobalOfUnknownOperandsIsFlagged) {
  ASSERT_OK_AND_ASSIGN(PickleScan scan, ScanPickleBytes("\x80\x04K\x01K\x02\x93.", "x.pkl"));
  EXPECT_THAT(scan.flagged, ElementsAre("<unknown>.<unknown>"));
}

TEST(PickleScanTest, AZipCheckpointScansItsDataPkl) {
  ASSERT_OK_AND_ASSIGN(PickleScan scan,
                       ScanPickleBytes(TorchZipCheckpoint(TorchStateDictPickle()), "m.pt"));
  EXPECT_EQ(scan.kind, "zip");
  ASSERT_EQ(scan.streams.size(), 1u);
  EXPECT_EQ(scan.streams[0].name, "archive/data.pkl");
  EXPECT_TRUE(scan.safe());
  EXPECT_EQ(scan.streams[0].imports[0].offset, scan.streams[0].offset + 2);  // from the file start
}

TEST(PickleScanTest, AZipCheckpointWithOsSystemIsFlagged) {
  ASSERT_OK_AND_ASSIGN(PickleScan scan,
                       ScanPickleBytes(TorchZipCheckpoint(OsSystemPickle(2)), "m.pt"));
  EXPECT_THAT(scan.flagged, ElementsAre("posix.system"));
}

TEST(PickleScanTest, ACompressedPickleEntryCannotBeScannedAndIsFlagged) {
  std::string zip = TorchZipCheckpoint(TorchStateDictPickle());
  // Mark archive/data.pkl deflated in its central directory entry (method at +10).
  size_t cd = zip.find("PK\x01\x02");
  while (cd != std::string::npos && zip.compare(cd + 46, 16, "archive/data.pkl") != 0) {
    cd = zip.find("PK\x01\x02", cd + 4);
  }
  ASSERT_NE(cd, std::string::npos);
  zip[cd + 10] = 8;
  ASSERT_OK_AND_ASSIGN(PickleScan scan, ScanPickleBytes(zip, "m.pt"));
  EXPECT_THAT(scan.flagged, ElementsAre("archive/data.pkl: not fully scanned"));
  EXPECT_THAT(scan.streams[0].error, HasSubstr("compressed entry (method 8)"));
}

TEST(PickleScanTest, ALegacyCheckpointScansEveryLeadingPickleAndStopsAtTheData) {
  ASSERT_OK_AND_ASSIGN(PickleScan scan,
                       ScanPickleBytes(TorchLegacyCheckpoint(TorchStateDictPickle()), "m.bin"));
  ASSERT_EQ(scan.streams.size(), 5u);
  for (const PickleStream& s : scan.streams) EXPECT_EQ(s.error, "") << s.name;
  EXPECT_EQ(scan.streams[3].name, "pickle 4 at byte 48");
  EXPECT_TRUE(scan.safe());
  ASSERT_OK_AND_ASSIGN(PickleScan evil,
                       ScanPickleBytes(TorchLegacyCheckpoint(OsSystemPickle(4)), "m.bin"));
  EXPECT_THAT(evil.flagged, ElementsAre("posix.system"));
}

TEST(PickleScanTest, BrokenStreamsEndFlaggedNotCrashed) {
  ASSERT_OK_AND_ASSIGN(PickleScan cut, ScanPickleBytes(OsSystemPickle(2).substr(0, 20), "cut.pkl"));
  EXPECT_THAT(cut.flagged, ElementsAre("posix.system", "pickle: not fully scanned"));
  EXPECT_THAT(cut.streams[0].error, HasSubstr("truncated"));
  // A length field far beyond the input allocates nothing.
  PickleStream huge = ScanPickleStream("\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\x7f");
  EXPECT_THAT(huge.error, HasSubstr("truncated argument"));
  EXPECT_THAT(ScanPickleStream("\x80\x02h\x05.").error, HasSubstr("never stored"));
  EXPECT_THAT(ScanPickleStream("\x80\x02R.").error, HasSubstr("stack underflow"));
  EXPECT_THAT(ScanPickleStream(std::string(100000, '(') + "N.").error, IsEmpty());
}

TEST(PickleScanTest, BytesThatAreNoPickleAreInvalidArgument) {
  EXPECT_THAT(ScanPickleBytes("GGUF\x03\0\0\0", "x.bin"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("neither a zip archive nor a pickle")));
  EXPECT_THAT(ScanPickleBytes(StoredZip({{"a.txt", "x"}}), "x.zip"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no .pkl entry")));
}

TEST(PickleScanTest, TheAllowListIsNarrow) {
  EXPECT_TRUE(IsAllowedPickleGlobal("torch._utils", "_rebuild_tensor_v2"));
  EXPECT_TRUE(IsAllowedPickleGlobal("torch", "BFloat16Storage"));
  EXPECT_TRUE(IsAllowedPickleGlobal("torch", "bfloat16"));
  EXPECT_TRUE(IsAllowedPickleGlobal("numpy.core.multiarray", "_reconstruct"));
  EXPECT_TRUE(IsAllowedPickleGlobal("numpy", "dtype"));
  EXPECT_TRUE(IsAllowedPickleGlobal("collections", "OrderedDict"));
  EXPECT_FALSE(IsAllowedPickleGlobal("builtins", "eval"));
  EXPECT_FALSE(IsAllowedPickleGlobal("torch", "load"));
  EXPECT_FALSE(IsAllowedPickleGlobal("torch._utils", "_rebuild_wrapper_subclass"));
  EXPECT_FALSE(IsAllowedPickleGlobal("collections", "defaultdict"));
  EXPECT_FALSE(IsAllowedPickleGlobal("torch", "Storage.__init__"));
}

}  // namespace
}  // namespace modelfs::testing
