#include "core/oci/zstd_frames.h"

#include <zstd.h>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/oci/layer_decoder.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;

std::string Weights(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>(i % 2 ? 0x3c + rng() % 3 : rng());
  return out;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class ZstdFramesTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& bytes) {
    const std::string path = dir_.Join("in.tar").string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  testing::TempDir dir_;
};

TEST_F(ZstdFramesTest, WritesOneIndependentFrameOfContentSizePerPieceOfInput) {
  const std::string data = Weights((3 << 20) + 5000, 1);
  const std::string out = dir_.Join("out.zst").string();
  ASSERT_OK_AND_ASSIGN(ZstdFramesResult r, WriteZstdFrames(Write(data), out, 1 << 20));
  const std::string z = ReadAll(out);
  EXPECT_EQ(r.frames, 4u);
  EXPECT_EQ(r.size, z.size());
  EXPECT_EQ(r.digest, Digest::Of(z));
  EXPECT_EQ(r.input_size, data.size());
  EXPECT_EQ(r.diff_id, Digest::Of(data));
  // Each frame decodes alone to its piece, its content size in its header.
  std::vector<uint64_t> sizes;
  size_t off = 0;
  for (uint64_t i = 0; off < z.size(); ++i) {
    const size_t n = ZSTD_findFrameCompressedSize(z.data() + off, z.size() - off);
    ASSERT_FALSE(ZSTD_isError(n));
    sizes.push_back(ZSTD_getFrameContentSize(z.data() + off, n));
    std::string piece(sizes.back(), '\0');
    EXPECT_EQ(ZSTD_decompress(piece.data(), piece.size(), z.data() + off, n), piece.size());
    EXPECT_EQ(piece, data.substr(i << 20, 1 << 20));
    off += n;
  }
  EXPECT_EQ(sizes, (std::vector<uint64_t>{1 << 20, 1 << 20, 1 << 20, 5000}));
}

TEST_F(ZstdFramesTest, TheStreamDecodesWholeToTheInput) {
  const std::string data = Weights(2 << 20, 2);
  const std::string out = dir_.Join("out.zst").string();
  ASSERT_OK_AND_ASSIGN(ZstdFramesResult r, WriteZstdFrames(Write(data), out, 1 << 20));
  const std::string z = ReadAll(out);
  std::string decoded;
  ASSERT_OK_AND_ASSIGN(DecodedLayer d, DecodeLayer(
                                           LayerEncoding::kTarZstd, r.digest, r.diff_id,
                                           [&](uint64_t offset, std::string* piece) {
                                             *piece = z.substr(offset);
                                             return absl::OkStatus();
                                           },
                                           [&](std::string_view b) {
                                             decoded.append(b);
                                             return absl::OkStatus();
                                           }));
  EXPECT_EQ(decoded, data);
  EXPECT_EQ(d.size, data.size());
  EXPECT_EQ(r.frames, 2u);
}

TEST_F(ZstdFramesTest, AnEmptyInputIsOneEmptyFrame) {
  const std::string out = dir_.Join("out.zst").string();
  ASSERT_OK_AND_ASSIGN(ZstdFramesResult r, WriteZstdFrames(Write(""), out, 1 << 20));
  EXPECT_EQ(r.frames, 1u);
  EXPECT_EQ(r.input_size, 0u);
  EXPECT_EQ(ZSTD_getFrameContentSize(ReadAll(out).data(), r.size), 0u);
}

TEST_F(ZstdFramesTest, AMissingInputIsNotFoundNamingIt) {
  EXPECT_THAT(WriteZstdFrames(dir_.Join("absent").string(), dir_.Join("o").string(), 1 << 20),
              StatusIs(absl::StatusCode::kNotFound, ::testing::HasSubstr("absent")));
}

}  // namespace
}  // namespace modelfs
