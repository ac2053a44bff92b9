// ChunkAssembler: a chunk delivered in pieces of any size is the same bytes with the same hash,
// whichever algorithm, and a restart mid-chunk leaves nothing of the first attempt.
#include "core/cache/chunk_landing.h"

#include <string>

#include "gtest/gtest.h"

namespace modelfs {
namespace {

constexpr uint64_t kChunk = 1 << 20;

std::string Pattern(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + i / 7 + seed) & 0xff);
  return s;
}

// Feeds `bytes` in pieces of `piece` bytes; returns the chunk once complete.
std::pair<std::string, ChunkHash> Assemble(ChunkAssembler& a, const std::string& bytes,
                                           size_t piece) {
  for (size_t off = 0; off < bytes.size(); off += piece) {
    absl::string_view data(bytes.data() + off, std::min(piece, bytes.size() - off));
    if (a.Take(data, bytes.size())) {
      EXPECT_TRUE(data.empty());
      ReceivedChunk got = a.Finish();
      return {std::string(got.bytes), got.hash};
    }
  }
  ADD_FAILURE() << "the chunk never completed";
  return {};
}

class ChunkAssemblerTest : public ::testing::TestWithParam<ChunkDigestAlgorithm> {};

TEST_P(ChunkAssemblerTest, PiecesOfAnySizeGiveTheChunkAndItsHash) {
  const std::string chunk = Pattern(kChunk, 1);
  for (size_t piece : {size_t{1} << 20, size_t{16384}, size_t{4093}}) {
    ChunkAssembler a(kChunk, GetParam());
    auto [bytes, hash] = Assemble(a, chunk, piece);
    EXPECT_EQ(bytes, chunk) << piece;
    EXPECT_EQ(hash, HashChunkBytes(GetParam(), chunk)) << piece;
  }
}

TEST_P(ChunkAssemblerTest, ConsecutiveChunksAreHashedEachOnItsOwn) {
  const std::string first = Pattern(kChunk, 2);
  const std::string second = Pattern(kChunk / 2 + 3, 3);  // a short last chunk
  ChunkAssembler a(kChunk, GetParam());
  EXPECT_EQ(Assemble(a, first, 16384).second, HashChunkBytes(GetParam(), first));
  EXPECT_EQ(Assemble(a, second, 16384).second, HashChunkBytes(GetParam(), second));
}

TEST_P(ChunkAssemblerTest, ARestartMidChunkForgetsThePiecesBeforeIt) {
  const std::string chunk = Pattern(kChunk, 4);
  ChunkAssembler a(kChunk, GetParam());
  const std::string wrong = Pattern(100000, 9);
  absl::string_view data(wrong);
  ASSERT_FALSE(a.Take(data, kChunk));
  a.Restart();
  auto [bytes, hash] = Assemble(a, chunk, 65536);
  EXPECT_EQ(bytes, chunk);
  EXPECT_EQ(hash, HashChunkBytes(GetParam(), chunk));
}

INSTANTIATE_TEST_SUITE_P(Algorithms, ChunkAssemblerTest,
                         ::testing::Values(ChunkDigestAlgorithm::kSha256,
                                           ChunkDigestAlgorithm::kBlake3));

TEST(ChunkAssemblerWithoutHashTest, AssemblesWithAZeroHash) {
  const std::string chunk = Pattern(4096, 5);
  ChunkAssembler a(kChunk, std::nullopt);
  auto [bytes, hash] = Assemble(a, chunk, 1000);
  EXPECT_EQ(bytes, chunk);
  EXPECT_EQ(hash, ChunkHash{});
}

}  // namespace
}  // namespace modelfs
