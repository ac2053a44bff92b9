// The media types of image layers (OCI image spec and Docker v2), apart from media_types.h so
// that the codec table (layer_codec.h), which media_types.h consults, can name them without
// including it back.
//
// Thread safety: constants only.
#pragma once

#include <string_view>

namespace modelfs {

inline constexpr std::string_view kOciLayerTarMediaType = "application/vnd.oci.image.layer.v1.tar";
inline constexpr std::string_view kOciLayerTarGzipMediaType =
    "application/vnd.oci.image.layer.v1.tar+gzip";
inline constexpr std::string_view kOciLayerTarZstdMediaType =
    "application/vnd.oci.image.layer.v1.tar+zstd";
inline constexpr std::string_view kDockerLayerTarGzipMediaType =
    "application/vnd.docker.image.rootfs.diff.tar.gzip";

}  // namespace modelfs
