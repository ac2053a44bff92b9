// End-to-end tests of the `modelfs` command-line tool: each test writes real model bytes with
// the project's writers, runs the built binary as a child process, and checks its exact output
// (JSON byte counts as plain integers) and its documented exit codes.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/formats/dequant.h"
#include "core/formats/ggml_types.h"
#include "core/formats/gguf_writer.h"
#include "core/formats/safetensors.h"
#include "nlohmann/json.hpp"
#include "testsupport/synth/synthetic_models.h"
#include "testsupport/testing/http_fixture.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

extern char** environ;

namespace modelfs {
namespace {

using ::modelfs::testing::RangeServer;
using ::modelfs::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

struct CliRun {
  int exit_code = -1;  // 128 + signal when the child was killed
  std::string out;
  std::string err;
};

std::string ReadWhole(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs MODELFS_BIN with args, stdout and stderr captured through files (no pipe to drain).
CliRun RunModelfs(const std::vector<std::string>& args) {
  TempDir io;
  const std::string out_path = io.Join("stdout").string();
  const std::string err_path = io.Join("stderr").string();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> storage = {MODELFS_BIN};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  CliRun run;
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, MODELFS_BIN, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    run.err = absl::StrCat("posix_spawn failed: ", strerror(rc));
    return run;
  }
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  run.exit_code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
  run.out = ReadWhole(out_path);
  run.err = ReadWhole(err_path);
  return run;
}

nlohmann::json ParseJson(const std::string& text) {
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

// The first array element whose `key` equals `value`, or null.
nlohmann::json FindBy(const nlohmann::json& array, const std::string& key,
                      const std::string& value) {
  for (const auto& e : array) {
    if (e.contains(key) && e[key] == value) return e;
  }
  return nullptr;
}

std::string F32Bytes(const std::vector<float>& v) {
  std::string out(v.size() * 4, '\0');
  memcpy(out.data(), v.data(), out.size());  // x86/ARM little-endian, as the formats are
  return out;
}

std::string Bf16Bytes(const std::vector<float>& v) {
  std::string out;
  for (float x : v) {
    const uint16_t b = FloatToBf16(x);
    out.push_back(static_cast<char>(b & 0xff));
    out.push_back(static_cast<char>(b >> 8));
  }
  return out;
}

std::string F16Bytes(const std::vector<float>& v) {
  std::string out;
  for (float x : v) {
    const uint16_t h = FloatToHalf(x);
    out.push_back(static_cast<char>(h & 0xff));
    out.push_back(static_cast<char>(h >> 8));
  }
  return out;
}

void WriteText(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
}

// ---------------------------------------------------------------------------------------------
// SmolLM2-135M Q8_0 (sparse): the lesson's figures.

class SmolLm2Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    path_ = new std::string(dir_->Join("SmolLM2-135M-Instruct-Q8_0.gguf").string());
    ASSERT_OK(WriteSmolLm2Q8Gguf(*path_, /*sparse_data=*/true));
  }
  static void TearDownTestSuite() {
    delete path_;
    delete dir_;
  }
  static TempDir* dir_;
  static std::string* path_;
};
TempDir* SmolLm2Test::dir_ = nullptr;
std::string* SmolLm2Test::path_ = nullptr;

TEST_F(SmolLm2Test, InspectJsonCountsParametersAsAPlainInteger) {
  CliRun r = RunModelfs({"inspect", "--json", *path_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  ASSERT_TRUE(j["parameters"].is_number_unsigned());
  EXPECT_EQ(j["parameters"].get<uint64_t>(), 134515008u);
  EXPECT_EQ(j["format"], "gguf");
  EXPECT_EQ(j["quantization"], "Q8_0");
  EXPECT_EQ(j["architecture"], "llama");
}

TEST_F(SmolLm2Test, InspectJsonSplitsTensorsByDtype) {
  CliRun r = RunModelfs({"inspect", "--json", *path_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  const nlohmann::json& q8 = j["dtypes"]["Q8_0"];
  ASSERT_TRUE(q8["bytes"].is_number_unsigned());
  EXPECT_EQ(q8["tensors"].get<uint64_t>(), 211u);
  EXPECT_EQ(q8["bytes"].get<uint64_t>(), 142884864u);
  const nlohmann::json& f32 = j["dtypes"]["F32"];
  EXPECT_EQ(f32["tensors"].get<uint64_t>(), 61u);
  EXPECT_EQ(f32["bytes"].get<uint64_t>(), 140544u);
  EXPECT_EQ(j["tensor_bytes"].get<uint64_t>(), 142884864u + 140544u);
  ASSERT_EQ(j["files"].size(), 1u);
  EXPECT_EQ(j["files"][0]["tensor_count"].get<uint64_t>(), 272u);
  EXPECT_EQ(j["files"][0]["file_type"], "MOSTLY_Q8_0");
}

TEST_F(SmolLm2Test, InspectTextShowsParametersWithThousandsSeparators) {
  CliRun r = RunModelfs({"inspect", *path_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("params 134,515,008 (134.5M)\n"));
  EXPECT_THAT(r.out, HasSubstr("272 tensors"));
  EXPECT_THAT(r.out, HasSubstr("file type MOSTLY_Q8_0"));
}

TEST_F(SmolLm2Test, MemoryJsonGivesKvBytesPerTokenAndTotalAsIntegers) {
  CliRun r = RunModelfs({"memory", *path_, "--ctx", "8192", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  nlohmann::json f16 = FindBy(j["kv_cache"], "kv_type", "f16");
  ASSERT_FALSE(f16.is_null()) << r.out;
  ASSERT_TRUE(f16["bytes_per_token"].is_number_unsigned());
  ASSERT_TRUE(f16["bytes"].is_number_unsigned());
  EXPECT_EQ(f16["bytes_per_token"].get<uint64_t>(), 23040u);  // 30 x 3 x (64 + 64) x 2
  EXPECT_EQ(f16["bytes"].get<uint64_t>(), 188743680u);        // x 8192
  EXPECT_EQ(j["ctx"].get<uint64_t>(), 8192u);
}

TEST_F(SmolLm2Test, MemoryJsonTakesTheWeightFigureFromTheFile) {
  CliRun r = RunModelfs({"memory", *path_, "--ctx", "8192", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  nlohmann::json file = FindBy(j["weights"], "source", "file");
  ASSERT_FALSE(file.is_null()) << r.out;
  EXPECT_EQ(file["bytes"].get<uint64_t>(), 143025408u);
  EXPECT_EQ(j["params"].get<uint64_t>(), 134515008u);
}

// ---------------------------------------------------------------------------------------------
// Llama 3.1 8B from config.json alone: the lesson's 24 GiB GPU example.

class Llama8bMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = dir_.WriteFile("config.json", R"({"num_hidden_layers":32,"num_attention_heads":32,)"
                                            R"("num_key_value_heads":8,"hidden_size":4096})")
                  .string();
  }
  CliRun RunJson() {
    return RunModelfs({"memory", config_, "--params", "8.03e9", "--quant", "Q4_K", "--ctx", "32768",
                       "--seqs", "16", "--gpu-gib", "24", "--json"});
  }
  TempDir dir_;
  std::string config_;
};

TEST_F(Llama8bMemoryTest, Q4KWeightsTake4516875072Bytes) {
  CliRun r = RunJson();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  nlohmann::json q4k = FindBy(j["weights"], "format", "Q4_K");
  ASSERT_FALSE(q4k.is_null()) << r.out;
  ASSERT_TRUE(q4k["bytes"].is_number_unsigned());
  EXPECT_EQ(q4k["bytes"].get<uint64_t>(), 4516875072u);
  EXPECT_EQ(j["params"].get<uint64_t>(), 8030000000u);
}

TEST_F(Llama8bMemoryTest, F16CacheCosts131072BytesPerTokenAnd64GiBForTheRequest) {
  CliRun r = RunJson();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  nlohmann::json f16 = FindBy(j["kv_cache"], "kv_type", "f16");
  ASSERT_FALSE(f16.is_null()) << r.out;
  EXPECT_EQ(f16["bytes_per_token"].get<uint64_t>(), 131072u);
  EXPECT_EQ(f16["bytes_per_sequence"].get<uint64_t>(), uint64_t{131072} * 32768);
  ASSERT_TRUE(f16["bytes"].is_number_unsigned());
  EXPECT_EQ(f16["bytes"].get<uint64_t>(), 68719476736u);
}

TEST_F(Llama8bMemoryTest, A24GiBGpuHolds142486TokensInFourSequences) {
  CliRun r = RunJson();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  ASSERT_TRUE(j["gpu"].is_object()) << r.out;
  nlohmann::json fit = FindBy(j["gpu"]["fits"], "weights", "Q4_K");
  ASSERT_FALSE(fit.is_null()) << r.out;
  EXPECT_EQ(fit["kv_type"], "f16");
  EXPECT_EQ(fit["weight_bytes"].get<uint64_t>(), 4516875072u);
  ASSERT_TRUE(fit["tokens"].is_number_unsigned());
  EXPECT_EQ(fit["tokens"].get<uint64_t>(), 142486u);
  EXPECT_EQ(fit["sequences"].get<uint64_t>(), 4u);
  EXPECT_EQ(fit["request_fits"], false);
  EXPECT_EQ(j["gpu"]["usable_bytes"].get<uint64_t>(), 23192823398u);  // floor(24 GiB x 0.9)
}

TEST_F(Llama8bMemoryTest, AConfigUnderAnotherJsonNameIsReadAsTheConfig) {
  // The lesson saves the config as llama31-8b.json.
  const std::string renamed = (dir_.path() / "llama31-8b.json").string();
  std::filesystem::rename(config_, renamed);
  CliRun r = RunModelfs({"memory", renamed, "--params", "8.03e9", "--quant", "Q4_K", "--ctx",
                         "32768", "--seqs", "16", "--gpu-gib", "24", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  EXPECT_EQ(FindBy(j["gpu"]["fits"], "weights", "Q4_K")["tokens"].get<uint64_t>(), 142486u);
}

TEST_F(Llama8bMemoryTest, AJsonFileThatIsNoModelConfigExitsTwo) {
  const std::string tokenizer =
      dir_.WriteFile("tokenizer.json", R"({"model":{"type":"BPE"}})").string();
  CliRun r = RunModelfs({"inspect", tokenizer});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("tokenizer.json: not a model config"));
}

TEST_F(Llama8bMemoryTest, TextReportPrintsTheCacheLineWithSeparators) {
  CliRun r = RunModelfs({"memory", config_, "--params", "8.03e9", "--quant", "Q4_K", "--ctx",
                         "32768", "--seqs", "16", "--gpu-gib", "24"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("4,516,875,072"));
  EXPECT_THAT(r.out, HasSubstr("131,072 bytes/token"));
  EXPECT_THAT(r.out, HasSubstr("68,719,476,736 bytes"));
  EXPECT_THAT(r.out, HasSubstr("142,486"));
}

// ---------------------------------------------------------------------------------------------
// Exit codes.

TEST(ExitCodeTest, MalformedSafetensorsExitsTwoNamingTheFile) {
  TempDir dir;
  std::string bytes(8, '\0');
  bytes[0] = 16;
  bytes += "{\"w\": not json }";
  const std::string path = dir.WriteFile("broken.safetensors", bytes).string();
  CliRun r = RunModelfs({"inspect", path});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("broken.safetensors"));
  EXPECT_EQ(r.out, "");
}

TEST(ExitCodeTest, TruncatedGgufExitsTwoNamingTheFile) {
  ASSERT_OK_AND_ASSIGN(GgufWriter w, MakeTinyLlamaWriter());
  ASSERT_OK_AND_ASSIGN(std::string bytes, w.Serialize());
  TempDir dir;
  const std::string path = dir.WriteFile("cut.gguf", bytes.substr(0, 1000)).string();
  CliRun r = RunModelfs({"inspect", path});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("cut.gguf"));
}

TEST(ExitCodeTest, GgufWithTruncatedTensorDataExitsTwo) {
  ASSERT_OK_AND_ASSIGN(GgufWriter w, MakeTinyLlamaWriter());
  ASSERT_OK_AND_ASSIGN(std::string bytes, w.Serialize());
  TempDir dir;
  const std::string path =
      dir.WriteFile("short.gguf", bytes.substr(0, bytes.size() - 4096)).string();
  CliRun r = RunModelfs({"inspect", "--json", path});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("short.gguf"));
}

TEST(ExitCodeTest, AFileThatIsNoModelExitsTwo) {
  TempDir dir;
  const std::string path = dir.WriteFile("notes.bin", "just some text, no model here\n").string();
  CliRun r = RunModelfs({"inspect", path});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("notes.bin"));
}

TEST(ExitCodeTest, MissingFileExitsTwoNamingIt) {
  TempDir dir;
  const std::string path = dir.Join("absent.gguf").string();
  CliRun r = RunModelfs({"inspect", path});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("absent.gguf"));
  CliRun m = RunModelfs({"memory", path});
  EXPECT_EQ(m.exit_code, 2);
  EXPECT_THAT(m.err, HasSubstr("absent.gguf"));
  CliRun d = RunModelfs({"digest", path});
  EXPECT_EQ(d.exit_code, 2);
  EXPECT_THAT(d.err, HasSubstr("absent.gguf"));
}

TEST(ExitCodeTest, UnknownFlagExitsTwo) {
  CliRun r = RunModelfs({"inspect", "--no-such-flag", "x.gguf"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--no-such-flag"));
}

TEST(ExitCodeTest, MissingSubcommandExitsTwo) {
  CliRun r = RunModelfs({});
  EXPECT_EQ(r.exit_code, 2);
}

TEST(ExitCodeTest, UnknownSubcommandExitsTwo) {
  CliRun r = RunModelfs({"frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
}

TEST(ExitCodeTest, BadFlagValueExitsTwo) {
  TempDir dir;
  const std::string config =
      dir.WriteFile("config.json",
                    R"({"num_hidden_layers":2,"num_attention_heads":4,"hidden_size":64})")
          .string();
  EXPECT_EQ(RunModelfs({"memory", config, "--ctx", "lots"}).exit_code, 2);
  EXPECT_EQ(RunModelfs({"memory", config, "--ctx", "128", "--kv-type", "f12"}).exit_code, 2);
  EXPECT_EQ(RunModelfs({"memory", config, "--ctx", "128", "--params", "many"}).exit_code, 2);
}

// The subcommand names `modelfs --help` lists (CLI11 prints them under "SUBCOMMANDS:").
std::vector<std::string> ListedSubcommands(const std::string& help) {
  std::vector<std::string> names;
  bool in_list = false;
  for (absl::string_view line : absl::StrSplit(help, '\n')) {
    if (absl::StartsWith(line, "Subcommands:") || absl::StartsWith(line, "SUBCOMMANDS:")) {
      in_list = true;
      continue;
    }
    if (!in_list) continue;
    if (line.empty() || line[0] != ' ') break;
    absl::string_view name = absl::StripLeadingAsciiWhitespace(line);
    name = name.substr(0, name.find(' '));
    if (!name.empty()) names.emplace_back(name);
  }
  return names;
}

TEST(ExitCodeTest, HelpOnEverySubcommandExitsZero) {
  CliRun top = RunModelfs({"--help"});
  ASSERT_EQ(top.exit_code, 0) << top.err;
  std::vector<std::string> names = ListedSubcommands(top.out);
  EXPECT_THAT(names, ::testing::IsSupersetOf({"inspect", "memory", "digest"})) << top.out;
  for (const std::string& name : names) {
    CliRun r = RunModelfs({name, "--help"});
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.err;
    EXPECT_THAT(r.out, HasSubstr(name)) << name;
  }
}

TEST(ExitCodeTest, DiffOfAMalformedReferenceIsBadInput) {
  CliRun r = RunModelfs({"diff", "not a reference", "localhost:5000/models/a:v1"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("not a reference"));
}

TEST(ExitCodeTest, VersionExitsZero) {
  CliRun r = RunModelfs({"--version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, StartsWith("modelfs "));
}

// ---------------------------------------------------------------------------------------------
// digest

constexpr char kAbcDigest[] =
    "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

TEST(DigestTest, PrintsTheSha256OfTheFile) {
  TempDir dir;
  const std::string path = dir.WriteFile("abc.txt", "abc").string();
  CliRun r = RunModelfs({"digest", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, absl::StrCat(kAbcDigest, "  ", path, "  3 bytes\n"));
}

TEST(DigestTest, MatchingExpectExitsZero) {
  TempDir dir;
  const std::string path = dir.WriteFile("abc.txt", "abc").string();
  CliRun r = RunModelfs({"digest", path, "--expect", kAbcDigest, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  EXPECT_EQ(j["digest"], kAbcDigest);
  EXPECT_EQ(j["size"].get<uint64_t>(), 3u);
  EXPECT_EQ(j["match"], true);
}

TEST(DigestTest, ExpectWithoutThePrefixIsReadAsSha256) {
  TempDir dir;
  const std::string path = dir.WriteFile("abc.txt", "abc").string();
  CliRun r = RunModelfs({"digest", path, "--expect", std::string(kAbcDigest).substr(7)});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(DigestTest, MismatchExitsOneNamingBothDigests) {
  TempDir dir;
  const std::string path = dir.WriteFile("abd.txt", "abd").string();
  CliRun r = RunModelfs({"digest", path, "--expect", kAbcDigest});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr(kAbcDigest));
  EXPECT_THAT(r.err, HasSubstr("abd.txt"));
}

TEST(DigestTest, MalformedExpectedDigestExitsTwo) {
  TempDir dir;
  const std::string path = dir.WriteFile("abc.txt", "abc").string();
  CliRun r = RunModelfs({"digest", path, "--expect", "sha256:xyz"});
  EXPECT_EQ(r.exit_code, 2);
}

// ---------------------------------------------------------------------------------------------
// inspect over HTTP: a header under 64 KiB costs one range request.

TEST(InspectHttpTest, SmallHeaderIsReadInOneRequest) {
  TempDir root;
  SafetensorsWriter w;
  ASSERT_OK(w.AddTensor("embed.weight", "F32", {64, 1024},
                        F32Bytes(SyntheticWeights(3, 0, 64 * 1024, 0.02f))));
  ASSERT_OK(
      w.AddTensor("norm.weight", "BF16", {1024}, Bf16Bytes(SyntheticWeights(3, 1, 1024, 0.02f))));
  const std::string bytes = w.Serialize();
  ASSERT_GT(bytes.size(), 64u << 10);
  root.WriteFile("model.safetensors", bytes);
  ASSERT_OK_AND_ASSIGN(auto server, RangeServer::Start({.root = root.path()}));

  CliRun text = RunModelfs({"inspect", server->Url("model.safetensors")});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("read 65,536 bytes in 1 request(s)\n"));
  EXPECT_THAT(text.out, HasSubstr("params 66,560 (0.1M)\n"));
  auto log = server->ReadLog();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].method, "GET");
  EXPECT_EQ(log[0].path, "/model.safetensors");
  EXPECT_EQ(log[0].status, 206);

  server->ClearLog();
  CliRun json = RunModelfs({"inspect", "--json", server->Url("model.safetensors")});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  nlohmann::json j = ParseJson(json.out);
  EXPECT_EQ(j["files"][0]["read"]["requests"].get<uint64_t>(), 1u);
  EXPECT_EQ(j["files"][0]["read"]["bytes"].get<uint64_t>(), 65536u);
  EXPECT_EQ(j["parameters"].get<uint64_t>(), 66560u);
  EXPECT_EQ(server->ReadLog().size(), 1u);
}

TEST(InspectHttpTest, MissingUrlExitsTwo) {
  TempDir root;
  ASSERT_OK_AND_ASSIGN(auto server, RangeServer::Start({.root = root.path()}));
  CliRun r = RunModelfs({"inspect", server->Url("nothing.safetensors")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("nothing.safetensors"));
}

// ---------------------------------------------------------------------------------------------
// inspect DIR: a sharded checkpoint with an index and config.json.

class ShardedDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SafetensorsWriter a;
    ASSERT_OK(a.AddTensor("model.embed_tokens.weight", "BF16", {64, 32},
                          Bf16Bytes(SyntheticWeights(5, 0, 64 * 32, 0.02f))));
    ASSERT_OK(
        a.AddTensor("model.norm.weight", "F32", {32}, F32Bytes(SyntheticWeights(5, 1, 32, 0.02f))));
    ASSERT_OK(a.WriteFile(dir_.Join("model-00001-of-00002.safetensors").string()));
    SafetensorsWriter b;
    ASSERT_OK(b.AddTensor("model.layers.0.mlp.down_proj.weight", "BF16", {32, 48},
                          Bf16Bytes(down_proj_)));
    ASSERT_OK(b.AddTensor("lm_head.weight", "F16", {64, 32},
                          F16Bytes(SyntheticWeights(5, 3, 64 * 32, 0.02f))));
    ASSERT_OK(b.WriteFile(dir_.Join("model-00002-of-00002.safetensors").string()));
    WriteText(dir_.Join("model.safetensors.index.json"), R"({
  "metadata": {"total_size": 11392},
  "weight_map": {
    "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
    "model.norm.weight": "model-00001-of-00002.safetensors",
    "model.layers.0.mlp.down_proj.weight": "model-00002-of-00002.safetensors",
    "lm_head.weight": "model-00002-of-00002.safetensors"
  }
})");
    WriteText(dir_.Join("config.json"),
              R"({"model_type":"llama","num_hidden_layers":1,"num_attention_heads":4,)"
              R"("num_key_value_heads":2,"hidden_size":32,"intermediate_size":48,)"
              R"("vocab_size":64,"max_position_embeddings":256})");
  }
  TempDir dir_;
  const std::vector<float> down_proj_ = SyntheticWeights(5, 2, 32 * 48, 0.02f);
};

TEST_F(ShardedDirTest, InspectSumsBothShards) {
  CliRun r = RunModelfs({"inspect", "--json", dir_.path().string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  // 2048 + 32 + 1536 + 2048 parameters; 4096 + 128 + 3072 + 4096 bytes.
  EXPECT_EQ(j["parameters"].get<uint64_t>(), 5664u);
  EXPECT_EQ(j["tensor_bytes"].get<uint64_t>(), 11392u);
  EXPECT_EQ(j["dtypes"]["BF16"]["tensors"].get<uint64_t>(), 2u);
  EXPECT_EQ(j["dtypes"]["BF16"]["bytes"].get<uint64_t>(), 7168u);
  EXPECT_EQ(j["dtypes"]["F16"]["parameters"].get<uint64_t>(), 2048u);
  EXPECT_EQ(j["dtypes"]["F32"]["bytes"].get<uint64_t>(), 128u);
  EXPECT_EQ(j["precision"], "BF16");
  EXPECT_EQ(j["quantization"], "");
  ASSERT_EQ(j["files"].size(), 1u) << "shards must be read through the index, not twice";
  EXPECT_EQ(j["files"][0]["format"], "safetensors-index");
  ASSERT_EQ(j["files"][0]["shards"].size(), 2u);
  EXPECT_EQ(j["files"][0]["shards"][0]["tensors"].get<uint64_t>(), 2u);
  EXPECT_EQ(j["files"][0]["declared_total_size"].get<uint64_t>(), 11392u);
  EXPECT_EQ(j["shape"]["layers"].get<uint64_t>(), 1u);
  EXPECT_EQ(j["architecture"], "llama");
}

TEST_F(ShardedDirTest, InspectTextNamesShardsAndConfigShape) {
  CliRun r = RunModelfs({"inspect", dir_.path().string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("sharded safetensors, 2 shards, 4 tensors\n"));
  EXPECT_THAT(r.out, HasSubstr("params 5,664"));
  EXPECT_THAT(r.out, HasSubstr("index total_size 11,392, computed 11,392\n"));
  EXPECT_THAT(r.out, HasSubstr("config.json: llama, 1 layers, 4 heads, 2 KV heads, head dim 8\n"));
}

TEST_F(ShardedDirTest, MemoryUsesConfigShapeAndExactFileBytes) {
  CliRun r = RunModelfs({"memory", dir_.path().string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  EXPECT_EQ(j["ctx"].get<uint64_t>(), 256u);  // max_position_embeddings
  nlohmann::json f16 = FindBy(j["kv_cache"], "kv_type", "f16");
  EXPECT_EQ(f16["bytes_per_token"].get<uint64_t>(), 64u);  // 1 layer x 2 heads x (8 + 8) x 2
  nlohmann::json file = FindBy(j["weights"], "source", "file");
  EXPECT_EQ(file["bytes"].get<uint64_t>(), 11392u);
}

TEST_F(ShardedDirTest, PeekFindsATensorInTheSecondShard) {
  CliRun r = RunModelfs({"inspect", "--json", dir_.path().string(), "--peek",
                         "model.layers.0.mlp.down_proj.weight", "--peek-count", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  ASSERT_EQ(j["peek"]["values"].size(), 4u) << r.out;
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(j["peek"]["values"][i].get<float>(), Bf16ToFloat(FloatToBf16(down_proj_[i])));
  }
}

TEST_F(ShardedDirTest, TensorsJsonListsEveryTensorOfAShard) {
  CliRun r = RunModelfs(
      {"inspect", "--json", "--tensors", dir_.Join("model-00002-of-00002.safetensors").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  const nlohmann::json& ts = j["files"][0]["tensors"];
  ASSERT_EQ(ts.size(), 2u);
  // The writer lays out wider dtypes first, then by name: BF16 and F16 are both 2 bytes.
  nlohmann::json down = FindBy(ts, "name", "model.layers.0.mlp.down_proj.weight");
  ASSERT_FALSE(down.is_null());
  EXPECT_EQ(down["dtype"], "BF16");
  EXPECT_EQ(down["shape"], nlohmann::json({32, 48}));
  EXPECT_EQ(down["parameters"].get<uint64_t>(), 1536u);
  EXPECT_EQ(down["bytes"].get<uint64_t>(), 3072u);
  nlohmann::json head = FindBy(ts, "name", "lm_head.weight");
  EXPECT_EQ(head["bytes"].get<uint64_t>(), 4096u);
  EXPECT_EQ(head["offset"].get<uint64_t>() + 4096u == down["offset"].get<uint64_t>() ||
                down["offset"].get<uint64_t>() + 3072u == head["offset"].get<uint64_t>(),
            true);
}

TEST_F(ShardedDirTest, TensorsTextPrintsOneLinePerTensor) {
  CliRun r =
      RunModelfs({"inspect", "--tensors", dir_.Join("model-00001-of-00002.safetensors").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\nmodel.embed_tokens.weight BF16 [64, 32] 4,096\n"));
  EXPECT_THAT(r.out, HasSubstr("\nmodel.norm.weight F32 [32] 128\n"));
}

// ---------------------------------------------------------------------------------------------
// --peek on the tiny GGUF: every decodable dtype, compared with the weights it was made from.

class TinyGgufPeekTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    path_ = new std::string(dir_->Join("tiny.gguf").string());
    absl::StatusOr<GgufWriter> w = MakeTinyLlamaWriter();
    ASSERT_OK(w);
    // The tiny model has no BF16 tensor; add one the way a BF16 conversion would store it.
    ASSERT_OK(w->AddTensor("extra.bf16.weight", {64, 2}, /*BF16*/ 30,
                           Bf16Bytes(SyntheticWeights(11, 0, 128, 0.5f))));
    ASSERT_OK(w->WriteFile(*path_));
  }
  static void TearDownTestSuite() {
    delete path_;
    delete dir_;
  }
  static std::vector<float> Peek(const std::string& tensor, size_t n) {
    CliRun r = RunModelfs(
        {"inspect", "--json", *path_, "--peek", tensor, "--peek-count", std::to_string(n)});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    nlohmann::json j = ParseJson(r.out);
    std::vector<float> out;
    if (j.is_discarded() || !j.contains("peek")) return out;
    EXPECT_EQ(j["peek"]["tensor"], tensor);
    for (const auto& v : j["peek"]["values"]) out.push_back(v.get<float>());
    return out;
  }
  static float AbsMax(const std::vector<float>& v) {
    float m = 0;
    for (float x : v) m = std::max(m, std::fabs(x));
    return m;
  }
  static TempDir* dir_;
  static std::string* path_;
};
TempDir* TinyGgufPeekTest::dir_ = nullptr;
std::string* TinyGgufPeekTest::path_ = nullptr;

// MakeTinyLlamaWriter's streams (seed 42): 0 token_embd (F16), then per layer 1 attn_norm (F32,
// 1 + N(0, 0.05)), 2 ffn_down (Q4_0), 3 ffn_gate, 4 ffn_up, 5 ffn_norm, 6 attn_k (Q8_0), ...

TEST_F(TinyGgufPeekTest, F32NormValuesAreExact) {
  std::vector<float> src = SyntheticWeights(42, 1, 8, 0.05f);
  for (float& x : src) x += 1.0f;
  std::vector<float> got = Peek("blk.0.attn_norm.weight", 8);
  EXPECT_EQ(got, src);
}

TEST_F(TinyGgufPeekTest, F16EmbeddingValuesAreTheSourceRoundedToHalf) {
  const std::vector<float> src = SyntheticWeights(42, 0, 8, 0.02f);
  std::vector<float> got = Peek("token_embd.weight", 8);
  ASSERT_EQ(got.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(got[i], HalfToFloat(FloatToHalf(src[i])));
    EXPECT_NEAR(got[i], src[i], 1e-4);
  }
}

TEST_F(TinyGgufPeekTest, Bf16ValuesAreTheSourceRoundedToBfloat) {
  const std::vector<float> src = SyntheticWeights(11, 0, 8, 0.5f);
  std::vector<float> got = Peek("extra.bf16.weight", 8);
  ASSERT_EQ(got.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(got[i], Bf16ToFloat(FloatToBf16(src[i])));
    EXPECT_NEAR(got[i], src[i], std::fabs(src[i]) / 128);
  }
}

TEST_F(TinyGgufPeekTest, Q8_0ValuesAreWithinOneStepOfTheSource) {
  const std::vector<float> src = SyntheticWeights(42, 6, 32, 0.02f);  // blk.0.attn_k, block 0
  ASSERT_OK_AND_ASSIGN(std::string block, QuantizeQ8_0(src));
  ASSERT_OK_AND_ASSIGN(std::vector<float> decoded,
                       DequantizeValues(*FindGgmlTypeByName("Q8_0"), block, 32));
  std::vector<float> got = Peek("blk.0.attn_k.weight", 32);
  ASSERT_EQ(got.size(), 32u);
  const float step = AbsMax(src) / 127;
  for (size_t i = 0; i < 32; ++i) {
    EXPECT_EQ(got[i], decoded[i]) << i;
    EXPECT_NEAR(got[i], src[i], step) << i;
  }
}

TEST_F(TinyGgufPeekTest, Q4_0ValuesAreWithinOneStepOfTheSource) {
  const std::vector<float> src = SyntheticWeights(42, 2, 32, 0.02f);  // blk.0.ffn_down, block 0
  ASSERT_OK_AND_ASSIGN(std::string block, QuantizeQ4_0(src));
  ASSERT_OK_AND_ASSIGN(std::vector<float> decoded,
                       DequantizeValues(*FindGgmlTypeByName("Q4_0"), block, 32));
  std::vector<float> got = Peek("blk.0.ffn_down.weight", 32);
  ASSERT_EQ(got.size(), 32u);
  const float step = AbsMax(src) / 8;
  for (size_t i = 0; i < 32; ++i) {
    EXPECT_EQ(got[i], decoded[i]) << i;
    EXPECT_NEAR(got[i], src[i], step) << i;
  }
}

TEST_F(TinyGgufPeekTest, TextPeekPrintsTheValuesAfterTheSummary) {
  CliRun r =
      RunModelfs({"inspect", *path_, "--peek", "blk.0.attn_norm.weight", "--peek-count", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<float> src = SyntheticWeights(42, 1, 2, 0.05f);
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("\npeek blk.0.attn_norm.weight: ",
                                            absl::StrFormat("%g, %g", src[0] + 1.0f, src[1] + 1.0f),
                                            "\n")));
  EXPECT_THAT(r.out, HasSubstr("tiny.gguf: GGUF v3"));
}

TEST_F(TinyGgufPeekTest, PeekOfAnUnknownTensorExitsTwo) {
  CliRun r = RunModelfs({"inspect", *path_, "--peek", "no.such.weight"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("no.such.weight"));
}

TEST_F(TinyGgufPeekTest, InspectCountsEveryDtype) {
  CliRun r = RunModelfs({"inspect", "--json", *path_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  for (const char* dtype : {"F32", "F16", "BF16", "Q8_0", "Q4_0"}) {
    EXPECT_TRUE(j["dtypes"].contains(dtype)) << dtype;
  }
  // 4 layers x 4 attention tensors Q8_0; 4 x 3 FFN tensors Q4_0; 4 x 2 + 1 norms F32.
  EXPECT_EQ(j["dtypes"]["Q8_0"]["tensors"].get<uint64_t>(), 16u);
  EXPECT_EQ(j["dtypes"]["Q4_0"]["tensors"].get<uint64_t>(), 12u);
  EXPECT_EQ(j["dtypes"]["F32"]["tensors"].get<uint64_t>(), 9u);
  EXPECT_EQ(j["dtypes"]["F16"]["tensors"].get<uint64_t>(), 2u);
  EXPECT_EQ(j["dtypes"]["BF16"]["parameters"].get<uint64_t>(), 128u);
}

}  // namespace
}  // namespace modelfs
