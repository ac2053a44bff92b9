// ModelPipeline: the one path from a resolved model to a served one, shared by `modelfs mount`
// (one model, the root of its own tree) and the snapshotter daemon (many models in one tree):
//   1. assemble (LoadModel): register M's layers with the verified cache, index its tar layers
//      and build .modelinfo.json;
//   2. serve: the caller's step that hands the files to the filesystem (fuse/ModelTree, and for
//      `modelfs mount` the FUSE mount itself); a callback, so that core/ needs nothing of fuse/;
//   3. prefetch in the background, by PrefetchPolicy:
//        kHeadersOnly  the headers of every safetensors and GGUF file and the top-level
//                      config.json, read through the cache exactly as .modelinfo.json reads
//                      them (InspectTreeFiles), one file at a time; only files in layers that
//                      serve verified chunks (a layer verified whole has nothing servable
//                      before all of it is fetched, as BlobCache::Prefetch says);
//        kAll          those headers, and every layer whole (BlobCache::Prefetch kAll);
//        kNone         nothing.
//      Prefetch starts at once, or only at StartPrefetch (the daemon: when a container first
//      uses the model, never while containerd pulls the image).
// Where the cache fetches a model's layers from (its RemoteBlobSource) is the caller's choice.
//
// Thread safety: every method may be called concurrently. mu_ guards the deferred prefetches
// and the queue of header reads; it is a leaf lock, never held across a call into the cache.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/cache/blob_cache.h"
#include "core/model/model_loader.h"
#include "core/model/tree_file.h"
#include "core/resolve/model_ref.h"

namespace modelfs {

struct PipelineOptions {
  PrefetchPolicy prefetch = PrefetchPolicy::kHeadersOnly;
  // Serve bytes before they are verified (still checked when the layer completes). Opt-in only.
  bool insecure_stream = false;
  // LoadOptions::decoding: the cache's source when it decodes compressed layers lazily.
  DecodingBlobSource* decoding = nullptr;
  // LoadOptions::on_records_checked.
  std::function<void(const std::string& model, const absl::Status&)> on_records_checked;
};

enum class PrefetchStart {
  kAtOnce,          // as soon as the model is served
  kOnStartPrefetch  // when StartPrefetch(model_ref) is called
};

class ModelPipeline {
 public:
  // `cache` is not owned and must outlive the pipeline.
  ModelPipeline(BlobCache* cache, PipelineOptions options);
  // Drops the queued header reads and waits for the one in progress.
  ~ModelPipeline();
  ModelPipeline(const ModelPipeline&) = delete;
  ModelPipeline& operator=(const ModelPipeline&) = delete;

  // Puts the assembled model in the filesystem. Its error fails Register.
  using ServeFn = std::function<absl::Status(const LoadedModel&)>;

  // Assembles rm (`reference` is shown in .modelinfo.json), calls `serve` with the result and
  // schedules its prefetch (see above). The model's cache references are held under M's digest
  // (model_ref) until Unregister. Errors: LoadModel's, then `serve`'s; on error no cache
  // reference is left behind. A model still registered must not be registered again.
  absl::StatusOr<LoadedModel> Register(const ResolvedModel& rm, const std::string& reference,
                                       const ServeFn& serve,
                                       PrefetchStart start = PrefetchStart::kAtOnce);

  // Starts the deferred prefetch of model_ref (PrefetchStart::kOnStartPrefetch); later calls
  // and unknown models do nothing.
  void StartPrefetch(const std::string& model_ref);

  // Drops the model's prefetch (deferred or queued header reads) and its cache references.
  void Unregister(const std::string& model_ref);

  // Waits until no header read is queued or running; false on timeout. For tests.
  bool WaitForHeaderReads(absl::Duration timeout);

 private:
  struct Prefetch {
    std::vector<TreeFile> header_files;  // paths as .modelinfo.json reads them (no prefix)
    std::vector<Digest> layers;
  };
  struct HeaderRead {
    std::string model_ref;
    TreeFile file;
  };
  void Begin(const std::string& model_ref, Prefetch prefetch);
  void ReadHeaders();
  bool HasHeaderWorkLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HeaderReadsDoneLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  BlobCache* const cache_;
  const PipelineOptions options_;

  mutable absl::Mutex mu_;
  std::map<std::string, Prefetch> deferred_ ABSL_GUARDED_BY(mu_);  // by model_ref
  std::deque<HeaderRead> header_reads_ ABSL_GUARDED_BY(mu_);
  int header_reads_running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread header_reader_ ABSL_GUARDED_BY(mu_);  // started with the first header read
};

}  // namespace modelfs
