#include "core/oci/tar_headers.h"

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/oci/tar.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/tar_blocks.h"

namespace modelfs {
namespace {

using ::modelfs::testing::IsOk;
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

// A modelcar-like tar: directories, busybox-style symlinks, a hard link, pax and GNU long
// names, a pax size record, small files and one larger than a chunk.
std::string MixedTar() {
  TarWriter w;
  EXPECT_OK(w.AddDirectory("bin"));
  EXPECT_OK(w.AddFile("bin/busybox", Bytes(70000, 1), 0755));
  EXPECT_OK(w.AddSymlink("bin/sh", "busybox"));
  EXPECT_OK(w.AddHardLink("bin/ash", "bin/busybox"));
  EXPECT_OK(w.AddDirectory("models"));
  EXPECT_OK(w.AddFile("models/config.json", "{\"model_type\": \"llama\"}\n"));
  EXPECT_OK(w.AddFile("models/" + std::string(200, 'p') + ".safetensors", Bytes(5000, 2)));
  EXPECT_OK(w.AddFile("models/model.safetensors", Bytes(3 << 20, 3)));
  std::string tar = w.Finish();
  tar.resize(tar.size() - 1024);  // the end blocks come after the GNU entry below
  TarWriter gnu(TarWriter::LongNames::kGnu);
  EXPECT_OK(gnu.AddFile("models/" + std::string(180, 'g') + ".json", "{}"));
  // A pax header whose size record overrides the header's size field.
  const std::string pax_rec = "11 size=10\n";
  std::string pax = *EncodeTarHeader("PaxHeaders.0/f", '0', pax_rec.size(), 0644);
  pax[156] = 'x';
  ::modelfs::testing::FixTarChecksum(pax, 0);
  const std::string hdr = *EncodeTarHeader("models/f", '0', 0, 0644);
  std::string long_name = gnu.Finish();
  long_name.resize(long_name.size() - 1024);
  return tar + long_name + pax + pax_rec + std::string(TarPadding(pax_rec.size()), '\0') + hdr +
         "0123456789" + std::string(TarPadding(10), '\0') + std::string(1024, '\0');
}

std::optional<TarHeaders> Record(const std::string& tar, size_t piece) {
  TarHeaderRecorder r;
  for (size_t at = 0; at < tar.size(); at += piece) {
    r.Feed(std::string_view(tar).substr(at, piece));
  }
  return r.Finish(Digest::Of(tar), "layer test");
}

std::vector<TarEntry> IndexRecorded(const TarHeaders& h) {
  std::unique_ptr<RangeReader> r =
      MakeTarHeadersReader(std::make_shared<const TarHeaders>(h), "layer test");
  absl::StatusOr<std::vector<TarEntry>> entries = IndexTar(*r);
  EXPECT_OK(entries.status());
  return entries.ok() ? *entries : std::vector<TarEntry>{};
}

bool SameEntries(const std::vector<TarEntry>& a, const std::vector<TarEntry>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].path != b[i].path || a[i].type != b[i].type || a[i].size != b[i].size ||
        a[i].data_offset != b[i].data_offset || a[i].header_offset != b[i].header_offset ||
        a[i].linkname != b[i].linkname || a[i].mode != b[i].mode) {
      return false;
    }
  }
  return true;
}

TEST(TarHeaderRecorderTest, IndexesTheTarAsItsOwnBytesDoInPiecesOfAnySize) {
  const std::string tar = MixedTar();
  ASSERT_OK_AND_ASSIGN(std::vector<TarEntry> want, IndexTarBytes(tar));
  ASSERT_EQ(want.size(), 10u);
  EXPECT_EQ(want.back().size, 10u);  // the pax size record
  for (size_t piece : {size_t{1}, size_t{7}, size_t{511}, size_t{513}, size_t{65536}, tar.size()}) {
    SCOPED_TRACE(piece);
    std::optional<TarHeaders> h = Record(tar, piece);
    ASSERT_TRUE(h.has_value());
    EXPECT_EQ(h->tar_digest, Digest::Of(tar));
    EXPECT_EQ(h->tar_size, tar.size());
    EXPECT_EQ(h->entries, want.size());
    EXPECT_TRUE(SameEntries(IndexRecorded(*h), want));
    // Headers only: the 3 MiB file and the busybox binary are not recorded.
    EXPECT_LT(h->recorded_bytes(), 16u * 512);
  }
}

TEST(TarHeaderRecorderTest, RoundTripsThroughItsSerialization) {
  std::optional<TarHeaders> h = Record(MixedTar(), 4096);
  ASSERT_TRUE(h.has_value());
  const std::string bytes = SerializeTarHeaders(*h);
  EXPECT_EQ(bytes.substr(0, 8), std::string_view("MFSTARH\0", 8));
  ASSERT_OK_AND_ASSIGN(TarHeaders back, ParseTarHeaders(bytes));
  EXPECT_EQ(back, *h);
  EXPECT_EQ(SerializeTarHeaders(back), bytes);
}

TEST(TarHeadersReaderTest, AMissingHeaderFailsTheIndexInsteadOfEndingIt) {
  std::optional<TarHeaders> h = Record(MixedTar(), 512);
  ASSERT_TRUE(h.has_value());
  // Drop the records after the first extent: the next header reads as 0xff, not as an end.
  for (size_t keep = 1; keep < h->extents.size(); ++keep) {
    TarHeaders cut = *h;
    cut.extents.resize(keep);
    std::unique_ptr<RangeReader> r =
        MakeTarHeadersReader(std::make_shared<const TarHeaders>(cut), "layer cut");
    EXPECT_THAT(IndexTar(*r).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("layer cut")))
        << keep;
  }
}

TEST(TarHeaderRecorderTest, GivesNothingForWhatItCannotFollow) {
  const std::string tar = MixedTar();
  // Not a tar.
  EXPECT_FALSE(Record(std::string(4096, 'x'), 100).has_value());
  // Truncated inside an entry's data.
  EXPECT_FALSE(Record(tar.substr(0, 2000), 100).has_value());
  // Truncated inside a header block.
  EXPECT_FALSE(Record(tar.substr(0, 700), 100).has_value());
  // A path that escapes: the scan over the records refuses it, as it would the tar.
  std::string bad = *EncodeTarHeader("f", '0', 0, 0644);
  std::memcpy(&bad[0], "../escape\0", 10);
  ::modelfs::testing::FixTarChecksum(bad, 0);
  EXPECT_FALSE(Record(bad + std::string(1024, '\0'), 512).has_value());
}

TEST(TarHeaderRecorderTest, ALongRunOfHeaderOnlyEntriesSpansSeveralExtents) {
  TarWriter w;
  for (int i = 0; i < 3000; ++i) ASSERT_OK(w.AddDirectory("d" + std::to_string(i)));
  const std::string tar = w.Finish();
  std::optional<TarHeaders> h = Record(tar, 65536);
  ASSERT_TRUE(h.has_value());
  ASSERT_GE(h->extents.size(), 2u);
  EXPECT_EQ(h->extents[1].offset, h->extents[0].bytes.size());  // they touch
  ASSERT_OK_AND_ASSIGN(TarHeaders back, ParseTarHeaders(SerializeTarHeaders(*h)));
  EXPECT_EQ(back, *h);
  EXPECT_EQ(IndexRecorded(back).size(), 3000u);
}

TEST(TarHeaderRecorderTest, LeavesOutRecordsOverItsBudget) {
  TarWriter w;
  for (int i = 0; i < 8400; ++i) ASSERT_OK(w.AddFile("f" + std::to_string(i), ""));
  const std::string tar = w.Finish();
  ASSERT_GT(tar.size(), TarHeaders::kMaxBytes);
  EXPECT_FALSE(Record(tar, 65536).has_value());
}

TEST(TarHeadersParseTest, RefusesMalformedRecords) {
  std::optional<TarHeaders> h = Record(MixedTar(), 4096);
  ASSERT_TRUE(h.has_value());
  ASSERT_GE(h->extents.size(), 2u);
  const std::string good = SerializeTarHeaders(*h);
  EXPECT_THAT(ParseTarHeaders(good.substr(0, 40)).status(),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(ParseTarHeaders(good.substr(0, good.size() - 1)).status(),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(ParseTarHeaders(good + "x").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("trailing")));
  std::string magic = good;
  magic[0] = 'X';
  EXPECT_THAT(ParseTarHeaders(magic).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("magic")));
  std::string count = good;
  count[64 + 7] = 0x7f;  // a count no file can hold: refused before allocating
  EXPECT_THAT(ParseTarHeaders(count).status(), StatusIs(absl::StatusCode::kOutOfRange));

  TarHeaders overlap = *h;
  overlap.extents[1].offset =
      overlap.extents[0].offset + overlap.extents[0].bytes.size() - 1;  // inside the first
  EXPECT_THAT(ParseTarHeaders(SerializeTarHeaders(overlap)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("extent 1")));
  TarHeaders past = *h;
  past.tar_size = past.extents.back().offset;
  EXPECT_THAT(ParseTarHeaders(SerializeTarHeaders(past)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("passes the tar's end")));
  TarHeaders empty = *h;
  empty.extents[0].bytes.clear();
  EXPECT_THAT(ParseTarHeaders(SerializeTarHeaders(empty)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("length")));
}

TEST(TarHeadersReaderTest, ReadsRecordedBytesAndFillsTheRest) {
  TarHeaders h;
  h.tar_size = 100;
  h.extents = {{10, "abc"}, {20, "de"}};
  std::unique_ptr<RangeReader> r =
      MakeTarHeadersReader(std::make_shared<const TarHeaders>(h), "layer x");
  ASSERT_OK_AND_ASSIGN(std::string got, r->ReadAt(8, 16));
  EXPECT_EQ(got,
            "\xff\xff"
            "abc"
            "\xff\xff\xff\xff\xff\xff\xff"
            "de"
            "\xff\xff");
  ASSERT_OK_AND_ASSIGN(got, r->ReadAt(11, 1));
  EXPECT_EQ(got, "b");
  EXPECT_THAT(r->ReadAt(90, 11).status(), StatusIs(absl::StatusCode::kOutOfRange));
}

}  // namespace
}  // namespace modelfs
