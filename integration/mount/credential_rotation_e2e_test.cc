// `modelfs mount` against a registry with token auth whose credentials come from a docker
// credential helper (a real script on $PATH speaking docker-credential-helpers' protocol), while
// tokens expire every 5 s and the cold load, slowed by a shaped link (fault_proxy.py --rate), lasts
// 20 s or more: every read succeeds with the right bytes, tokens are renewed on the way, and a
// password rotated mid-load (the token server and the helper read it from one file) is picked up
// by running the helper again when the token server refuses the old one; no restart.
// Needs /dev/fuse, docker-registry and openssl (skipped without, failed under CI=true); only
// talks to 127.0.0.1.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "integration/mount/mount_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/synth/synth_model.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kLinkBytesPerS = 320 * 1024;  // ~8 MiB of blobs: a load of 25 s or more

struct Env {
  std::unique_ptr<TempDir> work;
  std::unique_ptr<RegistryFixture> registry;
  std::string password_file;  // the token server's and the helper's password
  std::string helper_dir;     // on $PATH: docker-credential-modelfs-e2e
  std::string helper_log;     // one line per helper run
  std::map<std::string, std::string> files;
  std::string volume_ref;
};
Env* env = nullptr;
std::string unavailable;
std::string setup_error;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFileAtomically(const std::string& path, const std::string& bytes) {
  std::ofstream(path + ".tmp", std::ios::trunc) << bytes;
  fs::rename(path + ".tmp", path);
}

class CredentialEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    BecomeSubreaper();
    if (access("/dev/fuse", R_OK | W_OK) != 0) {
      unavailable = "no usable /dev/fuse";
      return;
    }
    setenv("DOCKER_CONFIG", "/nonexistent/modelfs-credential-rotation-e2e", 1);
    env = new Env();
    env->work = std::make_unique<TempDir>();
    env->password_file = env->work->Join("password").string();
    WriteFileAtomically(env->password_file, "pw-1\n");
    // The helper answers with the password in the file at the time it runs.
    env->helper_dir = env->work->Join("bin").string();
    env->helper_log = env->work->Join("helper.log").string();
    fs::create_directories(env->helper_dir);
    const std::string helper = env->helper_dir + "/docker-credential-modelfs-e2e";
    std::ofstream(helper) << "#!/bin/sh\n[ \"$1\" = get ] || exit 1\nserver=$(cat)\n"
                          << "echo \"$server\" >> '" << env->helper_log << "'\n"
                          << "printf '{\"ServerURL\":\"%s\",\"Username\":\"modelfs\","
                             "\"Secret\":\"%s\"}' \"$server\" \"$(cat '"
                          << env->password_file << "')\"\n";
    fs::permissions(helper, fs::perms::owner_all);
    setenv("PATH", absl::StrCat(env->helper_dir, ":", getenv("PATH")).c_str(), 1);

    RegistryFixtureOptions ro;
    ro.auth = RegistryFixtureOptions::Auth::kToken;
    ro.token_expires_in = 5;
    ro.password_file = env->password_file;
    auto reg = RegistryFixture::Start(ro);
    if (!reg.ok()) {
      if (absl::IsFailedPrecondition(reg.status())) {
        unavailable = std::string(reg.status().message());
      } else {
        setup_error = absl::StrCat("the registry did not start: ", reg.status().message());
      }
      return;
    }
    env->registry = std::move(*reg);
    const std::string dir = env->work->Join("model").string();
    SynthModelSpec spec;
    spec.target_mib = 8;
    spec.hidden = 256;
    spec.heads = 4;
    spec.kv_heads = 2;
    spec.ffn = 704;
    spec.vocab = 2048;
    spec.seed = 45;
    auto written = WriteSynthSafetensorsModel(dir, spec);
    if (!written.ok()) {
      setup_error = absl::StrCat("writing the model: ", written.status().message());
      return;
    }
    for (const std::string& rel : written->files) env->files[rel] = ReadAll(dir + "/" + rel);
    const std::string push_config = env->work->Join("push-config.json").string();
    std::ofstream(push_config) << R"({"auths":{")" << env->registry->host_port()
                               << R"(":{"username":"modelfs","password":"pw-1"}}})";
    const std::string model_ref = absl::StrCat(env->registry->host_port(), "/creds/model:v1");
    env->volume_ref = model_ref + "-volume";
    auto push = RunCommand(
        {ModelfsBinary(), "push", "--plain-http", "--docker-config", push_config, model_ref, dir},
        absl::Seconds(120));
    if (!push.ok() || push->exit_code != 0) {
      setup_error = absl::StrCat("modelfs push: ", push.ok() ? push->err : push.status().message());
    }
  }
  void TearDown() override {
    delete env;
    env = nullptr;
  }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new CredentialEnvironment);

class CredentialRotationE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_OR_FAIL_IF_UNAVAILABLE(unavailable);
    ASSERT_EQ(setup_error, "") << "suite setup failed";
    WriteFileAtomically(env->password_file, "pw-1\n");
    std::ofstream(env->helper_log, std::ios::trunc).close();
    tmp_ = std::make_unique<TempDir>();
    FaultProxyOptions po;
    po.rate_bytes_per_s = kLinkBytesPerS;
    // Distribution 2.8 accepts a token for a while past its exp (measured: still accepted 4 s
    // after a 2 s token expired), so the proxy is the registry that does not: a token older
    // than its 5 s gets the registry's 401. Tests that want refusals set a shorter age.
    po.bearer_max_age_s = bearer_max_age_s_;
    ASSERT_OK_AND_ASSIGN(proxy_, FaultProxy::Start(env->registry->host_port(), po));
    certs_ = tmp_->Join("certs.d").string();
    fs::create_directories(fs::path(certs_) / env->registry->host_port());
    std::ofstream(fs::path(certs_) / env->registry->host_port() / "hosts.toml")
        << "server = \"http://" << proxy_->host_port() << "\"\n";
    docker_config_ = tmp_->Join("config.json").string();
    std::ofstream(docker_config_) << R"({"credHelpers":{")" << env->registry->host_port()
                                  << R"(":"modelfs-e2e"}})";
    mnt_ = tmp_->Join("mnt").string();
    fs::create_directories(mnt_);
  }
  void TearDown() override {
    if (mount_) {
      EXPECT_OK(mount_->Unmount());
    }
    if (HasFailure() && tmp_) {
      std::cerr << "mount log:\n" << ReadAll(tmp_->Join("mount.log").string()) << "\n";
    }
    mount_.reset();
    proxy_.reset();
    tmp_.reset();
  }

  void Mount() {
    MountOptions o;
    o.cache_dir = tmp_->Join("cache").string();
    o.read_deadline_s = 60;
    o.hosts_dir = certs_;
    o.docker_config = docker_config_;
    o.log_file = tmp_->Join("mount.log").string();
    auto m = ModelMount::Start(env->volume_ref, mnt_, o);
    ASSERT_OK(m.status());
    mount_ = std::move(*m);
  }

  // Reads every file through the mount in 1 MiB preads with readahead off (as a loader reading
  // tensors does), in a child process bounded by a timeout, comparing every byte. Each chunk is
  // then its own request, so requests keep starting across the load and need fresh tokens.
  // Returns the failed reads; `seconds` gets the time the load took.
  int LoadEveryFile(double* seconds) {
    int failed = 0;
    const auto start = std::chrono::steady_clock::now();
    for (const auto& [rel, want] : env->files) {
      const std::string path = absl::StrCat(mnt_, "/", rel);
      std::string buf(1 << 20, '\0');
      pid_t pid = fork();
      if (pid == 0) {
        int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) _exit(2);
        posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
        for (size_t pos = 0; pos < want.size();) {
          ssize_t got = pread(fd, buf.data(), std::min(buf.size(), want.size() - pos),
                              static_cast<off_t>(pos));
          if (got <= 0) _exit(3);
          if (memcmp(buf.data(), want.data() + pos, static_cast<size_t>(got)) != 0) _exit(4);
          pos += static_cast<size_t>(got);
        }
        _exit(0);
      }
      int status = -1;
      for (int waited = 0; waited < 1800; ++waited) {  // 180 s
        if (waitpid(pid, &status, WNOHANG) == pid) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        status = -1;
      }
      if (status == -1) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
      if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        ++failed;
        ADD_FAILURE() << rel << ": "
                      << (status == -1 ? std::string("hung")
                                       : absl::StrCat("reader exit ", WEXITSTATUS(status),
                                                      " (2 open, 3 read error, 4 wrong bytes)"));
      }
    }
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return failed;
  }

  int HelperRuns() {
    std::vector<std::string> lines =
        absl::StrSplit(ReadAll(env->helper_log), '\n', absl::SkipEmpty());
    return static_cast<int>(lines.size());
  }

  double bearer_max_age_s_ = 5;
  std::unique_ptr<TempDir> tmp_;
  std::unique_ptr<FaultProxy> proxy_;
  std::unique_ptr<ModelMount> mount_;
  std::string certs_;
  std::string docker_config_;
  std::string mnt_;
};

TEST_F(CredentialRotationE2eTest, TokensExpiringEvery5sDuringA20sColdLoadFailNoRead) {
  Mount();
  ASSERT_NE(mount_, nullptr);
  ASSERT_OK_AND_ASSIGN(int tokens_before, env->registry->TokenRequestCount());
  double seconds = 0;
  EXPECT_EQ(LoadEveryFile(&seconds), 0);
  ASSERT_OK_AND_ASSIGN(int tokens_after, env->registry->TokenRequestCount());
  absl::StatusOr<int> blob_gets = proxy_->Stat("blob_gets");
  std::cerr << "cold load: " << seconds << " s, " << tokens_after - tokens_before
            << " token requests, " << (blob_gets.ok() ? *blob_gets : -1)
            << " blob GETs, helper runs " << HelperRuns() << "\n";
  RecordProperty("load_seconds", absl::StrCat(seconds));
  // The shaped link is what makes the load outlast several tokens; without it the test proves
  // nothing, so it says so.
  EXPECT_GE(seconds, 20) << "the load was not slowed enough to outlast 4 tokens";
  // Requests start in readahead batches (measured: 11 blob GETs in 3 batches over 26 s), and a
  // token is asked for when a request starts after the last one expired: at least twice here.
  EXPECT_GE(tokens_after - tokens_before, 2) << "tokens were not renewed during the load";
  EXPECT_EQ(HelperRuns(), 1) << "the helper's answer is kept while the registry accepts it";
}

// Tokens refused 1 s after they were issued although they claim 5 s (revoked early, or the
// registry's clock ahead of the token server's): requests keep meeting 401s during the load, each
// answered by one token fetch shared by the requests refused together, and no read fails.
class EarlyRevocationE2eTest : public CredentialRotationE2eTest {
 protected:
  EarlyRevocationE2eTest() { bearer_max_age_s_ = 1; }
};

TEST_F(EarlyRevocationE2eTest, TokensRefusedBeforeTheyExpireFailNoRead) {
  Mount();
  ASSERT_NE(mount_, nullptr);
  double seconds = 0;
  EXPECT_EQ(LoadEveryFile(&seconds), 0);
  absl::StatusOr<int> refused = proxy_->Stat("bearer_refused");
  ASSERT_OK(refused.status());
  std::cerr << "load with tokens refused after 1 s: " << seconds << " s, " << *refused
            << " requests refused for their token\n";
  EXPECT_GE(*refused, 1) << "no request met a refused token: the test proved nothing";
}

TEST_F(CredentialRotationE2eTest, PasswordRotatedMidLoadIsFetchedAgainFromTheHelper) {
  Mount();
  ASSERT_NE(mount_, nullptr);
  std::atomic<bool> done{false};
  std::thread rotate([&] {
    for (int i = 0; i < 80 && !done; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    WriteFileAtomically(env->password_file, "pw-2\n");
  });
  double seconds = 0;
  int failed = LoadEveryFile(&seconds);
  done = true;
  rotate.join();
  EXPECT_EQ(failed, 0);
  std::cerr << "load with a rotation after 8 s: " << seconds << " s, helper runs " << HelperRuns()
            << "\n";
  EXPECT_GE(seconds, 20) << "the load ended before the rotation could matter";
  EXPECT_GE(HelperRuns(), 2) << "the helper was not asked again after the token server "
                                "refused the old password";
}

}  // namespace
}  // namespace modelfs::testing
