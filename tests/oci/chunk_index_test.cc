#include "core/oci/chunk_index.h"

#include <string>

#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::IsOk;
using ::modelfs::testing::StatusIs;
using ::testing::HasSubstr;

constexpr uint64_t k64K = 64 << 10;

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + i / 7) & 0xff);
  return s;
}

TEST(ChunkIndexBuilderTest, HashesEachChunkAndTheWholeBlob) {
  const std::string blob = Pattern(2 * k64K + 100);
  ChunkIndex idx = BuildChunkIndex(blob, k64K);
  EXPECT_EQ(idx.blob_digest, Digest::Of(blob));
  EXPECT_EQ(idx.blob_size, blob.size());
  EXPECT_EQ(idx.chunk_size, k64K);
  ASSERT_EQ(idx.chunk_count(), 3u);
  EXPECT_EQ(Digest::FromRaw(idx.chunks[0]), Digest::Of(blob.substr(0, k64K)));
  EXPECT_EQ(Digest::FromRaw(idx.chunks[2]), Digest::Of(blob.substr(2 * k64K)));
  EXPECT_EQ(idx.ChunkLength(2), 100u);
  EXPECT_EQ(idx.ChunkLength(3), 0u);
  EXPECT_EQ(idx.ChunkOffset(2), 2 * k64K);
}

TEST(ChunkIndexBuilderTest, OddSizedUpdatesGiveTheSameIndexAsOneUpdate) {
  const std::string blob = Pattern(3 * k64K + 1);
  ChunkIndexBuilder b(k64K);
  for (size_t off = 0; off < blob.size(); off += 9973)
    b.Update(std::string_view(blob).substr(off, 9973));
  EXPECT_EQ(b.Finish(), BuildChunkIndex(blob, k64K));
}

TEST(ChunkIndexBuilderTest, EmptyBlobHasNoChunks) {
  ChunkIndex idx = BuildChunkIndex("", k64K);
  EXPECT_EQ(idx.chunk_count(), 0u);
  EXPECT_EQ(idx.blob_digest.str(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(ChunkIndexBuilderTest, ExactMultipleHasNoShortChunk) {
  ChunkIndex idx = BuildChunkIndex(Pattern(2 * k64K), k64K);
  EXPECT_EQ(idx.chunk_count(), 2u);
  EXPECT_EQ(idx.ChunkLength(1), k64K);
}

TEST(ChunkIndexTest, VerifyChunkAcceptsTheRightBytes) {
  const std::string blob = Pattern(k64K + 10);
  ChunkIndex idx = BuildChunkIndex(blob, k64K);
  EXPECT_THAT(idx.VerifyChunk(1, blob.substr(k64K)), IsOk());
}

TEST(ChunkIndexTest, VerifyChunkReportsDataLossWithChunkAndOffset) {
  std::string blob = Pattern(k64K + 10);
  ChunkIndex idx = BuildChunkIndex(blob, k64K);
  blob[k64K + 3] ^= 1;
  EXPECT_THAT(idx.VerifyChunk(1, blob.substr(k64K)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("chunk 1 of " + idx.blob_digest.str() + " at offset 65536")));
  EXPECT_THAT(idx.VerifyChunk(1, blob.substr(k64K, 5)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("got 5 bytes, want 10")));
  EXPECT_THAT(idx.VerifyChunk(2, ""), StatusIs(absl::StatusCode::kOutOfRange, ::testing::_));
}

TEST(ChunkIndexFormatTest, HeaderLayoutIsAsDocumented) {
  const std::string blob = Pattern(k64K + 1);
  ChunkIndex idx = BuildChunkIndex(blob, k64K);
  const std::string bytes = SerializeChunkIndex(idx);
  ASSERT_EQ(bytes.size(), 68u + 2 * 32);
  EXPECT_EQ(bytes.substr(0, 8), std::string("MFSCIDX\0", 8));
  EXPECT_EQ(bytes.substr(8, 4), std::string("\x01\x00\x00\x00", 4));
  EXPECT_EQ(bytes.substr(12, 8), std::string("\x00\x00\x01\x00\x00\x00\x00\x00", 8));  // 65536
  EXPECT_EQ(bytes.substr(20, 8), std::string("\x01\x00\x01\x00\x00\x00\x00\x00", 8));  // 65537
  const auto raw = idx.blob_digest.raw();
  EXPECT_EQ(bytes.substr(28, 32), std::string(reinterpret_cast<const char*>(raw.data()), 32));
  EXPECT_EQ(bytes.substr(60, 8), std::string("\x02\x00\x00\x00\x00\x00\x00\x00", 8));
}

TEST(ChunkIndexFormatTest, RoundTrips) {
  ChunkIndex idx = BuildChunkIndex(Pattern(5 * k64K + 77), k64K);
  ASSERT_OK_AND_ASSIGN(ChunkIndex back, ParseChunkIndex(SerializeChunkIndex(idx)));
  EXPECT_EQ(back, idx);
}

TEST(ChunkIndexFormatTest, RefusesBadMagic) {
  std::string bytes = SerializeChunkIndex(BuildChunkIndex(Pattern(10), k64K));
  bytes[0] = 'X';
  EXPECT_THAT(ParseChunkIndex(bytes),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("magic")));
}

TEST(ChunkIndexFormatTest, RefusesUnknownVersion) {
  std::string bytes = SerializeChunkIndex(BuildChunkIndex(Pattern(10), k64K));
  bytes[8] = 3;
  EXPECT_THAT(ParseChunkIndex(bytes),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("version is 3")));
}

TEST(ChunkIndexFormatTest, ASha256IndexIsWrittenAsVersion1) {
  const std::string bytes = SerializeChunkIndex(BuildChunkIndex(Pattern(3 * k64K), k64K));
  EXPECT_EQ(bytes[8], 1);
  EXPECT_EQ(bytes.size(), ChunkIndex::kHeaderSizeV1 + 3 * 32);
  EXPECT_EQ(bytes.size(), SerializedChunkIndexSize(3 * k64K, k64K, ChunkDigestAlgorithm::kSha256));
}

TEST(ChunkIndexFormatTest, ABlake3IndexIsVersion2AndRoundTrips) {
  const ChunkIndex idx =
      BuildChunkIndex(Pattern(2 * k64K + 5), k64K, ChunkDigestAlgorithm::kBlake3);
  const std::string bytes = SerializeChunkIndex(idx);
  EXPECT_EQ(bytes[8], 2);
  EXPECT_EQ(bytes[12], 2);  // the algorithm: BLAKE3
  EXPECT_EQ(bytes.size(), ChunkIndex::kHeaderSizeV2 + 3 * 32);
  EXPECT_EQ(bytes.size(),
            SerializedChunkIndexSize(2 * k64K + 5, k64K, ChunkDigestAlgorithm::kBlake3));
  ASSERT_OK_AND_ASSIGN(ChunkIndex back, ParseChunkIndex(bytes));
  EXPECT_EQ(back, idx);
  EXPECT_EQ(back.algorithm, ChunkDigestAlgorithm::kBlake3);
  EXPECT_EQ(SerializeChunkIndex(back), bytes);
}

TEST(ChunkIndexFormatTest, Blake3ChunkHashesAreBlake3AndTheBlobDigestStaysSha256) {
  const std::string blob = Pattern(k64K + 9);
  const ChunkIndex idx = BuildChunkIndex(blob, k64K, ChunkDigestAlgorithm::kBlake3);
  EXPECT_EQ(idx.blob_digest, Digest::Of(blob));
  ASSERT_EQ(idx.chunks.size(), 2u);
  EXPECT_EQ(idx.chunks[1],
            HashChunkBytes(ChunkDigestAlgorithm::kBlake3, std::string_view(blob).substr(k64K)));
  EXPECT_NE(idx.chunks[1],
            HashChunkBytes(ChunkDigestAlgorithm::kSha256, std::string_view(blob).substr(k64K)));
}

TEST(ChunkHashTest, Blake3OfTheEmptyStringIsTheReferenceValue) {
  // The BLAKE3 paper's test vector for empty input.
  EXPECT_EQ(Digest::FromRaw(HashChunkBytes(ChunkDigestAlgorithm::kBlake3, "")).hex(),
            "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262");
}

TEST(ChunkHashTest, AHasherStartsOverAfterFinish) {
  ChunkHasher h(ChunkDigestAlgorithm::kBlake3);
  h.Update("first chunk");
  h.Finish();
  h.Update("abc");
  EXPECT_EQ(h.Finish(), HashChunkBytes(ChunkDigestAlgorithm::kBlake3, "abc"));
}

TEST(ChunkHashTest, NamesParseBothWaysAndUnknownOnesAreRefused) {
  EXPECT_EQ(*ParseChunkDigestName("blake3"), ChunkDigestAlgorithm::kBlake3);
  EXPECT_EQ(*ParseChunkDigestName("sha256"), ChunkDigestAlgorithm::kSha256);
  EXPECT_EQ(ChunkDigestName(ChunkDigestAlgorithm::kBlake3), "blake3");
  EXPECT_THAT(ParseChunkDigestName("md5"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"md5\"")));
}

TEST(ChunkIndexFormatTest, Version2RefusesAnUnknownAlgorithm) {
  std::string bytes =
      SerializeChunkIndex(BuildChunkIndex(Pattern(10), k64K, ChunkDigestAlgorithm::kBlake3));
  bytes[12] = 9;
  EXPECT_THAT(ParseChunkIndex(bytes),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hash algorithm 9")));
}

TEST(ChunkIndexFormatTest, Version2NamingSha256IsRefusedSoEachIndexHasOneForm) {
  std::string bytes =
      SerializeChunkIndex(BuildChunkIndex(Pattern(10), k64K, ChunkDigestAlgorithm::kBlake3));
  bytes[12] = 1;
  EXPECT_THAT(ParseChunkIndex(bytes),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("written as version 1")));
}

TEST(ChunkIndexFormatTest, Version2RefusesAContentOtherThanStoredOrUncompressed) {
  std::string bytes =
      SerializeChunkIndex(BuildChunkIndex(Pattern(10), k64K, ChunkDigestAlgorithm::kBlake3));
  bytes[16] = 2;
  EXPECT_THAT(ParseChunkIndex(bytes),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("content 2")));
}

TEST(ChunkIndexFormatTest, AnIndexOfUncompressedBytesRoundTripsAsVersion2WithContent1) {
  for (ChunkDigestAlgorithm a : {ChunkDigestAlgorithm::kBlake3, ChunkDigestAlgorithm::kSha256}) {
    ChunkIndex idx = BuildChunkIndex(Pattern(3 * k64K + 5), k64K, a);
    idx.content = ChunkIndex::Content::kUncompressed;
    const std::string bytes = SerializeChunkIndex(idx);
    EXPECT_EQ(bytes.size(), ChunkIndex::kHeaderSizeV2 + 4 * 32);
    EXPECT_EQ(bytes[8], 2);   // version
    EXPECT_EQ(bytes[16], 1);  // content
    ASSERT_OK_AND_ASSIGN(ChunkIndex parsed, ParseChunkIndex(bytes));
    EXPECT_EQ(parsed, idx);
    EXPECT_EQ(SerializeChunkIndex(parsed), bytes);
  }
}

TEST(ChunkIndexFormatTest, Version2RefusesATruncatedHeader) {
  const std::string bytes =
      SerializeChunkIndex(BuildChunkIndex(Pattern(10), k64K, ChunkDigestAlgorithm::kBlake3));
  EXPECT_THAT(ParseChunkIndex(bytes.substr(0, 70)),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("header alone is 80")));
}

TEST(ChunkIndexTest, ABlake3ChunkThatDiffersIsDataLossNamingTheAlgorithm) {
  std::string blob = Pattern(2 * k64K);
  const ChunkIndex idx = BuildChunkIndex(blob, k64K, ChunkDigestAlgorithm::kBlake3);
  EXPECT_OK(idx.VerifyChunk(1, std::string_view(blob).substr(k64K)));
  blob[k64K + 3] ^= 1;
  EXPECT_THAT(idx.VerifyChunk(1, std::string_view(blob).substr(k64K)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("blake3 mismatch")));
}

TEST(ChunkIndexFormatTest, RefusesChunkSizeThatIsNotAPowerOfTwo) {
  std::string bytes = SerializeChunkIndex(BuildChunkIndex(Pattern(10), k64K));
  bytes[12] = 1;  // 65537
  EXPECT_THAT(ParseChunkIndex(bytes),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("chunk_size 65537")));
}

TEST(ChunkIndexFormatTest, RefusesCountThatDisagreesWithSizes) {
  std::string bytes = SerializeChunkIndex(BuildChunkIndex(Pattern(10), k64K));
  bytes[60] = 2;
  EXPECT_THAT(ParseChunkIndex(bytes),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("count is 2")));
}

TEST(ChunkIndexFormatTest, HugeClaimedCountIsRefusedBeforeAllocating) {
  ChunkIndex idx;
  idx.blob_digest = Digest::Of("x");
  idx.blob_size = 1ull << 62;
  idx.chunk_size = k64K;
  std::string bytes = SerializeChunkIndex(idx);  // header says 2^46 chunks, carries none
  EXPECT_THAT(ParseChunkIndex(bytes),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("count is 0")));
  bytes.replace(60, 8, std::string("\x00\x00\x00\x00\x00\x40\x00\x00", 8));
  EXPECT_THAT(ParseChunkIndex(bytes),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("truncated")));
}

TEST(ChunkIndexFormatTest, RefusesTruncationAndTrailingBytes) {
  const std::string bytes = SerializeChunkIndex(BuildChunkIndex(Pattern(k64K + 1), k64K));
  EXPECT_THAT(ParseChunkIndex(bytes.substr(0, bytes.size() - 1)),
              StatusIs(absl::StatusCode::kOutOfRange, ::testing::_));
  EXPECT_THAT(ParseChunkIndex(bytes.substr(0, 40)),
              StatusIs(absl::StatusCode::kOutOfRange, ::testing::_));
  EXPECT_THAT(ParseChunkIndex(bytes + "x"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("trailing")));
}

}  // namespace
}  // namespace modelfs
