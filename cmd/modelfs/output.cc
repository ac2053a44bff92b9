// Number formatting and terminal detection for the CLI's text output.
#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_format.h"
#include "cmd/modelfs/cli.h"

namespace modelfs::cli {

std::string HumanBytes(uint64_t n) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(n);
  int unit = 0;
  while (v >= 1024.0 && unit < 5) {
    v /= 1024.0;
    ++unit;
  }
  if (unit == 0) return absl::StrFormat("%d B", n);
  return absl::StrFormat("%.2f %s", v, kUnits[unit]);
}

bool StdoutIsTty() { return isatty(STDOUT_FILENO) == 1; }
bool StderrIsTty() { return isatty(STDERR_FILENO) == 1; }

}  // namespace modelfs::cli
