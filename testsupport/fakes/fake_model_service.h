// FakeModelService: the model host as the snapshotter sees it (host/model_service.h), in memory,
// for tests of the snapshotter's own logic without a cache, a tree or a mount. It records each
// call as one line ("mount <dir>", "register <name>", "delete-record <name>", ...) in a log the
// test owns, keeps records and registered models in maps, and answers the cache's questions
// with what the test set. No registry can be reached (Client: kUnavailable).
//
// Thread safety: safe for concurrent use.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "host/model_service.h"

namespace modelfs::testing {

class FakeModelService final : public ModelService {
 public:
  // What the service was asked, in order; outlives the service (the snapshotter owns it).
  class Log {
   public:
    void Add(const std::string& line) {
      absl::MutexLock lock(&mu_);
      lines_.push_back(line);
    }
    std::vector<std::string> Get() const {
      absl::MutexLock lock(&mu_);
      return lines_;
    }

   private:
    mutable absl::Mutex mu_;
    std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
  };

  explicit FakeModelService(Log* log) : log_(log) {}

  // What the test sets before handing the service over.
  void SetRecord(const std::string& name, const ResolvedModel& rm) {
    absl::MutexLock lock(&mu_);
    records_[name] = rm;
  }
  void SetCacheStats(const CacheStats& stats) {
    absl::MutexLock lock(&mu_);
    stats_ = stats;
  }

  absl::Status DetachStaleMount(const std::string& dir) override {
    return Note("detach-stale " + dir);
  }
  absl::Status Mount(const std::string& dir, const FuseMountOptions&) override {
    return Note("mount " + dir);
  }
  absl::Status Adopt(int, const std::string& dir, const FuseMountOptions&) override {
    return Note("adopt " + dir);
  }
  void LazyUnmount(const std::string& dir) override { log_->Add("lazy-unmount " + dir); }
  absl::Status Unmount(bool keep_mount = false) override {
    return Note(keep_mount ? "detach" : "unmount");
  }
  int fuse_fd() const override { return -1; }

  absl::StatusOr<std::shared_ptr<RegistryClient>> Client(const std::string& registry) override {
    log_->Add("client " + registry);
    return absl::UnavailableError(absl::StrCat("registry ", registry, " is unreachable"));
  }

  absl::StatusOr<LoadedModel> Register(const std::string& name, const ResolvedModel&,
                                       PrefetchStart) override {
    return Serve("register " + name, name);
  }
  absl::StatusOr<LoadedModel> RegisterFrom(const std::string& name, const ResolvedModel&,
                                           std::shared_ptr<RemoteBlobSource>,
                                           PrefetchStart) override {
    return Serve("register-from " + name, name);
  }
  absl::StatusOr<LoadedModel> RegisterInPlace(const std::string& name,
                                              const ResolvedModel&) override {
    return Serve("register-in-place " + name, name);
  }
  absl::Status Remove(const std::string& name, const std::string&) override {
    log_->Add("remove " + name);
    absl::MutexLock lock(&mu_);
    return models_.erase(name) > 0 ? absl::OkStatus()
                                   : absl::NotFoundError(absl::StrCat("no model ", name));
  }
  void Discard(const std::string& name, const std::string&) override {
    log_->Add("discard " + name);
    absl::MutexLock lock(&mu_);
    models_.erase(name);
  }
  bool HasModel(const std::string& name) override {
    absl::MutexLock lock(&mu_);
    return models_.contains(name);
  }
  void StartPrefetch(const std::string& model_ref) override {
    log_->Add("start-prefetch " + model_ref);
  }

  absl::Status SaveRecord(const std::string& name, const ResolvedModel& rm) override {
    log_->Add("save-record " + name);
    absl::MutexLock lock(&mu_);
    records_.emplace(name, rm);
    return absl::OkStatus();
  }
  absl::StatusOr<ResolvedModel> LoadRecord(const std::string& name) override {
    absl::MutexLock lock(&mu_);
    auto it = records_.find(name);
    if (it == records_.end()) return absl::NotFoundError(absl::StrCat("no record ", name));
    return it->second;
  }
  std::vector<std::string> ListRecords() override {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> out;
    for (const auto& [name, rm] : records_) out.push_back(name);
    return out;
  }
  absl::Status DeleteRecord(const std::string& name) override {
    log_->Add("delete-record " + name);
    absl::MutexLock lock(&mu_);
    records_.erase(name);
    return absl::OkStatus();
  }

  CacheStats cache_stats() const override {
    absl::MutexLock lock(&mu_);
    return stats_;
  }
  bool cache_disk_full() const override { return false; }
  std::map<Digest, BlobCache::LayerInfo> CachedLayers() const override { return {}; }
  absl::StatusOr<BlobCache::LayerInfo> CachedLayer(const Digest& layer) const override {
    return absl::NotFoundError(absl::StrCat("layer ", layer.str(), " is not cached"));
  }
  std::map<std::string, EndpointHealth::LastError> endpoint_errors() const override { return {}; }
  absl::Status FetchLayer(const Digest& layer) override {
    return Note("fetch-layer " + layer.str());
  }
  BlobCache::EvictResult EvictLayers(const std::vector<Digest>&) override {
    log_->Add("evict-layers");
    return {};
  }
  void EnforceCacheLimit() override { log_->Add("enforce-cache-limit"); }

 private:
  absl::Status Note(const std::string& line) {
    log_->Add(line);
    return absl::OkStatus();
  }
  absl::StatusOr<LoadedModel> Serve(const std::string& line, const std::string& name) {
    log_->Add(line);
    absl::MutexLock lock(&mu_);
    models_.insert(name);
    return LoadedModel{};
  }

  Log* const log_;
  mutable absl::Mutex mu_;
  std::map<std::string, ResolvedModel> records_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> models_ ABSL_GUARDED_BY(mu_);
  CacheStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace modelfs::testing
