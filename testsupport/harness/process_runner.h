// Running a command to completion for end-to-end tests: the modelfs CLI, skopeo, ctr. stdout
// and stderr are captured separately (tests assert on each), extra environment variables are
// set in the child only, and a command that outlives its deadline is killed.
//
// Thread safety: RunProcess keeps no state; concurrent calls are independent.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace modelfs::testing {

struct ProcessResult {
  int exit_code = -1;  // the exit status, or 128 + signal number
  std::string out;     // stdout
  std::string err;     // stderr
};

// The whole file at `path`, or "" when it cannot be read (logs and state files of services).
std::string ReadAll(const std::string& path);

// Runs argv[0] (looked up in PATH) with stdin from /dev/null. Errors: kInternal when the
// process cannot be started; kDeadlineExceeded (after SIGKILL) when it runs past `timeout`.
absl::StatusOr<ProcessResult> RunProcess(const std::vector<std::string>& argv,
                                         const std::map<std::string, std::string>& env = {},
                                         absl::Duration timeout = absl::Seconds(120));

}  // namespace modelfs::testing
