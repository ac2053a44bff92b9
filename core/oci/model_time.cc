#include "core/oci/model_time.h"

#include "absl/time/time.h"
#include "core/oci/media_types.h"

namespace modelfs {

std::optional<int64_t> ParseRfc3339Seconds(std::string_view text) {
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, std::string(text), &t, &err)) return std::nullopt;
  return absl::ToUnixSeconds(t);
}

std::optional<std::string> ModelCreatedAt(const ModelPackConfig* config, const Manifest& model) {
  if (config != nullptr && config->descriptor.created_at.has_value() &&
      ParseRfc3339Seconds(*config->descriptor.created_at).has_value()) {
    return *config->descriptor.created_at;
  }
  auto it = model.annotations.find(std::string(kAnnotationCreated));
  if (it != model.annotations.end() && ParseRfc3339Seconds(it->second).has_value()) {
    return it->second;
  }
  return std::nullopt;
}

int64_t ModelMtimeSeconds(const ModelPackConfig* config, const Manifest& model,
                          const Manifest* volume) {
  if (std::optional<std::string> created = ModelCreatedAt(config, model)) {
    return *ParseRfc3339Seconds(*created);
  }
  if (volume != nullptr) {
    auto it = volume->annotations.find(std::string(kAnnotationCreated));
    if (it != volume->annotations.end()) {
      if (std::optional<int64_t> s = ParseRfc3339Seconds(it->second)) return *s;
    }
  }
  return 0;
}

std::string FormatRfc3339Seconds(int64_t seconds) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixSeconds(seconds),
                          absl::UTCTimeZone());
}

}  // namespace modelfs
