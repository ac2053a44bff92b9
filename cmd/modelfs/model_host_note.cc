// The note the CLI prints when a volume image sends it to another registry for its model.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "cmd/modelfs/cli.h"
#include "core/text/escape.h"

namespace modelfs::cli {

RegistryConnector NotingConnector(const ImageReference& volume, RegistryClients& clients) {
  // ResolveModel calls the connector only for a registry other than the volume image's.
  return [volume, &clients](const std::string& registry) {
    // Both names come from the artifact: escaped, one line.
    fprintf(stderr, "%s\n",
            EscapeUntrusted(absl::StrCat("modelfs: note: volume image ", volume.String(),
                                         " names its model on registry ", registry,
                                         ", not its own ", volume.registry(),
                                         "; reading the model from there (modelfs-snapshotter "
                                         "does so only for hosts in its model_hosts)"))
                .c_str());
    return clients.For(registry);
  };
}

}  // namespace modelfs::cli
