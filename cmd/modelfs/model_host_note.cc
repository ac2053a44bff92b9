// The note the CLI prints when a volume image sends it outside its own repository for its model.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "cmd/modelfs/cli.h"
#include "core/text/escape.h"

namespace modelfs::cli {

ModelLocationCheck NotingLocation(const ImageReference& volume) {
  // ResolveModel asks only for a location other than the volume image's own repository.
  return [volume](const std::string& registry, const std::string& repository) {
    const std::string where =
        registry == volume.registry()
            ? absl::StrCat("repository ", repository, " of its registry")
            : absl::StrCat("repository ", repository, " on registry ", registry);
    // The names come from the artifact: escaped, one line.
    fprintf(stderr, "%s\n",
            EscapeUntrusted(
                absl::StrCat("modelfs: note: volume image ", volume.String(),
                             " names its model in ", where, ", not in its own repository ",
                             volume.registry(), "/", volume.repository(),
                             "; reading the model from there (modelfs-snapshotter does so only "
                             "where its model_hosts allows)"))
                .c_str());
    return absl::OkStatus();
  };
}

}  // namespace modelfs::cli
