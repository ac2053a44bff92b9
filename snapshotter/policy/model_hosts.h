// Where a volume image V may send the node for its model M (snapshotter.toml `model_hosts`).
// By default only V's own repository; each entry allows more:
//   "host[:port]"                 every repository on that registry (the entries' old meaning)
//   "host[:port]/path/to/repo"    that one repository
//   "host[:port]/path/*"          every repository under path/ (a project, a tenant)
// The registry is compared as written in image references ("reg:5000" and "reg" differ).
//
// Thread safety: plain functions of their arguments.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace modelfs::snapshotter {

// OK for an entry of one of the three forms; else kInvalidArgument naming it and the forms.
absl::Status CheckModelHostEntry(absl::string_view entry);

// True when `entry` (valid) allows M at `repository` on `registry`.
bool ModelHostAllows(absl::string_view entry, absl::string_view registry,
                     absl::string_view repository);

// A repository on a registry, as written in image references.
struct RepositoryName {
  std::string registry;
  std::string repository;
};

// OK when volume image `volume` (its reference, in repository `v`) may send the node to
// repository `m` for its model `model` (a digest): m is v, or an entry of `model_hosts` allows
// it. Else kPermissionDenied naming both repositories and the line to add to snapshotter.toml.
absl::Status CheckModelHost(const std::vector<std::string>& model_hosts, absl::string_view volume,
                            const RepositoryName& v, absl::string_view model,
                            const RepositoryName& m);

}  // namespace modelfs::snapshotter
