# OCI fuzz targets (owned by the oci engineer): the JSON documents a registry hands us, the
# binary chunk index, and the tar header reader.

# The codec table (layer_codec.h) and what its codecs use: media types, the seek index and the
# decoders all consult it.
set(MODELFS_OCI_CODEC_FUZZ_SOURCES
  ${PROJECT_SOURCE_DIR}/core/oci/media_types.cc
  ${PROJECT_SOURCE_DIR}/core/oci/layer_codec.cc
  ${PROJECT_SOURCE_DIR}/core/oci/codec_gzip.cc
  ${PROJECT_SOURCE_DIR}/core/oci/codec_zstd.cc
  ${PROJECT_SOURCE_DIR}/core/oci/layer_decoder.cc
  ${PROJECT_SOURCE_DIR}/core/oci/seek_index.cc
  ${PROJECT_SOURCE_DIR}/core/oci/span_decoder.cc
  ${PROJECT_SOURCE_DIR}/core/oci/zstd_decode_stream.cc
  ${PROJECT_SOURCE_DIR}/core/base/buffer_pool.cc)
set(MODELFS_OCI_CODEC_FUZZ_DEPS
  absl::synchronization PkgConfig::ZSTD PkgConfig::ISAL ZLIB::ZLIB)

set(MODELFS_OCI_FUZZ_SOURCES
  ${PROJECT_SOURCE_DIR}/core/oci/digest.cc
  ${MODELFS_OCI_CODEC_FUZZ_SOURCES}
  ${PROJECT_SOURCE_DIR}/core/oci/oci_json.cc
  ${PROJECT_SOURCE_DIR}/core/oci/manifest.cc
  ${PROJECT_SOURCE_DIR}/core/oci/modelpack.cc
  ${PROJECT_SOURCE_DIR}/core/text/base_name.cc
  ${PROJECT_SOURCE_DIR}/core/oci/path_safety.cc
  ${PROJECT_SOURCE_DIR}/core/oci/chunk_hash.cc
  ${PROJECT_SOURCE_DIR}/core/oci/chunk_index.cc
  ${PROJECT_SOURCE_DIR}/core/oci/tar.cc
  ${PROJECT_SOURCE_DIR}/core/oci/tar_follower.cc
  ${PROJECT_SOURCE_DIR}/core/oci/tar_headers.cc
  ${PROJECT_SOURCE_DIR}/core/oci/volume_image.cc
  ${PROJECT_SOURCE_DIR}/core/oci/volume_model_json.cc
  ${PROJECT_SOURCE_DIR}/core/oci/volume_binding.cc
  ${PROJECT_SOURCE_DIR}/core/oci/tensor_index.cc
  ${PROJECT_SOURCE_DIR}/core/text/utf8.cc
  ${PROJECT_SOURCE_DIR}/core/oci/seek_windows.cc
  ${PROJECT_SOURCE_DIR}/core/io/range_reader.cc
  ${PROJECT_SOURCE_DIR}/core/io/header_cursor.cc
  ${PROJECT_SOURCE_DIR}/core/io/http_range_reader.cc)
set(MODELFS_OCI_FUZZ_DEPS
  modelfs_status modelfs_blake3 OpenSSL::Crypto nlohmann_json::nlohmann_json absl::strings
  absl::str_format modelfs_http ${MODELFS_OCI_CODEC_FUZZ_DEPS})

# ParseManifest / ParseIndex / ParseModelPackConfig / ParseVolumeModelJson on arbitrary bytes,
# and parse -> serialize -> parse must be a fixed point.
modelfs_fuzzer(oci_manifest_fuzz
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/oci_manifest_fuzz.cc
  INSTRUMENT ${MODELFS_OCI_FUZZ_SOURCES}
  DEPS ${MODELFS_OCI_FUZZ_DEPS}
  CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/corpus/oci_manifest
  RUNS 20000)

# ParseChunkIndex on arbitrary bytes (versions 1 and 2); accepted indexes serialize back to the
# same bytes.
modelfs_fuzzer(oci_chunk_index_fuzz
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/oci_chunk_index_fuzz.cc
  INSTRUMENT
    ${PROJECT_SOURCE_DIR}/core/oci/digest.cc
    ${PROJECT_SOURCE_DIR}/core/oci/chunk_hash.cc
    ${PROJECT_SOURCE_DIR}/core/oci/chunk_index.cc
  DEPS modelfs_status modelfs_blake3 OpenSSL::Crypto absl::strings
  CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/corpus/oci_chunk_index
  RUNS 20000)

# IndexTar (paths checked and raw), TarHeaderRecorder, ParseTarHeaders and ParseVolumeLayer on
# arbitrary bytes; every entry's data must lie inside the blob, and a tar indexed from its
# recorded headers gives the entries it gives itself.
modelfs_fuzzer(oci_tar_fuzz
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/oci_tar_fuzz.cc
  INSTRUMENT ${MODELFS_OCI_FUZZ_SOURCES}
  DEPS ${MODELFS_OCI_FUZZ_DEPS}
  CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/corpus/oci_tar
  RUNS 20000)

# LayerDecoder on arbitrary gzip and zstd streams: fed whole or in small pieces, the outcome
# is the same (no partial stream is ever accepted by one and refused by the other).
modelfs_fuzzer(oci_layer_decoder_fuzz
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/oci_layer_decoder_fuzz.cc
  INSTRUMENT
    ${PROJECT_SOURCE_DIR}/core/oci/digest.cc
    ${MODELFS_OCI_CODEC_FUZZ_SOURCES}
  DEPS modelfs_status OpenSSL::Crypto absl::strings absl::status absl::statusor
       ${MODELFS_OCI_CODEC_FUZZ_DEPS}
  CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/corpus/oci_layer_decoder
  RUNS 3000)  # about 50 runs a second under ASan: every run sets up two 1 MiB decoders

# ParseSeekIndex (accepted indexes serialize back to the same bytes), the one-pass index
# builder on arbitrary gzip/zstd streams (ranges decoded through the index equal the plain
# decoding), span decoding entered at forged points, and ParseSeekWindowsTable (the windows
# table a mount fetches; accepted tables serialize back to the same bytes).
modelfs_fuzzer(oci_seek_index_fuzz
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/oci_seek_index_fuzz.cc
  INSTRUMENT
    ${PROJECT_SOURCE_DIR}/core/oci/digest.cc
    ${PROJECT_SOURCE_DIR}/core/oci/seek_windows.cc
    ${MODELFS_OCI_CODEC_FUZZ_SOURCES}
  DEPS modelfs_status OpenSSL::Crypto absl::strings absl::status absl::statusor
       ${MODELFS_OCI_CODEC_FUZZ_DEPS}
  CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/corpus/oci_seek_index
  RUNS 3000)

# MergeImageTars over up to four tars: an accepted tree is canonical, every parent is a
# directory, and every file lies inside its own layer.
modelfs_fuzzer(oci_image_tree_fuzz
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/oci_image_tree_fuzz.cc
  INSTRUMENT ${MODELFS_OCI_FUZZ_SOURCES} ${PROJECT_SOURCE_DIR}/core/oci/image_tree.cc
  DEPS ${MODELFS_OCI_FUZZ_DEPS}
  CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/corpus/oci_image_tree
  RUNS 20000)

# ParseStateConfig on arbitrary bytes: parse -> serialize -> parse is a fixed point, and an
# accepted config always builds a state manifest that matches it.
modelfs_fuzzer(oci_state_config_fuzz
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/oci_state_config_fuzz.cc
  INSTRUMENT ${MODELFS_OCI_FUZZ_SOURCES} ${PROJECT_SOURCE_DIR}/core/oci/state_artifact.cc
  DEPS ${MODELFS_OCI_FUZZ_DEPS}
  CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/corpus/oci_state_config
  RUNS 20000)

# ParseTensorIndex on arbitrary bytes (the index V pins, read by diff and inspect --tensors):
# never aborts, an accepted index serializes to the same bytes, and every tensor lies in the
# file and the file in the layer.
modelfs_fuzzer(oci_tensor_index_fuzz
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/oci_tensor_index_fuzz.cc
  INSTRUMENT
    ${PROJECT_SOURCE_DIR}/core/oci/digest.cc
    ${PROJECT_SOURCE_DIR}/core/oci/chunk_hash.cc
    ${PROJECT_SOURCE_DIR}/core/oci/tensor_index.cc
    ${PROJECT_SOURCE_DIR}/core/text/utf8.cc
  DEPS modelfs_status modelfs_blake3 OpenSSL::Crypto absl::strings
  CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/corpus/oci_tensor_index
  RUNS 20000)
