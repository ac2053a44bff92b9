// Number formatting and terminal detection for the CLI's text output.
#include <unistd.h>

#include <cstdio>

#include "cmd/modelfs/cli.h"

namespace modelfs::cli {

bool StdoutIsTty() { return isatty(STDOUT_FILENO) == 1; }
bool StderrIsTty() { return isatty(STDERR_FILENO) == 1; }

}  // namespace modelfs::cli
