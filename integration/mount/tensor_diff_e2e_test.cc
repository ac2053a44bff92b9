// End-to-end tests of the tensor index (docs/tensor-index.md), `modelfs diff` and
// `modelfs inspect --tensors` against a real docker-registry: two models written with the
// project's safetensors and GGUF writers share every tensor but one layer's; diff names exactly
// that layer's tensors from the indexes alone, reading under 1 MiB; inspect's digests equal
// BLAKE3 of the bytes a mount serves; and a volume image without the index (push
// --no-tensor-index, what builds before it wrote) still mounts and diffs through the fallback.
// Needs /dev/fuse for the mount tests (skipped without, failed under CI=true).
#include <fcntl.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/formats/gguf_writer.h"
#include "core/formats/safetensors.h"
#include "core/oci/chunk_hash.h"
#include "core/oci/manifest.h"
#include "core/oci/media_types.h"
#include "core/oci/tar.h"
#include "core/oci/tensor_index.h"
#include "core/oci/volume_image.h"
#include "core/status/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration/mount/mount_test_env.h"
#include "nlohmann/json.hpp"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

using ::testing::Lt;
using ::testing::UnorderedElementsAre;

constexpr int kLayers = 4;
constexpr int kChangedLayer = 2;

// 64 KiB of bf16 per tensor, its bytes a function of (seed, name).
std::string TensorBytes(uint64_t seed, const std::string& name) {
  std::string s(128 * 256 * 2, '\0');
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + std::hash<std::string>()(name);
  for (char& c : s) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c = static_cast<char>(x & 0xff);
  }
  return s;
}

// model.safetensors (kLayers layers of two tensors, plus embeddings) and model.gguf (three F32
// tensors); `changed_seed` gives layer kChangedLayer's tensors other bytes.
absl::Status WriteModel(const std::string& dir, uint64_t changed_seed) {
  SafetensorsWriter st;
  RETURN_IF_ERROR(st.AddTensor("model.embed_tokens.weight", "BF16", {128, 256},
                               TensorBytes(1, "model.embed_tokens.weight")));
  for (int l = 0; l < kLayers; ++l) {
    for (const char* t : {"self_attn.q_proj.weight", "mlp.up_proj.weight"}) {
      const std::string name = absl::StrCat("model.layers.", l, ".", t);
      RETURN_IF_ERROR(st.AddTensor(name, "BF16", {128, 256},
                                   TensorBytes(l == kChangedLayer ? changed_seed : 1, name)));
    }
  }
  RETURN_IF_ERROR(st.WriteFile(dir + "/model.safetensors"));
  GgufWriter g;
  g.Set("general.architecture", GgufValue::String("llama"));
  for (const char* name : {"token_embd.weight", "blk.0.attn_q.weight", "output_norm.weight"}) {
    RETURN_IF_ERROR(g.AddTensor(name, {64, 16}, /*F32*/ 0, TensorBytes(3, name).substr(0, 4096)));
  }
  return g.WriteFile(dir + "/model.gguf");
}

struct Env {
  std::unique_ptr<TempDir> work;
  std::unique_ptr<RegistryFixture> registry;
  std::string a, b, a_old;  // volume image references
};
Env* env = nullptr;
std::string suite_error;

absl::StatusOr<std::string> Push(const std::string& dir, const std::string& repo_tag,
                                 std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"push", "--plain-http",
                                   absl::StrCat(env->registry->host_port(), "/", repo_tag), dir,
                                   "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  ASSIGN_OR_RETURN(ProcessResult r, RunModelfs(args));
  if (r.exit_code != 0) return absl::InternalError(absl::StrCat("push: ", r.err));
  return ParseJsonOutput(r.out)["volume"]["reference"].get<std::string>();
}

class TensorDiffE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    BecomeSubreaper();
    setenv("DOCKER_CONFIG", "/nonexistent/modelfs-tensor-e2e", 1);
    env = new Env();
    env->work = std::make_unique<TempDir>();
    auto reg = RegistryFixture::Start();
    if (!reg.ok()) {
      suite_error = absl::StrCat("the registry did not start: ", reg.status().message());
      return;
    }
    env->registry = std::move(*reg);
    const std::string da = env->work->Join("a").string(), db = env->work->Join("b").string();
    std::filesystem::create_directories(da);
    std::filesystem::create_directories(db);
    absl::Status s = WriteModel(da, 1);
    if (s.ok()) s = WriteModel(db, 2);
    if (!s.ok()) {
      suite_error = absl::StrCat("writing the models: ", s.message());
      return;
    }
    auto a = Push(da, "models/a:v1");
    auto b = Push(db, "models/b:v1");
    auto a_old = Push(da, "models/a-old:v1", {"--no-tensor-index"});
    for (const auto* r : {&a, &b, &a_old}) {
      if (!r->ok()) {
        suite_error = std::string(r->status().message());
        return;
      }
    }
    env->a = *a;
    env->b = *b;
    env->a_old = *a_old;
  }
  static void TearDownTestSuite() {
    delete env;
    env = nullptr;
  }
  void SetUp() override { ASSERT_EQ(suite_error, "") << "suite setup failed"; }

  static nlohmann::json Diff(const std::string& x, const std::string& y) {
    absl::StatusOr<ProcessResult> r = RunModelfs({"diff", "--plain-http", x, y, "--json"});
    EXPECT_OK(r.status());
    if (!r.ok()) return nlohmann::json();
    EXPECT_EQ(r->exit_code, 0) << r->err;
    return ParseJsonOutput(r->out);
  }
  static std::set<std::string> ChangedNames(const nlohmann::json& d) {
    std::set<std::string> out;
    for (const auto& f : d["files"]) {
      for (const auto& c : f["changed"]) out.insert(c["name"].get<std::string>());
    }
    return out;
  }
};

TEST_F(TensorDiffE2eTest, DiffNamesExactlyTheChangedLayersTensorsFromTheIndexes) {
  const nlohmann::json d = Diff(env->a, env->b);
  EXPECT_THAT(ChangedNames(d), UnorderedElementsAre("model.layers.2.self_attn.q_proj.weight",
                                                    "model.layers.2.mlp.up_proj.weight"));
  EXPECT_EQ(d["summary"]["changed"], 2);
  EXPECT_EQ(d["summary"]["added"], 0);
  EXPECT_EQ(d["summary"]["removed"], 0);
  EXPECT_EQ(d["summary"]["identical"], 1 + 2 * kLayers - 2 + 3);
  EXPECT_EQ(d["a"]["source"], "index");
  EXPECT_EQ(d["b"]["source"], "index");
  EXPECT_EQ(d["a"]["hashed_bytes"], 0);
  EXPECT_THAT(d["bytes_read"].get<uint64_t>(), Lt(1u << 20));
  printf("diff from the indexes read %llu bytes\n",
         static_cast<unsigned long long>(d["bytes_read"].get<uint64_t>()));
  for (const auto& f : d["files"]) {
    for (const auto& c : f["changed"]) EXPECT_EQ(c["what"], nlohmann::json({"digest"}));
  }
}

TEST_F(TensorDiffE2eTest, TextOutputNamesTheSourceTheChangesAndTheBytesRead) {
  ASSERT_OK_AND_ASSIGN(ProcessResult r, RunModelfs({"diff", "--plain-http", env->a, env->b}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("(source: index, read "));
  EXPECT_THAT(r.out, ::testing::HasSubstr(
                         "model.safetensors: 0 added, 0 removed, 2 changed, 7 identical\n"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("  ~ model.layers.2.mlp.up_proj.weight (digest)\n"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("summary: 0 added, 0 removed, 2 changed, 10 identical; "
                                          "read "));
  ASSERT_OK_AND_ASSIGN(ProcessResult i,
                       RunModelfs({"inspect", "--plain-http", "--tensors", env->a_old}));
  ASSERT_EQ(i.exit_code, 0) << i.err;
  EXPECT_THAT(i.out, ::testing::HasSubstr("(source: headers+hashed "));
  EXPECT_THAT(i.out, ::testing::HasSubstr("model.gguf: 3 tensors (gguf, headers+hashed)\n"));
  EXPECT_THAT(i.out, ::testing::HasSubstr("  output_norm.weight F32 [64,16] offset "));
}

TEST_F(TensorDiffE2eTest, AModelDiffedWithItselfIsAllIdentical) {
  const nlohmann::json d = Diff(env->a, env->a);
  EXPECT_EQ(d["summary"]["same"], true);
  EXPECT_EQ(d["summary"]["identical"], 1 + 2 * kLayers + 3);
}

TEST_F(TensorDiffE2eTest, AVolumeWithoutTheIndexDiffsThroughHeadersAndHashing) {
  const nlohmann::json d = Diff(env->a_old, env->b);
  EXPECT_THAT(ChangedNames(d), UnorderedElementsAre("model.layers.2.self_attn.q_proj.weight",
                                                    "model.layers.2.mlp.up_proj.weight"));
  EXPECT_THAT(d["a"]["source"].get<std::string>(), ::testing::StartsWith("headers+hashed "));
  EXPECT_GT(d["a"]["hashed_bytes"].get<uint64_t>(), 9u * 65536);
  EXPECT_EQ(d["b"]["source"], "index");
  printf("diff through the fallback read %llu bytes (%s)\n",
         static_cast<unsigned long long>(d["bytes_read"].get<uint64_t>()),
         d["a"]["source"].get<std::string>().c_str());
}

// V of model a with one byte of its safetensors file's tensor index changed (and A, V's config
// and manifest rewritten to match): the index no longer has the digest model.json pins.
absl::StatusOr<std::string> PushTamperedVolume() {
  const std::string repo = "models/a";
  ASSIGN_OR_RETURN(std::unique_ptr<RegistryClient> client,
                   ConnectPlainHttp(env->registry->host_port()));
  ASSIGN_OR_RETURN(ManifestResult mr, client->GetManifest(repo, "v1-volume"));
  ASSIGN_OR_RETURN(Manifest v, ParseManifest(mr.bytes));
  ASSIGN_OR_RETURN(size_t ai, VolumeLayerIndex(v));
  const Descriptor a = v.layers[ai];
  ASSIGN_OR_RETURN(std::string a_bytes, FetchBlob(*client, repo, a.digest.str()));
  ASSIGN_OR_RETURN(std::vector<TarEntry> entries, IndexTarBytes(a_bytes));
  TarWriter w;
  bool tampered = false;
  for (const TarEntry& e : entries) {
    if (e.type == TarEntryType::kDirectory) {
      RETURN_IF_ERROR(w.AddDirectory(e.path));
      continue;
    }
    std::string bytes = a_bytes.substr(e.data_offset, e.size);
    if (!tampered && e.path.find(".modelfs/tensors/") == 0) {
      bytes.back() ^= 1;  // the last tensor's hash
      tampered = true;
    }
    RETURN_IF_ERROR(w.AddFile(e.path, bytes));
  }
  if (!tampered) return absl::NotFoundError("no tensor index in A");
  const std::string new_a = w.Finish();
  ASSIGN_OR_RETURN(Digest new_a_digest, UploadBlob(*client, repo, new_a));
  ASSIGN_OR_RETURN(std::string config, FetchBlob(*client, repo, v.config.digest.str()));
  auto swap = [&](std::string s) {
    for (size_t at; (at = s.find(a.digest.str())) != std::string::npos;) {
      s.replace(at, a.digest.str().size(), new_a_digest.str());
    }
    return s;
  };
  config = swap(config);
  ASSIGN_OR_RETURN(Digest config_digest, UploadBlob(*client, repo, config));
  std::string manifest = mr.bytes;
  for (size_t at; (at = manifest.find(v.config.digest.str())) != std::string::npos;) {
    manifest.replace(at, v.config.digest.str().size(), config_digest.str());
  }
  manifest = swap(manifest);
  if (new_a.size() != a.size || config.size() != v.config.size) {
    return absl::InternalError("sizes changed; the test rewrites digests only");
  }
  RETURN_IF_ERROR(
      client->PutManifest(repo, "tampered", manifest, std::string(kOciManifestMediaType)).status());
  return absl::StrCat(env->registry->host_port(), "/", repo, ":tampered");
}

TEST_F(TensorDiffE2eTest, ATamperedIndexIsAVerificationFailureNamingIt) {
  ASSERT_OK_AND_ASSIGN(std::string tampered, PushTamperedVolume());
  ASSERT_OK_AND_ASSIGN(ProcessResult d, RunModelfs({"diff", "--plain-http", tampered, env->b}));
  EXPECT_EQ(d.exit_code, 1) << d.err;
  EXPECT_THAT(d.err, ::testing::HasSubstr("tensor index .modelfs/tensors/"));
  ASSERT_OK_AND_ASSIGN(ProcessResult i,
                       RunModelfs({"inspect", "--plain-http", "--tensors", tampered}));
  EXPECT_EQ(i.exit_code, 1) << i.err;
}

TEST_F(TensorDiffE2eTest, InspectTensorsDigestsAreBlake3OfTheBytesAMountServes) {
  SKIP_OR_FAIL_IF_UNAVAILABLE(access("/dev/fuse", R_OK | W_OK) == 0 ? "" : "no usable /dev/fuse");
  ASSERT_OK_AND_ASSIGN(ProcessResult r,
                       RunModelfs({"inspect", "--plain-http", "--tensors", "--json", env->a}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = ParseJsonOutput(r.out);
  EXPECT_EQ(j["source"], "index");
  ASSERT_EQ(j["files"].size(), 2u);
  TempDir tmp;
  MountOptions mo;
  mo.cache_dir = tmp.Join("cache").string();
  std::filesystem::create_directories(tmp.Join("mnt"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ModelMount> m,
                       ModelMount::Start(env->a, tmp.Join("mnt").string(), mo));
  int checked = 0;
  for (const auto& f : j["files"]) {
    const std::string path = m->dir() + "/" + f["path"].get<std::string>();
    const int fd = open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << path;
    for (const auto& t : f["tensors"]) {
      ASSERT_OK_AND_ASSIGN(std::string bytes, PreadExact(fd, t["offset"].get<uint64_t>(),
                                                         t["length"].get<uint64_t>()));
      EXPECT_EQ(t["digest"],
                "blake3:" + TensorHashHex(HashChunkBytes(ChunkDigestAlgorithm::kBlake3, bytes)))
          << t["name"];
      ++checked;
    }
    close(fd);
  }
  EXPECT_EQ(checked, 1 + 2 * kLayers + 3);
  // .modelinfo.json names each file's index by digest and count, not the index itself.
  ASSERT_OK_AND_ASSIGN(std::string info, ReadWholeFile(m->dir() + "/.modelinfo.json"));
  std::map<std::string, nlohmann::json> by_path;
  const nlohmann::json info_json = nlohmann::json::parse(info);
  for (const auto& f : info_json["files"]) by_path[f["path"].get<std::string>()] = f;
  for (const auto& f : j["files"]) {
    auto it = by_path.find(f["path"].get<std::string>());
    ASSERT_TRUE(it != by_path.end() && it->second.contains("tensorIndex")) << info;
    EXPECT_EQ(it->second["tensorIndex"]["digest"], f["index_digest"]) << f["path"];
    EXPECT_EQ(it->second["tensorIndex"]["tensors"], f["tensors"].size()) << f["path"];
  }
  ASSERT_OK(m->Unmount());
}

TEST_F(TensorDiffE2eTest, AVolumeWithoutTheIndexStillMounts) {
  SKIP_OR_FAIL_IF_UNAVAILABLE(access("/dev/fuse", R_OK | W_OK) == 0 ? "" : "no usable /dev/fuse");
  TempDir tmp;
  MountOptions mo;
  mo.cache_dir = tmp.Join("cache").string();
  std::filesystem::create_directories(tmp.Join("mnt"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ModelMount> m,
                       ModelMount::Start(env->a_old, tmp.Join("mnt").string(), mo));
  ASSERT_OK_AND_ASSIGN(std::string served, ReadWholeFile(m->dir() + "/model.safetensors"));
  ASSERT_OK_AND_ASSIGN(std::string local,
                       ReadWholeFile(env->work->Join("a").string() + "/model.safetensors"));
  EXPECT_EQ(served, local);
  ASSERT_OK(m->Unmount());
}

}  // namespace
}  // namespace modelfs::testing
