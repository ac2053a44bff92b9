// ModelSnapshotter, the node's admin verbs: Status (what `modelfs node ls` shows), Prefetch and
// Evict (see model_snapshotter.h and node_status.h).
#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status/status_macros.h"
#include "snapshotter/model/model_snapshotter.h"

namespace modelfs::snapshotter {
namespace {

std::string ModelName(const Digest& model) {
  return absl::StrCat("sha256-", std::string(model.hex()));
}

// The container a snapshot key names: CRI prepares a container's root filesystem under its
// container ID ("<ns>/<n>/<64 hex>"), and an image volume under its sandbox's
// (ParseImageVolumeKey). "" for any other key.
std::string ContainerOf(const std::string& key) {
  if (std::optional<ImageVolumeKey> volume = ParseImageVolumeKey(key)) return volume->sandbox_id;
  const size_t slash = key.rfind('/');
  const std::string last = slash == std::string::npos ? key : key.substr(slash + 1);
  if (last.size() != 64) return "";
  for (char c : last) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c)) || absl::ascii_isupper(c)) return "";
  }
  return last;
}

const char* StateName(int state) {
  switch (state) {
    case 0:
      return "loading";
    case 1:
      return "ready";
    default:
      return "failed";
  }
}

}  // namespace

void ModelSnapshotter::DescribeModel(const std::string& name, const ResolvedModel& rm) {
  ModelOrigin o;
  o.reference = rm.ref.String();
  if (rm.volume_descriptor) o.volume_digest = rm.volume_descriptor->digest.str();
  o.registry = rm.registry;
  o.repository = rm.repository;
  absl::MutexLock lock(&mu_);
  origins_[name] = std::move(o);
}

void ModelSnapshotter::NoteRegistryError(const std::string& registry, const absl::Status& st) {
  if (st.ok()) return;
  absl::MutexLock lock(&mu_);
  NodeRegistryError& e = resolve_errors_[registry];
  e.registry = registry;
  e.at = clock_->Now();
  e.message = st.ToString();
  e.count++;
}

NodeStatus ModelSnapshotter::Status() {
  NodeStatus out;
  // 1. The models, under mu_.
  struct Held {
    NodeModel model;
    std::string model_ref;
  };
  std::map<std::string, Held> models;
  std::map<std::string, std::string> name_of_ref;  // M digest -> name
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, e] : models_) {
      Held& h = models[name];
      h.model.name = name;
      h.model.model_digest = e.model_ref;
      h.model.state = StateName(static_cast<int>(e.state));
      if (!e.error.ok()) h.model.error = e.error.ToString();
      h.model.prefetched = e.prefetched;
      h.model_ref = e.model_ref;
      name_of_ref[e.model_ref] = name;
      if (auto it = origins_.find(name); it != origins_.end()) {
        h.model.reference = it->second.reference;
        h.model.volume_digest = it->second.volume_digest;
        h.model.registry = it->second.registry;
        h.model.repository = it->second.repository;
      }
    }
    for (const auto& [registry, e] : resolve_errors_) out.errors.push_back(e);
  }
  // 2. The snapshots that hold each model: the model snapshots (labelled with the model's
  // name) and every snapshot above one, from one walk of the metadata.
  std::map<std::string, SnapshotInfo> snapshots;
  std::multimap<std::string, std::string> children;  // parent -> key
  (void)base_->Walk({}, [&](const SnapshotInfo& info) {
    if (!info.parent.empty()) children.emplace(info.parent, info.name);
    snapshots.emplace(info.name, info);
    return absl::OkStatus();
  });
  auto add = [&](NodeModel& m, const SnapshotInfo& info) {
    NodeSnapshot s;
    s.key = info.name;
    s.kind = KindName(info.kind);
    if (auto it = info.labels.find(kLabelCriImageRef); it != info.labels.end())
      s.image = it->second;
    if (info.kind != SnapshotKind::kCommitted) s.container = ContainerOf(info.name);
    m.snapshots.push_back(std::move(s));
  };
  for (const auto& [key, info] : snapshots) {
    std::string name;
    if (auto it = info.labels.find(kLabelRemoteModel); it != info.labels.end()) {
      name = it->second;
    } else if (auto c = info.labels.find(kLabelContentModel); c != info.labels.end()) {
      name = c->second;
    } else {
      continue;
    }
    auto m = models.find(name);
    if (m == models.end()) continue;
    add(m->second.model, info);
    // Everything above it, breadth first (a chain is short; a key is visited once).
    std::vector<std::string> todo = {key};
    std::set<std::string> seen = {key};
    while (!todo.empty()) {
      const std::string at = todo.back();
      todo.pop_back();
      auto [from, to] = children.equal_range(at);
      for (auto it = from; it != to; ++it) {
        if (!seen.insert(it->second).second) continue;
        auto child = snapshots.find(it->second);
        if (child == snapshots.end()) continue;
        add(m->second.model, child->second);
        todo.push_back(it->second);
      }
    }
  }
  // 3. The cache: its layer table once, each layer added to the models that reference it.
  const std::map<Digest, BlobCache::LayerInfo> layers = host_->CachedLayers();
  out.cache_bytes = host_->cache_stats().cached_bytes;
  out.cache_max_bytes = options_.cache.max_bytes;
  out.cache_layers = layers.size();
  out.disk_full = host_->cache_disk_full();
  std::map<std::string, bool> all_sealed;
  for (const auto& [digest, info] : layers) {
    if (info.quarantined || info.scrubbing) {
      NodeLayer l;
      l.digest = digest.str();
      l.size = info.size;
      l.quarantined = info.quarantined;
      l.scrubbing = info.scrubbing;
      l.models = info.models;
      out.layers.push_back(std::move(l));
    }
    for (const std::string& ref : info.models) {
      auto n = name_of_ref.find(ref);
      if (n == name_of_ref.end()) continue;
      NodeModel& m = models[n->second].model;
      m.layers++;
      m.size += info.size;
      m.cached_bytes += info.cached_bytes;
      m.verified_bytes += info.verified_bytes;
      m.passthrough_opens += info.passthrough_opens;
      auto [it, fresh] = all_sealed.emplace(n->second, true);
      it->second = it->second && info.whole_verified && !info.quarantined;
    }
  }
  for (auto& [name, h] : models) {
    auto s = all_sealed.find(name);
    h.model.sealed = s != all_sealed.end() && s->second;
    out.models.push_back(std::move(h.model));
  }
  // 4. The last error per registry: the cache's fetches, and the daemon's own resolutions.
  for (const auto& [endpoint, e] : host_->endpoint_errors()) {
    const std::string registry = endpoint.empty() ? "(default)" : endpoint;
    auto it = std::find_if(out.errors.begin(), out.errors.end(),
                           [&](const NodeRegistryError& x) { return x.registry == registry; });
    if (it == out.errors.end()) {
      out.errors.push_back({registry, e.at, e.message, e.count});
    } else {
      it->count += e.count;
      if (e.at > it->at) {
        it->at = e.at;
        it->message = e.message;
      }
    }
  }
  std::sort(out.errors.begin(), out.errors.end(),
            [](const NodeRegistryError& a, const NodeRegistryError& b) {
              return a.registry < b.registry;
            });
  return out;
}

absl::Status ModelSnapshotter::Prefetch(
    const std::string& reference, const std::function<void(const PrefetchProgress&)>& progress,
    const std::function<bool()>& cancelled, absl::Duration interval, absl::Duration stall) {
  PrefetchProgress p;
  p.phase = "resolving";
  progress(p);
  absl::StatusOr<ImageReference> parsed = ImageReference::Parse(reference);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prefetch: \"", reference, "\" is not an image reference: ", parsed.status().message()));
  }
  const ImageReference& named = *parsed;
  absl::StatusOr<std::shared_ptr<RegistryClient>> client = host_->Client(named.registry());
  if (!client.ok()) {
    NoteRegistryError(named.registry(), client.status());
    return client.status();
  }
  // The policy judges a digest, as for a pod: a tag is resolved first.
  Digest pinned;
  if (named.digest()) {
    pinned = *named.digest();
  } else {
    absl::StatusOr<ManifestHead> head =
        (*client)->HeadManifest(named.repository(), named.ManifestReference());
    if (!head.ok()) {
      NoteRegistryError(named.registry(), head.status());
      return head.status();
    }
    pinned = head->digest;
  }
  RETURN_IF_ERROR(CheckPolicy(named, pinned, "volume image"));
  ASSIGN_OR_RETURN(ImageReference ref,
                   ImageReference::Parse(absl::StrCat(named.Name(), "@", pinned.str())));
  std::string asking = ref.registry();
  absl::Status host_refusal;
  absl::StatusOr<ResolvedModel> resolved = ResolveModel(
      **client, ref,
      [&](const std::string& registry) -> absl::StatusOr<std::shared_ptr<RegistryClient>> {
        asking = registry;
        return host_->Client(registry);
      },
      [&](const std::string& registry, const std::string& repository) {
        host_refusal = CheckModelHost(ref, Digest(), registry, repository);
        return host_refusal;
      });
  if (!host_refusal.ok()) return host_refusal;
  if (!resolved.ok()) {
    NoteRegistryError(asking, resolved.status());
    return resolved.status();
  }
  const ResolvedModel& rm = *resolved;
  RETURN_IF_ERROR(CheckModelLocation(rm));
  const std::string name = ModelName(rm.model_descriptor.digest);
  const std::string model_ref = rm.model_descriptor.digest.str();
  p.phase = "registering";
  p.model_digest = model_ref;
  progress(p);
  {
    // As a Prepare: no Evict between the registration and the hold.
    absl::ReaderMutexLock evict_lock(&evict_mu_);
    if (absl::Status st = EnsureModel(name, rm); !st.ok()) {
      NoteRegistryError(rm.registry, st);
      return st;
    }
    absl::MutexLock lock(&mu_);
    auto it = models_.find(name);
    if (it == models_.end()) {
      return absl::UnavailableError(absl::StrCat("model ", name, " was removed meanwhile"));
    }
    it->second.prefetched = true;
    it->second.prefetching++;
  }
  struct Release {
    ModelSnapshotter* s;
    std::string name;
    ~Release() {
      absl::MutexLock lock(&s->mu_);
      if (auto it = s->models_.find(name); it != s->models_.end()) it->second.prefetching--;
    }
  } release{this, name};

  // Every byte, through the cache: each layer the model registered is filled whole.
  auto own_layers = [&]() {
    std::vector<std::pair<Digest, BlobCache::LayerInfo>> out;
    for (auto& [digest, info] : host_->CachedLayers()) {
      if (std::binary_search(info.models.begin(), info.models.end(), model_ref)) {
        out.emplace_back(digest, std::move(info));
      }
    }
    return out;
  };
  for (const auto& [digest, info] : own_layers()) {
    if (!info.whole_verified) RETURN_IF_ERROR(host_->FetchLayer(digest));
  }
  p.phase = "fetching";
  uint64_t last_landed = 0;
  absl::Time last_progress = clock_->Now();
  absl::Time last_kick = last_progress;
  while (true) {
    const auto layers = own_layers();
    p.layers = layers.size();
    p.layers_sealed = 0;
    p.total_bytes = 0;
    p.verified_bytes = 0;
    uint64_t landed = 0;
    for (const auto& [digest, info] : layers) {
      if (info.quarantined) {
        return absl::DataLossError(absl::StrCat("prefetch of ", reference, ": layer ", digest.str(),
                                                " of model ", model_ref,
                                                " failed verification and is quarantined"));
      }
      p.total_bytes += info.size;
      p.verified_bytes += info.whole_verified ? info.size : info.verified_bytes;
      landed += info.cached_bytes + info.verified_bytes;
      if (info.whole_verified) p.layers_sealed++;
    }
    if (p.layers_sealed == p.layers) {
      p.phase = "done";
      p.verified_bytes = p.total_bytes;
      progress(p);
      return absl::OkStatus();
    }
    progress(p);
    if (cancelled && cancelled()) {
      return absl::CancelledError(absl::StrCat("prefetch of ", reference, " cancelled"));
    }
    const absl::Time now = clock_->Now();
    if (landed != last_landed) {
      last_landed = landed;
      last_progress = now;
    } else if (now - last_progress > stall) {
      std::string why;
      for (const auto& [endpoint, e] : host_->endpoint_errors()) {
        if (endpoint == rm.registry || endpoint.empty()) why = absl::StrCat(": ", e.message);
      }
      return absl::DeadlineExceededError(
          absl::StrCat("prefetch of ", reference, ": nothing of model ", model_ref, " landed for ",
                       absl::FormatDuration(stall), " (registry ", rm.registry, why, ")"));
    } else if (now - last_kick > absl::Seconds(5)) {
      // A fill that failed (its retries spent) is not retried by the cache on its own.
      last_kick = now;
      for (const auto& [digest, info] : layers) {
        if (!info.whole_verified) (void)host_->FetchLayer(digest);
      }
    }
    clock_->SleepFor(interval);
  }
}

std::optional<std::string> ModelSnapshotter::FindModel(const std::string& reference) {
  std::string digest = reference;
  if (absl::StatusOr<ImageReference> ref = ImageReference::Parse(reference);
      ref.ok() && !absl::StartsWith(reference, "sha256:")) {
    if (!ref->digest()) {
      // A tag: the one registered model resolved from that repository, if only one is.
      absl::MutexLock lock(&mu_);
      std::optional<std::string> found;
      for (const auto& [name, o] : origins_) {
        absl::StatusOr<ImageReference> r = ImageReference::Parse(o.reference);
        if (!models_.contains(name) || !r.ok() || r->Name() != ref->Name()) continue;
        if (found) return std::nullopt;
        found = name;
      }
      return found;
    }
    digest = ref->digest()->str();
  }
  absl::MutexLock lock(&mu_);
  for (const auto& [name, e] : models_) {
    if (e.model_ref == digest) return name;
    auto o = origins_.find(name);
    if (o != origins_.end() && o->second.volume_digest == digest) return name;
  }
  return std::nullopt;
}

absl::StatusOr<EvictOutcome> ModelSnapshotter::Evict(const std::string& reference) {
  if (reference.empty()) return absl::InvalidArgumentError("evict: empty reference");
  EvictOutcome out;
  std::vector<Digest> layers;
  // A model that is not registered: its layers as its registry names them, asked before the
  // evict lock is taken, so that no Prepare waits on a registry round trip of ours.
  std::optional<ResolvedModel> unregistered;
  const bool by_digest = absl::StartsWith(reference, "sha256:");
  if (!by_digest && !FindModel(reference)) {
    ASSIGN_OR_RETURN(ImageReference ref, ImageReference::Parse(reference));
    ASSIGN_OR_RETURN(std::shared_ptr<RegistryClient> client, host_->Client(ref.registry()));
    // Held to model_hosts as a pod's V would be: the node goes nowhere else for it.
    absl::Status host_refusal;
    absl::StatusOr<ResolvedModel> resolved = ResolveModel(
        *client, ref,
        [&](const std::string& registry) -> absl::StatusOr<std::shared_ptr<RegistryClient>> {
          return host_->Client(registry);
        },
        [&](const std::string& registry, const std::string& repository) {
          host_refusal = CheckModelHost(ref, Digest(), registry, repository);
          return host_refusal;
        });
    if (!host_refusal.ok()) return host_refusal;
    if (!resolved.ok()) return resolved.status();
    unregistered = *std::move(resolved);
  }
  // Excludes every Prepare (and a Prefetch's registration) until the model is gone.
  absl::WriterMutexLock evict_lock(&evict_mu_);
  std::optional<std::string> name = FindModel(reference);
  // A Prepare may have registered it meanwhile.
  if (!name && unregistered) name = FindModel(unregistered->model_descriptor.digest.str());
  if (name) {
    std::string model_ref;
    std::set<int64_t> ids;
    {
      absl::MutexLock lock(&mu_);
      auto it = models_.find(*name);
      if (it == models_.end()) return absl::NotFoundError(absl::StrCat("model ", *name, " left"));
      model_ref = it->second.model_ref;
      ids = it->second.snapshot_ids;
      if (ids.empty() && it->second.prefetching > 0) {
        return absl::FailedPreconditionError(
            absl::StrCat("model ", model_ref, " is being prefetched; evict it once that ends"));
      }
      if (ids.empty() && it->second.state == ModelState::kLoading) {
        return absl::FailedPreconditionError(
            absl::StrCat("model ", model_ref, " is being registered"));
      }
      if (ids.empty()) {
        models_.erase(it);
        origins_.erase(*name);
        ++changes_;
      }
    }
    out.model_digest = model_ref;
    if (!ids.empty()) {
      // Name the snapshots that hold it (the model snapshots and those above them).
      NodeStatus status = Status();
      std::vector<std::string> keys;
      for (const NodeModel& m : status.models) {
        if (m.name != *name) continue;
        for (const NodeSnapshot& s : m.snapshots) keys.push_back(s.key);
      }
      return absl::FailedPreconditionError(absl::StrCat(
          "model ", model_ref, " is held by ", keys.size(), " snapshot(s): ",
          absl::StrJoin(keys, ", "), "; remove the pods (and images) that use it first"));
    }
    out.was_registered = true;
    for (const auto& [digest, info] : host_->CachedLayers()) {
      if (std::binary_search(info.models.begin(), info.models.end(), model_ref)) {
        layers.push_back(digest);
      }
    }
    // Out of the mount first, then its references: nothing can open it from here on, and
    // a reader inside a read pins the layer, which EvictLayers then leaves in place.
    if (absl::Status st = host_->Remove(*name, model_ref); !st.ok() && !absl::IsNotFound(st)) {
      Log(absl::StrCat("evict: model ", *name, ": ", st.ToString()));
    }
    if (content_reader_) content_reader_->RemoveModel(model_ref);
    (void)host_->DeleteRecord(*name);
  } else if (unregistered) {
    out.model_digest = unregistered->model_descriptor.digest.str();
    for (const ModelLayer& l : unregistered->layers) layers.push_back(l.descriptor.digest);
  } else {
    return absl::NotFoundError(
        absl::StrCat("evict: no registered model has digest ", reference,
                     "; name it by reference so that its layers can be resolved"));
  }
  BlobCache::EvictResult evicted = host_->EvictLayers(layers);
  out.layers_evicted = evicted.layers;
  out.bytes_evicted = evicted.bytes;
  out.layers_kept = evicted.busy.size();
  Log(absl::StrCat("model ", out.model_digest, " evicted: ", evicted.layers, " layers, ",
                   evicted.bytes, " bytes", evicted.busy.empty() ? "" : "; ",
                   evicted.busy.empty() ? ""
                                        : absl::StrCat(evicted.busy.size(),
                                                       " layer(s) kept: another model uses them")));
  return out;
}

}  // namespace modelfs::snapshotter
