// End-to-end tests of tensor indexes for tar layers (docs/tensor-index.md, "Tar layers")
// against a real docker-registry: two models that differ in one tensor are published as tar
// layers (`push --tar`, `push --tar --compress zstd`) and as modelcars, ordinary images whose
// one layer (plain, gzip, zstd) holds them under models/ beside a README, converted by
// `modelfs convert`. `diff` of the two volume images names exactly that tensor from the
// indexes alone, reading under 1 MiB; `inspect --tensors --json` lists every tensor of every
// weight file in the tar; a modelcar converted without indexes (what builds before them wrote)
// still lists its tensors, streaming the layer, and says so.
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/formats/gguf_writer.h"
#include "core/formats/safetensors.h"
#include "core/oci/manifest.h"
#include "core/oci/media_types.h"
#include "core/oci/tar.h"
#include "core/status/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration/mount/mount_test_env.h"
#include "nlohmann/json.hpp"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/compress.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

using ::testing::Lt;
using ::testing::StartsWith;

constexpr char kChanged[] = "model.layers.1.mlp.up_proj.weight";

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

struct Model {
  std::string safetensors, gguf;
};

// model.safetensors of five tensors (kChanged's bytes from `seed`) and model.gguf of three.
absl::StatusOr<Model> MakeModel(uint64_t seed) {
  SafetensorsWriter st;
  RETURN_IF_ERROR(st.AddTensor("model.embed_tokens.weight", "BF16", {128, 256},
                               TensorBytes(1, "model.embed_tokens.weight")));
  for (int l = 0; l < 2; ++l) {
    for (const char* t : {"self_attn.q_proj.weight", "mlp.up_proj.weight"}) {
      const std::string name = absl::StrCat("model.layers.", l, ".", t);
      RETURN_IF_ERROR(
          st.AddTensor(name, "BF16", {128, 256}, TensorBytes(name == kChanged ? seed : 1, name)));
    }
  }
  GgufWriter g;
  g.Set("general.architecture", GgufValue::String("llama"));
  for (const char* name : {"token_embd.weight", "blk.0.attn_q.weight", "output_norm.weight"}) {
    RETURN_IF_ERROR(g.AddTensor(name, {64, 16}, /*F32*/ 0, TensorBytes(3, name).substr(0, 4096)));
  }
  Model m;
  m.safetensors = st.Serialize();
  ASSIGN_OR_RETURN(m.gguf, g.Serialize());
  return m;
}

class TarTensorDiffE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    BecomeSubreaper();
    setenv("DOCKER_CONFIG", "/nonexistent/modelfs-tar-tensor-e2e", 1);
  }
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(registry_, RegistryFixture::Start());
    ASSERT_OK_AND_ASSIGN(client_, ConnectPlainHttp(registry_->host_port()));
    ASSERT_OK_AND_ASSIGN(a_, MakeModel(1));
    ASSERT_OK_AND_ASSIGN(b_, MakeModel(2));
  }

  // The model as a directory (for push).
  std::string WriteDir(const Model& m, const std::string& name) {
    const std::string dir = tmp_.Join(name).string();
    std::filesystem::create_directories(dir);
    EXPECT_OK(WriteFile(dir + "/model.safetensors", m.safetensors));
    EXPECT_OK(WriteFile(dir + "/model.gguf", m.gguf));
    return dir;
  }
  static absl::Status WriteFile(const std::string& path, const std::string& bytes) {
    FILE* f = fopen(path.c_str(), "wb");
    if (f == nullptr) return absl::InternalError(path);
    fwrite(bytes.data(), 1, bytes.size(), f);
    return fclose(f) == 0 ? absl::OkStatus() : absl::InternalError(path);
  }

  std::string Push(const std::string& dir, const std::string& repo_tag,
                   std::vector<std::string> extra) {
    std::vector<std::string> args = {
        "push", "--plain-http", absl::StrCat(registry_->host_port(), "/", repo_tag), dir, "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    absl::StatusOr<ProcessResult> r = RunModelfs(args);
    EXPECT_OK(r.status());
    if (!r.ok()) return "";
    EXPECT_EQ(r->exit_code, 0) << r->err;
    return ParseJsonOutput(r->out)["volume"]["reference"].get<std::string>();
  }

  // A modelcar: an ordinary image of one layer (`encoding`) holding models/ with the model, a
  // README and a long directory name (a pax path record), pushed as modelcars:`tag`.
  void PushModelcar(const Model& m, const std::string& tag, LayerEncoding encoding) {
    TarWriter w;
    ASSERT_OK(w.AddDirectory("models"));
    ASSERT_OK(w.AddFile("models/README.md", "# a modelcar\n"));
    ASSERT_OK(w.AddFile("models/model.safetensors", m.safetensors));
    ASSERT_OK(w.AddFile("models/" + std::string(120, 'q') + "/model.gguf", m.gguf));
    const std::string tar = w.Finish();
    std::string blob = tar;
    std::string_view media_type = kOciLayerTarMediaType;
    if (encoding == LayerEncoding::kTarGzip) {
      blob = Gzip(tar);
      media_type = kOciLayerTarGzipMediaType;
    } else if (encoding == LayerEncoding::kTarZstd) {
      blob = ZstdFrames(tar, 64 << 10);
      media_type = kOciLayerTarZstdMediaType;
    }
    ASSERT_OK_AND_ASSIGN(Digest layer, UploadBlob(*client_, "modelcars", blob));
    const std::string config =
        nlohmann::json{{"architecture", "amd64"},
                       {"os", "linux"},
                       {"rootfs", {{"type", "layers"}, {"diff_ids", {Digest::Of(tar).str()}}}}}
            .dump();
    ASSERT_OK_AND_ASSIGN(Digest c, UploadBlob(*client_, "modelcars", config));
    Manifest man;
    man.media_type = std::string(kOciManifestMediaType);
    man.config.media_type = std::string(kOciConfigMediaType);
    man.config.digest = c;
    man.config.size = config.size();
    Descriptor d;
    d.media_type = std::string(media_type);
    d.digest = layer;
    d.size = blob.size();
    man.layers.push_back(d);
    ASSERT_OK(client_
                  ->PutManifest("modelcars", tag, SerializeManifest(man),
                                std::string(kOciManifestMediaType))
                  .status());
  }

  std::string Convert(const std::string& tag, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"convert", "--plain-http", "--json",
                                     absl::StrCat(registry_->host_port(), "/modelcars:", tag)};
    args.insert(args.end(), extra.begin(), extra.end());
    absl::StatusOr<ProcessResult> r = RunModelfs(args);
    EXPECT_OK(r.status());
    if (!r.ok()) return "";
    EXPECT_EQ(r->exit_code, 0) << r->err;
    return ParseJsonOutput(r->out)["volume"]["reference"].get<std::string>();
  }

  static nlohmann::json Json(const std::vector<std::string>& args) {
    absl::StatusOr<ProcessResult> r = RunModelfs(args);
    EXPECT_OK(r.status());
    if (!r.ok()) return nlohmann::json();
    EXPECT_EQ(r->exit_code, 0) << r->err;
    return ParseJsonOutput(r->out);
  }

  // diff names exactly kChanged in `file`, every source an index, under 1 MiB read.
  static void ExpectDiffFromIndexes(const std::string& va, const std::string& vb,
                                    const std::string& file) {
    const nlohmann::json d = Json({"diff", "--plain-http", va, vb, "--json"});
    std::set<std::string> changed;
    for (const auto& f : d["files"]) {
      for (const auto& c : f["changed"]) {
        changed.insert(
            absl::StrCat(f["path"].get<std::string>(), ":", c["name"].get<std::string>()));
      }
    }
    EXPECT_EQ(changed, (std::set<std::string>{absl::StrCat(file, ":", kChanged)})) << d.dump(2);
    EXPECT_EQ(d["summary"]["changed"], 1);
    EXPECT_EQ(d["summary"]["identical"], 4 + 3);
    EXPECT_EQ(d["a"]["source"], "index") << d.dump(2);
    EXPECT_EQ(d["b"]["source"], "index") << d.dump(2);
    EXPECT_EQ(d["a"]["skipped"].size(), 0u);
    EXPECT_THAT(d["bytes_read"].get<uint64_t>(), Lt(1u << 20));
    printf("diff of %s and %s read %llu bytes\n", va.c_str(), vb.c_str(),
           static_cast<unsigned long long>(d["bytes_read"].get<uint64_t>()));
  }

  // inspect --tensors --json lists the safetensors' 5 tensors and the GGUF's 3 from the index.
  static void ExpectInspectListsEveryTensor(const std::string& v, const std::string& st,
                                            const std::string& gguf) {
    const nlohmann::json j = Json({"inspect", "--plain-http", "--tensors", "--json", v});
    EXPECT_EQ(j["tensors"], 8) << j.dump(2);
    EXPECT_EQ(j["source"], "index");
    std::set<std::string> files;
    for (const auto& f : j["files"]) {
      files.insert(f["path"].get<std::string>());
      EXPECT_EQ(f["source"], "index");
      EXPECT_THAT(f["index_digest"].get<std::string>(), StartsWith("sha256:"));
    }
    EXPECT_EQ(files, (std::set<std::string>{st, gguf}));
  }

  TempDir tmp_;
  std::unique_ptr<RegistryFixture> registry_;
  std::unique_ptr<RegistryClient> client_;
  Model a_, b_;
};

TEST_F(TarTensorDiffE2eTest, PushTarLayersDiffFromTheIndexesAlone) {
  const std::string va = Push(WriteDir(a_, "a"), "models/a:tar", {"--tar"});
  const std::string vb = Push(WriteDir(b_, "b"), "models/b:tar", {"--tar"});
  ExpectDiffFromIndexes(va, vb, "model.safetensors");
  ExpectInspectListsEveryTensor(va, "model.safetensors", "model.gguf");
}

TEST_F(TarTensorDiffE2eTest, PushZstdTarLayersDiffFromTheIndexesAlone) {
  const std::string va = Push(WriteDir(a_, "a"), "models/a:zstd", {"--compress", "zstd"});
  const std::string vb = Push(WriteDir(b_, "b"), "models/b:zstd", {"--compress", "zstd"});
  ExpectDiffFromIndexes(va, vb, "model.safetensors");
  ExpectInspectListsEveryTensor(vb, "model.safetensors", "model.gguf");
}

TEST_F(TarTensorDiffE2eTest, ConvertingAPushedTarModelGivesTheVolumeImagePushWrote) {
  absl::StatusOr<ProcessResult> r =
      RunModelfs({"push", "--plain-http", absl::StrCat(registry_->host_port(), "/models/a:same"),
                  WriteDir(a_, "a"), "--json", "--tar"});
  ASSERT_OK(r.status());
  ASSERT_EQ(r->exit_code, 0) << r->err;
  const nlohmann::json pushed = ParseJsonOutput(r->out);
  const nlohmann::json converted =
      Json({"convert", "--plain-http", "--json", pushed["model"]["reference"].get<std::string>()});
  EXPECT_EQ(converted["volume"]["digest"], pushed["volume"]["digest"]);
}

TEST_F(TarTensorDiffE2eTest, TextDiffOfTwoModelcarsNamesTheTensorAndTheBytesRead) {
  ASSERT_NO_FATAL_FAILURE(PushModelcar(a_, "a", LayerEncoding::kTarGzip));
  ASSERT_NO_FATAL_FAILURE(PushModelcar(b_, "b", LayerEncoding::kTarGzip));
  const std::string va = Convert("a"), vb = Convert("b");
  ASSERT_OK_AND_ASSIGN(ProcessResult r, RunModelfs({"diff", "--plain-http", va, vb}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("(source: index, read "));
  EXPECT_THAT(r.out, ::testing::HasSubstr(
                         "models/model.safetensors: 0 added, 0 removed, 1 changed, 4 identical\n"
                         "  ~ model.layers.1.mlp.up_proj.weight (digest)\n"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("summary: 0 added, 0 removed, 1 changed, 7 identical"));
  EXPECT_THAT(r.out, ::testing::Not(::testing::HasSubstr("not compared")));
}

class ModelcarTensorTest : public TarTensorDiffE2eTest,
                           public ::testing::WithParamInterface<LayerEncoding> {};

TEST_P(ModelcarTensorTest, ConvertedModelcarsDiffFromTheIndexesAlone) {
  ASSERT_NO_FATAL_FAILURE(PushModelcar(a_, "a", GetParam()));
  ASSERT_NO_FATAL_FAILURE(PushModelcar(b_, "b", GetParam()));
  const std::string va = Convert("a"), vb = Convert("b");
  const std::string gguf = "models/" + std::string(120, 'q') + "/model.gguf";
  ExpectDiffFromIndexes(va, vb, "models/model.safetensors");
  ExpectInspectListsEveryTensor(va, "models/model.safetensors", gguf);
}

TEST_P(ModelcarTensorTest, AModelcarConvertedWithoutIndexesStreamsItsLayerAndSaysSo) {
  ASSERT_NO_FATAL_FAILURE(PushModelcar(a_, "a", GetParam()));
  const std::string va = Convert("a", {"--no-tensor-index"});
  const nlohmann::json j = Json({"inspect", "--plain-http", "--tensors", "--json", va});
  EXPECT_EQ(j["tensors"], 8) << j.dump(2);
  EXPECT_THAT(j["source"].get<std::string>(), StartsWith("headers+hashed ")) << j.dump(2);
  for (const auto& f : j["files"]) EXPECT_EQ(f["source"], "headers+hashed");
  // The same digests as the index gives.
  const std::string vi = Convert("a");
  const nlohmann::json k = Json({"inspect", "--plain-http", "--tensors", "--json", vi});
  EXPECT_EQ(j["files"].size(), k["files"].size());
  for (size_t i = 0; i < j["files"].size() && i < k["files"].size(); ++i) {
    EXPECT_EQ(j["files"][i]["tensors"], k["files"][i]["tensors"]);
  }
}

INSTANTIATE_TEST_SUITE_P(Encodings, ModelcarTensorTest,
                         ::testing::Values(LayerEncoding::kTar, LayerEncoding::kTarGzip,
                                           LayerEncoding::kTarZstd),
                         [](const ::testing::TestParamInfo<LayerEncoding>& p) {
                           return p.param == LayerEncoding::kTar       ? std::string("plain")
                                  : p.param == LayerEncoding::kTarGzip ? std::string("gzip")
                                                                       : std::string("zstd");
                         });

}  // namespace
}  // namespace modelfs::testing
