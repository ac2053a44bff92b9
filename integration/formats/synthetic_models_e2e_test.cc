// The full SmolLM2-shaped Q8_0 file with real bytes (about 145 MB): what the README demo and
// the benchmarks use. Slow, so labelled e2e.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "core/formats/dequant.h"
#include "core/formats/gguf.h"
#include "testsupport/synth/synthetic_models.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

using ::modelfs::testing::TempDir;

TEST(SmolLm2RealBytesTest, WritesQuantizedWeightsThatPeekBackNearThePrngValues) {
  TempDir dir;
  const std::string path = dir.Join("SmolLM2-135M-Instruct-Q8_0.gguf");
  ASSERT_OK(WriteSmolLm2Q8Gguf(path, /*sparse_data=*/false));
  ASSERT_OK_AND_ASSIGN(auto reader, OpenFileRangeReader(path));
  ASSERT_OK_AND_ASSIGN(GgufFile f, ParseGguf(*reader));
  EXPECT_EQ(f.tensors.size(), 272u);
  EXPECT_EQ(f.TotalTensorBytes(), 143025408u);
  EXPECT_EQ(f.file_size, f.data_offset + 143025408u);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, 143025408u);  // not sparse

  // token_embd is stream 0 of seed 135; Q8_0 keeps each value within half a step.
  const std::vector<float> expected = SyntheticWeights(135, 0, 64, 0.02f);
  ASSERT_OK_AND_ASSIGN(std::vector<float> peek, PeekValues(*reader, f, "token_embd.weight", 64));
  for (size_t i = 0; i < 64; ++i) EXPECT_NEAR(peek[i], expected[i], 0.0005f) << i;
  ASSERT_OK_AND_ASSIGN(std::vector<float> norm, PeekValues(*reader, f, "output_norm.weight", 8));
  for (float x : norm) EXPECT_NEAR(x, 1.0f, 0.3f);
}

}  // namespace
}  // namespace modelfs
