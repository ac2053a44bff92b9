// ModelPipeline: the one path from a resolved model to a served one, shared by `modelfs mount`
// (one model, the root of its own tree) and the snapshotter daemon (many models in one tree):
//   1. assemble (LoadModel): register M's layers with the verified cache, index its tar layers
//      and build .modelinfo.json;
//   2. serve: the caller's step that hands the files to the filesystem (fuse/ModelTree, and for
//      `modelfs mount` the FUSE mount itself); a callback, so that core/ needs nothing of fuse/;
//   3. prefetch in the background, by PrefetchPolicy (BlobCache::Prefetch of every layer).
// Where the cache fetches a model's layers from (its RemoteBlobSource) is the caller's choice.
//
// Thread safety: every method may be called concurrently (the cache is thread-safe).
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "core/cache/blob_cache.h"
#include "core/model/model_loader.h"
#include "core/publish/model_ref.h"

namespace modelfs {

struct PipelineOptions {
  PrefetchPolicy prefetch = PrefetchPolicy::kHeadersOnly;
  // Serve bytes before they are verified (still checked when the layer completes). Opt-in only.
  bool insecure_stream = false;
};

class ModelPipeline {
 public:
  // `cache` is not owned and must outlive the pipeline.
  ModelPipeline(BlobCache* cache, PipelineOptions options);
  ModelPipeline(const ModelPipeline&) = delete;
  ModelPipeline& operator=(const ModelPipeline&) = delete;

  // Puts the assembled model in the filesystem. Its error fails Register.
  using ServeFn = std::function<absl::Status(const LoadedModel&)>;

  // Assembles rm (`reference` is shown in .modelinfo.json), calls `serve` with the result and
  // schedules its prefetch. The model's cache references are held under M's digest
  // (model_ref) until Unregister. Errors: LoadModel's, then `serve`'s; on error no cache
  // reference is left behind. A model still registered must not be registered again.
  absl::StatusOr<LoadedModel> Register(const ResolvedModel& rm, const std::string& reference,
                                       const ServeFn& serve);

  // Drops the model's cache references.
  void Unregister(const std::string& model_ref);

 private:
  BlobCache* const cache_;
  const PipelineOptions options_;
};

}  // namespace modelfs
