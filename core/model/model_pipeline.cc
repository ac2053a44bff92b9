// ModelPipeline: LoadModel, the caller's serve step, then the prefetch; header reads run on one
// background thread, a file at a time, so that stopping waits for one read at most.
#include "core/model/model_pipeline.h"

#include <algorithm>

#include <set>
#include <utility>

#include "core/model/modelinfo.h"
#include "core/status/status_macros.h"

namespace modelfs {

ModelPipeline::ModelPipeline(BlobCache* cache, PipelineOptions options)
    : cache_(cache), options_(std::move(options)) {}

ModelPipeline::~ModelPipeline() {
  std::thread reader;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    header_reads_.clear();
    reader = std::move(header_reader_);
  }
  if (reader.joinable()) reader.join();
}

absl::StatusOr<LoadedModel> ModelPipeline::Register(const ResolvedModel& rm,
                                                    const std::string& reference,
                                                    const ServeFn& serve, PrefetchStart start) {
  LoadOptions lo;
  lo.insecure_stream = options_.insecure_stream;
  lo.reference = reference;
  lo.decoding = options_.decoding;
  lo.on_records_checked = options_.on_records_checked;
  ASSIGN_OR_RETURN(LoadedModel loaded, LoadModel(rm, *cache_, lo));
  const std::string model_ref = rm.model_descriptor.digest.str();
  if (absl::Status served = serve(loaded); !served.ok()) {
    Unregister(model_ref);
    return served;
  }
  // Records nobody pinned are checked against the layers at once, after the model is ready:
  // its first read would wait for that check anyway, and a lie is caught even if nothing
  // reads the model.
  if (loaded.records_check != nullptr) loaded.records_check->StartInBackground();
  // Loaders read a model's files in path order (vLLM and llama.cpp sort their shards): each
  // weight layer passes its stream on to the next one's, so the next file is arriving when a
  // loader gets to it.
  {
    std::vector<const TreeFile*> by_path;
    for (const TreeFile& f : loaded.files) {
      if (f.kind == TreeFile::Kind::kFile) by_path.push_back(&f);
    }
    std::sort(by_path.begin(), by_path.end(),
              [](const TreeFile* a, const TreeFile* b) { return a->path < b->path; });
    std::vector<Digest> order;
    std::set<Digest> seen;
    for (const TreeFile* f : by_path) {
      if (seen.insert(f->layer).second) order.push_back(f->layer);
    }
    for (size_t i = 0; i + 1 < order.size(); ++i)
      cache_->SetStreamSuccessor(order[i], order[i + 1]);
  }
  if (options_.prefetch == PrefetchPolicy::kNone) return loaded;

  Prefetch p;
  p.layers = loaded.layers;
  // Headers help only where verified chunks are served before the whole layer is.
  std::set<Digest> early;
  for (const ModelLayer& l : rm.layers) {
    if (options_.insecure_stream || rm.chunk_indexes.count(l.descriptor.digest) > 0) {
      early.insert(l.descriptor.digest);
    }
  }
  for (const auto& [layer, serving] : loaded.layer_serving) {
    if (serving != "lazy-seek-index") continue;
    // Its files are named by the diffId of the uncompressed layer.
    absl::StatusOr<Digest> d = Digest::Parse(layer);
    if (d.ok()) early.insert(rm.seek_indexes.at(*d)->diff_id);
  }
  // .modelinfo.json reads the files by their paths in M, before V's path prefix is applied.
  const std::string prefix = rm.path_prefix.empty() ? "" : rm.path_prefix + "/";
  for (TreeFile f : loaded.files) {
    if (early.count(f.layer) == 0) continue;
    if (!prefix.empty() && f.path.rfind(prefix, 0) == 0) f.path = f.path.substr(prefix.size());
    p.header_files.push_back(std::move(f));
  }
  if (start == PrefetchStart::kAtOnce) {
    Begin(model_ref, std::move(p));
  } else {
    absl::MutexLock lock(&mu_);
    deferred_[model_ref] = std::move(p);
  }
  return loaded;
}

void ModelPipeline::StartPrefetch(const std::string& model_ref) {
  Prefetch p;
  {
    absl::MutexLock lock(&mu_);
    auto it = deferred_.find(model_ref);
    if (it == deferred_.end()) return;
    p = std::move(it->second);
    deferred_.erase(it);
  }
  Begin(model_ref, std::move(p));
}

void ModelPipeline::Begin(const std::string& model_ref, Prefetch p) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    for (TreeFile& f : p.header_files) header_reads_.push_back({model_ref, std::move(f)});
    if (!header_reads_.empty() && !header_reader_.joinable()) {
      header_reader_ = std::thread([this] { ReadHeaders(); });
    }
  }
  // Header reads are foreground reads, so they go ahead of the whole-layer fill.
  if (options_.prefetch == PrefetchPolicy::kAll) {
    for (const Digest& d : p.layers) (void)cache_->Prefetch(d, PrefetchPolicy::kAll);
  }
}

void ModelPipeline::ReadHeaders() {
  while (true) {
    HeaderRead next;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &ModelPipeline::HasHeaderWorkLocked));
      if (stopping_) return;
      next = std::move(header_reads_.front());
      header_reads_.pop_front();
      ++header_reads_running_;
    }
    // The same reads .modelinfo.json makes; what they find is not needed here, and a file
    // whose header does not parse was already reported there.
    (void)InspectTreeFiles(*cache_, {next.file});
    absl::MutexLock lock(&mu_);
    --header_reads_running_;
  }
}

bool ModelPipeline::WaitForHeaderReads(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(this, &ModelPipeline::HeaderReadsDoneLocked),
                              timeout);
}

bool ModelPipeline::HasHeaderWorkLocked() const { return stopping_ || !header_reads_.empty(); }

bool ModelPipeline::HeaderReadsDoneLocked() const {
  return header_reads_.empty() && header_reads_running_ == 0;
}

void ModelPipeline::Unregister(const std::string& model_ref) {
  {
    absl::MutexLock lock(&mu_);
    deferred_.erase(model_ref);
    std::erase_if(header_reads_, [&](const HeaderRead& r) { return r.model_ref == model_ref; });
  }
  cache_->UnregisterModel(model_ref);
}

}  // namespace modelfs
