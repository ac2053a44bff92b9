// `modelfs mount` through a proxy whose blob bodies break: reset after some bytes, cut short of
// their Content-Length, stalled mid-body, a flipped byte, or a Content-Range that names another
// range (testsupport/harness/fault_proxy.py --blob-fault). A small model (a 6 MiB safetensors
// file, so several 1 MiB chunks) is pushed once with `modelfs push` to a real docker-registry on
// loopback; every test mounts it through a fresh proxy (hosts.toml `server` = the proxy) with a
// fresh cache, and the fault is switched on only once the mount is ready, so it hits the reads
// (the blobs of every file), not the manifests and config the mount resolves at start.
//
// What must hold, for each fault:
//  - never a wrong byte: every byte a read returns equals the source;
//  - never a hang: every read ends (each runs in a child process with a watchdog);
//  - a fault on the first answers only: the reads succeed (a reset or cut body at once, within
//    the read's own retries; a stall at worst after an EIO: a stalled request is given up after a
//    third of the read deadline; a chunk that fails verification or an answer with the wrong
//    Content-Range is fetched once more within the read, so one such answer costs no EIO, and
//    a second fails the read that needed it);
//  - a fault on every answer: EIO within about the read deadline (3 s here), and once the fault
//    is cleared the same mount reads every file right.
// Needs /dev/fuse (skipped without it, failed under CI=true); only talks to 127.0.0.1.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "integration/mount/mount_test_env.h"
#include "nlohmann/json.hpp"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/synth/synth_model.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;
using BlobFault = FaultProxyOptions::BlobFault;

constexpr uint64_t kMiB = 1ull << 20;
constexpr double kDeadlineS = 3;  // --read-deadline of every mount here

// One registry and one model for the whole binary.
struct Env {
  std::unique_ptr<TempDir> work;
  std::unique_ptr<RegistryFixture> registry;
  std::string dir;
  std::map<std::string, std::string> files;  // relative path -> bytes
  std::string weights;                       // the largest file
  std::string model_ref;                     // M: whole-layer verification
  std::string volume_ref;                    // V: chunk verification
};
Env* env = nullptr;
std::string unavailable;  // a missing component: every test skips (fails under CI=true)
std::string setup_error;  // a setup step that failed: every test fails

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class FaultEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    BecomeSubreaper();
    if (access("/dev/fuse", R_OK | W_OK) != 0) {
      unavailable = "no usable /dev/fuse";
      return;
    }
    setenv("DOCKER_CONFIG", "/nonexistent/modelfs-fault-proxy-e2e", 1);
    env = new Env();
    env->work = std::make_unique<TempDir>();
    auto reg = RegistryFixture::Start();
    if (!reg.ok()) {
      setup_error = absl::StrCat("the registry did not start: ", reg.status().message());
      return;
    }
    env->registry = std::move(*reg);
    env->dir = env->work->Join("model").string();
    SynthModelSpec spec;
    spec.target_mib = 6;
    spec.hidden = 256;
    spec.heads = 4;
    spec.kv_heads = 2;
    spec.ffn = 704;
    spec.vocab = 2048;
    spec.seed = 29;
    auto written = WriteSynthSafetensorsModel(env->dir, spec);
    if (!written.ok()) {
      setup_error = absl::StrCat("writing the model: ", written.status().message());
      return;
    }
    for (const std::string& rel : written->files) {
      env->files[rel] = ReadAll(env->dir + "/" + rel);
      if (env->weights.empty() || env->files[rel].size() > env->files[env->weights].size()) {
        env->weights = rel;
      }
    }
    if (env->files[env->weights].size() < 4 * kMiB) {
      setup_error = absl::StrCat("the weights are only ", env->files[env->weights].size(),
                                 " bytes; the tests want several 1 MiB chunks");
      return;
    }
    env->model_ref = absl::StrCat(env->registry->host_port(), "/faults/model:v1");
    env->volume_ref = env->model_ref + "-volume";
    auto push = RunCommand({ModelfsBinary(), "push", "--plain-http", env->model_ref, env->dir},
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
const auto* const kFaultEnvironment = ::testing::AddGlobalTestEnvironment(new FaultEnvironment);

// What one bounded read of [offset, offset + length) of a file through the mount gave.
struct ReadOutcome {
  enum Kind : int { kRight = 0, kWrongBytes = 1, kError = 2, kShort = 3, kHung = 4, kLost = 5 };
  int kind = kLost;
  int err = 0;          // kError: errno of the failed read
  uint64_t offset = 0;  // kWrongBytes: first wrong byte; kError/kShort: where it stopped
  double seconds = 0;
};

std::string Describe(const ReadOutcome& o) {
  static const char* const kNames[] = {"right bytes", "WRONG BYTES", "error",
                                       "short read",  "HUNG",        "child lost"};
  std::string s = absl::StrCat(kNames[o.kind], " after ", o.seconds, " s");
  if (o.kind == ReadOutcome::kError) absl::StrAppend(&s, ": ", strerror(o.err));
  if (o.kind != ReadOutcome::kRight) absl::StrAppend(&s, " at offset ", o.offset);
  return s;
}

// Reads [offset, offset + length) of `path` in a child process (1 MiB preads, readahead off
// when `random`) and compares every byte it gets with `want`. A child still reading after
// `timeout_s` is killed: kHung. The child only calls open, pread, memcmp, write and _exit (its
// buffer is allocated before the fork).
ReadOutcome BoundedRead(const std::string& path, const std::string& want, uint64_t offset,
                        uint64_t length, bool random, double timeout_s = 20) {
  ReadOutcome out;
  std::string buf(std::min<uint64_t>(length, kMiB), '\0');
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return out;
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    ReadOutcome r;
    r.kind = ReadOutcome::kRight;
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      r.kind = ReadOutcome::kError;
      r.err = errno;
    } else {
      if (random) posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
      uint64_t pos = offset;
      const uint64_t end = offset + length;
      while (pos < end) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(end - pos, buf.size()));
        ssize_t got = pread(fd, buf.data(), n, static_cast<off_t>(pos));
        if (got < 0) {
          r.kind = ReadOutcome::kError;
          r.err = errno;
          r.offset = pos;
          break;
        }
        if (got == 0) {
          r.kind = ReadOutcome::kShort;
          r.offset = pos;
          break;
        }
        if (memcmp(buf.data(), want.data() + pos, static_cast<size_t>(got)) != 0) {
          r.kind = ReadOutcome::kWrongBytes;
          for (ssize_t i = 0; i < got; ++i) {
            if (buf[i] != want[pos + i]) {
              r.offset = pos + i;
              break;
            }
          }
          break;
        }
        pos += static_cast<uint64_t>(got);
      }
    }
    ssize_t w = write(fds[1], &r, sizeof(r));
    _exit(w == sizeof(r) ? 0 : 1);
  }
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    return out;
  }
  pollfd p{fds[0], POLLIN, 0};
  int ready = poll(&p, 1, static_cast<int>(timeout_s * 1000));
  if (ready == 1 && read(fds[0], &out, sizeof(out)) == sizeof(out)) {
    // what the child said
  } else {
    out = ReadOutcome();
    out.kind = ReadOutcome::kHung;
    kill(pid, SIGKILL);
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

class FaultProxyE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_OR_FAIL_IF_UNAVAILABLE(unavailable);
    ASSERT_EQ(setup_error, "") << "suite setup failed";
    tmp_ = std::make_unique<TempDir>();
    ASSERT_OK_AND_ASSIGN(proxy_, FaultProxy::Start(env->registry->host_port(), {}));
    // Every request for the registry goes to the proxy (V's record names M on the registry's
    // own host:port, so the ref alone would reach the weights past the proxy).
    certs_ = tmp_->Join("certs.d").string();
    fs::create_directories(fs::path(certs_) / env->registry->host_port());
    std::ofstream(fs::path(certs_) / env->registry->host_port() / "hosts.toml")
        << "server = \"http://" << proxy_->host_port() << "\"\n";
    mnt_ = tmp_->Join("mnt").string();
    fs::create_directories(mnt_);
  }

  void TearDown() override {
    if (proxy_) (void)proxy_->ClearBlobFault();
    for (auto& m : mounts_) EXPECT_OK(m->Unmount());
    if (HasFailure() && tmp_) {
      std::cerr << "mount daemon log:\n" << ReadAll(tmp_->Join("mount.log").string()) << "\n";
    }
    mounts_.clear();
    proxy_.reset();
    tmp_.reset();
  }

  ModelMount* Mount(const std::string& ref) {
    MountOptions o;
    o.cache_dir = tmp_->Join("cache").string();
    o.read_deadline_s = kDeadlineS;
    o.hosts_dir = certs_;
    o.log_file = tmp_->Join("mount.log").string();
    auto m = ModelMount::Start(ref, mnt_, o);
    EXPECT_OK(m.status());
    if (!m.ok()) return nullptr;
    mounts_.push_back(std::move(*m));
    return mounts_.back().get();
  }

  // Whole-file reads of `rel` until one gives the right bytes, at most `passes` of them; every
  // failed pass must be EIO (never wrong bytes, never a hang). Returns the passes it took (0:
  // none succeeded).
  int ReadUntilRight(const std::string& rel, int passes) {
    const std::string& want = env->files.at(rel);
    for (int pass = 1; pass <= passes; ++pass) {
      ReadOutcome o = BoundedRead(mnt_ + "/" + rel, want, 0, want.size(), /*random=*/false);
      RecordProperty(absl::StrCat(rel, "_pass", pass), Describe(o));
      std::cerr << rel << " pass " << pass << ": " << Describe(o) << "\n";
      if (o.kind == ReadOutcome::kRight) return pass;
      EXPECT_EQ(o.kind, ReadOutcome::kError) << rel << " pass " << pass << ": " << Describe(o);
      if (o.kind != ReadOutcome::kError) return 0;
      EXPECT_EQ(o.err, EIO) << rel << " pass " << pass << ": " << Describe(o);
    }
    return 0;
  }

  // `modelfs stats --json` of the mount, as an admin runs it right after a read.
  nlohmann::json CliStats() {
    absl::StatusOr<CommandResult> r =
        RunCommand({ModelfsBinary(), "stats", "--json", mnt_}, absl::Seconds(10));
    EXPECT_OK(r.status());
    if (!r.ok()) return nlohmann::json::object();
    EXPECT_EQ(r->exit_code, 0) << r->err;
    return nlohmann::json::parse(r->out, nullptr, false);
  }

  int Stat(const std::string& name) {
    auto v = proxy_->Stat(name);
    EXPECT_OK(v.status());
    return v.ok() ? *v : -1;
  }

  std::unique_ptr<TempDir> tmp_;
  std::unique_ptr<FaultProxy> proxy_;
  std::string certs_;
  std::string mnt_;
  std::vector<std::unique_ptr<ModelMount>> mounts_;
};

struct FaultCase {
  const char* name;
  BlobFault fault;
  // A fault on the first answers only is survived within the read (a transport failure,
  // retried); otherwise the read that meets it may fail once with EIO.
  bool retried_within_the_read;
};

const FaultCase kCases[] = {
    {"Reset", BlobFault::kReset, true},
    {"Truncate", BlobFault::kTruncate, true},
    {"Stall", BlobFault::kStall, false},
    {"Corrupt", BlobFault::kCorrupt, false},
    {"WrongRange", BlobFault::kWrongRange, false},
};

class BlobFaultTest : public FaultProxyE2eTest, public ::testing::WithParamInterface<FaultCase> {};

// The first two blob answers broken, then the proxy behaves: every file reads right.
TEST_P(BlobFaultTest, AFaultOnTheFirstAnswersOnlyStillReadsEveryFileRight) {
  const FaultCase& c = GetParam();
  ASSERT_NE(Mount(env->volume_ref), nullptr);
  ASSERT_OK(proxy_->SetBlobFault(c.fault, /*first=*/2));
  // The weights first: their first answers take the fault.
  std::vector<std::string> order = {env->weights};
  for (const auto& [rel, bytes] : env->files) {
    if (rel != env->weights) order.push_back(rel);
  }
  for (const std::string& rel : order) {
    // A stall costs up to two stall timeouts (a third of the read deadline each, rounded up to
    // 1 s here): the request, and its retry, which can take the second faulty answer. A read
    // that waits on them past its deadline fails (1 s once the registry is marked slow).
    int passes = ReadUntilRight(rel, c.retried_within_the_read ? 1 : 6);
    EXPECT_GT(passes, 0) << rel << " never read right";
  }
  EXPECT_EQ(Stat("blob_faults"), 2) << "the fault did not hit (or hit more than 2 answers)";
}

// Every blob answer broken: reads fail with EIO within about the read deadline and never
// return a wrong byte; once the fault is cleared, the same mount reads every file right.
TEST_P(BlobFaultTest, AFaultOnEveryAnswerIsEioWithinTheDeadlineAndClearingItHeals) {
  const FaultCase& c = GetParam();
  ASSERT_NE(Mount(env->volume_ref), nullptr);
  ASSERT_OK(proxy_->SetBlobFault(c.fault, /*first=*/0));
  const std::string& want = env->files.at(env->weights);
  // A read inside the third chunk, and one whole file.
  ReadOutcome o = BoundedRead(mnt_ + "/" + env->weights, want, 2 * kMiB + 4096, 65536,
                              /*random=*/true);
  RecordProperty("faulty_pread", Describe(o));
  EXPECT_EQ(o.kind, ReadOutcome::kError) << Describe(o);
  EXPECT_EQ(o.err, EIO) << Describe(o);
  EXPECT_LT(o.seconds, kDeadlineS + 2.5) << Describe(o);
  o = BoundedRead(mnt_ + "/" + env->weights, want, 0, want.size(), /*random=*/false);
  RecordProperty("faulty_full_read", Describe(o));
  EXPECT_EQ(o.kind, ReadOutcome::kError) << Describe(o);
  EXPECT_EQ(o.err, EIO) << Describe(o);
  EXPECT_GT(Stat("blob_faults"), 0);

  ASSERT_OK(proxy_->ClearBlobFault());
  if (c.fault == BlobFault::kStall) {
    // The connections that stalled stay stalled (the proxy holds them open): the client must
    // give them up within about a read deadline, and retry on new ones, which the proxy now
    // serves. Before that fix the readahead requests on them held their chunks for the 60 s
    // stall timeout, and every read of those chunks failed with EIO meanwhile.
    absl::SleepFor(absl::Seconds(kDeadlineS + 1.5));
  }
  for (const auto& [rel, bytes] : env->files) {
    EXPECT_GT(ReadUntilRight(rel, 1), 0)
        << rel << " did not read right after the fault was cleared";
  }
}

// One wrong answer (a flipped byte, a Content-Range for another range) is not an EIO: the chunk is
// fetched once more within the read, and every file reads right at the first pass. (Every answer
// wrong is EIO within the deadline: the test above.)
class OneWrongAnswerTest : public FaultProxyE2eTest,
                           public ::testing::WithParamInterface<BlobFault> {};

TEST_P(OneWrongAnswerTest, IsRefetchedWithinTheReadAndEveryFileReadsRight) {
  ASSERT_NE(Mount(env->volume_ref), nullptr);
  ASSERT_OK(proxy_->SetBlobFault(GetParam(), /*first=*/1));
  std::vector<std::string> order = {env->weights};
  for (const auto& [rel, bytes] : env->files) {
    if (rel != env->weights) order.push_back(rel);
  }
  for (const std::string& rel : order) {
    EXPECT_EQ(ReadUntilRight(rel, 1), 1) << rel << " did not read right at the first pass";
  }
  EXPECT_EQ(Stat("blob_faults"), 1) << "the fault did not hit (or hit more than once)";
}

// A middlebox that flipped a byte once: the read is right, and `modelfs stats` right after it
// shows the refusal and the refetch that recovered from it.
TEST_F(FaultProxyE2eTest, OneFlippedByteIsCountedAsOneFailureAndOneRecoveryAtOnce) {
  ASSERT_NE(Mount(env->volume_ref), nullptr);
  ASSERT_OK(proxy_->SetBlobFault(BlobFault::kCorrupt, /*first=*/1));
  ASSERT_EQ(ReadUntilRight(env->weights, 1), 1);
  ASSERT_EQ(Stat("blob_faults"), 1);
  nlohmann::json stats = CliStats();
  EXPECT_EQ(stats.value("verification_failures", -1), 1) << stats.dump();
  EXPECT_EQ(stats.value("refetch_recoveries", -1), 1) << stats.dump();
}

// Every answer corrupt: the read fails, and `modelfs stats` run right after the EIO counts
// both refusals (the answer and its refetch), not the counters of up to a second before.
TEST_F(FaultProxyE2eTest, AChunkRefusedForGoodIsCountedByTheTimeStatsIsAskedAfterTheEio) {
  ASSERT_NE(Mount(env->volume_ref), nullptr);
  ASSERT_OK(proxy_->SetBlobFault(BlobFault::kCorrupt, /*first=*/0));
  const std::string& want = env->files.at(env->weights);
  ReadOutcome o = BoundedRead(mnt_ + "/" + env->weights, want, 2 * kMiB + 4096, 65536,
                              /*random=*/true);
  ASSERT_EQ(o.kind, ReadOutcome::kError) << Describe(o);
  ASSERT_EQ(o.err, EIO) << Describe(o);
  nlohmann::json stats = CliStats();
  EXPECT_EQ(stats.value("verification_failures", -1), 2) << stats.dump();
  EXPECT_EQ(stats.value("refetch_recoveries", -1), 0) << stats.dump();
}

INSTANTIATE_TEST_SUITE_P(Faults, OneWrongAnswerTest,
                         ::testing::Values(BlobFault::kCorrupt, BlobFault::kWrongRange),
                         [](const ::testing::TestParamInfo<BlobFault>& info) {
                           return std::string(info.param == BlobFault::kCorrupt ? "Corrupt"
                                                                                : "WrongRange");
                         });

// A readahead request (the cache's own, with a long deadline) that stalls must not hold the
// chunks it carries past a read deadline: once the proxy serves new connections again, the
// client gives up the stalled one and fetches them anew, so a read a little over a deadline
// later gets the right bytes (it used to wait for the 60 s stall timeout: EIO meanwhile, and an
// unmount that had to kill the daemon).
TEST_F(FaultProxyE2eTest, AStalledReadaheadRequestIsGivenUpWithinAboutTheReadDeadline) {
  ASSERT_NE(Mount(env->volume_ref), nullptr);
  const std::string& want = env->files.at(env->weights);
  // Every request past the fourth chunk stalls: the readahead that the first 4 MiB read in a
  // row earn does (reads are direct_io: the kernel sends no readahead of its own).
  ASSERT_OK(proxy_->SetBlobFault(BlobFault::kStall, /*first=*/0, "", /*bytes=*/-1, /*offset=*/-1,
                                 /*from=*/4 * kMiB));
  ReadOutcome o = BoundedRead(mnt_ + "/" + env->weights, want, 0, 4 * kMiB, /*random=*/false);
  EXPECT_EQ(o.kind, ReadOutcome::kRight) << Describe(o);
  // Give the readahead time to start and stall.
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_GT(Stat("blob_faults"), 0) << "no request past the fourth chunk was made";
  ASSERT_OK(proxy_->ClearBlobFault());
  absl::SleepFor(absl::Seconds(kDeadlineS + 1.5));
  o = BoundedRead(mnt_ + "/" + env->weights, want, 0, want.size(), /*random=*/false);
  EXPECT_EQ(o.kind, ReadOutcome::kRight) << Describe(o);
  auto start = std::chrono::steady_clock::now();
  ASSERT_OK(mounts_.back()->Unmount());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5)
      << "the daemon took this long to exit";
}

INSTANTIATE_TEST_SUITE_P(Modes, BlobFaultTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<FaultCase>& info) {
                           return std::string(info.param.name);
                         });

// Whole-layer verification (M, not V): the layer is fetched and hashed whole before a byte is
// served, so a reset or a cut body on the first answers must still end in the right bytes.
TEST_F(FaultProxyE2eTest, WholeLayerModeSurvivesResetsAndTruncationsOfTheFirstAnswers) {
  ASSERT_NE(Mount(env->model_ref), nullptr);
  ASSERT_OK(proxy_->SetBlobFault(BlobFault::kReset, /*first=*/1));
  EXPECT_GT(ReadUntilRight(env->weights, 1), 0);
  ASSERT_OK(proxy_->SetBlobFault(BlobFault::kTruncate, /*first=*/1));
  for (const auto& [rel, bytes] : env->files) {
    if (rel != env->weights) {
      EXPECT_GT(ReadUntilRight(rel, 1), 0) << rel;
    }
  }
  EXPECT_EQ(Stat("blob_faults"), 2);
}

// Whole-layer verification with a byte flipped in every answer: EIO, never the bytes.
TEST_F(FaultProxyE2eTest, WholeLayerModeNeverServesACorruptedLayer) {
  ASSERT_NE(Mount(env->model_ref), nullptr);
  ASSERT_OK(proxy_->SetBlobFault(BlobFault::kCorrupt, /*first=*/0));
  const std::string& want = env->files.at(env->weights);
  ReadOutcome o = BoundedRead(mnt_ + "/" + env->weights, want, 0, want.size(), /*random=*/false);
  EXPECT_EQ(o.kind, ReadOutcome::kError) << Describe(o);
  EXPECT_EQ(o.err, EIO) << Describe(o);
  EXPECT_LT(o.seconds, kDeadlineS + 2.5) << Describe(o);
  EXPECT_GT(Stat("blob_faults"), 0);
}

}  // namespace
}  // namespace modelfs::testing
