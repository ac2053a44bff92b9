// DaemonLog: where the daemon's log events go. Each event at or above the configured level
// becomes one line on stderr (logfmt or JSON, log_event.h), or, with the journal on, one
// journald entry whose fields are JournalFields (MESSAGE, PRIORITY, MODELFS_COMPONENT,
// MODELFS_DIGEST, ...) sent with sd_journal_sendv; should that fail, the line goes to stderr.
//
// Thread safety: Write may be called from any thread; each event is one write(2) or one
// sd_journal_sendv, so concurrent events never interleave.
#pragma once

#include <cstdint>
#include <string>

#include "core/base/log_event.h"

namespace modelfs::snapshotter {

struct DaemonLogOptions {
  log::Level min_level = log::Level::kInfo;
  log::Format format = log::Format::kLogfmt;
  bool journal = false;
  // SYSLOG_IDENTIFIER of journal entries.
  std::string identifier = "modelfs-snapshotter";
};

// Whether events go to the journal for log_journal ("on", "off", "auto"). "auto": systemd
// connected stderr to the journal, i.e. `journal_stream` (JOURNAL_STREAM, "DEV:INODE") names
// the device and inode of stderr (`stderr_dev`, `stderr_ino`); stderr redirected elsewhere
// (a file, a pipe) keeps the lines there, as systemd.exec(5) advises.
bool JournalWanted(const std::string& log_journal, const char* journal_stream, uint64_t stderr_dev,
                   uint64_t stderr_ino);
// The same for this process's stderr (fstat(2)).
bool JournalWanted(const std::string& log_journal);

class DaemonLog {
 public:
  explicit DaemonLog(DaemonLogOptions options) : options_(std::move(options)) {}
  void Write(const log::Event& event) const;
  bool Enabled(log::Level level) const { return level >= options_.min_level; }
  // A sink writing here; this DaemonLog must outlive it.
  log::Sink sink() const {
    return [this](const log::Event& e) { Write(e); };
  }

 private:
  const DaemonLogOptions options_;
};

}  // namespace modelfs::snapshotter
