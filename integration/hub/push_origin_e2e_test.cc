// From the Hub to a registry: `modelfs fetch` from the fake Hub, then `modelfs push` of that
// directory to a real docker-registry. The config must carry the origin (descriptor.sourceURL,
// descriptor.revision) and the identity record (licenses, datasets, and M's annotations for
// the rest), push must refuse bytes that differ from the lock, and `inspect REF` and a pull +
// `verify` must show the same record.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/hub/identity.h"
#include "core/oci/digest.h"
#include "core/oci/manifest.h"
#include "core/status/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration/publish/json_schema_check.h"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/hub/fake_hub_fixture.h"
#include "testsupport/hub/hub_test_model.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kCommit[] = "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00";

std::string Card() {
  return "---\nlicense: apache-2.0\nbase_model: org/base-model\nbase_model_relation: finetune\n"
         "datasets:\n- org/pretrain-mix\nmodel-index:\n- name: tiny\n  results: []\n---\n\n"
         "# Tiny\n";
}

class PushOriginE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto hub = FakeHub::Start();
    ASSERT_OK(hub.status());
    hub_ = hub->release();
    auto registry = RegistryFixture::Start();
    ASSERT_OK(registry.status());
    registry_ = registry->release();
    files_ = new std::map<std::string, std::string>(TinyRepoFiles(3));
    (*files_)["README.md"] = Card();
    auto dir = hub_->WriteCommit("c", *files_);
    ASSERT_OK(dir.status());
    ASSERT_OK(hub_->SetState(
        {{"lfs_threshold", 1024}, {"repos", {{"org/tiny", {{"commits", {{kCommit, *dir}}}}}}}}));
  }
  static void TearDownTestSuite() {
    delete files_;
    delete registry_;
    delete hub_;
  }

  // A fresh fetch of org/tiny@kCommit into tmp_/model.
  void SetUp() override {
    ASSERT_NE(registry_, nullptr);
    model_ = (tmp_.path() / "model").string();
    ASSERT_OK_AND_ASSIGN(ProcessResult r,
                         RunModelfs({"fetch", "org/tiny", "--revision", kCommit, "--dest", model_},
                                    {{"HF_ENDPOINT", hub_->endpoint()}, {"HF_TOKEN", ""}}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  static std::string Ref(const std::string& repo_tag) {
    return absl::StrCat(registry_->host_port(), "/", repo_tag);
  }

  struct Pushed {
    Manifest manifest;
    nlohmann::json config;
  };
  static absl::StatusOr<Pushed> ReadBack(const std::string& repo, const std::string& tag) {
    ASSIGN_OR_RETURN(auto client, ConnectPlainHttp(registry_->host_port()));
    ASSIGN_OR_RETURN(ManifestResult m, client->GetManifest(repo, tag));
    Pushed p;
    ASSIGN_OR_RETURN(p.manifest, ParseManifest(m.bytes));
    ASSIGN_OR_RETURN(std::string config, FetchBlob(*client, repo, p.manifest.config.digest.str()));
    p.config = nlohmann::json::parse(config);
    return p;
  }

  static std::string ExpectedTokenizerHash() {
    std::string lines;
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
      absl::StrAppend(&lines, std::string(Digest::Of(files_->at(f)).hex()), "  ", f, "\n");
    }
    return Digest::Of(lines).str();
  }

  TempDir tmp_;
  std::string model_;
  static FakeHub* hub_;
  static RegistryFixture* registry_;
  static std::map<std::string, std::string>* files_;
};

FakeHub* PushOriginE2eTest::hub_ = nullptr;
RegistryFixture* PushOriginE2eTest::registry_ = nullptr;
std::map<std::string, std::string>* PushOriginE2eTest::files_ = nullptr;

TEST_F(PushOriginE2eTest, TheConfigCarriesTheOriginAndTheIdentityRecord) {
  ASSERT_OK_AND_ASSIGN(
      ProcessResult r,
      RunModelfs({"push", "--plain-http", Ref("hub/tiny:v1"), model_, "--eval-id",
                  "eval-2026-06-12", "--quantization-recipe", "none (bf16 as trained)", "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_OK_AND_ASSIGN(Pushed p, ReadBack("hub/tiny", "v1"));
  const nlohmann::json& d = p.config["descriptor"];
  EXPECT_EQ(d["sourceURL"], absl::StrCat(hub_->endpoint(), "/org/tiny"));
  EXPECT_EQ(d["revision"], kCommit);
  EXPECT_EQ(d["licenses"], nlohmann::json::array({"Apache-2.0"}));
  EXPECT_EQ(d["datasetsURL"],
            nlohmann::json::array({absl::StrCat(hub_->endpoint(), "/datasets/org/pretrain-mix")}));
  EXPECT_EQ(p.config["config"]["format"], "safetensors");
  auto& a = p.manifest.annotations;
  EXPECT_EQ(a[std::string(kAnnotationBaseModel)], "org/base-model");
  EXPECT_EQ(a[std::string(kAnnotationBaseModelRelation)], "finetune");
  EXPECT_EQ(a[std::string(kAnnotationTokenizerSha256)], ExpectedTokenizerHash());
  EXPECT_EQ(a[std::string(kAnnotationQuantizationRecipe)], "none (bf16 as trained)");
  EXPECT_EQ(a[std::string(kAnnotationEvalIds)], "eval-2026-06-12");
  EXPECT_EQ(a[std::string(kAnnotationOciSource)], absl::StrCat(hub_->endpoint(), "/org/tiny"));
  EXPECT_EQ(a[std::string(kAnnotationOciRevision)], kCommit);
  EXPECT_EQ(a[std::string(kAnnotationOciLicenses)], "Apache-2.0");
  // Still a valid ModelPack config.
  ASSERT_OK_AND_ASSIGN(nlohmann::json schema,
                       LoadJsonFile(SchemaDir() + "/modelpack-config.schema.json"));
  EXPECT_THAT(CheckJsonSchema(schema, p.config), IsEmpty());
  // The push reports the same record.
  nlohmann::json out = ParseJsonOutput(r.out);
  EXPECT_EQ(out["identity"]["baseModels"], nlohmann::json::array({"org/base-model"}));
  EXPECT_EQ(out["lock"], (fs::path(model_) / "modelfs.lock.json").string());
}

TEST_F(PushOriginE2eTest, FlagsOverrideTheModelCard) {
  ASSERT_OK_AND_ASSIGN(
      ProcessResult r,
      RunModelfs({"push", "--plain-http", Ref("hub/tiny:flags"), model_, "--license", "MIT",
                  "--base-model", "org/other", "--base-model-relation", "quantization",
                  "--quantization", "q8_0", "--dataset", "https://example.com/data"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_OK_AND_ASSIGN(Pushed p, ReadBack("hub/tiny", "flags"));
  EXPECT_EQ(p.config["descriptor"]["licenses"], nlohmann::json::array({"MIT"}));
  EXPECT_EQ(p.config["descriptor"]["datasetsURL"],
            nlohmann::json::array({"https://example.com/data"}));
  EXPECT_EQ(p.config["config"]["quantization"], "q8_0");
  EXPECT_EQ(p.manifest.annotations[std::string(kAnnotationBaseModel)], "org/other");
  EXPECT_EQ(p.manifest.annotations[std::string(kAnnotationBaseModelRelation)], "quantized");
  ASSERT_OK_AND_ASSIGN(ProcessResult bad, RunModelfs({"push", "--plain-http", Ref("hub/tiny:bad"),
                                                      model_, "--base-model-relation", "cousin"}));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("want finetune, quantized, merge or adapter"));
}

TEST_F(PushOriginE2eTest, BytesThatDifferFromTheLockAreRefusedAndNothingIsTagged) {
  std::string bytes = files_->at("model.safetensors");
  bytes[bytes.size() - 1] ^= 1;
  std::ofstream(fs::path(model_) / "model.safetensors", std::ios::binary | std::ios::trunc)
      << bytes;
  ASSERT_OK_AND_ASSIGN(ProcessResult r,
                       RunModelfs({"push", "--plain-http", Ref("hub/tiny:tampered"), model_}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("model.safetensors: sha256"));
  EXPECT_THAT(r.err, HasSubstr("differs from modelfs.lock.json"));
  ASSERT_OK_AND_ASSIGN(auto client, ConnectPlainHttp(registry_->host_port()));
  EXPECT_THAT(client->GetManifest("hub/tiny", "tampered"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(PushOriginE2eTest, AFileTheLockDoesNotNameIsRefused) {
  std::ofstream(fs::path(model_) / "extra.txt") << "added later\n";
  ASSERT_OK_AND_ASSIGN(ProcessResult r,
                       RunModelfs({"push", "--plain-http", Ref("hub/tiny:extra"), model_}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("extra.txt: not in modelfs.lock.json"));
}

TEST_F(PushOriginE2eTest, InspectRefShowsTheRecordAndAPullVerifiesAgainstTheLock) {
  ASSERT_OK_AND_ASSIGN(ProcessResult push,
                       RunModelfs({"push", "--plain-http", Ref("hub/tiny:v2"), model_}));
  ASSERT_EQ(push.exit_code, 0) << push.err;
  ASSERT_OK_AND_ASSIGN(ProcessResult text,
                       RunModelfs({"inspect", "--plain-http", Ref("hub/tiny:v2")}));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out,
              HasSubstr(absl::StrCat("  source          ", hub_->endpoint(), "/org/tiny")));
  EXPECT_THAT(text.out, HasSubstr(absl::StrCat("  revision        ", kCommit)));
  EXPECT_THAT(text.out, HasSubstr("  license         Apache-2.0"));
  EXPECT_THAT(text.out, HasSubstr("  base model      org/base-model (finetune)"));
  EXPECT_THAT(text.out, HasSubstr(absl::StrCat("  tokenizer       ", ExpectedTokenizerHash())));
  ASSERT_OK_AND_ASSIGN(ProcessResult json, RunModelfs({"inspect", "--plain-http", "--json",
                                                       Ref("hub/tiny:v2-volume")}));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  nlohmann::json j = ParseJsonOutput(json.out);
  EXPECT_EQ(j["identity"]["revision"], kCommit);
  EXPECT_EQ(j["identity"]["licenses"], nlohmann::json::array({"Apache-2.0"}));
  EXPECT_EQ(j["config"]["descriptor"]["sourceURL"], absl::StrCat(hub_->endpoint(), "/org/tiny"));

  const std::string pulled = (tmp_.path() / "pulled").string();
  ASSERT_OK_AND_ASSIGN(ProcessResult pull,
                       RunModelfs({"pull", "--plain-http", Ref("hub/tiny:v2"), pulled}));
  ASSERT_EQ(pull.exit_code, 0) << pull.err;
  ASSERT_OK_AND_ASSIGN(ProcessResult verify, RunModelfs({"verify", pulled}));
  EXPECT_EQ(verify.exit_code, 0) << verify.err;
  EXPECT_EQ(DescribeFiles(pulled), DescribeFiles(model_));
}

// `inspect REF` reaches a registry as every other command does: a certs.d hosts.toml that sends
// a registry name to another server is followed, and without it that name is not reachable.
TEST_F(PushOriginE2eTest, InspectRefReachesTheRegistryThroughTheHostsDir) {
  ASSERT_OK_AND_ASSIGN(ProcessResult push,
                       RunModelfs({"push", "--plain-http", Ref("hub/tiny:v3"), model_}));
  ASSERT_EQ(push.exit_code, 0) << push.err;
  const fs::path hosts = tmp_.path() / "certs.d";
  fs::create_directories(hosts / "models.invalid:5000");
  std::ofstream(hosts / "models.invalid:5000" / "hosts.toml")
      << "server = \"http://" << registry_->host_port() << "\"\n"
      << "capabilities = [\"pull\", \"resolve\"]\n";
  ASSERT_OK_AND_ASSIGN(ProcessResult r,
                       RunModelfs({"inspect", "--json", "--hosts-dir", hosts.string(),
                                   "models.invalid:5000/hub/tiny:v3"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ParseJsonOutput(r.out)["identity"]["revision"], kCommit);
  ASSERT_OK_AND_ASSIGN(ProcessResult without,
                       RunModelfs({"inspect", "--hosts-dir", (tmp_.path() / "none").string(),
                                   "models.invalid:5000/hub/tiny:v3"}));
  EXPECT_NE(without.exit_code, 0);
}

}  // namespace
}  // namespace modelfs::testing
