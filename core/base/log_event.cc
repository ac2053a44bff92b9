// log::Event encodings (see log_event.h).
#include "core/base/log_event.h"

#include <unistd.h>

#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/text/escape.h"

namespace modelfs::log {
namespace {

constexpr absl::string_view kRedacted = "REDACTED";

bool IsTokenChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' ||
         c == '~' || c == '+' || c == '/' || c == '=' || c == '%';
}

bool IsUrlEnd(char c) {
  return c == '/' || c == '?' || c == '#' || c == '"' || c == '\'' || c == '<' || c == '>' ||
         absl::ascii_isspace(static_cast<unsigned char>(c));
}

// Position of `needle` in `hay` at or after `from`, ignoring ASCII case; npos if none.
size_t FindNoCase(absl::string_view hay, absl::string_view needle, size_t from) {
  for (size_t i = from; i + needle.size() <= hay.size(); ++i) {
    if (absl::EqualsIgnoreCase(hay.substr(i, needle.size()), needle)) return i;
  }
  return absl::string_view::npos;
}

// "scheme://user:pass@host" -> "scheme://REDACTED@host".
std::string RedactUserinfo(absl::string_view s) {
  std::string out;
  size_t done = 0;
  for (size_t at = s.find("://"); at != absl::string_view::npos; at = s.find("://", at + 3)) {
    const size_t start = at + 3;
    size_t end = start;
    while (end < s.size() && !IsUrlEnd(s[end])) ++end;
    const size_t last_at = s.substr(start, end - start).rfind('@');
    if (last_at == absl::string_view::npos) continue;
    absl::StrAppend(&out, s.substr(done, start - done), kRedacted);
    done = start + last_at;
  }
  absl::StrAppend(&out, s.substr(done));
  return out;
}

// The value after each `marker` (the bytes `keep` accepts; at least `min_len` of them)
// replaced. Markers match ignoring ASCII case unless `exact_case`.
std::string RedactAfter(absl::string_view s, absl::string_view marker, bool (*keep)(char),
                        bool exact_case = false, size_t min_len = 1) {
  auto find = [&](size_t from) {
    return exact_case ? s.find(marker, from) : FindNoCase(s, marker, from);
  };
  std::string out;
  size_t done = 0;
  for (size_t at = find(0); at != absl::string_view::npos; at = find(at + marker.size())) {
    const size_t start = at + marker.size();
    if (start < done) continue;
    size_t end = start;
    while (end < s.size() && keep(s[end])) ++end;
    if (end - start < min_len) continue;
    absl::StrAppend(&out, s.substr(done, start - done), kRedacted);
    done = end;
  }
  absl::StrAppend(&out, s.substr(done));
  return out;
}

bool HeaderValueChar(char c) { return c != '\n' && c != '\r' && c != '"' && c != ','; }
bool QueryValueChar(char c) { return c != '&' && c != '#' && !IsUrlEnd(c); }

// Keys are ours; still, nothing but [a-z0-9_] reaches a line.
std::string CleanKey(absl::string_view key) {
  std::string out(key);
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (!(absl::ascii_islower(u) || absl::ascii_isdigit(u) || c == '_')) {
      c = absl::ascii_isupper(u) ? absl::ascii_tolower(u) : '_';
    }
  }
  return out.empty() ? "_" : out;
}

// Escaped, scrubbed text for any encoding.
std::string Clean(absl::string_view value) { return EscapeUntrusted(RedactCredentials(value)); }

void AppendLogfmtValue(std::string& out, absl::string_view value) {
  const std::string v = Clean(value);
  const bool bare = !v.empty() && v.find_first_of(" \"=\\") == std::string::npos;
  if (bare) {
    out += v;
    return;
  }
  out.push_back('"');
  for (char c : v) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
}

// component=... msg=... k=v ... (the part of a logfmt line after time and level).
std::string LogfmtBody(const Event& e) {
  std::string out = "component=";
  AppendLogfmtValue(out, e.component());
  out += " msg=";
  AppendLogfmtValue(out, e.msg());
  for (const auto& [k, v] : e.fields()) {
    absl::StrAppend(&out, " ", CleanKey(k), "=");
    AppendLogfmtValue(out, v);
  }
  return out;
}

std::string TimeText(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

}  // namespace

absl::string_view LevelName(Level level) {
  switch (level) {
    case Level::kDebug:
      return "debug";
    case Level::kInfo:
      return "info";
    case Level::kWarn:
      return "warn";
    case Level::kError:
      return "error";
  }
  return "info";
}

std::optional<Level> ParseLevel(absl::string_view name) {
  for (Level l : {Level::kDebug, Level::kInfo, Level::kWarn, Level::kError}) {
    if (name == LevelName(l)) return l;
  }
  return std::nullopt;
}

int SyslogPriority(Level level) {
  switch (level) {
    case Level::kDebug:
      return 7;
    case Level::kInfo:
      return 6;
    case Level::kWarn:
      return 4;
    case Level::kError:
      return 3;
  }
  return 6;
}

Event& Event::Field(absl::string_view key, uint64_t value) {
  return Field(key, std::to_string(value));
}

Event& Event::Range(uint64_t first, uint64_t last) {
  return Field("range", absl::StrCat(first, "-", last));
}

const std::string* Event::Find(absl::string_view key) const {
  for (const auto& [k, v] : fields_) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::optional<Format> ParseFormat(absl::string_view name) {
  if (name == "logfmt") return Format::kLogfmt;
  if (name == "json") return Format::kJson;
  return std::nullopt;
}

std::string FormatLine(const Event& e, absl::Time time, Format format) {
  if (format == Format::kLogfmt) {
    return absl::StrCat("time=", TimeText(time), " level=", LevelName(e.level()), " ",
                        LogfmtBody(e));
  }
  std::string out = "{\"time\":";
  AppendJsonString(out, TimeText(time));
  absl::StrAppend(&out, ",\"level\":\"", LevelName(e.level()), "\",\"component\":");
  AppendJsonString(out, Clean(e.component()));
  out += ",\"msg\":";
  AppendJsonString(out, Clean(e.msg()));
  for (const auto& [k, v] : e.fields()) {
    std::string key = CleanKey(k);
    if (key == "time" || key == "level" || key == "component" || key == "msg") {
      key = "field_" + key;
    }
    absl::StrAppend(&out, ",\"", key, "\":");
    AppendJsonString(out, Clean(v));
  }
  out.push_back('}');
  return out;
}

std::vector<std::string> JournalFields(const Event& e, absl::string_view identifier) {
  std::vector<std::string> out;
  out.push_back(absl::StrCat("MESSAGE=", LogfmtBody(e)));
  out.push_back(absl::StrCat("PRIORITY=", SyslogPriority(e.level())));
  out.push_back(absl::StrCat("SYSLOG_IDENTIFIER=", Clean(identifier)));
  out.push_back(absl::StrCat("MODELFS_COMPONENT=", Clean(e.component())));
  for (const auto& [k, v] : e.fields()) {
    out.push_back(absl::StrCat("MODELFS_", absl::AsciiStrToUpper(CleanKey(k)), "=", Clean(v)));
  }
  return out;
}

std::string RedactCredentials(absl::string_view text) {
  std::string s = RedactUserinfo(text);
  s = RedactAfter(s, "authorization: ", HeaderValueChar);
  s = RedactAfter(s, "authorization=", QueryValueChar);
  // The schemes as HTTP writes them; prose ("basic auth") is left alone.
  s = RedactAfter(s, "Bearer ", IsTokenChar, /*exact_case=*/true, /*min_len=*/8);
  s = RedactAfter(s, "Basic ", IsTokenChar, /*exact_case=*/true, /*min_len=*/8);
  for (absl::string_view key :
       {"token=", "access_token=", "refresh_token=", "password=", "x-amz-signature=",
        "x-amz-credential=", "x-amz-security-token=", "sig=", "signature="}) {
    for (char sep : {'?', '&'}) {
      s = RedactAfter(s, absl::StrCat(std::string(1, sep), key), QueryValueChar);
    }
  }
  return s;
}

void WriteToStderr(const Event& event) {
  std::string line = absl::StrCat(FormatLine(event, absl::Now(), Format::kLogfmt), "\n");
  (void)!::write(2, line.data(), line.size());
}

}  // namespace modelfs::log
