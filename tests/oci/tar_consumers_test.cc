// The consumers of the one tar follower agree on the same bytes: ScanTarHeaders, the header
// recorder (and the scan of its records), TarSplitWriter and TarTensorIndexer. In particular on
// the one behaviour issue 47 changed: 'g', 'L' and 'K' payloads, up to 1 MiB, are followed
// by all of them (kept as records, left in the split's data file), and one over 1 MiB stops all
// of them at the same header. Before, TarSplitWriter skipped such payloads whatever their size.
#include <string>
#include <vector>

#include "core/formats/safetensors.h"
#include "core/oci/tar.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/tar_blocks.h"
#include "testsupport/testing/tar_consumers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

using ::modelfs::testing::RunTarConsumers;
using ::modelfs::testing::StatusIs;
using ::modelfs::testing::TarConsumerOutcomes;
using ::modelfs::testing::TarConsumersDisagree;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

constexpr uint64_t kMemberMin = 1024;

std::string Extended(char typeflag, const std::string& payload) {
  std::string h = *EncodeTarHeader("PaxHeaders.0/f", '0', payload.size(), 0644);
  h[156] = typeflag;
  ::modelfs::testing::FixTarChecksum(h, 0);
  return h + payload + std::string(TarPadding(payload.size()), '\0');
}

std::string Entry(const std::string& path, char typeflag, const std::string& content,
                  const std::string& link = {}) {
  return *EncodeTarHeader(path, typeflag, content.size(), 0644, link) + content +
         std::string(TarPadding(content.size()), '\0');
}

// A pax record ("<len> <key>=<value>\n") of exactly `size` bytes.
std::string PaxRecordOf(size_t size) {
  const std::string head = std::to_string(size) + " comment=";
  return head + std::string(size - head.size() - 1, 'c') + "\n";
}

// A long name padded with NULs to `size` bytes, as a GNU 'L' or 'K' payload may be.
std::string LongName(const std::string& name, size_t size) {
  return name + std::string(size - name.size(), '\0');
}

std::string Weights() {
  SafetensorsWriter w;
  EXPECT_OK(w.AddTensor("a.weight", "F32", {512}, std::string(2048, 'w')));
  return w.Serialize();
}

const std::string kWeightPath = "models/" + std::string(150, 'w') + ".safetensors";

TarConsumerOutcomes RunAll(const std::string& tar) {
  testing::TempDir dir;
  return RunTarConsumers(tar, 100000, dir.path(), kMemberMin);
}

TEST(TarConsumersTest, BigGlobalAndGnuLongNamePayloadsAreFollowedAlikeByEveryConsumer) {
  const std::string weights = Weights();
  const std::string small = "{\"a\": 1}";
  const std::string tar =
      Extended('g', PaxRecordOf(kTarMaxMetaBytes)) +                                // at the limit
      Extended('L', LongName(kWeightPath, 800 << 10)) + Entry("w", '0', weights) +  //
      Extended('K', LongName(kWeightPath, 600 << 10)) +
      Extended('L', LongName("models/latest", 300 << 10)) + Entry("l", '2', "", "t") +
      Entry("config.json", '0', small) + std::string(1024, '\0');
  const TarConsumerOutcomes o = RunAll(tar);
  EXPECT_EQ(TarConsumersDisagree(o, tar, kMemberMin), "");

  ASSERT_OK(o.scan.status());
  ASSERT_EQ(o.scan->size(), 3u);
  const TarEntry& w = (*o.scan)[0];
  EXPECT_EQ(w.path, kWeightPath);
  EXPECT_EQ(w.size, weights.size());
  EXPECT_EQ(w.header_offset, 512 + kTarMaxMetaBytes);  // the 'L' header; the 'g' one is no part
  EXPECT_EQ((*o.scan)[1].path, "models/latest");
  EXPECT_EQ((*o.scan)[1].linkname, kWeightPath);
  // The payloads are records, every byte of them.
  ASSERT_TRUE(o.records.has_value());
  EXPECT_GT(o.records->recorded_bytes(), kTarMaxMetaBytes + ((800 + 600 + 300) << 10));
  // The split: one member, the weight file; the payloads stay in the data file.
  EXPECT_THAT(o.members, ElementsAre(Pair(w.data_offset, weights.size())));
  EXPECT_EQ(o.split_stopped, "");
  // The indexer names the weight file by its long name.
  ASSERT_TRUE(o.indexes.has_value()) << o.indexer_stopped;
  ASSERT_EQ(o.indexes->files.size(), 1u);
  EXPECT_EQ(o.indexes->files[0].file, kWeightPath);
  EXPECT_EQ(o.indexes->files[0].index.file_offset, w.data_offset);
}

TEST(TarConsumersTest, AGlobalOrGnuLongNamePayloadOverTheLimitStopsEveryConsumerAtItsHeader) {
  const std::string first = Entry("first.bin", '0', std::string(4096, 'f'));  // 4608 bytes
  for (char t : {'g', 'L', 'K', 'x'}) {
    SCOPED_TRACE(t);
    const std::string payload = t == 'g' || t == 'x'
                                    ? PaxRecordOf(kTarMaxMetaBytes + 1)
                                    : LongName("models/over.safetensors", kTarMaxMetaBytes + 1);
    const std::string tar = first + Extended(t, payload) +
                            Entry("models/w.safetensors", '0', Weights()) + std::string(1024, '\0');
    const TarConsumerOutcomes o = RunAll(tar);
    EXPECT_EQ(TarConsumersDisagree(o, tar, kMemberMin), "");
    const std::string why =
        "tar header at offset 4608: extended header of 1048577 bytes exceeds "
        "the limit of 1048576";
    EXPECT_THAT(o.scan_raw.status(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(why)));
    EXPECT_FALSE(o.records.has_value());
    EXPECT_THAT(o.split_stopped, HasSubstr(why));
    EXPECT_THAT(o.members, ElementsAre(Pair(512u, 4096u)));  // first.bin; nothing after it
    EXPECT_FALSE(o.indexes.has_value());
    EXPECT_THAT(o.indexer_stopped, HasSubstr(why));
  }
}

// The same bytes in pieces of any size: the streaming consumers agree with the reader.
TEST(TarConsumersTest, AgreeOnAMixedTarInPiecesOfAnySize) {
  TarWriter writer;
  ASSERT_OK(writer.AddDirectory("models"));
  ASSERT_OK(writer.AddFile("models/" + std::string(200, 'p') + ".safetensors", Weights()));
  ASSERT_OK(writer.AddFile("models/small", "x"));
  ASSERT_OK(writer.AddSymlink("models/latest", "small"));
  std::string tar = writer.Finish();
  tar.resize(tar.size() - 1024);
  TarWriter gnu(TarWriter::LongNames::kGnu);
  ASSERT_OK(gnu.AddFile("models/" + std::string(180, 'g') + ".gguf.bin", std::string(3000, 'b')));
  tar += gnu.Finish();
  for (size_t piece : {size_t{1}, size_t{511}, size_t{513}, size_t{4096}}) {
    SCOPED_TRACE(piece);
    testing::TempDir dir;
    const TarConsumerOutcomes o = RunTarConsumers(tar, piece, dir.path(), kMemberMin);
    EXPECT_EQ(TarConsumersDisagree(o, tar, kMemberMin), "");
    ASSERT_OK(o.scan.status());
    EXPECT_EQ(o.scan->size(), 5u);
    EXPECT_EQ(o.members.size(), 2u);
    ASSERT_TRUE(o.indexes.has_value());
    EXPECT_EQ(o.indexes->files.size(), 1u);
  }
}

}  // namespace
}  // namespace modelfs
