# core/trust fuzz targets: the simple-signing payload (bytes from a registry, parsed after the
# signature verified, but fuzzed as untrusted) and containers-policy.json.
modelfs_fuzzer(trust_payload_fuzz
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/trust_payload_fuzz.cc
  INSTRUMENT
    ${PROJECT_SOURCE_DIR}/core/trust/strict_json.cc
    ${PROJECT_SOURCE_DIR}/core/trust/simple_signing.cc
  DEPS modelfs_oci modelfs_status nlohmann_json::nlohmann_json absl::strings
  CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/corpus/trust_payload
  RUNS 20000)

modelfs_fuzzer(trust_policy_fuzz
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/trust_policy_fuzz.cc
  INSTRUMENT
    ${PROJECT_SOURCE_DIR}/core/trust/strict_json.cc
    ${PROJECT_SOURCE_DIR}/core/trust/keys.cc
    ${PROJECT_SOURCE_DIR}/core/trust/policy.cc
  DEPS modelfs_registry modelfs_oci modelfs_status OpenSSL::Crypto PkgConfig::SODIUM
       nlohmann_json::nlohmann_json absl::strings
  CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/corpus/trust_policy
  RUNS 20000)

# core/attest: the DSSE envelope and the in-toto statement an attestation reader takes from a
# registry.
modelfs_fuzzer(attest_envelope_fuzz
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/attest_envelope_fuzz.cc
  INSTRUMENT ${PROJECT_SOURCE_DIR}/core/attest/attestation.cc
  DEPS modelfs_attest
  CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/corpus/attest_envelope
  RUNS 20000)
