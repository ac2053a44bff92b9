// log::Event: one structured log event (time, level, component, message, fields) and its two
// line encodings, logfmt (the daemon's default) and JSON, plus the journald fields it maps to.
// Code that logs builds an Event and hands it to the sink its owner passed in (a
// `log::Sink` in its options); nothing here is process-global. docs/snapshotter.md ("Logs")
// documents the fields.
//
//   sink(log::Warn("cache", "chunk failed verification")
//            .Field("digest", d.str()).Range(first, last).Field("registry", host));
//
// Every message and value is escaped here (EscapeUntrusted: no control character, no invalid
// UTF-8 reaches a line) and scrubbed of credentials (userinfo in URLs, Authorization headers,
// bearer and basic tokens), so callers may pass registry errors and caller-chosen names as
// they are.
//
// Thread safety: Event is a value; the functions are pure.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/time/time.h"

namespace modelfs::log {

enum class Level { kDebug, kInfo, kWarn, kError };

// "debug", "info", "warn", "error".
absl::string_view LevelName(Level level);
// The inverse of LevelName; nullopt for any other text.
std::optional<Level> ParseLevel(absl::string_view name);
// syslog priority, journald's PRIORITY: debug 7, info 6, warn 4, error 3.
int SyslogPriority(Level level);

class Event {
 public:
  Event(Level level, absl::string_view component, absl::string_view msg)
      : level_(level), component_(component), msg_(msg) {}

  // Fields keep their order. Keys are ours: lowercase letters, digits and '_' (any other byte
  // is written as '_').
  Event& Field(absl::string_view key, absl::string_view value) {
    fields_.emplace_back(std::string(key), std::string(value));
    return *this;
  }
  Event& Field(absl::string_view key, const char* value) {
    return Field(key, absl::string_view(value));
  }
  Event& Field(absl::string_view key, const std::string& value) {
    return Field(key, absl::string_view(value));
  }
  Event& Field(absl::string_view key, uint64_t value);
  // range=FIRST-LAST, both inclusive (bytes [first, last]).
  Event& Range(uint64_t first, uint64_t last);

  Level level() const { return level_; }
  const std::string& component() const { return component_; }
  const std::string& msg() const { return msg_; }
  const std::vector<std::pair<std::string, std::string>>& fields() const { return fields_; }
  // The value of the first field named `key`, or nullptr.
  const std::string* Find(absl::string_view key) const;

 private:
  Level level_;
  std::string component_;
  std::string msg_;
  std::vector<std::pair<std::string, std::string>> fields_;
};

// Shorthands: log::Warn("cache", "quarantined layer").Field("digest", d).
inline Event Debug(absl::string_view component, absl::string_view msg) {
  return Event(Level::kDebug, component, msg);
}
inline Event Info(absl::string_view component, absl::string_view msg) {
  return Event(Level::kInfo, component, msg);
}
inline Event Warn(absl::string_view component, absl::string_view msg) {
  return Event(Level::kWarn, component, msg);
}
inline Event Error(absl::string_view component, absl::string_view msg) {
  return Event(Level::kError, component, msg);
}

// Where events go; the daemon's writes a line to stderr and, under systemd, to the journal.
using Sink = std::function<void(const Event&)>;

enum class Format { kLogfmt, kJson };
// "logfmt" | "json"; nullopt for any other text.
std::optional<Format> ParseFormat(absl::string_view name);

// One line, no trailing newline:
//   logfmt: time=2026-12-07T15:08:22.123Z level=warn component=cache msg="..." digest=... ...
//     A value is written bare when it is non-empty and has no space, '"', '=' or '\\' (after
//     escaping), else in double quotes with '"' written \" and a backslash written \\, so a
//     logfmt reader's unquoting gives back the escaped text exactly (a newline reads as "\\n").
//   json: {"time":"...","level":"warn","component":"cache","msg":"...","digest":"...",...}
//     (a field named time, level, component or msg is written with a "field_" prefix).
// `time` is written in UTC with milliseconds.
std::string FormatLine(const Event& event, absl::Time time, Format format);

// The journald fields of `event` ("NAME=value"): MESSAGE (the logfmt line without time and
// level), PRIORITY, SYSLOG_IDENTIFIER=`identifier`, MODELFS_COMPONENT, and MODELFS_<KEY> per
// field (key uppercased). Values are escaped and scrubbed like the line's.
std::vector<std::string> JournalFields(const Event& event, absl::string_view identifier);

// `text` with credentials replaced by "REDACTED": the userinfo of any URL
// ("https://u:p@host" -> "https://REDACTED@host"), the value of an Authorization or
// Proxy-Authorization header, and the token after "Bearer " or "Basic ".
std::string RedactCredentials(absl::string_view text);

// A sink that writes logfmt lines to stderr prefixed by nothing, one write(2) per line: the
// default of libraries whose owner passed no sink (the `modelfs mount` daemon).
void WriteToStderr(const Event& event);

}  // namespace modelfs::log
