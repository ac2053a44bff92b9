// CachedModelTest: a real BlobCache over an in-memory remote (FakeRemote) and a ResolvedModel
// whose layers the test adds, for the tests of model assembly and the pipeline.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/cache/blob_cache.h"
#include "core/oci/media_types.h"
#include "core/resolve/model_ref.h"
#include "gtest/gtest.h"
#include "testsupport/fakes/fake_remote.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {

class CachedModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CacheOptions o;
    o.dir = tmp_.Join("cache").string();
    o.log = [](const log::Event&) {};
    ASSERT_OK_AND_ASSIGN(cache_, BlobCache::Open(o, &remote_));
    ASSERT_OK_AND_ASSIGN(model_.ref, ImageReference::Parse("registry.test/models/m:v1"));
    model_.repository = "models/m";
    model_.model_descriptor.media_type = std::string(kOciManifestMediaType);
    model_.model_descriptor.digest = Digest::Of("the model manifest");
    model_.model_descriptor.size = 18;
    model_.model.config.digest = Digest::Of("the model config");
  }

  // A layer served by the fake remote, appended to the model.
  Digest AddLayer(const std::string& bytes, LayerEncoding encoding, const std::string& path,
                  const std::string& media_type) {
    ModelLayer l;
    l.descriptor.media_type = media_type;
    l.descriptor.digest = remote_.AddBlob(bytes);
    l.descriptor.size = bytes.size();
    l.kind = LayerKind::kDoc;
    l.encoding = encoding;
    l.path = path;
    model_.layers.push_back(l);
    return l.descriptor.digest;
  }
  Digest AddRawLayer(const std::string& bytes, const std::string& path) {
    return AddLayer(bytes, LayerEncoding::kRaw, path, "application/vnd.cncf.model.doc.v1.raw");
  }

  // The cache references held on `layer` (0 when the cache does not know it).
  int References(const Digest& layer) const {
    absl::StatusOr<BlobCache::LayerInfo> info = cache_->GetLayerInfo(layer);
    return info.ok() ? info->references : 0;
  }

  std::string ModelRef() const { return model_.model_descriptor.digest.str(); }

  TempDir tmp_;
  FakeRemote remote_;
  std::unique_ptr<BlobCache> cache_;
  ResolvedModel model_;
};

}  // namespace modelfs::testing
