// ModelPipeline: LoadModel, the caller's serve step, then the prefetch.
#include "core/model/model_pipeline.h"

#include <utility>

#include "core/status/status_macros.h"

namespace modelfs {

ModelPipeline::ModelPipeline(BlobCache* cache, PipelineOptions options)
    : cache_(cache), options_(std::move(options)) {}

absl::StatusOr<LoadedModel> ModelPipeline::Register(const ResolvedModel& rm,
                                                    const std::string& reference,
                                                    const ServeFn& serve) {
  LoadOptions lo;
  lo.insecure_stream = options_.insecure_stream;
  lo.reference = reference;
  ASSIGN_OR_RETURN(LoadedModel loaded, LoadModel(rm, *cache_, lo));
  if (absl::Status served = serve(loaded); !served.ok()) {
    Unregister(rm.model_descriptor.digest.str());
    return served;
  }
  if (options_.prefetch != PrefetchPolicy::kNone) {
    for (const Digest& d : loaded.layers) (void)cache_->Prefetch(d, options_.prefetch);
  }
  return loaded;
}

void ModelPipeline::Unregister(const std::string& model_ref) { cache_->UnregisterModel(model_ref); }

}  // namespace modelfs
