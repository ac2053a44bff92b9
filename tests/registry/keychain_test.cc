// DockerConfigKeychain and the credential helper protocol, with real helper scripts written into
// a temporary directory put first on $PATH; the chain's order; RunCredentialProcess's bounds.
#include "core/registry/keychain.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/registry/credential_process.h"
#include "testsupport/fakes/fake_clock.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::modelfs::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

std::string ReadAll(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A temporary directory first on $PATH for the test's lifetime, holding helper scripts.
class HelperDir {
 public:
  HelperDir() : saved_(std::getenv("PATH") != nullptr ? std::getenv("PATH") : "") {
    setenv("PATH", absl::StrCat(dir_.path().string(), ":", saved_).c_str(), 1);
  }
  ~HelperDir() { setenv("PATH", saved_.c_str(), 1); }
  // Writes an executable shell script named `name`.
  void Script(const std::string& name, const std::string& body) const {
    auto p = dir_.WriteFile(name, "#!/bin/sh\n" + body);
    std::filesystem::permissions(p, std::filesystem::perms::owner_all);
  }
  std::filesystem::path Join(const std::string& n) const { return dir_.Join(n); }
  std::string path() const { return dir_.path().string(); }

 private:
  TempDir dir_;
  std::string saved_;
};

// docker-credential-<name>: logs its argument and stdin (one line per run) to <name>.log and
// answers `answer` with exit code `code`.
void Helper(const HelperDir& d, const std::string& name, const std::string& answer, int code = 0) {
  d.Script("docker-credential-" + name,
           absl::StrCat("echo \"$1 $(cat)\" >> '", d.Join(name + ".log").string(), "'\n",
                        "printf '%s' '", answer, "'\nexit ", code, "\n"));
}

absl::StatusOr<std::unique_ptr<DockerConfigKeychain>> DockerKeychain(const std::string& path,
                                                                     Clock* clock = nullptr) {
  DockerConfigKeychain::Options o;
  o.path = path;
  o.clock = clock;
  o.helper_timeout = absl::Seconds(10);
  return DockerConfigKeychain::Create(o);
}

TEST(CredentialHelperOutput, UsernameAndSecretAreAPassword) {
  ASSERT_OK_AND_ASSIGN(Credential c, ParseCredentialHelperOutput(
                                         R"({"ServerURL":"r","Username":"u","Secret":"p"})", "h"));
  EXPECT_EQ(c.username, "u");
  EXPECT_EQ(c.password, "p");
  EXPECT_EQ(c.identity_token, "");
}

TEST(CredentialHelperOutput, TokenUsernameMakesTheSecretAnIdentityToken) {
  ASSERT_OK_AND_ASSIGN(Credential c,
                       ParseCredentialHelperOutput(
                           R"({"ServerURL":"r","Username":"<token>","Secret":"refresh-1"})", "h"));
  EXPECT_EQ(c.username, "");
  EXPECT_EQ(c.password, "");
  EXPECT_EQ(c.identity_token, "refresh-1");
}

TEST(CredentialHelperOutput, ErrorsNameTheHelperAndNeverTheBytes) {
  auto r = ParseCredentialHelperOutput(R"({"Username":"u","Secret":7,"x":"hunter2"})",
                                       "docker-credential-x for registry r");
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument,
                          HasSubstr("docker-credential-x for registry r")));
  EXPECT_THAT(r.status().message(), Not(HasSubstr("hunter2")));
  EXPECT_THAT(ParseCredentialHelperOutput("not json hunter2", "h").status().message(),
              Not(HasSubstr("hunter2")));
  EXPECT_THAT(ParseCredentialHelperOutput(R"({"Username":"u"})", "h"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no Secret")));
}

TEST(DockerConfigKeychain, CredHelpersEntryRunsItsHelperWithTheServerOnStdin) {
  HelperDir d;
  Helper(d, "mtest", R"({"ServerURL":"reg.example:5000","Username":"alice","Secret":"s1"})");
  TempDir cfg;
  auto path = cfg.WriteFile("config.json", R"({"credHelpers":{"reg.example:5000":"mtest"}})");
  ASSERT_OK_AND_ASSIGN(auto k, DockerKeychain(path));
  ASSERT_OK_AND_ASSIGN(std::optional<Credential> c, k->Get("reg.example:5000"));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->username, "alice");
  EXPECT_EQ(c->password, "s1");
  EXPECT_EQ(ReadAll(d.Join("mtest.log")), "get reg.example:5000\n");
}

TEST(DockerConfigKeychain, HelperAnswersAreCachedUntilInvalidated) {
  HelperDir d;
  Helper(d, "mtest", R"({"Username":"alice","Secret":"s1"})");
  TempDir cfg;
  auto path = cfg.WriteFile("config.json", R"({"credsStore":"mtest"})");
  ASSERT_OK_AND_ASSIGN(auto k, DockerKeychain(path));
  ASSERT_OK(k->Get("reg.example"));
  ASSERT_OK(k->Get("reg.example"));
  EXPECT_EQ(k->helper_runs(), 1);
  k->Invalidate("reg.example");
  ASSERT_OK(k->Get("reg.example"));
  EXPECT_EQ(k->helper_runs(), 2);
}

TEST(DockerConfigKeychain, CredHelpersWinOverCredsStoreAndCredsStoreOverAuths) {
  HelperDir d;
  Helper(d, "one", R"({"Username":"from-one","Secret":"s"})");
  Helper(d, "store", R"({"Username":"from-store","Secret":"s"})");
  TempDir cfg;
  auto path = cfg.WriteFile("config.json", R"({"credsStore":"store",
      "credHelpers":{"one.example":"one"},
      "auths":{"two.example":{"username":"static","password":"p"}}})");
  ASSERT_OK_AND_ASSIGN(auto k, DockerKeychain(path));
  ASSERT_OK_AND_ASSIGN(auto one, k->Get("one.example"));
  ASSERT_OK_AND_ASSIGN(auto two, k->Get("two.example"));
  ASSERT_TRUE(one.has_value() && two.has_value());
  EXPECT_EQ(one->username, "from-one");
  EXPECT_EQ(two->username, "from-store");
}

TEST(DockerConfigKeychain, HelperWithoutCredentialsFallsBackToTheAuthsEntry) {
  HelperDir d;
  Helper(d, "store", "credentials not found in native keychain\n", 1);
  TempDir cfg;
  auto path = cfg.WriteFile("config.json", R"({"credsStore":"store",
      "auths":{"reg.example":{"username":"static","password":"p"}}})");
  ASSERT_OK_AND_ASSIGN(auto k, DockerKeychain(path));
  ASSERT_OK_AND_ASSIGN(auto c, k->Get("reg.example"));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->username, "static");
  ASSERT_OK_AND_ASSIGN(auto none, k->Get("other.example"));
  EXPECT_FALSE(none.has_value());
}

TEST(DockerConfigKeychain, DockerHubIsAskedForUnderTheIndexUrl) {
  HelperDir d;
  Helper(d, "store", R"({"Username":"u","Secret":"s"})");
  TempDir cfg;
  auto path = cfg.WriteFile("config.json", R"({"credsStore":"store"})");
  ASSERT_OK_AND_ASSIGN(auto k, DockerKeychain(path));
  ASSERT_OK(k->Get("docker.io"));
  EXPECT_EQ(ReadAll(d.Join("store.log")), "get https://index.docker.io/v1/\n");
}

TEST(DockerConfigKeychain, MissingHelperIsAnErrorNamingTheHelperAndTheRegistry) {
  HelperDir d;
  TempDir cfg;
  auto path = cfg.WriteFile("config.json", R"({"credHelpers":{"reg.example":"absent-zz"}})");
  ASSERT_OK_AND_ASSIGN(auto k, DockerKeychain(path));
  EXPECT_THAT(k->Get("reg.example"),
              StatusIs(absl::StatusCode::kNotFound,
                       ::testing::AllOf(HasSubstr("docker-credential-absent-zz"),
                                        HasSubstr("reg.example"), HasSubstr(path.string()))));
}

TEST(DockerConfigKeychain, FailingHelperErrorHoldsNeitherItsOutputNorTheSecret) {
  HelperDir d;
  Helper(d, "bad", R"({"Username":"u","Secret":"hunter2"} oops)", 3);
  TempDir cfg;
  auto path = cfg.WriteFile("config.json", R"({"credsStore":"bad"})");
  ASSERT_OK_AND_ASSIGN(auto k, DockerKeychain(path));
  auto r = k->Get("reg.example");
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kUnauthenticated,
                          ::testing::AllOf(HasSubstr("docker-credential-bad"),
                                           HasSubstr("reg.example"), HasSubstr("exit code 3"))));
  EXPECT_THAT(r.status().message(), Not(HasSubstr("hunter2")));
}

TEST(DockerConfigKeychain, AFailedHelperIsRunAgainOnlyAfterTheRetryDelay) {
  HelperDir d;
  Helper(d, "bad", "", 1);
  TempDir cfg;
  auto path = cfg.WriteFile("config.json", R"({"credsStore":"bad"})");
  modelfs::testing::FakeClock clock;
  ASSERT_OK_AND_ASSIGN(auto k, DockerKeychain(path, &clock));
  EXPECT_FALSE(k->Get("reg.example").ok());
  EXPECT_FALSE(k->Get("reg.example").ok());
  EXPECT_EQ(k->helper_runs(), 1);
  clock.Advance(absl::Seconds(5));
  EXPECT_FALSE(k->Get("reg.example").ok());
  EXPECT_EQ(k->helper_runs(), 2);
}

TEST(DockerConfigKeychain, RewrittenFileIsReadAgainOnTheNextGet) {
  TempDir cfg;
  auto path = cfg.WriteFile("config.json", R"({"auths":{"r.example":{"auth":"dTE6cDE="}}})");
  ASSERT_OK_AND_ASSIGN(auto k, DockerKeychain(path));
  ASSERT_OK_AND_ASSIGN(auto before, k->Get("r.example"));
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(before->username, "u1");
  // As refreshers do: a new file renamed over the old one (another inode).
  auto tmp = cfg.WriteFile("config.json.new",
                           R"({"auths":{"r.example":{"username":"u2","password":"p2"}}})");
  std::filesystem::rename(tmp, path);
  ASSERT_OK_AND_ASSIGN(auto after, k->Get("r.example"));
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->username, "u2");
  EXPECT_EQ(after->password, "p2");
}

TEST(DockerConfigKeychain, FileThatStopsParsingIsAnErrorUntilItIsFixed) {
  TempDir cfg;
  auto path = cfg.WriteFile("config.json", R"({"auths":{}})");
  ASSERT_OK_AND_ASSIGN(auto k, DockerKeychain(path));
  cfg.WriteFile("config.json", R"({"auths":)");
  EXPECT_THAT(k->Get("r.example"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(path.string())));
  cfg.WriteFile("config.json", R"({"auths":{"r.example":{"username":"u","password":"p"}}})");
  ASSERT_OK_AND_ASSIGN(auto c, k->Get("r.example"));
  EXPECT_TRUE(c.has_value());
}

TEST(DockerConfigKeychain, MissingFileHasNoCredentials) {
  ASSERT_OK_AND_ASSIGN(auto k, DockerKeychain("/nonexistent/modelfs/config.json"));
  ASSERT_OK_AND_ASSIGN(auto c, k->Get("r.example"));
  EXPECT_FALSE(c.has_value());
}

TEST(DockerConfigKeychain, HelperNameWithASlashIsRefused) {
  TempDir cfg;
  auto path = cfg.WriteFile("config.json", R"({"credsStore":"../../bin/sh"})");
  EXPECT_THAT(DockerKeychain(path), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("not a credential helper name")));
}

TEST(ChainKeychains, FirstSourceWithACredentialWins) {
  CredentialStore a, b;
  b.Add("r.example", Credential{"from-b", "p", "", ""});
  b.Add("s.example", Credential{"b-s", "p", "", ""});
  a.Add("s.example", Credential{"a-s", "p", "", ""});
  auto chain = ChainKeychains({StaticKeychain(a), StaticKeychain(b)});
  ASSERT_OK_AND_ASSIGN(auto r, chain->Get("r.example"));
  ASSERT_OK_AND_ASSIGN(auto s, chain->Get("s.example"));
  EXPECT_EQ(r->username, "from-b");
  EXPECT_EQ(s->username, "a-s");
}

TEST(ChainKeychains, FailingSourceIsPassedOverButReportedWhenNothingElseAnswers) {
  HelperDir d;
  TempDir cfg;
  auto path = cfg.WriteFile("config.json", R"({"credsStore":"absent-zz"})");
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Keychain> failing, DockerKeychain(path));
  CredentialStore b;
  b.Add("r.example", Credential{"from-b", "p", "", ""});
  auto chain = ChainKeychains({failing, StaticKeychain(b)});
  ASSERT_OK_AND_ASSIGN(auto r, chain->Get("r.example"));
  EXPECT_EQ(r->username, "from-b");
  EXPECT_THAT(chain->Get("other.example"), StatusIs(absl::StatusCode::kNotFound));
}

TEST(CredentialProcess, ProgramThatHangsIsKilledAtTheTimeout) {
  CredentialProcess p;
  p.argv = {"/bin/sh", "-c", "sleep 30"};
  p.timeout = absl::Milliseconds(300);
  p.label = "test helper";
  absl::Time start = absl::Now();
  EXPECT_THAT(RunCredentialProcess(p),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("test helper")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));  // killed, not waited for
}

TEST(CredentialProcess, EnvironmentAndStdinReachTheProgram) {
  CredentialProcess p;
  p.argv = {"/bin/sh", "-c", "printf '%s:%s' \"$MODELFS_T\" \"$(cat)\""};
  p.env = {{"MODELFS_T", "v"}};
  p.stdin_data = "in";
  ASSERT_OK_AND_ASSIGN(CredentialProcessResult r, RunCredentialProcess(p));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.stdout, "v:in");
}

TEST(CredentialProcess, ProgramThatIgnoresStdinDoesNotKillTheCaller) {
  CredentialProcess p;
  p.argv = {"/bin/sh", "-c", "exec 0<&-; echo ok"};
  p.stdin_data = std::string(200000, 'x');  // more than a pipe holds
  ASSERT_OK_AND_ASSIGN(CredentialProcessResult r, RunCredentialProcess(p));
  EXPECT_EQ(r.stdout, "ok\n");
}

}  // namespace
}  // namespace modelfs
