// Differential fuzzing of the tar follower's consumers (core/oci/tar_follower.h): the input is a
// tar, fed in pieces whose size its last byte picks, to ScanTarHeaders (paths raw and checked),
// TarHeaderRecorder (and the scan of its records), TarSplitWriter (into a temporary directory,
// every regular file a member) and TarTensorIndexer. They must agree: the same entries, or all
// refuse (testsupport/testing/tar_consumers.h says what agreeing means). Never aborts otherwise.
#include <stdio.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "testsupport/testing/tar_consumers.h"

using namespace modelfs;

namespace {

const std::filesystem::path& WorkDir() {
  static const std::filesystem::path dir = [] {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tar_consumers_fuzz.XXXXXX");
    if (mkdtemp(tmpl.data()) == nullptr) abort();
    return std::filesystem::path(tmpl);
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view tar(reinterpret_cast<const char*>(data), size);
  const size_t piece = 1 + data[size - 1] % 1031;
  const testing::TarConsumerOutcomes o = testing::RunTarConsumers(tar, piece, WorkDir(), 1);
  const std::string why = testing::TarConsumersDisagree(o, tar, 1);
  if (!why.empty()) {
    fprintf(stderr, "tar consumers disagree: %s\n", why.c_str());
    abort();
  }
  return 0;
}
