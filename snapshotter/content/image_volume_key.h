// The snapshot key containerd 2.1's CRI plugin uses for an image volume, as the snapshotter
// receives it through containerd's metadata layer:
//
//   <namespace>/<n>/<state dir>/io.containerd.grpc.v1.cri/image-volumes/<sandbox id>/<hex>
//
// <namespace> and <n> are the prefix containerd's metadata store puts on every backend key
// (namespace, then a decimal counter); <state dir> is containerd's state directory (absolute,
// so the key holds "//"); <sandbox id> and <hex> are 64 lowercase hex digits, the pod sandbox and
// the image. Prepare comes with parent "" when containerd could not unpack the image (a
// ModelPack artifact has no rootfs), which is the case modelfs serves from the content store.
//
// Thread safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/oci/digest.h"

namespace modelfs::snapshotter {

struct ImageVolumeKey {
  std::string ns;          // containerd namespace ("k8s.io")
  std::string sandbox_id;  // 64 hex
  Digest image;            // sha256:<hex> from the key's last component
};

// The parts of `key` when it has exactly the shape above; nullopt for any other key (an
// ordinary layer, a container's root filesystem, or anything merely similar).
std::optional<ImageVolumeKey> ParseImageVolumeKey(std::string_view key);

}  // namespace modelfs::snapshotter
