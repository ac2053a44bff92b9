// Pickle checkpoints through the binary: `inspect` lists what they import and exits 1 on an
// import outside the allow-list; `push` refuses them without --allow-pickle and records them
// in M's annotations with it (a real docker-registry).
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/oci/manifest.h"
#include "core/publish/push.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/hub/hub_test_model.h"
#include "testsupport/hub/pickle_test_files.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(PickleInspectE2eTest, AnOsSystemGlobalIsReportedAndExitsOne) {
  TempDir tmp;
  const std::string evil = tmp.WriteFile("pytorch_model.bin", OsSystemPickle(2)).string();
  ASSERT_OK_AND_ASSIGN(ProcessResult r, RunModelfs({"inspect", evil}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, HasSubstr("posix.system (os.system)"));
  EXPECT_THAT(r.out, HasSubstr("DANGEROUS"));
  EXPECT_THAT(r.err, HasSubstr("pytorch_model.bin: posix.system (os.system)"));
  EXPECT_THAT(r.err, HasSubstr("nothing was executed"));

  ASSERT_OK_AND_ASSIGN(ProcessResult j, RunModelfs({"inspect", evil, "--json"}));
  EXPECT_EQ(j.exit_code, 1);
  nlohmann::json doc = ParseJsonOutput(j.out);
  EXPECT_EQ(doc["pickles"][0]["safe"], false);
  EXPECT_EQ(doc["pickles"][0]["flagged"][0], "posix.system");
}

TEST(PickleInspectE2eTest, ABenignZipCheckpointListsItsImportsAndExitsZero) {
  TempDir tmp;
  const std::string pt =
      tmp.WriteFile("model.pt", TorchZipCheckpoint(TorchStateDictPickle())).string();
  ASSERT_OK_AND_ASSIGN(ProcessResult r, RunModelfs({"inspect", pt}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("PyTorch zip checkpoint, 1 pickle (archive/data.pkl"));
  EXPECT_THAT(r.out, HasSubstr("torch._utils._rebuild_tensor_v2"));
  EXPECT_THAT(r.out, HasSubstr("verdict: every import is in the allow-list"));
}

TEST(PickleInspectE2eTest, ADirectoryScansItsPickleFilesNextToItsSafetensors) {
  TempDir tmp;
  tmp.WriteFile("model.safetensors", TinySafetensors());
  tmp.WriteFile("training_args.bin", OsSystemPickle(4));
  ASSERT_OK_AND_ASSIGN(ProcessResult r, RunModelfs({"inspect", tmp.path().string()}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, HasSubstr("training_args.bin: pickle stream"));
  EXPECT_THAT(r.out, HasSubstr("model.safetensors: safetensors"));
}

class PicklePushE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto registry = RegistryFixture::Start();
    ASSERT_OK(registry.status());
    registry_ = std::move(*registry);
    tmp_.WriteFile("model/model.safetensors", TinySafetensors());
    tmp_.WriteFile("model/config.json", TinyConfigJson());
    tmp_.WriteFile("model/pytorch_model.bin", OsSystemPickle(2));
  }
  std::string Ref(const std::string& tag) {
    return absl::StrCat(registry_->host_port(), "/demo/pickle:", tag);
  }
  std::unique_ptr<RegistryFixture> registry_;
  TempDir tmp_;
};

TEST_F(PicklePushE2eTest, PushRefusesAPickleFileAndUploadsNothing) {
  ASSERT_OK_AND_ASSIGN(ProcessResult r, RunModelfs({"push", "--plain-http", Ref("v1"),
                                                    (tmp_.path() / "model").string()}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("refusing to push pickle checkpoint(s) pytorch_model.bin"));
  EXPECT_THAT(r.err, HasSubstr("--allow-pickle"));
  ASSERT_OK_AND_ASSIGN(auto client, ConnectPlainHttp(registry_->host_port()));
  EXPECT_THAT(client->GetManifest("demo/pickle", "v1"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(PicklePushE2eTest, AllowPicklePushesAndRecordsItInTheManifest) {
  ASSERT_OK_AND_ASSIGN(ProcessResult r,
                       RunModelfs({"push", "--plain-http", "--allow-pickle", Ref("v1"),
                                   (tmp_.path() / "model").string(), "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_OK_AND_ASSIGN(auto client, ConnectPlainHttp(registry_->host_port()));
  ASSERT_OK_AND_ASSIGN(ManifestResult got, client->GetManifest("demo/pickle", "v1"));
  ASSERT_OK_AND_ASSIGN(Manifest m, ParseManifest(got.bytes));
  EXPECT_EQ(m.annotations[std::string(kAnnotationPickleAllowed)], "true");
  EXPECT_EQ(m.annotations[std::string(kAnnotationPickleFiles)], "pytorch_model.bin");
  EXPECT_EQ(m.annotations[std::string(kAnnotationPickleFlagged)],
            "pytorch_model.bin: posix.system");
}

}  // namespace
}  // namespace modelfs::testing
