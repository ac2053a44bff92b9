// TarFollower: a tar fed in pieces of any size, or read header by header with its data skipped,
// gives the entries ScanTarHeaders gives, hands each entry's data over as it passes, and refuses
// a tar cut short or an extended header over its limit naming the offset.
#include "core/oci/tar_follower.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/oci/tar.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/tar_blocks.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::testing::HasSubstr;

std::string Bytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  for (char& c : s) {
    seed = seed * 1664525 + 1013904223;
    c = static_cast<char>(seed >> 24);
  }
  return s;
}

// An extended header of `typeflag` with `payload`, as a tar writer lays it out.
std::string Extended(char typeflag, const std::string& payload) {
  std::string h = *EncodeTarHeader("PaxHeaders.0/f", '0', payload.size(), 0644);
  h[156] = typeflag;
  ::modelfs::testing::FixTarChecksum(h, 0);
  return h + payload + std::string(TarPadding(payload.size()), '\0');
}

std::string File(const std::string& path, const std::string& content) {
  return *EncodeTarHeader(path, '0', content.size(), 0644) + content +
         std::string(TarPadding(content.size()), '\0');
}

// Files of several sizes, a pax long name, GNU long names, a 'g' header and a pax size record.
std::string MixedTar() {
  TarWriter w;
  EXPECT_OK(w.AddDirectory("models"));
  EXPECT_OK(w.AddFile("models/a.bin", Bytes(70000, 1)));
  EXPECT_OK(w.AddFile("models/" + std::string(200, 'p') + ".safetensors", Bytes(5000, 2)));
  EXPECT_OK(w.AddSymlink("models/latest", "a.bin"));
  std::string tar = w.Finish();
  tar.resize(tar.size() - 1024);
  TarWriter gnu(TarWriter::LongNames::kGnu);
  EXPECT_OK(gnu.AddFile("models/" + std::string(180, 'g') + ".json", "{}"));
  EXPECT_OK(gnu.AddSymlink("models/" + std::string(150, 'l'), std::string(120, 't')));
  std::string long_names = gnu.Finish();
  long_names.resize(long_names.size() - 1024);
  return tar + long_names + Extended('g', "20 comment=abcdefgh\n") + Extended('x', "11 size=10\n") +
         File("models/f", "") + "0123456789" + std::string(TarPadding(10), '\0') +
         std::string(1024, '\0');
}

// Keeps what the follower says.
class Recorder : public TarFollower::Listener {
 public:
  absl::Status OnHeaderBlock(uint64_t offset, std::string_view block) override {
    used.emplace_back(offset, block.size());
    return absl::OkStatus();
  }
  absl::Status OnMetaPayload(uint64_t offset, char, std::string_view payload) override {
    used.emplace_back(offset, payload.size());
    return absl::OkStatus();
  }
  absl::Status OnEntry(const TarEntry& entry) override {
    entries.push_back(entry);
    data.emplace_back();
    return absl::OkStatus();
  }
  absl::Status OnData(const TarEntry& entry, uint64_t offset, std::string_view bytes) override {
    EXPECT_EQ(entry.data_offset + data.back().size(), offset);
    data.back().append(bytes);
    return absl::OkStatus();
  }
  std::vector<std::pair<uint64_t, uint64_t>> used;
  std::vector<TarEntry> entries;
  std::vector<std::string> data;
};

// Feeds `tar` in pieces of `piece` bytes and finishes.
absl::Status FeedAll(TarFollower& f, Recorder& r, std::string_view tar, size_t piece) {
  for (size_t at = 0; at < tar.size(); at += piece) {
    absl::Status s = f.Feed(tar.substr(at, piece), r);
    if (!s.ok()) return s;
  }
  return f.Finish();
}

void ExpectSameEntries(const std::vector<TarEntry>& got, const std::vector<TarEntry>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(want[i].path);
    EXPECT_EQ(got[i].path, want[i].path);
    EXPECT_EQ(got[i].type, want[i].type);
    EXPECT_EQ(got[i].size, want[i].size);
    EXPECT_EQ(got[i].header_offset, want[i].header_offset);
    EXPECT_EQ(got[i].data_offset, want[i].data_offset);
    EXPECT_EQ(got[i].linkname, want[i].linkname);
  }
}

TEST(TarFollowerTest, FedInPiecesOfAnySizeItFindsTheEntriesTheReaderFinds) {
  const std::string tar = MixedTar();
  TarReadOptions raw;
  raw.check_paths = false;
  ASSERT_OK_AND_ASSIGN(std::vector<TarEntry> want, IndexTarBytes(tar, raw));
  ASSERT_EQ(want.size(), 7u);
  EXPECT_EQ(want.back().size, 10u);  // the pax size record
  for (size_t piece :
       {size_t{1}, size_t{7}, size_t{511}, size_t{512}, size_t{513}, size_t{65536}, tar.size()}) {
    SCOPED_TRACE(piece);
    TarFollower f;
    Recorder r;
    EXPECT_OK(FeedAll(f, r, tar, piece));
    ExpectSameEntries(r.entries, want);
    EXPECT_EQ(f.position(), tar.size());
    for (size_t i = 0; i < r.entries.size(); ++i) {
      EXPECT_EQ(r.data[i], tar.substr(r.entries[i].data_offset, r.entries[i].size));
    }
  }
}

TEST(TarFollowerTest, AReaderThatSkipsDataReadsOnlyHeadersAndPayloads) {
  const std::string tar = MixedTar();
  TarFollower f(TarFollower::Options{"tar", kTarMaxMetaBytes, tar.size()});
  Recorder r;
  uint64_t fed = 0;
  for (TarFollower::Want w = f.wanted(); f.following() && w.offset < tar.size(); w = f.wanted()) {
    f.SkipTo(w.offset);
    ASSERT_EQ(f.position(), w.offset);
    ASSERT_OK(f.Feed(std::string_view(tar).substr(w.offset, w.length), r));
    fed += w.length;
  }
  EXPECT_OK(f.Finish());
  TarReadOptions raw;
  raw.check_paths = false;
  ASSERT_OK_AND_ASSIGN(std::vector<TarEntry> want, IndexTarBytes(tar, raw));
  ExpectSameEntries(r.entries, want);
  uint64_t used = 0;
  for (const auto& [offset, length] : r.used) used += length;
  EXPECT_EQ(fed, used);
  EXPECT_LT(fed, 24u * 512);                             // not the 70 KB file
  for (const std::string& d : r.data) EXPECT_EQ(d, "");  // skipped, never handed over
}

TEST(TarFollowerTest, ATarCutShortIsRefusedWhenItEndsNamingTheOffset) {
  const std::string file = File("f", Bytes(1000, 3));  // data at 512, padding from 1512
  struct Case {
    std::string tar;
    std::string message;
  };
  const std::string pax = Extended('x', "12 path=abc\n");
  for (const Case& c : std::vector<Case>{
           {file.substr(0, 300), "tar truncated: partial header at offset 0 (300 bytes)"},
           {pax.substr(0, 520), "tar truncated: extended header at 0 wants 12 bytes"},
           {file.substr(0, 1000),
            "tar truncated: entry 'f' at offset 0 has 1000 data bytes but the blob ends at 1000"},
           {pax, "tar truncated: extended header at offset 0 is not followed by an entry"},
       }) {
    SCOPED_TRACE(c.message);
    TarFollower f(TarFollower::Options{"layer x"});
    Recorder r;
    EXPECT_THAT(FeedAll(f, r, c.tar, 100),
                StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("layer x: " + c.message)))
        << f.status();
    EXPECT_FALSE(f.following());
  }
  // An end block where the entry of an extended header should be.
  TarFollower f(TarFollower::Options{"layer x"});
  Recorder r;
  EXPECT_THAT(FeedAll(f, r, pax + std::string(1024, '\0'), 100),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("layer x: tar header at offset 1024: end-of-archive block after "
                                 "an extended header")));
  // Cut inside the last entry's padding: its data is all there.
  TarFollower padding;
  Recorder r2;
  EXPECT_OK(FeedAll(padding, r2, file.substr(0, 1520), 100));
  ASSERT_EQ(r2.entries.size(), 1u);
}

TEST(TarFollowerTest, EveryKindOfExtendedHeaderOverTheLimitStopsItNamingItsOffset) {
  const std::string before = File("a", "x");  // 1024 bytes
  for (char t : {'x', 'g', 'L', 'K'}) {
    SCOPED_TRACE(t);
    // 1001 bytes, a valid pax record too.
    const std::string payload = "1001 comment=" + std::string(987, 'c') + "\n";
    ASSERT_EQ(payload.size(), 1001u);
    const std::string tar = before + Extended(t, payload) + File("b", "y");
    TarFollower f(TarFollower::Options{"layer x", 1000});
    Recorder r;
    EXPECT_THAT(FeedAll(f, r, tar, 4096),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("layer x: tar header at offset 1024: extended header of 1001 "
                                   "bytes exceeds the limit of 1000")));
    ASSERT_EQ(r.entries.size(), 1u);  // "a", not "b"
    EXPECT_EQ(f.position(), tar.size());
    // At the limit, it is followed.
    TarFollower at_limit(TarFollower::Options{"layer x", 1001});
    Recorder r2;
    EXPECT_OK(FeedAll(at_limit, r2, tar, 4096));
    EXPECT_EQ(r2.entries.size(), 2u);
  }
}

TEST(TarFollowerTest, AListenerErrorStopsItAndIsWhatFeedReturns) {
  class Refusing : public TarFollower::Listener {
    absl::Status OnEntry(const TarEntry& e) override {
      return absl::CancelledError(absl::StrCat("no ", e.path));
    }
  };
  const std::string tar = File("a", "x") + File("b", "y");
  TarFollower f;
  Refusing r;
  EXPECT_THAT(f.Feed(tar, r), StatusIs(absl::StatusCode::kCancelled, HasSubstr("no a")));
  EXPECT_FALSE(f.following());
  EXPECT_THAT(f.Finish(), StatusIs(absl::StatusCode::kCancelled));
}

TEST(TarFollowerTest, BytesAfterTheEndBlockAreCountedNotRead) {
  const std::string tar = File("a", "x") + std::string(1024, '\0') + "trailing bytes";
  TarFollower f;
  Recorder r;
  EXPECT_OK(FeedAll(f, r, tar, 7));
  EXPECT_EQ(r.entries.size(), 1u);
  EXPECT_EQ(f.position(), tar.size());
  EXPECT_EQ(r.used.back(), std::make_pair(uint64_t{1024}, uint64_t{512}));  // the first zero block
}

TEST(TarFollowerTest, ABadHeaderBlockStopsItNamingTheOffset) {
  std::string tar = File("a", "x") + File("b", "y");
  tar[1024 + 148] ^= 1;  // b's checksum
  TarFollower f(TarFollower::Options{"layer x"});
  Recorder r;
  EXPECT_THAT(FeedAll(f, r, tar, 512),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("layer x: tar header at offset 1024: bad checksum")));
  EXPECT_EQ(r.entries.size(), 1u);
}

}  // namespace
}  // namespace modelfs
