#include "cmd/modelfs/memory_render.h"

#include <cstdint>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/formats/memory.h"
#include "tests/formats/memory_test_models.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs::cli {
namespace {

using ::modelfs::testing::DeepSeekV3;
using ::modelfs::testing::Gemma2_9B;
using ::modelfs::testing::kLlamaParams;
using ::modelfs::testing::LlamaRequest;
using ::modelfs::testing::SmolLM2;
using ::testing::HasSubstr;
using json = nlohmann::json;

TEST(ComputeMemoryReport, JsonHoldsByteCountsAsPlainIntegers) {
  ASSERT_OK_AND_ASSIGN(MemoryReport r, ComputeMemoryReport(LlamaRequest()));
  json j = MemoryReportToJson(r);
  EXPECT_TRUE(j["weights"][0]["bytes"].is_number_unsigned());
  EXPECT_EQ(j["weights"][0]["bytes"].get<uint64_t>(), 4516875072u);
  EXPECT_TRUE(j["kv_cache"][0]["bytes"].is_number_unsigned());
  EXPECT_EQ(j["kv_cache"][0]["bytes"].get<uint64_t>(), 68719476736u);
  EXPECT_EQ(j["kv_cache"][0]["bytes_per_token"].get<uint64_t>(), 131072u);
  EXPECT_TRUE(j["gpu"]["fits"][0]["tokens"].is_number_unsigned());
  EXPECT_EQ(j["gpu"]["fits"][0]["tokens"].get<uint64_t>(), 142486u);
  EXPECT_EQ(j["gpu"]["fits"][0]["sequences"].get<uint64_t>(), 4u);
  EXPECT_EQ(j["gpu"]["usable_bytes"].get<uint64_t>(), 23192823398u);
  EXPECT_EQ(j["params"].get<uint64_t>(), kLlamaParams);
  EXPECT_EQ(j["ctx"].get<uint64_t>(), 32768u);
  EXPECT_TRUE(j["kv_cache"][0]["windowed_bytes"].is_null());
  // Integers survive a round trip through text unchanged.
  EXPECT_THAT(j.dump(), HasSubstr("\"bytes\":68719476736"));
}

TEST(RenderMemoryReport, PrintsTheLessonLines) {
  ASSERT_OK_AND_ASSIGN(MemoryReport r, ComputeMemoryReport(LlamaRequest()));
  std::string text = RenderMemoryReport(r);
  EXPECT_THAT(text, HasSubstr("Q4_K       4,516,875,072   4.21 GiB 4.50 bits/weight\n"));
  EXPECT_THAT(text, HasSubstr("kv cache f16: 32 layers x 8 KV heads x (128 + 128) dims = "
                              "131,072 bytes/token\n"));
  EXPECT_THAT(text, HasSubstr("32,768 tokens x 16 sequence(s) = 68,719,476,736 bytes (64.00 GiB)"));
  EXPECT_THAT(text, HasSubstr("gpu 24.0 GiB x 0.9: 17.39 GiB left for KV = 142,486 tokens = "
                              "4 sequence(s) of 32,768; 16 requested do not fit\n"));
}

TEST(RenderMemoryReport, PrintsTheSmolLM2CacheInMiB) {
  MemoryRequest req;
  req.shape = SmolLM2();
  ASSERT_OK_AND_ASSIGN(MemoryReport r, ComputeMemoryReport(req));
  std::string text = RenderMemoryReport(r);
  EXPECT_THAT(text, HasSubstr("kv cache f16: 30 layers x 3 KV heads x (64 + 64) dims = "
                              "23,040 bytes/token\n"));
  EXPECT_THAT(text, HasSubstr("8,192 tokens x 1 sequence(s) = 188,743,680 bytes (180.0 MiB)\n"));
}

TEST(RenderMemoryReport, PrintsTheWindowedFigureBesideTheHeadline) {
  MemoryRequest req;
  req.shape = Gemma2_9B();
  ASSERT_OK_AND_ASSIGN(MemoryReport r, ComputeMemoryReport(req));
  EXPECT_THAT(
      RenderMemoryReport(r),
      HasSubstr("with the 4,096-token window on 21 layers: 2,113,929,216 bytes (1.97 GiB)"));
}

TEST(RenderMemoryReport, DescribesTheMlaLatent) {
  MemoryRequest req;
  req.shape = DeepSeekV3();
  req.ctx = 4096;
  ASSERT_OK_AND_ASSIGN(MemoryReport r, ComputeMemoryReport(req));
  EXPECT_THAT(RenderMemoryReport(r),
              HasSubstr("kv cache f16: 61 layers x 576 latent dims (MLA: kv_lora_rank 512 + rope "
                        "64) = 70,272 bytes/token"));
}

}  // namespace
}  // namespace modelfs::cli
