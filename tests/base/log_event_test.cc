// log::Event: the logfmt and JSON encodings, levels, the journald fields and the credential
// scrub, on the exact lines an operator's tools parse.
#include "core/base/log_event.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/text/escape.h"
#include "nlohmann/json.hpp"

namespace modelfs::log {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

const absl::Time kTime = absl::FromUnixMillis(1796656102123);  // 2026-12-07T15:08:22.123Z

// What a value reads as after the encoders' escaping (the alphabet below holds no credential).
std::string EscapeForTest(const std::string& v) { return EscapeUntrusted(v); }

std::string Logfmt(const Event& e) { return FormatLine(e, kTime, Format::kLogfmt); }
std::string Json(const Event& e) { return FormatLine(e, kTime, Format::kJson); }

// A minimal logfmt reader (key=bare | key="quoted with \" and \\"), enough to prove each line
// splits back into exactly the pairs written.
std::vector<std::pair<std::string, std::string>> ParseLogfmt(const std::string& line) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t i = 0;
  while (i < line.size()) {
    size_t eq = line.find('=', i);
    EXPECT_NE(eq, std::string::npos) << line;
    if (eq == std::string::npos) break;
    std::string key = line.substr(i, eq - i);
    std::string value;
    i = eq + 1;
    if (i < line.size() && line[i] == '"') {
      for (++i; i < line.size() && line[i] != '"'; ++i) {
        if (line[i] == '\\' && i + 1 < line.size()) ++i;
        value.push_back(line[i]);
      }
      ++i;  // the closing quote
    } else {
      while (i < line.size() && line[i] != ' ') value.push_back(line[i++]);
    }
    out.emplace_back(key, value);
    if (i < line.size()) {
      EXPECT_EQ(line[i], ' ') << line;
      ++i;
    }
  }
  return out;
}

TEST(LogEventTest, LogfmtWritesTimeLevelComponentMessageAndFieldsInOrder) {
  Event e(Level::kWarn, "cache", "chunk failed verification");
  e.Field("digest", "sha256:abcd").Range(0, 4095).Field("registry", "reg.example:5000");
  EXPECT_EQ(Logfmt(e),
            "time=2026-12-07T15:08:22.123Z level=warn component=cache "
            "msg=\"chunk failed verification\" digest=sha256:abcd range=0-4095 "
            "registry=reg.example:5000");
}

TEST(LogEventTest, JsonWritesTheSameFieldsAsOneObject) {
  Event e(Level::kError, "policy", "refused");
  e.Field("digest", "sha256:abcd").Field("chunks", uint64_t{3});
  EXPECT_EQ(Json(e),
            "{\"time\":\"2026-12-07T15:08:22.123Z\",\"level\":\"error\",\"component\":\"policy\","
            "\"msg\":\"refused\",\"digest\":\"sha256:abcd\",\"chunks\":\"3\"}");
}

TEST(LogEventTest, LogfmtQuotesValuesWithSpacesEqualsQuotesAndEmptyOnes) {
  Event e(Level::kInfo, "c", "m");
  e.Field("a", "x y").Field("b", "k=v").Field("c", "say \"hi\"").Field("d", "");
  EXPECT_EQ(Logfmt(e),
            "time=2026-12-07T15:08:22.123Z level=info component=c msg=m a=\"x y\" b=\"k=v\" "
            "c=\"say \\\"hi\\\"\" d=\"\"");
}

TEST(LogEventTest, NewlinesAndControlBytesNeverBreakTheLine) {
  Event e(Level::kInfo, "c", "line1\nlevel=error forged=1\r\x1b[31m");
  const std::string line = Logfmt(e);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(line.find('\r'), std::string::npos);
  EXPECT_EQ(line.find('\x1b'), std::string::npos);
  EXPECT_THAT(line, HasSubstr("msg=\"line1\\\\nlevel=error forged=1\\\\r\\\\x1b[31m\""));
  // The forged "level=error" stays inside msg.
  auto pairs = ParseLogfmt(line);
  ASSERT_EQ(pairs.size(), 4u);
  EXPECT_EQ(pairs[1], (std::pair<std::string, std::string>("level", "info")));
  EXPECT_EQ(pairs[3].first, "msg");
}

TEST(LogEventTest, InvalidUtf8IsWrittenAsHexEscapesInBothFormats) {
  Event e(Level::kInfo, "c", "m");
  e.Field("name", std::string("a\xff\xfe"
                              "b"));
  EXPECT_THAT(Logfmt(e), HasSubstr("name=\"a\\\\xff\\\\xfeb\""));
  nlohmann::json j = nlohmann::json::parse(Json(e));  // throws on invalid UTF-8
  EXPECT_EQ(j["name"], "a\\xff\\xfeb");
}

TEST(LogEventTest, ValidUtf8IsKeptAsItIs) {
  Event e(Level::kInfo, "c", "modèle");
  EXPECT_THAT(Logfmt(e), HasSubstr("msg=modèle"));
  EXPECT_EQ(nlohmann::json::parse(Json(e))["msg"], "modèle");
}

TEST(LogEventTest, KeysAreCleanedAndJsonNeverShadowsTheFixedFields) {
  Event e(Level::kInfo, "c", "m");
  e.Field("Bad Key=", "1").Field("msg", "2");
  EXPECT_THAT(Logfmt(e), HasSubstr(" bad_key_=1 msg=2"));
  nlohmann::json j = nlohmann::json::parse(Json(e));
  EXPECT_EQ(j["msg"], "m");
  EXPECT_EQ(j["field_msg"], "2");
  EXPECT_EQ(j["bad_key_"], "1");
}

// Random bytes in every position: each line is one line, splits back into the pairs written
// (logfmt) and parses as one JSON object with the values written (after escaping).
TEST(LogEventTest, RandomBytesAlwaysRoundTripThroughBothEncoders) {
  std::mt19937 rng(45);
  const std::string alphabet =
      std::string("ab =\"\\\n\r\t{}:,") + "\x00\x7f\x80\xc3\xa9\xff\xe2\x80\xa8";
  for (int round = 0; round < 2000; ++round) {
    auto random_text = [&] {
      std::string s;
      const int n = static_cast<int>(rng() % 12);
      for (int i = 0; i < n; ++i) s.push_back(alphabet[rng() % alphabet.size()]);
      return s;
    };
    Event e(Level::kDebug, random_text(), random_text());
    e.Field("v", random_text());
    const std::string line = Logfmt(e);
    ASSERT_EQ(line.find('\n'), std::string::npos);
    auto pairs = ParseLogfmt(line);
    ASSERT_EQ(pairs.size(), 5u) << line;
    EXPECT_EQ(pairs[2].first, "component");
    EXPECT_EQ(pairs[3].first, "msg");
    EXPECT_EQ(pairs[4].first, "v");
    EXPECT_EQ(pairs[4].second, EscapeForTest(e.fields()[0].second)) << line;
    nlohmann::json j = nlohmann::json::parse(Json(e));
    EXPECT_EQ(j.size(), 5u);
    EXPECT_EQ(j["v"], EscapeForTest(e.fields()[0].second));
  }
}

TEST(LogEventTest, LevelsParseTheirNamesAndMapToSyslogPriorities) {
  EXPECT_EQ(ParseLevel("debug"), Level::kDebug);
  EXPECT_EQ(ParseLevel("info"), Level::kInfo);
  EXPECT_EQ(ParseLevel("warn"), Level::kWarn);
  EXPECT_EQ(ParseLevel("error"), Level::kError);
  EXPECT_EQ(ParseLevel("INFO"), std::nullopt);
  EXPECT_EQ(SyslogPriority(Level::kDebug), 7);
  EXPECT_EQ(SyslogPriority(Level::kInfo), 6);
  EXPECT_EQ(SyslogPriority(Level::kWarn), 4);
  EXPECT_EQ(SyslogPriority(Level::kError), 3);
  EXPECT_EQ(ParseFormat("json"), Format::kJson);
  EXPECT_EQ(ParseFormat("logfmt"), Format::kLogfmt);
  EXPECT_EQ(ParseFormat("text"), std::nullopt);
}

TEST(LogEventTest, JournalFieldsCarryPriorityComponentAndOneFieldPerKey) {
  Event e(Level::kError, "cache", "quarantined layer");
  e.Field("digest", "sha256:abcd").Range(10, 20).Field("reason", "a\nb");
  EXPECT_THAT(
      JournalFields(e, "modelfs-snapshotter"),
      ElementsAre("MESSAGE=component=cache msg=\"quarantined layer\" digest=sha256:abcd "
                  "range=10-20 reason=\"a\\\\nb\"",
                  "PRIORITY=3", "SYSLOG_IDENTIFIER=modelfs-snapshotter", "MODELFS_COMPONENT=cache",
                  "MODELFS_DIGEST=sha256:abcd", "MODELFS_RANGE=10-20", "MODELFS_REASON=a\\nb"));
}

TEST(LogEventTest, UrlUserinfoNeverReachesALine) {
  Event e(Level::kError, "registry", "GET https://alice:s3cret@reg.example/v2/ failed");
  e.Field("url", "http://bob:hunter2@10.0.0.1:5000/v2/m/blobs/sha256:ab");
  for (Format f : {Format::kLogfmt, Format::kJson}) {
    const std::string line = FormatLine(e, kTime, f);
    EXPECT_THAT(line, Not(HasSubstr("s3cret")));
    EXPECT_THAT(line, Not(HasSubstr("alice")));
    EXPECT_THAT(line, Not(HasSubstr("hunter2")));
    EXPECT_THAT(line, HasSubstr("https://REDACTED@reg.example/v2/"));
    EXPECT_THAT(line, HasSubstr("http://REDACTED@10.0.0.1:5000/v2/m/blobs/sha256:ab"));
  }
  for (const std::string& f : JournalFields(e, "x")) EXPECT_THAT(f, Not(HasSubstr("s3cret")));
}

TEST(LogEventTest, AuthorizationHeadersAndTokensNeverReachALine) {
  Event e(Level::kWarn, "registry", "sent Authorization: Bearer eyJhbGciOiJFUzI1NiJ9.payload");
  e.Field("header", "authorization: Basic YWxpY2U6czNjcmV0")
      .Field("token_url", "https://auth.example/token?service=r&refresh_token=abc123secret&x=1")
      .Field("challenge", "Bearer eyJhbGciOiJFUzI1NiJ9.second");
  const std::string line = Logfmt(e);
  EXPECT_THAT(line, Not(HasSubstr("eyJhbGci")));
  EXPECT_THAT(line, Not(HasSubstr("YWxpY2U6czNjcmV0")));
  EXPECT_THAT(line, Not(HasSubstr("abc123secret")));
  EXPECT_THAT(line, HasSubstr("msg=\"sent Authorization: REDACTED\""));
  EXPECT_THAT(line, HasSubstr("refresh_token=REDACTED&x=1"));
  EXPECT_THAT(line, HasSubstr("challenge=\"Bearer REDACTED\""));
}

TEST(LogEventTest, ProseAboutAuthIsLeftAlone) {
  EXPECT_EQ(RedactCredentials("basic auth refused; Bearer token expired"),
            "basic auth refused; Bearer token expired");
}

}  // namespace
}  // namespace modelfs::log
