// The daemon's log sink (see daemon_log.h).
#include "cmd/modelfs-snapshotter/daemon_log.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <systemd/sd-journal.h>
#include <unistd.h>

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace modelfs::snapshotter {

bool JournalWanted(const std::string& log_journal, const char* journal_stream, uint64_t stderr_dev,
                   uint64_t stderr_ino) {
  if (log_journal == "on") return true;
  if (log_journal != "auto" || journal_stream == nullptr) return false;
  std::pair<std::string, std::string> parts = absl::StrSplit(journal_stream, ':');
  uint64_t dev = 0, ino = 0;
  return absl::SimpleAtoi(parts.first, &dev) && absl::SimpleAtoi(parts.second, &ino) &&
         dev == stderr_dev && ino == stderr_ino;
}

bool JournalWanted(const std::string& log_journal) {
  struct stat st {};
  if (::fstat(STDERR_FILENO, &st) != 0) return log_journal == "on";
  return JournalWanted(log_journal, getenv("JOURNAL_STREAM"), st.st_dev, st.st_ino);
}

void DaemonLog::Write(const log::Event& event) const {
  if (!Enabled(event.level())) return;
  if (options_.journal) {
    const std::vector<std::string> fields = log::JournalFields(event, options_.identifier);
    std::vector<iovec> iov;
    iov.reserve(fields.size());
    for (const std::string& f : fields) {
      iov.push_back(iovec{const_cast<char*>(f.data()), f.size()});
    }
    if (sd_journal_sendv(iov.data(), static_cast<int>(iov.size())) == 0) return;
  }
  const std::string line = absl::StrCat(log::FormatLine(event, absl::Now(), options_.format), "\n");
  (void)!::write(2, line.data(), line.size());
}

}  // namespace modelfs::snapshotter
