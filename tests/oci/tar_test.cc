#include "core/oci/tar.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/tar_blocks.h"

namespace modelfs {
namespace {

using namespace std::string_literals;

using ::modelfs::testing::IsOk;
using ::modelfs::testing::StatusIs;
using ::testing::HasSubstr;

std::string Data(const std::string& tar, const TarEntry& e) {
  return tar.substr(e.data_offset, e.size);
}

TEST(TarWriterTest, WritesDeterministicUstarHeaders) {
  TarWriter w;
  ASSERT_OK(w.AddFile("hello.txt", "hello\n"));
  const std::string tar = w.Finish();
  ASSERT_EQ(tar.size(), 512u + 512u + 1024u);
  EXPECT_EQ(tar.substr(0, 10), "hello.txt\0"s);
  EXPECT_EQ(tar.substr(100, 8), "0000644\0"s);
  EXPECT_EQ(tar.substr(108, 16),
            "0000000\0"
            "0000000\0"s);
  EXPECT_EQ(tar.substr(124, 12), "00000000006\0"s);
  EXPECT_EQ(tar.substr(136, 12), "00000000000\0"s);
  EXPECT_EQ(tar[156], '0');
  EXPECT_EQ(tar.substr(257, 8),
            "ustar\0"
            "00"s);
  EXPECT_EQ(tar.substr(512, 6), "hello\n");
  EXPECT_EQ(tar.substr(1024), std::string(1024, '\0'));
  TarWriter again;
  ASSERT_OK(again.AddFile("hello.txt", "hello\n"));
  EXPECT_EQ(again.Finish(), tar);
}

TEST(TarReaderTest, IndexesFilesDirectoriesAndSymlinks) {
  TarWriter w;
  ASSERT_OK(w.AddDirectory("dir"));
  ASSERT_OK(w.AddFile("dir/a.bin", std::string(1000, 'a'), 0600));
  ASSERT_OK(w.AddSymlink("dir/link", "a.bin"));
  ASSERT_OK(w.AddFile("empty", ""));
  const std::string tar = w.Finish();
  ASSERT_OK_AND_ASSIGN(std::vector<TarEntry> entries, IndexTarBytes(tar));
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries[0].path, "dir");
  EXPECT_EQ(entries[0].type, TarEntryType::kDirectory);
  EXPECT_EQ(entries[0].mode, 0755u);
  EXPECT_EQ(entries[1].path, "dir/a.bin");
  EXPECT_EQ(entries[1].type, TarEntryType::kFile);
  EXPECT_EQ(entries[1].size, 1000u);
  EXPECT_EQ(entries[1].header_offset, 512u);
  EXPECT_EQ(entries[1].data_offset, 1024u);
  EXPECT_EQ(entries[1].mode, 0600u);
  EXPECT_EQ(Data(tar, entries[1]), std::string(1000, 'a'));
  EXPECT_EQ(entries[2].type, TarEntryType::kSymlink);
  EXPECT_EQ(entries[2].linkname, "a.bin");
  EXPECT_EQ(entries[2].size, 0u);
  EXPECT_EQ(entries[3].path, "empty");
  EXPECT_EQ(entries[3].size, 0u);
}

TEST(TarReaderTest, UsesTheUstarPrefixForNamesUpTo256Bytes) {
  const std::string path = std::string(120, 'd') + "/" + std::string(90, 'f');
  TarWriter w;
  ASSERT_OK(w.AddFile(path, "x"));
  const std::string tar = w.Finish();
  EXPECT_EQ(tar.size(), 512u * 2 + 1024u);  // no pax header needed
  EXPECT_EQ(tar.substr(345, 120), std::string(120, 'd'));
  ASSERT_OK_AND_ASSIGN(std::vector<TarEntry> entries, IndexTarBytes(tar));
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].path, path);
  EXPECT_EQ(Data(tar, entries[0]), "x");
}

TEST(TarReaderTest, ReadsPaxLongNamesAndLinkTargets) {
  const std::string path =
      std::string(200, 'p') + "/" + std::string(150, 'q') + "/model.safetensors";
  const std::string target = std::string(150, 't');
  TarWriter w;
  ASSERT_OK(w.AddFile(path, "weights"));
  ASSERT_OK(w.AddSymlink("short", target));
  const std::string tar = w.Finish();
  EXPECT_EQ(tar[156], 'x');
  ASSERT_OK_AND_ASSIGN(std::vector<TarEntry> entries, IndexTarBytes(tar));
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].path, path);
  EXPECT_EQ(entries[0].header_offset, 0u);
  EXPECT_EQ(Data(tar, entries[0]), "weights");
  EXPECT_EQ(entries[1].linkname, target);
}

TEST(TarReaderTest, ReadsGnuLongNamesAndLinkTargets) {
  const std::string path = std::string(200, 'g') + "/w.gguf";
  const std::string target = std::string(130, 'k');
  TarWriter w(TarWriter::LongNames::kGnu);
  ASSERT_OK(w.AddFile(path, "gguf"));
  ASSERT_OK(w.AddSymlink("s", target));
  const std::string tar = w.Finish();
  EXPECT_EQ(tar[156], 'L');
  EXPECT_EQ(tar.substr(0, 13), "././@LongLink");
  ASSERT_OK_AND_ASSIGN(std::vector<TarEntry> entries, IndexTarBytes(tar));
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].path, path);
  EXPECT_EQ(Data(tar, entries[0]), "gguf");
  EXPECT_EQ(entries[1].linkname, target);
}

TEST(TarReaderTest, PaxSizeRecordOverridesTheHeader) {
  // Hand-built: pax header with "size=3", then a header whose size field says 0.
  std::string pax_rec = "11 size=10\n";
  ASSERT_OK_AND_ASSIGN(std::string pax,
                       EncodeTarHeader("PaxHeaders.0/f", '0', pax_rec.size(), 0644));
  pax[156] = 'x';
  ::modelfs::testing::FixTarChecksum(pax, 0);
  ASSERT_OK_AND_ASSIGN(std::string hdr, EncodeTarHeader("f", '0', 0, 0644));
  std::string tar = pax + pax_rec + std::string(TarPadding(pax_rec.size()), '\0') + hdr +
                    "0123456789" + std::string(TarPadding(10), '\0') + std::string(1024, '\0');
  ASSERT_OK_AND_ASSIGN(std::vector<TarEntry> entries, IndexTarBytes(tar));
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].size, 10u);
  EXPECT_EQ(Data(tar, entries[0]), "0123456789");
}

// Writes `v` as a NUL-terminated octal field of `len` bytes at `off` of the block at `block`.
void SetOctal(std::string& tar, size_t block, size_t off, size_t len, uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*llo", static_cast<int>(len - 1),
                static_cast<unsigned long long>(v));
  std::memcpy(&tar[block + off], buf, len);
}

TEST(TarReaderTest, ReadsOwnersTimesAndDeviceNumbers) {
  TarWriter w;
  ASSERT_OK(w.AddFile("dev/null", ""));
  std::string tar = w.Finish();
  tar[156] = '3';
  SetOctal(tar, 0, 108, 8, 1000);            // uid
  SetOctal(tar, 0, 116, 8, 1001);            // gid
  SetOctal(tar, 0, 136, 12, 1'600'000'000);  // mtime
  SetOctal(tar, 0, 329, 8, 1);               // devmajor
  SetOctal(tar, 0, 337, 8, 3);               // devminor
  ::modelfs::testing::FixTarChecksum(tar, 0);
  ASSERT_OK_AND_ASSIGN(std::vector<TarEntry> entries, IndexTarBytes(tar));
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].typeflag, '3');
  EXPECT_EQ(entries[0].type, TarEntryType::kOther);
  EXPECT_EQ(entries[0].uid, 1000u);
  EXPECT_EQ(entries[0].gid, 1001u);
  EXPECT_EQ(entries[0].mtime, 1'600'000'000);
  EXPECT_EQ(entries[0].mtime_nsec, 0u);
  EXPECT_EQ(entries[0].devmajor, 1u);
  EXPECT_EQ(entries[0].devminor, 3u);
  EXPECT_TRUE(entries[0].xattrs.empty());
}

TEST(TarReaderTest, PaxOwnerTimeAndXattrRecordsOverrideTheHeader) {
  const std::string pax_rec = "15 uid=3000000\n13 gid=70000\n31 mtime=1600000000.1234567891\n" +
                              std::string("33 SCHILY.xattr.user.origin=tool\n") +
                              "29 SCHILY.xattr.trusted.z=\x01\x02\n";
  ASSERT_OK_AND_ASSIGN(std::string pax,
                       EncodeTarHeader("PaxHeaders.0/f", '0', pax_rec.size(), 0644));
  pax[156] = 'x';
  ::modelfs::testing::FixTarChecksum(pax, 0);
  ASSERT_OK_AND_ASSIGN(std::string hdr, EncodeTarHeader("f", '0', 0, 0644));
  std::string tar =
      pax + pax_rec + std::string(TarPadding(pax_rec.size()), '\0') + hdr + std::string(1024, '\0');
  ASSERT_OK_AND_ASSIGN(std::vector<TarEntry> entries, IndexTarBytes(tar));
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].uid, 3'000'000u);
  EXPECT_EQ(entries[0].gid, 70'000u);
  EXPECT_EQ(entries[0].mtime, 1'600'000'000);
  EXPECT_EQ(entries[0].mtime_nsec, 123'456'789u);  // nine digits kept, as Go reads it
  EXPECT_EQ(entries[0].xattrs, (std::map<std::string, std::string>{{"trusted.z", "\x01\x02"},
                                                                   {"user.origin", "tool"}}));
}

TEST(TarReaderTest, RefusesAPaxMtimeThatIsNotATime) {
  const std::string pax_rec = "15 mtime=12a45\n";
  ASSERT_OK_AND_ASSIGN(std::string pax,
                       EncodeTarHeader("PaxHeaders.0/f", '0', pax_rec.size(), 0644));
  pax[156] = 'x';
  ::modelfs::testing::FixTarChecksum(pax, 0);
  ASSERT_OK_AND_ASSIGN(std::string hdr, EncodeTarHeader("f", '0', 0, 0644));
  std::string tar =
      pax + pax_rec + std::string(TarPadding(pax_rec.size()), '\0') + hdr + std::string(1024, '\0');
  EXPECT_THAT(IndexTarBytes(tar).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("pax mtime is not a time")));
}

TEST(TarReaderTest, RefusesABadChecksumNamingTheOffset) {
  TarWriter w;
  ASSERT_OK(w.AddFile("a", "1"));
  ASSERT_OK(w.AddFile("b", "2"));
  std::string tar = w.Finish();
  tar[1024 + 1] = 'X';  // second header's name
  EXPECT_THAT(IndexTarBytes(tar), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("tar header at offset 1024: bad checksum")));
}

TEST(TarReaderTest, RefusesNegativeBase256Sizes) {
  TarWriter w;
  ASSERT_OK(w.AddFile("a", ""));
  std::string tar = w.Finish();
  std::memset(&tar[124], 0xff, 12);
  ::modelfs::testing::FixTarChecksum(tar, 0);
  EXPECT_THAT(IndexTarBytes(tar),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("negative")));
}

TEST(TarReaderTest, ReadsBase256SizesBeyondOctalRange) {
  TarWriter w;
  ASSERT_OK(w.AddFile("a", ""));
  std::string tar = w.Finish().substr(0, 512);
  std::string field(12, '\0');
  field[0] = static_cast<char>(0x80);
  field[7] = 0x02;  // 2 << 32 = 8 GiB
  tar.replace(124, 12, field);
  ::modelfs::testing::FixTarChecksum(tar, 0);
  // The blob is only one header: the entry's data passes the end.
  EXPECT_THAT(IndexTarBytes(tar),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("has 8589934592 data bytes")));
}

TEST(TarReaderTest, RefusesNonOctalNumbers) {
  TarWriter w;
  ASSERT_OK(w.AddFile("a", ""));
  std::string tar = w.Finish();
  tar[124] = '9';
  ::modelfs::testing::FixTarChecksum(tar, 0);
  EXPECT_THAT(IndexTarBytes(tar),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("size field")));
}

TEST(TarReaderTest, ReportsTruncatedData) {
  TarWriter w;
  ASSERT_OK(w.AddFile("a", std::string(2000, 'a')));
  const std::string tar = w.Finish();
  EXPECT_THAT(IndexTarBytes(tar.substr(0, 1500)),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("entry 'a' at offset 0")));
  EXPECT_THAT(IndexTarBytes(tar.substr(0, 300)),
              StatusIs(absl::StatusCode::kOutOfRange, ::testing::_));
}

TEST(TarReaderTest, AcceptsEndOfDataWithoutEndBlocks) {
  TarWriter w;
  ASSERT_OK(w.AddFile("a", "x"));
  const std::string tar = w.Finish();
  ASSERT_OK_AND_ASSIGN(std::vector<TarEntry> entries, IndexTarBytes(tar.substr(0, 1024)));
  EXPECT_EQ(entries.size(), 1u);
}

TEST(TarReaderTest, RefusesEscapingNames) {
  ASSERT_OK_AND_ASSIGN(std::string hdr, EncodeTarHeader("ok", '0', 0, 0644));
  std::memcpy(&hdr[0], "../../etc/passwd\0", 17);
  ::modelfs::testing::FixTarChecksum(hdr, 0);
  const std::string tar = hdr + std::string(1024, '\0');
  EXPECT_THAT(IndexTarBytes(tar), StatusIs(absl::StatusCode::kPermissionDenied,
                                           HasSubstr("refused path '../../etc/passwd'")));
  TarReadOptions raw;
  raw.check_paths = false;
  ASSERT_OK_AND_ASSIGN(std::vector<TarEntry> entries, IndexTarBytes(tar, raw));
  EXPECT_EQ(entries[0].path, "../../etc/passwd");
}

TEST(TarReaderTest, RefusesANewlineInAUstarNameNamingTheEntryOffset) {
  ASSERT_OK_AND_ASSIGN(std::string first, EncodeTarHeader("ok.txt", '0', 0, 0644));
  ASSERT_OK_AND_ASSIGN(std::string hdr, EncodeTarHeader("x", '0', 0, 0644));
  std::memcpy(&hdr[0], "a\nverified\0", 11);
  ::modelfs::testing::FixTarChecksum(hdr, 0);
  EXPECT_THAT(IndexTarBytes(first + hdr + std::string(1024, '\0')),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("tar entry at offset 512: refused path 'a\nverified': contains "
                                 "a control character")));
}

TEST(TarReaderTest, RefusesAnEscapeCharacterInAPaxPath) {
  // A pax record "path=dir/\x1b[2Jx": its length field counts itself.
  const std::string record = "22 path=dir/\x1b[2Jx.bin\n";
  ASSERT_EQ(record.size(), 22u);
  ASSERT_OK_AND_ASSIGN(std::string pax, EncodeTarHeader("pax", '0', record.size(), 0644));
  pax[156] = 'x';
  ::modelfs::testing::FixTarChecksum(pax, 0);
  ASSERT_OK_AND_ASSIGN(std::string file, EncodeTarHeader("placeholder", '0', 0, 0644));
  const std::string tar =
      pax + record + std::string(512 - record.size(), '\0') + file + std::string(1024, '\0');
  EXPECT_THAT(IndexTarBytes(tar),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("refused path 'dir/\x1b[2Jx.bin': contains a control "
                                 "character")));
}

TEST(TarReaderTest, NormalizesDotSlashNamesAndSkipsTheRootEntry) {
  ASSERT_OK_AND_ASSIGN(std::string root, EncodeTarHeader("x", '5', 0, 0755));
  std::memcpy(&root[0], "./\0", 3);
  ::modelfs::testing::FixTarChecksum(root, 0);
  ASSERT_OK_AND_ASSIGN(std::string file, EncodeTarHeader("x", '0', 0, 0644));
  std::memcpy(&file[0], "./a//b\0", 7);
  ::modelfs::testing::FixTarChecksum(file, 0);
  ASSERT_OK_AND_ASSIGN(std::vector<TarEntry> entries,
                       IndexTarBytes(root + file + std::string(1024, '\0')));
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].path, "a/b");
}

TEST(TarReaderTest, RefusesHardLinksThatEscape) {
  ASSERT_OK_AND_ASSIGN(std::string hdr, EncodeTarHeader("h", '1', 0, 0644, "target"));
  std::memcpy(&hdr[157], "/etc/shadow\0", 12);
  ::modelfs::testing::FixTarChecksum(hdr, 0);
  EXPECT_THAT(IndexTarBytes(hdr + std::string(1024, '\0')),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("hard link 'h'")));
}

TEST(TarReaderTest, IndexingReadsHeadersNotData) {
  TarWriter w;
  ASSERT_OK(w.AddFile("big1", std::string(4 << 20, 'a')));
  ASSERT_OK(w.AddFile("big2", std::string(4 << 20, 'b')));
  const std::string tar = w.Finish();
  auto reader = MakeMemoryRangeReader("layer", tar);
  ASSERT_OK_AND_ASSIGN(std::vector<TarEntry> entries, IndexTar(*reader));
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[1].data_offset, 512u + (4u << 20) + 512u);
  EXPECT_EQ(reader->stats().requests, 3u);
  EXPECT_LE(reader->stats().bytes, 3u * (64u << 10));
}

TEST(TarReaderTest, StopsWhenTheCallbackFails) {
  TarWriter w;
  ASSERT_OK(w.AddFile("a", "1"));
  ASSERT_OK(w.AddFile("b", "2"));
  auto reader = MakeMemoryRangeReader("layer", w.Finish());
  int calls = 0;
  absl::Status s = ScanTarHeaders(*reader, [&](const TarEntry&) {
    ++calls;
    return absl::CancelledError("enough");
  });
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kCancelled, HasSubstr("enough")));
  EXPECT_EQ(calls, 1);
}

TEST(TarWriterTest, RefusesUnsafePaths) {
  TarWriter w;
  EXPECT_THAT(w.AddFile("/abs", "x"), StatusIs(absl::StatusCode::kPermissionDenied, ::testing::_));
  EXPECT_THAT(w.AddFile("a/../b", "x"),
              StatusIs(absl::StatusCode::kPermissionDenied, ::testing::_));
}

TEST(TarWriterTest, StreamingHeaderMatchesTheWriter) {
  ASSERT_OK_AND_ASSIGN(std::string hdr, EncodeTarHeader("w.bin", '0', 5, 0644));
  TarWriter w;
  ASSERT_OK(w.AddFile("w.bin", "12345"));
  EXPECT_EQ(hdr + "12345" + std::string(TarPadding(5), '\0') + std::string(1024, '\0'), w.Finish());
  EXPECT_EQ(TarPadding(0), 0u);
  EXPECT_EQ(TarPadding(512), 0u);
  EXPECT_EQ(TarPadding(513), 511u);
}

}  // namespace
}  // namespace modelfs
