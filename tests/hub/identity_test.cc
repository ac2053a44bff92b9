// The identity record: model card front matter, Hub license ids as SPDX, the tokenizer hash,
// where each field is stored in a ModelPack artifact and read back, and .modelinfo.json.
#include "core/hub/identity.h"

#include "core/model/modelinfo.h"
#include "core/oci/digest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(ModelCardTest, ReadsTheKeysTheIdentityNeeds) {
  ModelCard c = ParseModelCard(
      "---\n"
      "license: other\n"
      "license_name: llama3.1 # the community license\n"
      "base_model:\n"
      "- meta-llama/Llama-3.1-8B\n"
      "  - meta-llama/Llama-3.1-8B-Instruct\n"
      "base_model_relation: 'quantized'\n"
      "datasets: [HuggingFaceFW/fineweb, \"allenai/c4\"]\n"
      "model-index:\n"
      "- name: x\n"
      "  results:\n"
      "  - task: {type: text-generation}\n"
      "tags:\n"
      "- gguf\n"
      "---\n"
      "# Title\n"
      "license: not-this-one\n");
  EXPECT_TRUE(c.has_front_matter);
  EXPECT_EQ(c.license, "other");
  EXPECT_EQ(c.license_name, "llama3.1");
  EXPECT_THAT(c.base_models,
              ElementsAre("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B-Instruct"));
  EXPECT_EQ(c.base_model_relation, "quantized");
  EXPECT_THAT(c.datasets, ElementsAre("HuggingFaceFW/fineweb", "allenai/c4"));
}

TEST(ModelCardTest, NoFrontMatterOrAnUnclosedOneIsEmpty) {
  EXPECT_FALSE(ParseModelCard("# Just a README\nlicense: mit\n").has_front_matter);
  EXPECT_FALSE(ParseModelCard("---\nlicense: mit\n").has_front_matter);
  EXPECT_EQ(ParseModelCard("\xEF\xBB\xBF---\nlicense: mit\n---\n").license, "mit");
}

TEST(ModelCardTest, HubLicensesBecomeSpdx) {
  EXPECT_EQ(HubLicenseToSpdx("apache-2.0"), "Apache-2.0");
  EXPECT_EQ(HubLicenseToSpdx("MIT"), "MIT");
  EXPECT_EQ(HubLicenseToSpdx("gpl-3.0"), "GPL-3.0-only");
  EXPECT_EQ(HubLicenseToSpdx("cc-by-nc-sa-4.0"), "CC-BY-NC-SA-4.0");
  EXPECT_EQ(HubLicenseToSpdx("llama3.1"), "LicenseRef-llama3.1");
  EXPECT_EQ(HubLicenseToSpdx("other", "my license"), "LicenseRef-my-license");
  EXPECT_EQ(HubLicenseToSpdx(""), "");
}

TEST(IdentityTest, RelationsAreNormalizedToTheHubsFour) {
  EXPECT_EQ(*NormalizeBaseModelRelation("fine-tune"), "finetune");
  EXPECT_EQ(*NormalizeBaseModelRelation("Quantization"), "quantized");
  EXPECT_EQ(*NormalizeBaseModelRelation("merge"), "merge");
  EXPECT_EQ(*NormalizeBaseModelRelation("adapter"), "adapter");
  EXPECT_THAT(NormalizeBaseModelRelation("cousin"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(IdentityTest, TheTokenizerHashIsSha256sumOfTheTokenizerFilesInPathOrder) {
  TempDir tmp;
  const std::string a = tmp.WriteFile("tokenizer_config.json", "{}").string();
  const std::string b = tmp.WriteFile("tokenizer.json", "{\"v\":1}").string();
  const std::string c = tmp.WriteFile("model.safetensors", "weights").string();
  ASSERT_OK_AND_ASSIGN(std::string h, TokenizerHash({{"tokenizer_config.json", a},
                                                     {"model.safetensors", c},
                                                     {"tokenizer.json", b}}));
  const std::string lines = std::string(Digest::Of("{\"v\":1}").hex()) + "  tokenizer.json\n" +
                            std::string(Digest::Of("{}").hex()) + "  tokenizer_config.json\n";
  EXPECT_EQ(h, Digest::Of(lines).str());
  ASSERT_OK_AND_ASSIGN(std::string none, TokenizerHash({{"model.safetensors", c}}));
  EXPECT_EQ(none, "");
}

ModelIdentity Full() {
  ModelIdentity id;
  id.licenses = {"Apache-2.0"};
  id.source_url = "https://huggingface.co/org/tiny";
  id.revision = std::string(40, 'a');
  id.base_models = {"org/base", "org/base2"};
  id.base_model_relation = "merge";
  id.tokenizer_sha256 = Digest::Of("t").str();
  id.quantization = "q4_k_m";
  id.quantization_recipe = "llama-quantize b4500 --imatrix";
  id.datasets = {"https://huggingface.co/datasets/org/data"};
  id.eval_ids = {"e1", "e2"};
  return id;
}

TEST(IdentityTest, SpecFieldsGoToTheConfigAndTheRestToAnnotations) {
  ModelPackConfig config;
  std::map<std::string, std::string> a;
  ApplyIdentity(Full(), config, a);
  EXPECT_THAT(config.descriptor.licenses, ElementsAre("Apache-2.0"));
  EXPECT_EQ(config.descriptor.source_url, "https://huggingface.co/org/tiny");
  EXPECT_EQ(config.descriptor.revision, std::string(40, 'a'));
  EXPECT_THAT(config.descriptor.datasets_url,
              ElementsAre("https://huggingface.co/datasets/org/data"));
  EXPECT_EQ(config.config.quantization, "q4_k_m");
  EXPECT_EQ(a["dev.modelfs.base-model"], "org/base,org/base2");
  EXPECT_EQ(a["dev.modelfs.base-model-relation"], "merge");
  EXPECT_EQ(a["dev.modelfs.tokenizer.sha256"], Digest::Of("t").str());
  EXPECT_EQ(a["dev.modelfs.quantization.recipe"], "llama-quantize b4500 --imatrix");
  EXPECT_EQ(a["dev.modelfs.eval-ids"], "e1,e2");
  EXPECT_EQ(a["org.opencontainers.image.licenses"], "Apache-2.0");
  EXPECT_EQ(a["org.opencontainers.image.source"], "https://huggingface.co/org/tiny");
  EXPECT_EQ(IdentityFromArtifact(&config, a), Full());
}

TEST(IdentityTest, CardThenFlagsThenNothingElse) {
  ModelCard card;
  card.license = "apache-2.0";
  card.base_models = {"org/base"};
  card.datasets = {"org/data"};
  ASSERT_OK_AND_ASSIGN(ModelIdentity from_card, IdentityFromCard(card, "http://hub"));
  EXPECT_THAT(from_card.datasets, ElementsAre("http://hub/datasets/org/data"));
  ModelIdentity flags;
  flags.licenses = {"MIT"};
  ModelIdentity merged = MergeIdentity(from_card, flags);
  EXPECT_THAT(merged.licenses, ElementsAre("MIT"));
  EXPECT_THAT(merged.base_models, ElementsAre("org/base"));
}

TEST(IdentityTest, ModelInfoShowsTheRecord) {
  ModelInfoContext ctx;
  ctx.identity = IdentityToJson(Full());
  nlohmann::json doc = BuildModelInfo({}, TreeInspection{}, ctx);
  EXPECT_EQ(doc["identity"]["licenses"], nlohmann::json::array({"Apache-2.0"}));
  EXPECT_EQ(doc["identity"]["baseModelRelation"], "merge");
  EXPECT_EQ(doc["identity"]["evalIds"], nlohmann::json::array({"e1", "e2"}));
  EXPECT_TRUE(BuildModelInfo({}, TreeInspection{}, ModelInfoContext{})["identity"].is_null());
}

TEST(IdentityTest, SpdxExpressionsAreCheckedForShape) {
  EXPECT_OK(CheckSpdxExpression("Apache-2.0 OR MIT"));
  EXPECT_OK(CheckSpdxExpression("LicenseRef-llama3.1"));
  EXPECT_THAT(CheckSpdxExpression("mit; rm -rf"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CheckSpdxExpression(""), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace modelfs::testing
