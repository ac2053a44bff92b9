// Equivalence attestations and cosign interop end to end, against a real docker-registry 2.8 and
// cosign 2.5.0 (../shared/tools, extracted into the build tree): `modelfs attest equivalence`
// compares models pushed with `modelfs push` (a bf16 checkpoint, its f16 conversion, Q8_0 GGUFs
// made with the project's writer and quantizer), signs and stores the statement where cosign
// stores attestations; `cosign verify-attestation` and `modelfs verify --attestation` agree on
// every attestation made, a tampered one and one by another key included; signatures made by
// either tool are accepted by the other. Without cosign, tests skip (fail under CI=true).
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/attest/attestation.h"
#include "core/oci/digest.h"
#include "core/registry/registry_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testsupport/harness/cosign_tool.h"
#include "testsupport/harness/process_runner.h"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/synth/equivalent_models.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"
#include "testsupport/trust/test_keys.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kPass[] = "attest-pass";

class AttestTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    env_ = new Env();
    auto cosign = CosignBinary();
    if (!cosign.ok()) {
      env_->unavailable = std::string(cosign.status().message());
      return;
    }
    env_->cosign = *cosign;
    auto registry = RegistryFixture::Start();
    ASSERT_OK(registry.status());
    env_->registry = std::move(*registry);
    env_->dir = std::make_unique<TempDir>();
    fs::create_directories(Path("home"));
    // The models, each pushed as M (:v1) and V (:v1-volume).
    TinyLlamaOptions f16, replaced, q8, other, unpermuted;
    f16.dtype = "F16";
    replaced.dtype = "F16";
    replaced.replace_tensor = "model.layers.1.mlp.up_proj.weight";
    other.seed = 2;
    unpermuted.permute_qk = false;
    Push("src", Path("src/model.safetensors"), WriteEquivalenceSafetensors, TinyLlamaOptions{});
    Push("f16", Path("f16/model.safetensors"), WriteEquivalenceSafetensors, f16);
    Push("replaced", Path("replaced/model.safetensors"), WriteEquivalenceSafetensors, replaced);
    Push("q8", Path("q8/model.gguf"), WriteEquivalenceGguf, q8);
    Push("other", Path("other/model.gguf"), WriteEquivalenceGguf, other);
    Push("unpermuted", Path("unpermuted/model.gguf"), WriteEquivalenceGguf, unpermuted);
    // A cosign key pair made by cosign itself (encrypted, COSIGN_PASSWORD), and a stranger's.
    ProcessResult gen = Cosign({"generate-key-pair", "--output-key-prefix", Path("cosign")});
    ASSERT_EQ(gen.exit_code, 0) << gen.err;
    PemPair stranger = GenerateKey();
    env_->dir->WriteFile("stranger.pem", stranger.private_pem);
    env_->dir->WriteFile("stranger.pub", stranger.public_pem);
  }
  static void TearDownTestSuite() {
    delete env_;
    env_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(env_, nullptr);
    SKIP_OR_FAIL_IF_UNAVAILABLE(env_->unavailable);
    ASSERT_NE(env_->registry, nullptr);
  }

  static std::string Ref(const std::string& repo_tag) {
    return absl::StrCat(env_->registry->host_port(), "/", repo_tag);
  }
  static std::string Path(const std::string& name) { return (env_->dir->path() / name).string(); }

  template <typename Writer>
  static void Push(const std::string& name, const std::string& file, Writer write,
                   const TinyLlamaOptions& o) {
    fs::create_directories(fs::path(file).parent_path());
    ASSERT_OK(write(file, o));
    ASSERT_OK_AND_ASSIGN(ProcessResult push,
                         RunModelfs({"push", "--plain-http", Ref(name + "/m:v1"),
                                     fs::path(file).parent_path().string()}));
    ASSERT_EQ(push.exit_code, 0) << push.err;
  }

  static ProcessResult Cosign(std::vector<std::string> args) {
    std::vector<std::string> argv = {env_->cosign};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r =
        RunProcess(argv, {{"COSIGN_PASSWORD", kPass}, {"HOME", Path("home")}}, absl::Minutes(2));
    EXPECT_OK(r.status());
    return r.ok() ? *r : ProcessResult{-1, "", r.status().ToString()};
  }
  static ProcessResult Modelfs(std::vector<std::string> args) {
    auto r = RunModelfs(args, {{"COSIGN_PASSWORD", kPass}});
    EXPECT_OK(r.status());
    return r.ok() ? *r : ProcessResult{-1, "", r.status().ToString()};
  }
  static ProcessResult Attest(const std::string& derived, const std::string& source,
                              std::vector<std::string> more = {}) {
    std::vector<std::string> args = {"attest",   "equivalence", Ref(derived),
                                     "--source", Ref(source),   "--plain-http"};
    args.insert(args.end(), more.begin(), more.end());
    return Modelfs(args);
  }
  static bool CosignAccepts(const std::string& ref, const std::string& pub = "cosign.pub") {
    ProcessResult r =
        Cosign({"verify-attestation", "--key", Path(pub), "--type", kEquivalencePredicateType,
                "--insecure-ignore-tlog", "--allow-http-registry", Ref(ref)});
    return r.exit_code == 0;
  }
  static int ModelfsVerify(const std::string& ref, const std::string& pub = "cosign.pub") {
    ProcessResult r = Modelfs(
        {"verify", Ref(ref), "--attestation", "equivalence", "--key", Path(pub), "--plain-http"});
    if (r.exit_code != 0)
      printf("modelfs verify %s: %s%s", ref.c_str(), r.out.c_str(), r.err.c_str());
    return r.exit_code;
  }
  static std::unique_ptr<RegistryClient> Client() {
    RegistryClientOptions co;
    co.registry = env_->registry->host_port();
    co.endpoint.host = env_->registry->host_port();
    co.endpoint.scheme = "http";
    auto client = RegistryClient::Create(co);
    EXPECT_OK(client.status());
    return client.ok() ? std::move(*client) : nullptr;
  }
  static Digest DigestOf(const std::string& repo, const std::string& tag) {
    auto client = Client();
    auto m = client->GetManifest(repo, tag);
    EXPECT_OK(m.status());
    return m->digest;
  }

  struct Env {
    std::string unavailable;
    std::string cosign;
    std::unique_ptr<RegistryFixture> registry;
    std::unique_ptr<TempDir> dir;
  };
  static Env* env_;
};
AttestTest::Env* AttestTest::env_ = nullptr;

TEST_F(AttestTest, AnF16ConversionAttestsEquivalentAndCosignAndModelfsAcceptIt) {
  ProcessResult r =
      Attest("f16/m:v1-volume", "src/m:v1-volume", {"--sign-key", Path("cosign.key")});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("verdict    equivalent"));
  EXPECT_THAT(r.out, HasSubstr("tolerance  BF16->F16"));
  EXPECT_THAT(r.out, HasSubstr(".att ("));
  EXPECT_THAT(r.out, HasSubstr("referrer none"));
  EXPECT_TRUE(CosignAccepts("f16/m:v1-volume"));
  EXPECT_EQ(ModelfsVerify("f16/m:v1-volume"), 0);
  // Another key: both refuse.
  EXPECT_FALSE(CosignAccepts("f16/m:v1-volume", "stranger.pub"));
  EXPECT_EQ(ModelfsVerify("f16/m:v1-volume", "stranger.pub"), 1);
}

TEST_F(AttestTest, TheF16WithOneTensorReplacedIsRefusedNamingItAndNothingIsStored) {
  ProcessResult r =
      Attest("replaced/m:v1-volume", "src/m:v1-volume", {"--sign-key", Path("cosign.key")});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("model.layers.1.mlp.up_proj.weight (BF16->F16): relative L2"));
  EXPECT_THAT(r.err, HasSubstr("nothing signed"));
  EXPECT_FALSE(CosignAccepts("replaced/m:v1-volume"));
  EXPECT_EQ(ModelfsVerify("replaced/m:v1-volume"), 1);
}

TEST_F(AttestTest, AQ8_0GgufOfTheCheckpointPassesWithTheStatementRecordingTheMap) {
  ProcessResult r = Attest("q8/m:v1-volume", "src/m:v1-volume", {"--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  nlohmann::json s = nlohmann::json::parse(r.out);
  EXPECT_EQ(s["_type"], "https://in-toto.io/Statement/v1");
  EXPECT_EQ(s["predicateType"], kEquivalencePredicateType);
  EXPECT_EQ(s["subject"][0]["digest"]["sha256"], std::string(DigestOf("q8/m", "v1-volume").hex()));
  EXPECT_EQ(s["predicate"]["nameMap"]["map"], "llama");
  EXPECT_EQ(s["predicate"]["summary"]["tensors"], kTinyLlamaTensors);
  EXPECT_EQ(s["predicate"]["summary"]["failed"], 0);
  EXPECT_EQ(s["predicate"]["equivalent"], true);
  EXPECT_TRUE(s["predicate"]["tolerances"].contains("BF16->Q8_0"));
  // Signed by a plain PEM key: both verifiers accept with its public half.
  ProcessResult signed_run =
      Attest("q8/m:v1-volume", "src/m:v1-volume", {"--sign-key", Path("stranger.pem")});
  ASSERT_EQ(signed_run.exit_code, 0) << signed_run.err;
  EXPECT_TRUE(CosignAccepts("q8/m:v1-volume", "stranger.pub"));
  EXPECT_EQ(ModelfsVerify("q8/m:v1-volume", "stranger.pub"), 0);
}

TEST_F(AttestTest, AQ8_0OfAnotherModelAndAWronglyPermutedOneFailNamingTheTensors) {
  ProcessResult other = Attest("other/m:v1-volume", "src/m:v1-volume");
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_THAT(other.err, HasSubstr("output.weight (BF16->Q8_0, source lm_head.weight)"));
  EXPECT_THAT(other.err, HasSubstr("more tensors differ"));
  ProcessResult unpermuted = Attest("unpermuted/m:v1-volume", "src/m:v1-volume");
  EXPECT_EQ(unpermuted.exit_code, 1);
  EXPECT_THAT(unpermuted.err, HasSubstr("blk.0.attn_k.weight (BF16->Q8_0"));
  EXPECT_THAT(unpermuted.err, HasSubstr("blk.0.attn_q.weight (BF16->Q8_0"));
  EXPECT_THAT(unpermuted.err, Not(HasSubstr("attn_v")));
}

TEST_F(AttestTest, ATamperedAttestationIsRefusedByBoth) {
  ASSERT_EQ(Attest("f16/m:v1", "src/m:v1", {"--sign-key", Path("cosign.key")}).exit_code, 0);
  ASSERT_TRUE(CosignAccepts("f16/m:v1"));
  // Rewrite the envelope's payload (the signature stays) and point the .att tag at it.
  auto client = Client();
  ASSERT_NE(client, nullptr);
  const Digest subject = DigestOf("f16/m", "v1");
  ASSERT_OK_AND_ASSIGN(ManifestResult att, client->GetManifest("f16/m", AttestationTag(subject)));
  nlohmann::json m = nlohmann::json::parse(att.bytes);
  ASSERT_OK_AND_ASSIGN(Digest env_digest,
                       Digest::Parse(m["layers"][0]["digest"].get<std::string>()));
  std::string envelope;
  ASSERT_OK(client->GetBlob("f16/m", env_digest, [&](std::string_view b) {
    envelope.append(b);
    return absl::OkStatus();
  }));
  nlohmann::json e = nlohmann::json::parse(envelope);
  std::string payload;
  ASSERT_TRUE(absl::Base64Unescape(e["payload"].get<std::string>(), &payload));
  nlohmann::json statement = nlohmann::json::parse(payload);
  statement["predicate"]["source"]["reference"] = "elsewhere/model:v9";
  e["payload"] = absl::Base64Escape(statement.dump());
  const std::string tampered = e.dump();
  const Digest td = Digest::Of(tampered);
  ASSERT_OK(client->PushBlob("f16/m", td, tampered.size(),
                             BlobReadAtString(std::make_shared<std::string>(tampered))));
  m["layers"][0]["digest"] = td.str();
  m["layers"][0]["size"] = tampered.size();
  ASSERT_OK(client->PutManifest("f16/m", AttestationTag(subject), m.dump(), kMediaTypeOciManifest)
                .status());
  EXPECT_FALSE(CosignAccepts("f16/m:v1"));
  EXPECT_EQ(ModelfsVerify("f16/m:v1"), 1);
}

TEST_F(AttestTest, AnAttestationCosignMakesIsAcceptedByModelfs) {
  const std::string pred =
      env_->dir
          ->WriteFile("predicate.json", R"({"equivalent": true, "note": "made by cosign attest"})")
          .string();
  ProcessResult a = Cosign({"attest", "--key", Path("cosign.key"), "--type",
                            kEquivalencePredicateType, "--predicate", pred, "--tlog-upload=false",
                            "--allow-http-registry", "--yes", Ref("q8/m:v1")});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_TRUE(CosignAccepts("q8/m:v1"));
  EXPECT_EQ(ModelfsVerify("q8/m:v1"), 0);
  EXPECT_EQ(ModelfsVerify("q8/m:v1", "stranger.pub"), 1);
}

TEST_F(AttestTest, CosignVerifiesWhatModelfsSignsAndModelfsVerifiesWhatCosignSigns) {
  ProcessResult s =
      Modelfs({"sign", Ref("src/m:v1-volume"), "--key", Path("cosign.key"), "--plain-http"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  ProcessResult cv = Cosign({"verify", "--key", Path("cosign.pub"), "--insecure-ignore-tlog",
                             "--allow-http-registry", Ref("src/m:v1-volume")});
  EXPECT_EQ(cv.exit_code, 0) << cv.err;

  ProcessResult cs = Cosign({"sign", "--key", Path("cosign.key"), "--tlog-upload=false",
                             "--allow-http-registry", "--yes", Ref("f16/m:v1-volume")});
  ASSERT_EQ(cs.exit_code, 0) << cs.err;
  ProcessResult mv =
      Modelfs({"verify", Ref("f16/m:v1-volume"), "--key", Path("cosign.pub"), "--plain-http"});
  EXPECT_EQ(mv.exit_code, 0) << mv.out << mv.err;
  ProcessResult refused =
      Modelfs({"verify", Ref("f16/m:v1-volume"), "--key", Path("stranger.pub"), "--plain-http"});
  EXPECT_EQ(refused.exit_code, 1);
}

}  // namespace
}  // namespace modelfs::testing
