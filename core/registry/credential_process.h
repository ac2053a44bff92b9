// Running a credential program (a docker-credential-<name> helper, a kubelet image credential
// provider plugin): the request on its stdin, its answer read from stdout, bounded by a timeout.
// Its stdout may hold a secret and its stderr may echo one, so neither ever reaches a Status
// message or a log: stderr goes to /dev/null and errors say only how the program ended.
//
// Thread safety: RunCredentialProcess may be called concurrently (pipes are close-on-exec, so a
// program started by one thread never holds another's pipe open).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace modelfs {

struct CredentialProcess {
  // argv[0] is the program: a path with a '/' is run as is, a bare name is looked up on $PATH.
  std::vector<std::string> argv;
  // Added to (or replacing in) the environment the program inherits.
  std::vector<std::pair<std::string, std::string>> env;
  std::string stdin_data;
  absl::Duration timeout = absl::Seconds(30);
  // How messages name the program and what it was asked for ("docker-credential-pass for
  // registry reg:5000"); never the request or the answer.
  std::string label;
};

struct CredentialProcessResult {
  int exit_code = 0;   // 0..255
  std::string stdout;  // at most 1 MiB; may hold a secret
};

// Runs the program to completion. Errors (naming `label`, never the output): kNotFound when
// the program does not exist or cannot be executed, kDeadlineExceeded when it runs longer than
// the timeout (it is killed), kInternal when it dies of a signal, its output exceeds 1 MiB or
// a pipe fails. A non-zero exit is not an error here: the caller reads exit_code.
absl::StatusOr<CredentialProcessResult> RunCredentialProcess(const CredentialProcess& p);

}  // namespace modelfs
