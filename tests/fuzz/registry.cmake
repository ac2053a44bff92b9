# core/registry fuzz targets: what credential programs answer (a docker credential helper's JSON,
# a kubelet plugin's CredentialProviderResponse), the CredentialProviderConfig, docker's
# config.json and the kubelet's matchImages rule. Local programs and files an admin installed,
# but a helper may relay whatever a remote service sent it.
modelfs_fuzzer(registry_credentials_fuzz
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/registry_credentials_fuzz.cc
  INSTRUMENT
    ${PROJECT_SOURCE_DIR}/core/registry/credentials.cc
    ${PROJECT_SOURCE_DIR}/core/registry/keychain.cc
    ${PROJECT_SOURCE_DIR}/core/registry/kubelet_credential_provider.cc
  DEPS modelfs_registry modelfs_status nlohmann_json::nlohmann_json absl::strings
  CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/corpus/registry_credentials
  RUNS 20000)
