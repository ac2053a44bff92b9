// What `modelfs push` publishes, read by another client: skopeo reads M and V exactly as the
// registry serves them, and M and its config validate against the ModelPack JSON schemas in
// integration/schemas/.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/oci/digest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration/publish/json_schema_check.h"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

class ManifestSchemaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto registry = RegistryFixture::Start();
    ASSERT_OK(registry.status());
    registry_ = registry->release();
    TempDir model;
    ASSERT_OK(WriteTestModel(model.path().string()).status());
    ASSERT_OK_AND_ASSIGN(
        ProcessResult push,
        RunModelfs({"push", "--plain-http", Ref("v1"), model.path().string(), "--annotation",
                    "org.opencontainers.image.version=1.0", "--json"}));
    ASSERT_EQ(push.exit_code, 0) << push.err;
    push_ = new nlohmann::json(ParseJsonOutput(push.out));
  }
  static void TearDownTestSuite() {
    delete push_;
    delete registry_;
  }
  void SetUp() override {
    ASSERT_NE(push_, nullptr);
    ASSERT_OK_AND_ASSIGN(client_, ConnectPlainHttp(registry_->host_port()));
  }

  static std::string Ref(const std::string& tag) {
    return absl::StrCat(registry_->host_port(), "/", kRepo, ":", tag);
  }
  static absl::StatusOr<ProcessResult> SkopeoInspectRaw(const std::string& tag) {
    return RunProcess({"skopeo", "inspect", "--raw", "--tls-verify=false", "docker://" + Ref(tag)});
  }
  nlohmann::json Schema(const std::string& name) {
    absl::StatusOr<nlohmann::json> s = LoadJsonFile(SchemaDir() + "/" + name);
    EXPECT_OK(s.status());
    return s.ok() ? *s : nlohmann::json();
  }
  std::string ServedManifest(const std::string& tag) {
    absl::StatusOr<ManifestResult> m = client_->GetManifest(kRepo, tag);
    EXPECT_OK(m.status());
    return m.ok() ? m->bytes : "";
  }
  nlohmann::json ModelConfig() {
    nlohmann::json m = nlohmann::json::parse(ServedManifest("v1"));
    absl::StatusOr<std::string> c = FetchBlob(*client_, kRepo, m["config"]["digest"]);
    EXPECT_OK(c.status());
    return c.ok() ? nlohmann::json::parse(*c) : nlohmann::json();
  }

  static constexpr char kRepo[] = "schema/llama";
  static RegistryFixture* registry_;
  static nlohmann::json* push_;
  std::unique_ptr<RegistryClient> client_;
};

RegistryFixture* ManifestSchemaTest::registry_ = nullptr;
nlohmann::json* ManifestSchemaTest::push_ = nullptr;

TEST_F(ManifestSchemaTest, SkopeoReadsTheModelManifestByteForByteAsServed) {
  ASSERT_OK_AND_ASSIGN(ProcessResult skopeo, SkopeoInspectRaw("v1"));
  ASSERT_EQ(skopeo.exit_code, 0) << skopeo.err;
  std::string served = ServedManifest("v1");
  EXPECT_EQ(nlohmann::json::parse(skopeo.out), nlohmann::json::parse(served));
  EXPECT_EQ(skopeo.out, served);
  EXPECT_EQ(Digest::Of(skopeo.out).str(), (*push_)["model"]["digest"]);
}

TEST_F(ManifestSchemaTest, SkopeoReadsTheVolumeManifestByteForByteAsServed) {
  ASSERT_OK_AND_ASSIGN(ProcessResult skopeo, SkopeoInspectRaw("v1-volume"));
  ASSERT_EQ(skopeo.exit_code, 0) << skopeo.err;
  std::string served = ServedManifest("v1-volume");
  EXPECT_EQ(nlohmann::json::parse(skopeo.out), nlohmann::json::parse(served));
  EXPECT_EQ(skopeo.out, served);
  EXPECT_EQ(Digest::Of(skopeo.out).str(), (*push_)["volume"]["digest"]);
  nlohmann::json v = nlohmann::json::parse(skopeo.out);
  EXPECT_EQ(v["subject"]["digest"], (*push_)["model"]["digest"]);
}

TEST_F(ManifestSchemaTest, ModelManifestValidatesAgainstTheModelPackManifestSchema) {
  nlohmann::json m = nlohmann::json::parse(ServedManifest("v1"));
  EXPECT_THAT(CheckJsonSchema(Schema("modelpack-manifest.schema.json"), m), IsEmpty());
  EXPECT_EQ(m["annotations"]["org.opencontainers.image.version"], "1.0");
  for (const auto& layer : m["layers"]) {
    EXPECT_TRUE(layer["annotations"].contains("org.cncf.model.filepath")) << layer.dump();
  }
}

TEST_F(ManifestSchemaTest, VolumeManifestValidatesAgainstTheVolumeImageSchema) {
  nlohmann::json v = nlohmann::json::parse(ServedManifest("v1-volume"));
  EXPECT_THAT(CheckJsonSchema(Schema("volume-image-manifest.schema.json"), v), IsEmpty());
  EXPECT_EQ(v["layers"][0]["annotations"]["containerd.io/snapshot/modelfs.model"],
            (*push_)["model"]["digest"]);
}

TEST_F(ManifestSchemaTest, ModelConfigValidatesAgainstTheModelPackConfigSchema) {
  nlohmann::json config = ModelConfig();
  EXPECT_THAT(CheckJsonSchema(Schema("modelpack-config.schema.json"), config), IsEmpty());
}

TEST_F(ManifestSchemaTest, ModelConfigListsEveryLayerDigestAsADiffIdInOrder) {
  nlohmann::json m = nlohmann::json::parse(ServedManifest("v1"));
  nlohmann::json config = ModelConfig();
  std::vector<std::string> layers;
  for (const auto& l : m["layers"]) layers.push_back(l["digest"]);
  EXPECT_EQ(config["modelfs"]["diffIds"].get<std::vector<std::string>>(), layers);
  EXPECT_EQ(config["descriptor"]["name"], "llama");
  EXPECT_EQ(config["config"]["format"], "mixed");  // safetensors shards and a GGUF
}

TEST_F(ManifestSchemaTest, ConfigSchemaRejectsAWrongModelfsTypeAndAMissingDescriptor) {
  nlohmann::json config = ModelConfig();
  config["modelfs"]["type"] = "tars";
  config.erase("descriptor");
  EXPECT_THAT(CheckJsonSchema(Schema("modelpack-config.schema.json"), config),
              UnorderedElementsAre("$: required property 'descriptor' is missing",
                                   "$.modelfs.type: \"tars\" is not one of [\"layers\"]"));
}

TEST_F(ManifestSchemaTest, ManifestSchemaRejectsAnImageLayerMediaType) {
  nlohmann::json m = nlohmann::json::parse(ServedManifest("v1"));
  m["layers"][0]["mediaType"] = "application/vnd.oci.image.layer.v1.tar";
  std::vector<std::string> errors = CheckJsonSchema(Schema("modelpack-manifest.schema.json"), m);
  EXPECT_THAT(errors, ElementsAre(HasSubstr("$.layers[0].mediaType: ")));
}

}  // namespace
}  // namespace modelfs::testing
