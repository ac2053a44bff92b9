// `modelfs state push` and `modelfs state list`: publishing a model's state (a prompt cache, a
// primed session) as a state artifact S whose subject is the model M, plus a volume image VS
// for S so a pod mounts the state as a second image volume; and listing the states of a model
// through the referrers API or its fallback tag (core/oci/state_artifact.h,
// docs/volume-image.md "State artifacts").
//
// S, its blobs and VS go into M's repository (where the referrers of M live), whatever
// repository MODEL_REF named (a volume image V is followed to M first).
//
// Thread safety: free functions; the clients are thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/oci/state_artifact.h"
#include "core/publish/push.h"
#include "core/registry/registry_client.h"
#include "core/resolve/model_ref.h"
#include "nlohmann/json.hpp"

namespace modelfs {

struct StatePushOptions {
  std::vector<std::string> inputs;  // files and directories (a directory's files keep their paths)
  std::string name;                 // StateConfig::name (CheckStateName)
  std::string format;               // StateConfig::format
  std::optional<uint64_t> tokens;
  std::string precision;
  std::string tag;  // S's tag; default "state-<name>"; VS gets "<tag>-volume"
  ProgressFn progress;
};

struct StatePushResult {
  std::string repository;  // "registry/repo" of M, S and VS
  Descriptor model;        // M
  Descriptor state;        // S (artifactType set)
  std::string state_tag;
  Descriptor volume;  // VS
  std::string volume_tag;
  StateConfig config;
  // "api" when the registry indexes referrers itself, "tag" when the fallback tag
  // sha256-<M hex> (and sha256-<S hex> for VS) was written.
  std::string referrers;
  std::vector<PushedBlob> blobs;
  int uploaded = 0, present = 0;
};

// Writes S (and VS) for `model` (resolved from MODEL_REF; must be a model, not a state) through
// `client`, a push client of the model's registry. Files are hashed and indexed first, so a
// missing or unsafe file stops the push before anything is uploaded. Errors: kInvalidArgument
// for a bad name/format/precision, no files, `model` being a state; kPermissionDenied for an
// unsafe path; kNotFound for a missing input; the registry's errors.
absl::StatusOr<StatePushResult> PushState(RegistryClient& client, const ResolvedModel& model,
                                          const StatePushOptions& options);

struct StateListing {
  Descriptor state;  // S as the registry listed it, with its artifactType and annotations
  StateConfig config;
  std::vector<StateFile> files;
  std::optional<Descriptor> volume;  // VS, when a volume image refers to S
};

// The states whose subject is M (referrers API, else the fallback tag), each S and its config
// fetched by digest, verified and parsed; a listed manifest that is not a state of M is
// skipped. Ordered by name, then digest. Errors: the registry's; kDataLoss for a state whose
// bytes fail their digest; kInvalidArgument for a malformed state config or referrers index.
absl::StatusOr<std::vector<StateListing>> ListStates(RegistryClient& client,
                                                     const ResolvedModel& model);

nlohmann::json StatePushResultToJson(const StatePushResult& r);
nlohmann::json StateListingToJson(const StateListing& s, const std::string& repository);

}  // namespace modelfs
