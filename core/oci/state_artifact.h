// Model state artifacts (docs/volume-image.md, "State artifacts"): a prompt cache, a primed
// session or a saved conversation published as an OCI image manifest S whose `subject` is the
// model M it was computed with, so the registry's referrers API (or the fallback tag
// "sha256-<M hex>") lists the states available for a model. S's config says what a runtime
// needs to decide whether it can load the state (format, tokens read, precision); S's layers
// are the state's files, raw, each named by org.cncf.model.filepath. The media types live under
// modelfs's own vendor tree until ModelPack standardises them.
//
// The state config is untrusted input (fuzzed: tests/fuzz/oci_state_config_fuzz.cc) and parsed
// strictly: every field is checked, unknown fields are refused (a newer schema gets a new media
// type). Serialization is compact JSON with sorted keys and no timestamp, so the same state of
// the same model always gives the same config and manifest digests.
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/oci/descriptor.h"
#include "core/oci/manifest.h"

namespace modelfs {

inline constexpr std::string_view kStateArtifactType =
    "application/vnd.modelfs.state.manifest.v1+json";
inline constexpr std::string_view kStateConfigMediaType =
    "application/vnd.modelfs.state.config.v1+json";
inline constexpr std::string_view kStateLayerMediaType =
    "application/vnd.modelfs.state.layer.v1.raw";
// Annotations on S's manifest, so a referrers listing can show a state without fetching it.
// Listings still fetch S and its config by digest and show only what those say.
inline constexpr std::string_view kAnnotationStateName = "dev.modelfs.state.name";
inline constexpr std::string_view kAnnotationStateFormat = "dev.modelfs.state.format";

// A state config is small; anything larger is refused before it is parsed.
inline constexpr uint64_t kMaxStateConfigBytes = 64u << 10;
// Fields of the config: at most this many bytes each.
inline constexpr size_t kMaxStateFieldBytes = 128;

// The config blob, schemaVersion 1.
struct StateConfig {
  int schema_version = 1;
  std::string name;    // [A-Za-z0-9_.-], 1..128 bytes: what the state is ("system-prompt")
  std::string format;  // what reads it: "llama.cpp", "vllm", "shem.session/v1", ...
  Descriptor model;    // M: mediaType, digest, size (the manifest's subject)
  std::optional<uint64_t> tokens;  // tokens the state has read
  std::string precision;           // of the state's tensors: "f16", "q8_0", ...; "" = absent
  friend bool operator==(const StateConfig&, const StateConfig&) = default;
};

// Errors: kInvalidArgument naming the field ("state config.tokens: ..."): not a JSON object,
// over kMaxStateConfigBytes, a missing or ill-typed field, an unknown field, a schemaVersion
// other than 1, a bad name, an empty or over-long or non-printable format or precision, a model
// descriptor without mediaType/digest/size.
absl::StatusOr<StateConfig> ParseStateConfig(std::string_view bytes);
std::string SerializeStateConfig(const StateConfig& config);

// kInvalidArgument unless `name` is 1..128 bytes of [A-Za-z0-9_.-] not starting with '.' or
// '-' (it becomes part of a tag).
absl::Status CheckStateName(std::string_view name);

// One file of a state, already hashed: its path in the state (canonical, relative), the
// digest and size of its bytes.
struct StateFile {
  std::string path;
  Digest digest;
  uint64_t size = 0;
};

// Builds S: OCI manifest, artifactType kStateArtifactType, config = `config_blob`
// (kStateConfigMediaType), one kStateLayerMediaType layer per file in the given order with
// org.cncf.model.filepath and org.opencontainers.image.title, subject = `model` (mediaType,
// digest, size, artifactType), and the name/format annotations. Errors: kPermissionDenied for
// an unsafe path, kInvalidArgument for no files, a duplicate path, a reserved path
// (.modelinfo.json), or a config that does not parse or whose model is not `model`.
absl::StatusOr<Manifest> BuildStateManifest(std::string_view config_blob, const Descriptor& model,
                                            const std::vector<StateFile>& files);

// True when S's artifactType or config media type is a state's.
bool IsStateManifest(const Manifest& m);

// Checks a verified S against its verified config: S has a subject, and the config's model is
// that subject (digest, size, media type). Errors: kDataLoss naming both digests.
absl::Status CheckStateMatchesSubject(const Manifest& s, const StateConfig& config);

}  // namespace modelfs
