// The libcurl RangeReader against testsupport/fakes/range_server.py on loopback.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/io/header_cursor.h"
#include "core/io/range_reader.h"
#include "testsupport/testing/http_fixture.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

using ::modelfs::testing::RangeFaults;
using ::modelfs::testing::RangeServer;
using ::modelfs::testing::RangeServerOptions;
using ::modelfs::testing::RequestLogEntry;
using ::modelfs::testing::StatusIs;
using ::modelfs::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t KiB = 1024;

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + 7) % 251);
  return s;
}

// Files every test can read; one shared well-behaved server, plus per-test servers for faults.
class HttpRangeReaderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    dir_->WriteFile("small.safetensors", Pattern(40 * KiB));
    dir_->WriteFile("big.bin", Pattern(300 * KiB));
    dir_->WriteFile("empty.bin", "");
    auto server = RangeServer::Start({.root = dir_->path()});
    ASSERT_OK(server.status());
    server_ = std::move(server).value().release();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
    server_ = nullptr;
    dir_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    ASSERT_OK(server_->SetFaults({}));
    server_->ClearLog();
  }

  static std::unique_ptr<RangeReader> Open(const std::string& url, HttpReaderOptions o = {}) {
    auto r = OpenHttpRangeReader(url, o);
    EXPECT_OK(r.status());
    return r.ok() ? std::move(r).value() : nullptr;
  }
  // The shared server, now injecting `faults` (SetUp turns them off again).
  static RangeServer* Faulty(const RangeFaults& faults) {
    absl::Status s = server_->SetFaults(faults);
    EXPECT_OK(s);
    return s.ok() ? server_ : nullptr;
  }

  static TempDir* dir_;
  static RangeServer* server_;
};

TempDir* HttpRangeReaderTest::dir_ = nullptr;
RangeServer* HttpRangeReaderTest::server_ = nullptr;

TEST_F(HttpRangeReaderTest, ReadAtReturnsTheBytesAtAnOffsetWithOneRangeRequest) {
  auto reader = Open(server_->Url("big.bin"));
  ASSERT_NE(reader, nullptr);
  ASSERT_OK_AND_ASSIGN(std::string got, reader->ReadAt(100000, 5000));
  EXPECT_EQ(got, Pattern(300 * KiB).substr(100000, 5000));
  std::vector<RequestLogEntry> log = server_->ReadLog();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].method, "GET");
  EXPECT_EQ(log[0].path, "/big.bin");
  EXPECT_EQ(log[0].range, "bytes=100000-104999");
  EXPECT_EQ(log[0].status, 206);
  EXPECT_EQ(reader->stats().requests, 1u);
  EXPECT_EQ(reader->stats().bytes, 5000u);
}

TEST_F(HttpRangeReaderTest, SizeIsLearnedFromOneRangedGetOfTheFirst64KiB) {
  auto reader = Open(server_->Url("big.bin"));
  ASSERT_NE(reader, nullptr);
  ASSERT_OK_AND_ASSIGN(uint64_t size, reader->Size());
  EXPECT_EQ(size, 300 * KiB);
  ASSERT_OK_AND_ASSIGN(uint64_t again, reader->Size());
  EXPECT_EQ(again, 300 * KiB);
  std::vector<RequestLogEntry> log = server_->ReadLog();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].range, "bytes=0-65535");
  EXPECT_EQ(reader->stats().bytes, 64 * KiB);
}

TEST_F(HttpRangeReaderTest, ReadsInsideTheFirst64KiBAfterSizeCostNoRequest) {
  auto reader = Open(server_->Url("big.bin"));
  ASSERT_NE(reader, nullptr);
  ASSERT_OK(reader->Size().status());
  ASSERT_OK_AND_ASSIGN(std::string got, reader->ReadAt(1000, 64 * KiB - 1000));
  EXPECT_EQ(got, Pattern(64 * KiB).substr(1000));
  EXPECT_EQ(server_->ReadLog().size(), 1u);
  EXPECT_EQ(reader->stats().requests, 1u);
}

TEST_F(HttpRangeReaderTest, HeaderCursorReadsA40KiBFileInExactlyOneRequest) {
  auto reader = Open(server_->Url("small.safetensors"));
  ASSERT_NE(reader, nullptr);
  ASSERT_OK_AND_ASSIGN(uint64_t size, reader->Size());
  ASSERT_EQ(size, 40 * KiB);
  HeaderCursor cursor(*reader, size);
  ASSERT_OK_AND_ASSIGN(uint64_t first8, cursor.ReadU64());
  (void)first8;
  ASSERT_OK_AND_ASSIGN(std::string_view rest, cursor.Read(cursor.remaining()));
  EXPECT_EQ(std::string(rest), Pattern(40 * KiB).substr(8));
  std::vector<RequestLogEntry> log = server_->ReadLog();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].status, 206);
  EXPECT_EQ(log[0].bytes, 40 * KiB);
  EXPECT_EQ(reader->stats().requests, 1u);
  EXPECT_EQ(reader->stats().bytes, 40 * KiB);
}

TEST_F(HttpRangeReaderTest, ReusesOneConnectionAcrossRequests) {
  auto reader = Open(server_->Url("big.bin"));
  ASSERT_NE(reader, nullptr);
  ASSERT_OK(reader->ReadAt(0, 10).status());
  ASSERT_OK(reader->ReadAt(200000, 10).status());
  ASSERT_OK(reader->ReadAt(100, 10).status());
  std::vector<RequestLogEntry> log = server_->ReadLog();
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[1].conn, log[0].conn);
  EXPECT_EQ(log[2].conn, log[0].conn);
}

TEST_F(HttpRangeReaderTest, AnEmptyFileHasSizeZero) {
  auto reader = Open(server_->Url("empty.bin"));
  ASSERT_NE(reader, nullptr);
  ASSERT_OK_AND_ASSIGN(uint64_t size, reader->Size());
  EXPECT_EQ(size, 0u);
  ASSERT_OK_AND_ASSIGN(std::string got, reader->ReadAt(0, 0));
  EXPECT_EQ(got, "");
}

TEST_F(HttpRangeReaderTest, ReadPastTheKnownEndIsOutOfRangeWithoutARequest) {
  auto reader = Open(server_->Url("small.safetensors"));
  ASSERT_NE(reader, nullptr);
  ASSERT_OK(reader->Size().status());
  EXPECT_THAT(reader->ReadAt(40 * KiB - 10, 20),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("small.safetensors: truncated: wants 20 bytes at byte 40950 but "
                                 "the source has 40960")));
  EXPECT_EQ(server_->ReadLog().size(), 1u);
}

TEST_F(HttpRangeReaderTest, ReadOverlappingTheEndBeforeSizeIsKnownIsOutOfRange) {
  auto reader = Open(server_->Url("big.bin"));
  ASSERT_NE(reader, nullptr);
  EXPECT_THAT(reader->ReadAt(300 * KiB - 10, 20),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("wants 20 bytes at byte 307190 but the source has 307200")));
}

TEST_F(HttpRangeReaderTest, ReadBeyondTheEndBeforeSizeIsKnownIsOutOfRange) {
  auto reader = Open(server_->Url("big.bin"));
  ASSERT_NE(reader, nullptr);
  EXPECT_THAT(reader->ReadAt(400 * KiB, 10),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("wants 10 bytes at byte 409600 but the source has 307200")));
  EXPECT_EQ(server_->ReadLog().at(0).status, 416);
}

TEST_F(HttpRangeReaderTest, MissingFileIsNotFoundNamingTheUrl) {
  auto reader = Open(server_->Url("absent.bin"));
  ASSERT_NE(reader, nullptr);
  EXPECT_THAT(reader->Size(), StatusIs(absl::StatusCode::kNotFound,
                                       HasSubstr(server_->Url("absent.bin") + " (bytes 0-65535): "
                                                                              "HTTP 404")));
}

TEST_F(HttpRangeReaderTest, AServerThatIgnoresRangeGetsTheClearMessage) {
  RangeServer* server = Faulty({.ignore_range = true});
  ASSERT_NE(server, nullptr);
  const std::string url = server->Url("big.bin");
  auto reader = Open(url);
  ASSERT_NE(reader, nullptr);
  const std::string want = url +
                           " answered 200 to a Range request (the server ignores Range); download "
                           "the file and inspect it locally";
  EXPECT_THAT(reader->Size(), StatusIs(absl::StatusCode::kInvalidArgument, want));
  EXPECT_THAT(reader->ReadAt(100000, 10), StatusIs(absl::StatusCode::kInvalidArgument, want));
  // The reader aborted the whole-file bodies instead of keeping them.
  EXPECT_LE(reader->stats().bytes, 64 * KiB);
}

TEST_F(HttpRangeReaderTest, ASmallFileSentWholeByARangeIgnoringServerIsStillRead) {
  RangeServer* server = Faulty({.ignore_range = true});
  ASSERT_NE(server, nullptr);
  auto reader = Open(server->Url("small.safetensors"));
  ASSERT_NE(reader, nullptr);
  ASSERT_OK_AND_ASSIGN(uint64_t size, reader->Size());
  EXPECT_EQ(size, 40 * KiB);
  ASSERT_OK_AND_ASSIGN(std::string got, reader->ReadAt(40 * KiB - 100, 100));
  EXPECT_EQ(got, Pattern(40 * KiB).substr(40 * KiB - 100));
  EXPECT_EQ(server->ReadLog().size(), 1u);
}

TEST_F(HttpRangeReaderTest, A503IsUnavailableAndTheNextCallSucceeds) {
  RangeServer* server = Faulty({.fail_first = 1});
  ASSERT_NE(server, nullptr);
  auto reader = Open(server->Url("big.bin"));
  ASSERT_NE(reader, nullptr);
  EXPECT_THAT(reader->ReadAt(5, 5),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("HTTP 503")));
  ASSERT_OK_AND_ASSIGN(std::string got, reader->ReadAt(5, 5));
  EXPECT_EQ(got, Pattern(10).substr(5));
}

TEST_F(HttpRangeReaderTest, AConnectionResetMidBodyIsUnavailable) {
  RangeServer* server = Faulty({.reset_after_bytes = 1000});
  ASSERT_NE(server, nullptr);
  auto reader = Open(server->Url("big.bin"));
  ASSERT_NE(reader, nullptr);
  EXPECT_THAT(reader->ReadAt(0, 100 * KiB),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("(bytes 0-102399)")));
}

TEST_F(HttpRangeReaderTest, FaultsGivenAtStartApplyFromTheFirstRequest) {
  auto started = RangeServer::Start({.root = dir_->path(), .faults = {.fail_first = 2}});
  ASSERT_OK(started.status());
  auto reader = Open((*started)->Url("big.bin"));
  ASSERT_NE(reader, nullptr);
  EXPECT_THAT(reader->Size(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("HTTP 503")));
  EXPECT_THAT(reader->Size(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("HTTP 503")));
  ASSERT_OK_AND_ASSIGN(uint64_t size, reader->Size());
  EXPECT_EQ(size, 300 * KiB);
  EXPECT_EQ((*started)->ReadLog().size(), 3u);
}

TEST_F(HttpRangeReaderTest, ARefusedConnectionIsUnavailable) {
  auto reader = Open("http://127.0.0.1:1/x.bin");
  ASSERT_NE(reader, nullptr);
  EXPECT_THAT(reader->Size(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("http://127.0.0.1:1/x.bin")));
}

TEST_F(HttpRangeReaderTest, ASlowServerHitsTheRequestTimeout) {
  RangeServer* server = Faulty({.delay_ms = 1000});
  ASSERT_NE(server, nullptr);
  auto reader = Open(server->Url("big.bin"), {.request_timeout_ms = 100});
  ASSERT_NE(reader, nullptr);
  EXPECT_THAT(reader->ReadAt(0, 10),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("timed out")));
  EXPECT_EQ(server->ReadLog().size(), 1u);
}

TEST_F(HttpRangeReaderTest, ACorruptingServerChangesExactlyTheChosenByte) {
  RangeServer* server = Faulty({.corrupt_offset = 70000});
  ASSERT_NE(server, nullptr);
  auto reader = Open(server->Url("big.bin"));
  ASSERT_NE(reader, nullptr);
  ASSERT_OK_AND_ASSIGN(std::string got, reader->ReadAt(69990, 20));
  std::string want = Pattern(300 * KiB).substr(69990, 20);
  want[10] = static_cast<char>(want[10] ^ 0xff);
  EXPECT_EQ(got, want);
}

TEST_F(HttpRangeReaderTest, TheBearerTokenIsSentAndAMissingOneIsPermissionDenied) {
  RangeServer* server = Faulty({.require_token = "t0ken"});
  ASSERT_NE(server, nullptr);
  auto anonymous = Open(server->Url("big.bin"));
  ASSERT_NE(anonymous, nullptr);
  EXPECT_THAT(anonymous->Size(),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("HTTP 401")));
  auto authorized = Open(server->Url("big.bin"), {.bearer_token = "t0ken"});
  ASSERT_NE(authorized, nullptr);
  ASSERT_OK_AND_ASSIGN(uint64_t size, authorized->Size());
  EXPECT_EQ(size, 300 * KiB);
}

TEST_F(HttpRangeReaderTest, RedirectsAreFollowedButTheTokenStaysWithTheOriginalHost) {
  RangeServer* server = Faulty({.redirect_host = "localhost"});
  ASSERT_NE(server, nullptr);
  auto reader = Open(server->Url("big.bin"), {.bearer_token = "t0ken"});
  ASSERT_NE(reader, nullptr);
  ASSERT_OK_AND_ASSIGN(std::string got, reader->ReadAt(10, 10));
  EXPECT_EQ(got, Pattern(20).substr(10));
  std::vector<RequestLogEntry> log = server->ReadLog();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].status, 302);
  EXPECT_TRUE(log[0].auth);
  EXPECT_EQ(log[1].status, 206);
  EXPECT_FALSE(log[1].auth);
}

TEST_F(HttpRangeReaderTest, NameStripsUserinfoAndQuery) {
  const std::string url = "http://alice:s3cret@127.0.0.1:" + std::to_string(server_->port()) +
                          "/absent.bin?X-Amz-Signature=abc";
  auto reader = Open(url);
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(reader->name(), server_->Url("absent.bin") + "?<query redacted>");
  absl::Status status = reader->Size().status();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kNotFound, Not(HasSubstr("s3cret"))));
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kNotFound, Not(HasSubstr("abc"))));
}

TEST_F(HttpRangeReaderTest, NameOfAUrlWithoutCredentialsIsTheUrl) {
  auto reader = Open(server_->Url("big.bin"));
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(reader->name(), server_->Url("big.bin"));
}

TEST_F(HttpRangeReaderTest, ANonHttpUrlIsInvalidArgument) {
  EXPECT_THAT(
      OpenHttpRangeReader("ftp://user:pw@example.com/x", {}),
      StatusIs(absl::StatusCode::kInvalidArgument, "ftp://example.com/x: not an http(s) URL"));
}

TEST_F(HttpRangeReaderTest, OpenRangeReaderSendsUrlsToTheHttpReader) {
  ASSERT_OK_AND_ASSIGN(auto reader, OpenRangeReader(server_->Url("big.bin")));
  ASSERT_OK_AND_ASSIGN(uint64_t size, reader->Size());
  EXPECT_EQ(size, 300 * KiB);
}

}  // namespace
}  // namespace modelfs
