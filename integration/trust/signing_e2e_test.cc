// Signed models end to end, against a real docker-registry and an independent implementation,
// skopeo 1.18 (containers/image): signatures made by either are judged alike by both, for every
// signedIdentity and both identity forms; hostile signature manifests and registry faults are
// refused (fail closed, bounded); `mount --policy` and `pull --policy` fetch, cache and mount
// nothing they refuse.
//
// skopeo comes from ../shared/tools/signing/install-skopeo.sh (Debian trixie's build, which
// keeps sigstore; bookworm's does not). Without it, or without root and /dev/fuse for the mount
// tests, tests skip (fail under CI=true).
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "core/oci/digest.h"
#include "core/registry/registry_client.h"
#include "core/trust/evaluate.h"
#include "core/trust/keys.h"
#include "core/trust/policy.h"
#include "core/trust/signature_store.h"
#include "core/trust/simple_signing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testsupport/harness/process_runner.h"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"
#include "testsupport/trust/test_keys.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string SigningToolsDir() {
  const char* env = getenv("MODELFS_SIGNING_TOOLS");
  return env != nullptr && *env != '\0' ? env : MODELFS_SIGNING_TOOLS_DIR;
}

bool IsFuseMount(const std::string& dir) {
  std::string canonical = fs::weakly_canonical(dir).string();
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StrContains(line, " " + canonical + " ") && absl::StrContains(line, "fuse")) {
      return true;
    }
  }
  return false;
}

bool EmptyOrMissing(const std::string& dir) {
  std::error_code ec;
  return !fs::exists(dir, ec) || fs::is_empty(dir, ec);
}

// One registry, one pushed model (M at team/m:v1, V at team/m:v1-volume), keys and skopeo for
// the whole suite. Each test signs copies in repositories of its own, so signatures never mix.
class SigningTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    env_ = new Env();
    std::string script = SigningToolsDir() + "/install-skopeo.sh";
    if (!fs::exists(script)) {
      env_->unavailable = "no " + script + " (../shared/tools/signing beside the source tree)";
      return;
    }
    auto installed = RunProcess({"bash", script}, {}, absl::Minutes(5));
    if (!installed.ok() || installed->exit_code != 0) {
      env_->unavailable = "install-skopeo.sh failed: " +
                          (installed.ok() ? installed->err : installed.status().ToString());
      return;
    }
    env_->skopeo = std::string(absl::StripAsciiWhitespace(installed->out));
    auto registry = RegistryFixture::Start();
    ASSERT_OK(registry.status());
    env_->registry = std::move(*registry);
    env_->dir = std::make_unique<TempDir>();
    const fs::path d = env_->dir->path();
    ASSERT_OK(WriteTestModel((d / "model").string()).status());
    ASSERT_OK_AND_ASSIGN(ProcessResult push, RunModelfs({"push", "--plain-http", Ref("team/m:v1"),
                                                         (d / "model").string(), "--json"}));
    ASSERT_EQ(push.exit_code, 0) << push.err;
    // Keys: cosign format from the independent generator and from skopeo; a plain PEM one.
    ASSERT_OK_AND_ASSIGN(ProcessResult gen,
                         RunProcess({"/usr/bin/python3", SigningToolsDir() + "/cosign_keygen.py",
                                     (d / "cosign").string(), "--passphrase", "cosign-pass"}));
    ASSERT_EQ(gen.exit_code, 0) << gen.err;
    env_->dir->WriteFile("skopeo.pass", "skopeo-pass");
    ASSERT_OK_AND_ASSIGN(
        ProcessResult sgen,
        RunProcess({env_->skopeo, "generate-sigstore-key", "--output-prefix",
                    (d / "skopeo").string(), "--passphrase-file", (d / "skopeo.pass").string()}));
    ASSERT_EQ(sgen.exit_code, 0) << sgen.err;
    PemPair plain = GenerateKey();
    env_->dir->WriteFile("plain.pem", plain.private_pem);
    env_->dir->WriteFile("plain.pub", plain.public_pem);
    env_->dir->WriteFile("stranger.pub", GenerateKey().public_pem);
    fs::create_directories(d / "registries.d");
    env_->dir->WriteFile("registries.d/default.yaml",
                         absl::StrCat("docker:\n  ", env_->registry->host_port(),
                                      ":\n    use-sigstore-attachments: true\n"));
    env_->dir->WriteFile("any.json", R"({"default":[{"type":"insecureAcceptAnything"}]})");
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

  // skopeo with our policy and registries.d; plain HTTP to the loopback registry.
  static ProcessResult Skopeo(std::vector<std::string> args, const std::string& policy) {
    std::vector<std::string> argv = {env_->skopeo, "--policy", policy, "--registries.d",
                                     Path("registries.d")};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = RunProcess(argv, {}, absl::Minutes(2));
    EXPECT_OK(r.status());
    return r.ok() ? *r : ProcessResult{};
  }
  // Copies V (unsigned) to `repo_tag`; the digest is kept.
  static void CopyVolume(const std::string& repo_tag) {
    ProcessResult r =
        Skopeo({"copy", "--preserve-digests", "--src-tls-verify=false", "--dest-tls-verify=false",
                "docker://" + Ref("team/m:v1-volume"), "docker://" + Ref(repo_tag)},
               Path("any.json"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  // Whether skopeo, under `policy`, accepts pulling `ref` (copying it to a directory).
  static bool SkopeoAccepts(const std::string& ref, const std::string& policy) {
    TempDir out;
    ProcessResult r = Skopeo({"copy", "--src-tls-verify=false", "docker://" + ref,
                              "dir:" + (out.path() / "img").string()},
                             policy);
    return r.exit_code == 0;
  }
  // A policy requiring a signature by `key` for the registry, rejecting everything else.
  static std::string Policy(const std::string& name, const std::string& key,
                            const std::string& identity = "") {
    std::string req = absl::StrCat(R"({"type":"sigstoreSigned","keyPath":")", key, "\"");
    if (!identity.empty()) absl::StrAppend(&req, R"(,"signedIdentity":{"type":")", identity, "\"}");
    req += "}";
    return env_->dir
        ->WriteFile(name,
                    absl::StrCat(R"({"default":[{"type":"reject"}],"transports":{"docker":{")",
                                 env_->registry->host_port(), R"(":[)", req, "]}}}"))
        .string();
  }
  struct Verified {
    int exit_code = -1;
    nlohmann::json json;
    std::string err;
  };
  static Verified Verify(const std::string& ref, const std::string& policy) {
    auto r = RunModelfs({"verify", ref, "--policy", policy, "--plain-http", "--json"});
    EXPECT_OK(r.status());
    if (!r.ok()) return {};
    return {r->exit_code, ParseJsonOutput(r->out), r->err};
  }
  static std::unique_ptr<RegistryClient> Client() {
    auto c = ConnectPlainHttp(env_->registry->host_port());
    EXPECT_OK(c.status());
    return c.ok() ? std::move(*c) : nullptr;
  }
  static Digest DigestOf(const std::string& repo, const std::string& tag) {
    auto head = Client()->HeadManifest(repo, tag);
    EXPECT_OK(head.status());
    return head.ok() ? head->digest : Digest();
  }
  // Adds a signature over `payload` by `key` (a PEM private key file) to repo's .sig tag.
  static void AddSignature(const std::string& repo, const Digest& digest,
                           const std::string& payload, const std::string& key_file = "plain.pem") {
    auto key = PrivateKey::FromFile(Path(key_file));
    ASSERT_OK(key.status());
    auto der = key->Sign(payload);
    ASSERT_OK(der.status());
    auto client = Client();
    RegistrySignatureStore store(client.get());
    ASSERT_OK(store.Append(repo, digest, payload, *der).status());
  }
  // Writes `manifest` (JSON) as repo's .sig tag for `digest`, with an empty config.
  static void PutSigManifest(const std::string& repo, const Digest& digest, nlohmann::json manifest,
                             const std::string& media_type = kMediaTypeOciManifest) {
    auto client = Client();
    const std::string config = "{}";
    ASSERT_OK(UploadBlob(*client, repo, config).status());
    if (media_type == kMediaTypeOciManifest) {
      manifest["config"] = {{"mediaType", "application/vnd.oci.image.config.v1+json"},
                            {"digest", Digest::Of(config).str()},
                            {"size", config.size()}};
    }
    ASSERT_OK(
        client->PutManifest(repo, SignatureTag(digest), manifest.dump(), media_type).status());
  }
  static nlohmann::json Layer(const std::string& payload, const std::string& signature_b64) {
    return {{"mediaType", kMediaTypeCosignSimpleSigning},
            {"digest", Digest::Of(payload).str()},
            {"size", payload.size()},
            {"annotations", {{kCosignSignatureAnnotation, signature_b64}}}};
  }

  struct Env {
    std::string unavailable;
    std::string skopeo;
    std::unique_ptr<RegistryFixture> registry;
    std::unique_ptr<TempDir> dir;
  };
  static Env* env_;
};

SigningTest::Env* SigningTest::env_ = nullptr;

// --- interoperability with skopeo ------------------------------------------------------------

TEST_F(SigningTest, SkopeoSignatureIsAcceptedUnderItsKeyAndRefusedUnderAnother) {
  ProcessResult r =
      Skopeo({"copy", "--preserve-digests", "--src-tls-verify=false", "--dest-tls-verify=false",
              "--sign-by-sigstore-private-key", Path("skopeo.private"), "--sign-passphrase-file",
              Path("skopeo.pass"), "docker://" + Ref("team/m:v1-volume"),
              "docker://" + Ref("by-skopeo/m:v1-volume")},
             Path("any.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Verified ok = Verify(Ref("by-skopeo/m:v1-volume"), Policy("skopeo-key.json", Path("skopeo.pub")));
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(ok.json["reason"], "accepted");
  ASSERT_EQ(ok.json["signatures"].size(), 1u);
  EXPECT_EQ(ok.json["signatures"][0]["key"], Path("skopeo.pub"));
  EXPECT_EQ(ok.json["signatures"][0]["docker_reference"], Ref("by-skopeo/m:v1-volume"));

  Verified other =
      Verify(Ref("by-skopeo/m:v1-volume"), Policy("stranger.json", Path("stranger.pub")));
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_EQ(other.json["reason"], "no_key_matched");
}

TEST_F(SigningTest, ModelfsSignatureWithAPemKeyIsAcceptedBySkopeo) {
  CopyVolume("pem/m:v1");
  ASSERT_OK_AND_ASSIGN(ProcessResult s, RunModelfs({"sign", Ref("pem/m:v1"), "--key",
                                                    Path("plain.pem"), "--plain-http", "--json"}));
  ASSERT_EQ(s.exit_code, 0) << s.err;
  nlohmann::json j = ParseJsonOutput(s.out);
  EXPECT_EQ(j["docker_reference"], Ref("pem/m:v1"));
  EXPECT_EQ(j["signature_tag"], SignatureTag(DigestOf("pem/m", "v1")));
  const std::string policy = Policy("plain.json", Path("plain.pub"));
  EXPECT_TRUE(SkopeoAccepts(Ref("pem/m:v1"), policy));
  EXPECT_EQ(Verify(Ref("pem/m:v1"), policy).exit_code, 0);
}

TEST_F(SigningTest, ModelfsSignatureWithACosignEncryptedKeyIsAcceptedBySkopeo) {
  CopyVolume("cosign/m:v1");
  ASSERT_OK_AND_ASSIGN(ProcessResult s, RunModelfs({"sign", Ref("cosign/m:v1"), "--key",
                                                    Path("cosign.key"), "--plain-http"},
                                                   {{"COSIGN_PASSWORD", "cosign-pass"}}));
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_THAT(s.out, HasSubstr("holds 1 signature(s)"));
  EXPECT_TRUE(SkopeoAccepts(Ref("cosign/m:v1"), Policy("cosign.json", Path("cosign.pub"))));
}

TEST_F(SigningTest, SkopeoKeyOpensInModelfsAndSigningAgainKeepsTheFirstSignature) {
  CopyVolume("twice/m:v1");
  std::map<std::string, std::string> env = {{"COSIGN_PASSWORD", "skopeo-pass"}};
  ASSERT_OK_AND_ASSIGN(ProcessResult a, RunModelfs({"sign", Ref("twice/m:v1"), "--key",
                                                    Path("skopeo.private"), "--plain-http"},
                                                   env));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_OK_AND_ASSIGN(ProcessResult b, RunModelfs({"sign", Ref("twice/m:v1"), "--key",
                                                    Path("plain.pem"), "--plain-http"}));
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_THAT(b.out, HasSubstr("holds 2 signature(s)"));
  // Each key alone is enough, for skopeo and for modelfs.
  for (const char* key : {"skopeo.pub", "plain.pub"}) {
    std::string policy = Policy(absl::StrCat("twice-", key, ".json"), Path(key));
    EXPECT_TRUE(SkopeoAccepts(Ref("twice/m:v1"), policy)) << key;
    EXPECT_EQ(Verify(Ref("twice/m:v1"), policy).exit_code, 0) << key;
  }
}

TEST_F(SigningTest, UnsignedImageIsRefusedByBoth) {
  CopyVolume("unsigned/m:v1");
  const std::string policy = Policy("unsigned.json", Path("plain.pub"));
  EXPECT_FALSE(SkopeoAccepts(Ref("unsigned/m:v1"), policy));
  Verified v = Verify(Ref("unsigned/m:v1"), policy);
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ(v.json["reason"], "no_signature");
}

TEST_F(SigningTest, TamperedPayloadIsRefusedByBoth) {
  CopyVolume("tampered/m:v1");
  const Digest digest = DigestOf("tampered/m", "v1");
  auto key = PrivateKey::FromFile(Path("plain.pem"));
  ASSERT_OK(key.status());
  const std::string honest = BuildSimpleSigningPayload(Ref("tampered/m:v1"), digest);
  ASSERT_OK_AND_ASSIGN(std::string der, key->Sign(honest));
  // The signature of the honest payload, over a payload naming another tag.
  const std::string forged = BuildSimpleSigningPayload(Ref("tampered/m:v2"), digest);
  ASSERT_OK(UploadBlob(*Client(), "tampered/m", forged).status());
  PutSigManifest("tampered/m", digest,
                 {{"schemaVersion", 2},
                  {"mediaType", kMediaTypeOciManifest},
                  {"layers", {Layer(forged, absl::Base64Escape(der))}}});
  const std::string policy = Policy("tampered.json", Path("plain.pub"), "matchRepository");
  EXPECT_FALSE(SkopeoAccepts(Ref("tampered/m:v1"), policy));
  Verified v = Verify(Ref("tampered/m:v1"), policy);
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ(v.json["reason"], "no_key_matched");
}

// Both identity forms under each signedIdentity type: modelfs decides as skopeo does.
TEST_F(SigningTest, IdentityFormsAreJudgedAsSkopeoJudgesThem) {
  struct Form {
    const char* repo;
    bool with_tag;  // skopeo writes host/repo:tag, cosign host/repo
  };
  int compared = 0, accepted = 0;
  for (Form form : {Form{"idform-skopeo/m", true}, Form{"idform-cosign/m", false}}) {
    CopyVolume(absl::StrCat(form.repo, ":v1"));
    const Digest digest = DigestOf(form.repo, "v1");
    AddSignature(form.repo, digest,
                 BuildSimpleSigningPayload(
                     form.with_tag ? Ref(absl::StrCat(form.repo, ":v1")) : Ref(form.repo), digest));
    for (const char* identity : {"matchRepoDigestOrExact", "matchRepository", "matchExact"}) {
      const std::string policy =
          Policy(absl::StrCat("id-", identity, ".json"), Path("plain.pub"), identity);
      for (const std::string& ref :
           {Ref(absl::StrCat(form.repo, ":v1")), Ref(absl::StrCat(form.repo, "@", digest.str()))}) {
        const bool skopeo = SkopeoAccepts(ref, policy);
        Verified v = Verify(ref, policy);
        EXPECT_EQ(v.exit_code == 0, skopeo)
            << identity << " " << ref << " signed as "
            << (form.with_tag ? "host/repo:tag" : "host/repo") << ": skopeo "
            << (skopeo ? "accepts" : "refuses") << ", modelfs says " << v.json.dump();
        ++compared;
        accepted += skopeo;
      }
    }
  }
  EXPECT_EQ(compared, 12);
  // c/image: host/repo:tag passes all three by tag and the first two by digest; host/repo only
  // matchRepository, by tag and by digest.
  EXPECT_EQ(accepted, 7);
}

// --- hostile signature manifests ------------------------------------------------------------

TEST_F(SigningTest, SignatureManifestWithThousandsOfLayersIsRefused) {
  CopyVolume("many/m:v1");
  const Digest digest = DigestOf("many/m", "v1");
  const std::string payload = BuildSimpleSigningPayload(Ref("many/m:v1"), digest);
  ASSERT_OK(UploadBlob(*Client(), "many/m", payload).status());
  nlohmann::json layers = nlohmann::json::array();
  for (int i = 0; i < 5000; ++i) layers.push_back(Layer(payload, "AAAA"));
  PutSigManifest("many/m", digest,
                 {{"schemaVersion", 2}, {"mediaType", kMediaTypeOciManifest}, {"layers", layers}});
  Verified v = Verify(Ref("many/m:v1"), Policy("many.json", Path("plain.pub")));
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ(v.json["reason"], "bad_payload");
  EXPECT_THAT(v.json["message"].get<std::string>(),
              HasSubstr("5000 signature layers, over the cap of 64"));
}

TEST_F(SigningTest, HugePayloadIsNotFetchedAndIsRefused) {
  CopyVolume("huge/m:v1");
  const Digest digest = DigestOf("huge/m", "v1");
  const std::string huge(8 << 20, 'x');
  ASSERT_OK(UploadBlob(*Client(), "huge/m", huge).status());
  PutSigManifest("huge/m", digest,
                 {{"schemaVersion", 2},
                  {"mediaType", kMediaTypeOciManifest},
                  {"layers", {Layer(huge, "AAAA")}}});
  Verified v = Verify(Ref("huge/m:v1"), Policy("huge.json", Path("plain.pub")));
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ(v.json["reason"], "bad_payload");
  EXPECT_THAT(v.json["signatures"][0]["detail"].get<std::string>(),
              HasSubstr("payload of 8388608 bytes, over the cap of 65536"));
}

TEST_F(SigningTest, PayloadServedWithOtherBytesThanItsDigestIsRefused) {
  CopyVolume("corrupt/m:v1");
  const Digest digest = DigestOf("corrupt/m", "v1");
  const std::string payload = BuildSimpleSigningPayload(Ref("corrupt/m:v1"), digest);
  AddSignature("corrupt/m", digest, payload);
  FaultProxyOptions o;
  o.blob_fault = FaultProxyOptions::BlobFault::kCorrupt;
  o.blob_fault_path = std::string(Digest::Of(payload).hex());
  ASSERT_OK_AND_ASSIGN(auto proxy, FaultProxy::Start(env_->registry->host_port(), o));
  const std::string ref = absl::StrCat(proxy->host_port(), "/corrupt/m:v1");
  const std::string policy =
      env_->dir
          ->WriteFile("corrupt.json",
                      absl::StrCat(R"({"default":[{"type":"sigstoreSigned","keyPath":")",
                                   Path("plain.pub"), R"("}]})"))
          .string();
  Verified v = Verify(ref, policy);
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ(v.json["reason"], "bad_payload");
  EXPECT_THAT(v.json["signatures"][0]["detail"].get<std::string>(), HasSubstr("payload hashes to"));
}

TEST_F(SigningTest, SignatureOfAnotherManifestDigestIsRefused) {
  CopyVolume("otherdigest/m:v1");
  const Digest digest = DigestOf("otherdigest/m", "v1");
  const Digest model = DigestOf("team/m", "v1");
  AddSignature("otherdigest/m", digest, BuildSimpleSigningPayload(Ref("otherdigest/m:v1"), model));
  Verified v = Verify(Ref("otherdigest/m:v1"), Policy("otherdigest.json", Path("plain.pub")));
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ(v.json["reason"], "identity_mismatch");
  EXPECT_THAT(v.json["message"].get<std::string>(), HasSubstr("signs manifest " + model.str()));
}

TEST_F(SigningTest, ValidSignatureForAnotherRepositoryIsRefusedUnderMatchRepository) {
  CopyVolume("victim/m:v1");
  const Digest digest = DigestOf("victim/m", "v1");
  AddSignature("victim/m", digest, BuildSimpleSigningPayload(Ref("public/m:v1"), digest));
  const std::string policy = Policy("otherrepo.json", Path("plain.pub"), "matchRepository");
  Verified v = Verify(Ref("victim/m:v1"), policy);
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ(v.json["reason"], "identity_mismatch");
  EXPECT_FALSE(SkopeoAccepts(Ref("victim/m:v1"), policy));
}

TEST_F(SigningTest, SignedPayloadWithWrongCriticalTypeIsRefused) {
  CopyVolume("wrongtype/m:v1");
  const Digest digest = DigestOf("wrongtype/m", "v1");
  std::string payload = BuildSimpleSigningPayload(Ref("wrongtype/m:v1"), digest);
  payload = absl::StrReplaceAll(payload, {{kSimpleSigningType, "atomic container signature"}});
  AddSignature("wrongtype/m", digest, payload);
  const std::string policy = Policy("wrongtype.json", Path("plain.pub"));
  Verified v = Verify(Ref("wrongtype/m:v1"), policy);
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ(v.json["reason"], "bad_payload");
  EXPECT_FALSE(SkopeoAccepts(Ref("wrongtype/m:v1"), policy));
}

TEST_F(SigningTest, PolicyWithAKeyOfTheWrongTypeIsBadInputNamingTheFile) {
  for (KeyKind kind : {KeyKind::kRsa2048, KeyKind::kP384, KeyKind::kEd25519}) {
    const std::string key =
        env_->dir->WriteFile("wrong.pub", GenerateKey(kind).public_pem).string();
    Verified v = Verify(Ref("team/m:v1"), Policy("wrongkey.json", key));
    EXPECT_EQ(v.exit_code, 2);
    EXPECT_THAT(v.err, HasSubstr(key + ": "));
    EXPECT_THAT(v.err, HasSubstr("not supported"));
  }
}

TEST_F(SigningTest, SigningWithAKeyOfTheWrongTypeIsBadInput) {
  env_->dir->WriteFile("rsa.pem", GenerateKey(KeyKind::kRsa2048).private_pem);
  ASSERT_OK_AND_ASSIGN(ProcessResult s, RunModelfs({"sign", Ref("team/m:v1"), "--key",
                                                    Path("rsa.pem"), "--plain-http"}));
  EXPECT_EQ(s.exit_code, 2);
  EXPECT_THAT(s.err, HasSubstr("key type RSA is not supported"));
}

TEST_F(SigningTest, SignatureTagThatIsAnIndexIsRefused) {
  CopyVolume("index/m:v1");
  const Digest digest = DigestOf("index/m", "v1");
  PutSigManifest(
      "index/m", digest,
      {{"schemaVersion", 2},
       {"mediaType", kMediaTypeOciIndex},
       {"manifests",
        {{{"mediaType", kMediaTypeOciManifest}, {"digest", digest.str()}, {"size", 1}}}}},
      kMediaTypeOciIndex);
  Verified v = Verify(Ref("index/m:v1"), Policy("index.json", Path("plain.pub")));
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ(v.json["reason"], "bad_payload");
  EXPECT_THAT(v.json["message"].get<std::string>(), HasSubstr("is an index"));
}

TEST_F(SigningTest, RegistryAnswering500ForTheSignatureTagIsRefusal) {
  CopyVolume("fault500/m:v1");
  const Digest digest = DigestOf("fault500/m", "v1");
  AddSignature("fault500/m", digest, BuildSimpleSigningPayload(Ref("fault500/m:v1"), digest));
  FaultProxyOptions o;
  o.fail_first = 1000;
  o.fail_status = 500;
  o.fail_path = ".sig";
  ASSERT_OK_AND_ASSIGN(auto proxy, FaultProxy::Start(env_->registry->host_port(), o));
  const std::string policy =
      env_->dir
          ->WriteFile("fault.json",
                      absl::StrCat(R"({"default":[{"type":"sigstoreSigned","keyPath":")",
                                   Path("plain.pub"), R"("}]})"))
          .string();
  Verified v = Verify(absl::StrCat(proxy->host_port(), "/fault500/m@", digest.str()), policy);
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ(v.json["reason"], "fetch_failed");
  EXPECT_THAT(v.err, HasSubstr("500"));
}

TEST_F(SigningTest, RegistryStallingOnASignatureIsRefusalWithinTheClientsTimeouts) {
  CopyVolume("stall/m:v1");
  const Digest digest = DigestOf("stall/m", "v1");
  const std::string payload = BuildSimpleSigningPayload(Ref("stall/m:v1"), digest);
  AddSignature("stall/m", digest, payload);
  FaultProxyOptions o;
  o.blob_fault = FaultProxyOptions::BlobFault::kStall;
  o.blob_fault_path = std::string(Digest::Of(payload).hex());
  o.blob_fault_bytes = 0;
  ASSERT_OK_AND_ASSIGN(auto proxy, FaultProxy::Start(env_->registry->host_port(), o));
  // The daemon's and the CLI's client, with its deadlines shortened for the test.
  RegistryClientOptions co;
  co.registry = proxy->host_port();
  co.endpoint.host = proxy->host_port();
  co.endpoint.scheme = "http";
  co.stall_timeout = absl::Seconds(2);
  co.retry_deadline = absl::Seconds(6);
  co.max_attempts = 2;
  ASSERT_OK_AND_ASSIGN(auto client, RegistryClient::Create(co));
  ASSERT_OK_AND_ASSIGN(
      TrustPolicy policy,
      TrustPolicy::Parse(absl::StrCat(R"({"default":[{"type":"sigstoreSigned","keyPath":")",
                                      Path("plain.pub"), R"("}]})"),
                         "stall.json"));
  RegistrySignatureStore store(client.get());
  ASSERT_OK_AND_ASSIGN(ImageReference ref,
                       ImageReference::Parse(absl::StrCat(proxy->host_port(), "/stall/m:v1")));
  TrustVerdict v = Evaluate(policy, ref, digest, store);
  EXPECT_FALSE(v.accepted);
  EXPECT_EQ(v.reason, TrustReason::kFetchFailed);
}

// --- push, mount and pull -------------------------------------------------------------------

TEST_F(SigningTest, PushWithSignKeySignsTheArtifactAndTheVolumeImage) {
  ASSERT_OK_AND_ASSIGN(ProcessResult push,
                       RunModelfs({"push", "--plain-http", Ref("signedpush/m:v1"), Path("model"),
                                   "--sign-key", Path("plain.pem"), "--json"}));
  ASSERT_EQ(push.exit_code, 0) << push.err;
  EXPECT_EQ(ParseJsonOutput(push.out)["signatures"].size(), 2u);
  const std::string policy = Policy("signedpush.json", Path("plain.pub"));
  EXPECT_EQ(Verify(Ref("signedpush/m:v1"), policy).exit_code, 0);
  EXPECT_EQ(Verify(Ref("signedpush/m:v1-volume"), policy).exit_code, 0);
  EXPECT_TRUE(SkopeoAccepts(Ref("signedpush/m:v1-volume"), policy));
}

TEST_F(SigningTest, ConvertWithSignKeySignsTheVolumeImageItWrites) {
  ProcessResult copy =
      Skopeo({"copy", "--preserve-digests", "--src-tls-verify=false", "--dest-tls-verify=false",
              "docker://" + Ref("team/m:v1"), "docker://" + Ref("convertsign/m:v1")},
             Path("any.json"));
  ASSERT_EQ(copy.exit_code, 0) << copy.err;
  ASSERT_OK_AND_ASSIGN(ProcessResult c,
                       RunModelfs({"convert", "--plain-http", Ref("convertsign/m:v1"), "--sign-key",
                                   Path("plain.pem"), "--json"}));
  ASSERT_EQ(c.exit_code, 0) << c.err;
  nlohmann::json j = ParseJsonOutput(c.out);
  ASSERT_EQ(j["signatures"].size(), 1u);
  EXPECT_EQ(j["signatures"][0]["docker_reference"], Ref("convertsign/m:v1-volume"));
  const std::string policy = Policy("convertsign.json", Path("plain.pub"));
  EXPECT_EQ(Verify(Ref("convertsign/m:v1-volume"), policy).exit_code, 0);
  EXPECT_EQ(Verify(Ref("convertsign/m:v1"), policy).json["reason"], "no_signature");
}

TEST_F(SigningTest, PullRefusedByPolicyWritesNothing) {
  CopyVolume("pullrefused/m:v1");
  TempDir out;
  const std::string dest = (out.path() / "dest").string();
  ASSERT_OK_AND_ASSIGN(ProcessResult r,
                       RunModelfs({"pull", Ref("pullrefused/m:v1"), dest, "--plain-http",
                                   "--policy", Policy("pull.json", Path("plain.pub"))}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr(Ref("pullrefused/m:v1") + " (" +
                               DigestOf("pullrefused/m", "v1").str() + ") refused by policy"));
  EXPECT_THAT(r.err, HasSubstr("scope docker:" + env_->registry->host_port()));
  EXPECT_THAT(r.err, HasSubstr("no_signature"));
  EXPECT_TRUE(EmptyOrMissing(dest));
}

TEST_F(SigningTest, PullAcceptedByPolicyPullsTheModel) {
  CopyVolume("pullok/m:v1");
  ASSERT_OK_AND_ASSIGN(ProcessResult s, RunModelfs({"sign", Ref("pullok/m:v1"), "--key",
                                                    Path("plain.pem"), "--plain-http"}));
  ASSERT_EQ(s.exit_code, 0) << s.err;
  TempDir out;
  const std::string dest = (out.path() / "dest").string();
  ASSERT_OK_AND_ASSIGN(ProcessResult r,
                       RunModelfs({"pull", Ref("pullok/m:v1"), dest, "--plain-http", "--policy",
                                   Policy("pullok.json", Path("plain.pub"))}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(DescribeFiles(dest), DescribeFiles(Path("model")));
}

class SigningMountTest : public SigningTest {
 protected:
  void SetUp() override {
    SigningTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (geteuid() != 0 || access("/dev/fuse", R_OK | W_OK) != 0) {
      SKIP_OR_FAIL_IF_UNAVAILABLE("needs root and /dev/fuse");
    }
  }
};

TEST_F(SigningMountTest, RefusedMountMountsAndCachesNothing) {
  CopyVolume("mountrefused/m:v1");
  TempDir work;
  const std::string mnt = (work.path() / "mnt").string();
  const std::string cache = (work.path() / "cache").string();
  fs::create_directories(mnt);
  ASSERT_OK_AND_ASSIGN(ProcessResult r, RunModelfs({"mount", Ref("mountrefused/m:v1"), mnt,
                                                    "--plain-http", "--cache", cache, "--policy",
                                                    Policy("mount.json", Path("plain.pub"))}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr(Ref("mountrefused/m:v1") + " (" +
                               DigestOf("mountrefused/m", "v1").str() + ") refused by policy"));
  EXPECT_THAT(r.err, HasSubstr("no_signature"));
  EXPECT_FALSE(IsFuseMount(mnt));
  EXPECT_TRUE(fs::is_empty(mnt));
  EXPECT_TRUE(EmptyOrMissing(cache));
}

TEST_F(SigningMountTest, AcceptedMountServesTheModel) {
  CopyVolume("mountok/m:v1");
  ASSERT_OK_AND_ASSIGN(ProcessResult s, RunModelfs({"sign", Ref("mountok/m:v1"), "--key",
                                                    Path("plain.pem"), "--plain-http"}));
  ASSERT_EQ(s.exit_code, 0) << s.err;
  TempDir work;
  const std::string mnt = (work.path() / "mnt").string();
  fs::create_directories(mnt);
  ASSERT_OK_AND_ASSIGN(ProcessResult r,
                       RunModelfs({"mount", Ref("mountok/m:v1"), mnt, "--plain-http", "--cache",
                                   (work.path() / "cache").string(), "--policy",
                                   Policy("mountok.json", Path("plain.pub"))}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(IsFuseMount(mnt));
  std::map<std::string, std::string> served = DescribeFiles(mnt);
  served.erase(".modelinfo.json");  // the mount's own summary, not one of the model's files
  EXPECT_EQ(served, DescribeFiles(Path("model")));
  ASSERT_OK_AND_ASSIGN(ProcessResult u, RunModelfs({"umount", mnt}));
  EXPECT_EQ(u.exit_code, 0) << u.err;
}

}  // namespace
}  // namespace modelfs::testing
