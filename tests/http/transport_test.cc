// HttpHandle and HttpHandlePool against testsupport/fakes/range_server.py on loopback.
#include "core/http/transport.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "testsupport/testing/http_fixture.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

using ::modelfs::testing::RangeFaults;
using ::modelfs::testing::RangeServer;
using ::modelfs::testing::RequestLogEntry;
using ::modelfs::testing::TempDir;

// What one request received.
struct Received {
  std::map<std::string, std::string> headers;
  std::string body;
  int responses = 0;
};

HttpRequest Get(const std::string& url, Received& got) {
  HttpRequest req;
  req.url = url;
  req.on_response = [&got] {
    ++got.responses;
    got.headers.clear();
  };
  req.on_header = [&got](std::string name, std::string value) { got.headers[name] = value; };
  req.on_body = [&got](long, std::string_view data) {
    got.body.append(data);
    return true;
  };
  return req;
}

class HttpTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.WriteFile("f.bin", "0123456789");
    ASSERT_OK_AND_ASSIGN(server_, RangeServer::Start({.root = dir_.path()}));
  }

  TempDir dir_;
  std::unique_ptr<RangeServer> server_;
};

TEST_F(HttpTransportTest, ARangeRequestGetsTheRangeItsStatusAndLowercasedHeaders) {
  std::unique_ptr<HttpHandle> h = HttpHandle::Create();
  ASSERT_NE(h, nullptr);
  Received got;
  HttpRequest req = Get(server_->Url("f.bin"), got);
  req.range = "2-4";
  HttpResult r = h->Perform(req);
  EXPECT_TRUE(r.ok()) << r.Message();
  EXPECT_EQ(r.status, 206);
  EXPECT_EQ(got.body, "234");
  EXPECT_EQ(got.headers["content-range"], "bytes 2-4/10");
}

TEST_F(HttpTransportTest, ARedirectIsNotFollowedUnlessAsked) {
  ASSERT_OK(server_->SetFaults({.redirect_host = "localhost"}));
  std::unique_ptr<HttpHandle> h = HttpHandle::Create();
  Received got;
  HttpResult r = h->Perform(Get(server_->Url("f.bin"), got));
  EXPECT_TRUE(r.ok()) << r.Message();
  EXPECT_EQ(r.status, 302);
  EXPECT_EQ(got.headers["location"],
            "http://localhost:" + std::to_string(server_->port()) + "/f.bin");
}

TEST_F(HttpTransportTest, AFollowedRedirectToAnotherHostCarriesNoAuthorization) {
  ASSERT_OK(server_->SetFaults({.redirect_host = "localhost"}));
  std::unique_ptr<HttpHandle> h = HttpHandle::Create();
  Received got;
  HttpRequest req = Get(server_->Url("f.bin"), got);
  req.headers.push_back("Authorization: Bearer secret");
  req.follow_redirects = true;
  HttpResult r = h->Perform(req);
  EXPECT_TRUE(r.ok()) << r.Message();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(got.body, "0123456789");
  EXPECT_EQ(got.responses, 2);
  std::vector<RequestLogEntry> log = server_->ReadLog();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_TRUE(log[0].auth);
  EXPECT_FALSE(log[1].auth);
}

TEST_F(HttpTransportTest, ABodyCallbackThatRefusesAbortsTheTransfer) {
  std::unique_ptr<HttpHandle> h = HttpHandle::Create();
  HttpRequest req;
  req.url = server_->Url("f.bin");
  req.on_body = [](long, std::string_view) { return false; };
  HttpResult r = h->Perform(req);
  EXPECT_EQ(r.error, HttpError::kWriteAborted);
  EXPECT_EQ(r.status, 200);
}

TEST_F(HttpTransportTest, ASchemeOtherThanHttpIsABadUrl) {
  std::unique_ptr<HttpHandle> h = HttpHandle::Create();
  HttpRequest req;
  req.url = "ftp://127.0.0.1/f.bin";
  HttpResult r = h->Perform(req);
  EXPECT_EQ(r.error, HttpError::kBadUrl);
  EXPECT_FALSE(r.Message().empty());
}

TEST_F(HttpTransportTest, AnAnswerThatSendsNoByteForTheIdleLimitIsCutAsStalled) {
  ASSERT_OK(server_->SetFaults({.delay_ms = 5000}));
  std::unique_ptr<HttpHandle> h = HttpHandle::Create();
  Received got;
  HttpRequest req = Get(server_->Url("f.bin"), got);
  req.idle_limit = absl::Milliseconds(500);
  HttpResult r = h->Perform(req);
  EXPECT_EQ(r.error, HttpError::kOther);
  EXPECT_TRUE(r.stalled);
}

TEST_F(HttpTransportTest, AnUploadSendsTheBodyItsReaderGives) {
  std::unique_ptr<HttpHandle> h = HttpHandle::Create();
  HttpRequest req;
  req.method = "PUT";
  req.url = server_->Url("f.bin");
  req.upload = true;
  req.upload_length = 5;
  req.read_body = [sent = false](char* buf, size_t n) mutable -> std::optional<size_t> {
    if (sent) return 0;
    sent = true;
    std::memcpy(buf, "hello", std::min<size_t>(n, 5));
    return std::min<size_t>(n, 5);
  };
  HttpResult r = h->Perform(req);
  EXPECT_EQ(r.status, 201);
  EXPECT_EQ(r.bytes_uploaded, 5u);
  std::vector<RequestLogEntry> log = server_->ReadLog();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].method, "PUT");
  EXPECT_EQ(log[0].bytes, 5u);
}

TEST_F(HttpTransportTest, APooledHandleReusesItsConnection) {
  HttpHandlePool pool;
  for (int i = 0; i < 2; ++i) {
    std::unique_ptr<HttpHandle> h = pool.Acquire();
    ASSERT_NE(h, nullptr);
    Received got;
    HttpResult r = h->Perform(Get(server_->Url("f.bin"), got));
    EXPECT_EQ(r.status, 200);
    pool.Release(std::move(h));
  }
  std::vector<RequestLogEntry> log = server_->ReadLog();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].conn, log[1].conn);
}

}  // namespace
}  // namespace modelfs
