// ModelSnapshotter: the snapshotter the daemon serves. Ordinary layers get containerd's
// overlayfs semantics (OverlaySnapshotter). A layer of a modelfs volume image V becomes a lazily
// mounted model instead:
//
//   Prepare(key, parent, labels) with labels
//     containerd.io/snapshot.ref            the chain ID containerd wants committed
//     containerd.io/snapshot/modelfs.model  M's digest (V's layer annotation, forwarded)
//     containerd.io/snapshot/cri.image-ref  the image being pulled (CRI, snapshot annotations on)
//     containerd.io/snapshot/cri.manifest-digest  V's digest, as containerd resolved it
//   fetches V by that digest and its config, and goes on only when the chain ID is A's own:
//   A is V's volume layer, V's config rootfs.diff_ids names A at A's position, the parent is
//   the chain below A and the target the chain up to A (CheckVolumeSnapshotBinding), so no
//   image can bind a model to another image's chain ID. It then resolves V -> M (V's small
//   layer A carries the chunk indexes), registers M
//   in the daemon's single FUSE mount at <root>/mnt/sha256-<hex of M>, commits an empty
//   snapshot named by the chain ID (label modelfs.remote = the model's directory) and answers
//   ALREADY_EXISTS, so containerd fetches none of the model. V may name M outside its own
//   repository only where `model_hosts` allows it: otherwise the Prepare fails
//   (kPermissionDenied) before anything of M is requested. A model that cannot be reached (registry
//   down, slow, refusing the node's credentials) fails the Prepare with kUnavailable naming the
//   registry and the reason, so the kubelet retries the pull; any other failure fails it too. Only
//   without the CRI labels (image reference, pinned digest: a node configuration error) does it log
//   why and fall back to the ordinary path: containerd unpacks A and the container sees the
//   `.modelfs/` pointer files. Such an unpacked snapshot of the target never answers a later
//   remote Prepare: once the model is registered it is removed (unless a snapshot uses it:
//   kFailedPrecondition) and the lazy one committed in its place.
//
//   A layer of V below A (index layers; M's tars in the image-compatible profile; labelled
//   containerd.io/snapshot/modelfs.role) is answered as an empty remote snapshot once V's
//   manifest and config bind it to the target (CheckVolumeLowerBinding), else unpacked as
//   ever; nothing but V's next layer may stand on such a snapshot. With `lazy_images`, the top
//   layer of an ordinary image whose referrers include a volume image is served as its model
//   (model_snapshotter_registry.cc, PrepareLazyImage), and the layers below it are fetched,
//   verified and unpacked by the snapshotter itself (PrepareLazyLower), so that containerd
//   fetches no blob of the image.
//
//   Snapshots on top of a model snapshot use <root>/mnt/<model> as their lower directory:
//   overlay for active snapshots, a read-only bind for views (what image volumes mount). When
//   the model is a lazy image's own merged tree (kLabelImageTree), it is the lowest directory
//   of their mounts: the image's lower layers are already in it.
//
//   An image volume that names a plain ModelPack artifact M (containerd 2.1): containerd has
//   downloaded M whole into its content store and sends
//   Prepare("<ns>/<n>/<state>/io.containerd.grpc.v1.cri/image-volumes/<sandbox>/<M hex>", "")
//   with no labels. With `containerd_address` set, M is resolved and served from containerd's
//   content store (model_snapshotter_content.cc): the snapshot's mount is a read-only bind of
//   <root>/mnt/sha256-<M hex>. Anything else, or a failure, gives the ordinary empty snapshot.
//   Open registers such models again from the content store, as it does registry models.
//
// Restart: snapshot metadata is in SQLite; each model's manifests are kept under
// <root>/models/ (model_records.h), so Open re-registers models in the background without the
// registry (uncached bytes are still fetched on demand). Mounts on top of a model wait until it
// is registered again.
//
// Where the code lives: model_snapshotter.cc holds the state machine (the collaborators, the
// models' registration states, Prepare/View/Mounts/Remove, restart recovery);
// model_snapshotter_registry.cc the remote Prepare of a volume layer from a registry (binding,
// model hosts, policy); model_snapshotter_lazy_lower.cc the lower layers of a lazy plain image;
// model_snapshotter_content.cc the image volumes served from containerd's
// content store; model_snapshotter_node.cc the admin verbs (Status, Prefetch, Evict). Its
// collaborators (ModelSnapshotterParts) are passed in: Open builds the real ones, tests their own.
// What serves the models (registry clients, cache, pipeline, tree, FUSE mount, records) it sees
// only as a ModelService (host/model_service.h): this class is containerd's snapshot decorator
// over it. Open makes it a ModelHost (ModelHost::Open, host/model_host.h).
//
// Thread-safety: every method may be called concurrently. Lock order: evict_mu_ (Prepare
// shared, Evict exclusive) before OverlaySnapshotter's locks before mu_ (the lower-directory
// resolver takes mu_); mu_ is never held across a call into the overlay snapshotter, the
// cache, the mounter or the registry.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/base/clock.h"
#include "core/base/log_event.h"
#include "core/cache/blob_cache.h"
#include "core/model/model_pipeline.h"
#include "core/oci/volume_image.h"
#include "core/resolve/model_ref.h"
#include "core/resolve/registry_clients.h"
#include "fuse/mount_options.h"
#include "host/model_service.h"
#include "snapshotter/content/content_store_blob_reader.h"
#include "snapshotter/content/content_store_client.h"
#include "snapshotter/content/image_volume_key.h"
#include "snapshotter/model/node_status.h"
#include "snapshotter/policy/attestation_gate.h"
#include "snapshotter/policy/policy_gate.h"
#include "snapshotter/store/overlay_snapshotter.h"
#include "snapshotter/store/snapshotter.h"

namespace modelfs::snapshotter {

inline constexpr char kLabelTargetRef[] = "containerd.io/snapshot.ref";
inline constexpr char kLabelCriImageRef[] = "containerd.io/snapshot/cri.image-ref";
inline constexpr char kLabelCriManifestDigest[] = "containerd.io/snapshot/cri.manifest-digest";
// On a committed model snapshot: the model's directory under <root>/mnt.
inline constexpr char kLabelRemoteModel[] = "containerd.io/snapshot/modelfs.remote";
// On an image-volume snapshot served from containerd's content store: the model's directory
// under <root>/mnt, and the containerd namespace whose content store holds it.
// On a committed, empty snapshot that answers a lower layer of a volume image V (an index
// layer, below A): V's digest. Nothing but V's own next layer is prepared on top of it.
inline constexpr char kLabelRemoteLower[] = "containerd.io/snapshot/modelfs.remote-lower";
// On a committed model snapshot of an image-compatible V: "true" when the snapshot's own
// directory holds V's `.modelfs/` files, which views show above the model's directory.
inline constexpr char kLabelRemoteFiles[] = "containerd.io/snapshot/modelfs.remote-files";
// On a committed model snapshot of an ordinary image's top layer (lazy_images) whose volume
// image's model is that image itself: "true". The model's directory is then the image's whole
// merged tree (every layer, whiteouts applied), so snapshots on it mount it alone, without the
// directories of the layers below.
inline constexpr char kLabelImageTree[] = "containerd.io/snapshot/modelfs.image-tree";
inline constexpr char kLabelContentModel[] = "containerd.io/snapshot/modelfs.content-model";
inline constexpr char kLabelContentNamespace[] = "containerd.io/snapshot/modelfs.content-namespace";

struct ModelSnapshotterOptions {
  std::filesystem::path root;  // metadata.db, snapshots/, mnt/, models/, cache/
  RegistryAccessOptions registry;
  CacheOptions cache;  // cache.dir defaults to <root>/cache
  // Background fetch of a model (core/model/model_pipeline.h). It starts when a container first
  // uses the model (Prepare or View on top of its snapshot, Mounts of one), never during the
  // remote Prepare of containerd's pull; for models registered again after a restart, at once.
  PrefetchPolicy prefetch = PrefetchPolicy::kHeadersOnly;
  bool insecure_stream = false;
  FuseMountOptions fuse;
  OverlayOptions overlay = DetectOverlayOptions();
  // How long a mount on top of a model waits for the model to be registered after a restart.
  absl::Duration model_wait = absl::Seconds(60);
  // Where a volume image may send the daemon for its model M besides its own repository
  // (model_hosts.h: "host[:port]", "host[:port]/repo", "host[:port]/prefix/*"). M is fetched
  // with the node's credentials, so without this a volume image could point a pod at any model
  // the node can read (another tenant's repository on the same registry too), or make the
  // node send requests where it chooses. Others are refused (kPermissionDenied) before
  // anything of M is requested.
  std::vector<std::string> model_hosts;
  // Ordinary images served lazily when a modelfs volume image V is among their referrers
  // (snapshotter.md, "Lazy plain images"): repositories in the model_hosts forms. Empty: none.
  std::vector<std::string> lazy_images;
  // With a policy, an image of a repository in lazy_images that the policy refuses fails its
  // Prepare (kPermissionDenied), whether or not it has a volume image: the policy says what
  // runs here, and unpacking the image instead would run it all the same. true: such an image
  // is unpacked eagerly as containerd would without modelfs (the refusal is still logged and
  // counted). snapshotter.toml `lazy_images_unpack_refused`.
  bool lazy_images_unpack_refused = false;
  // A containers-policy.json (policy_gate.h) that volume images must satisfy before their model
  // is registered, and again each time a container is to use one; empty: no policy, nothing
  // checked.
  std::string policy;
  // Repositories (model_hosts forms) whose volume images must carry an equivalence attestation
  // (attestation_gate.h) signed by one of equivalence_keys (PEM public key paths). Empty: none
  // required. snapshotter.toml `require_equivalence`, `equivalence_keys`.
  std::vector<std::string> require_equivalence;
  std::vector<std::string> equivalence_keys;
  // containerd's socket, for its content API (image volumes naming a plain ModelPack artifact);
  // empty: such volumes stay empty, as with stock containerd.
  std::string containerd_address;
  // Tests: the content store to read instead of containerd's at containerd_address (not owned;
  // must outlive the snapshotter).
  ContentStore* content_store = nullptr;
  // One event per notable happening (fallbacks, registrations, failures), component
  // "snapshotter"; refusals carry digest, registry and reason fields. Default:
  // log::WriteToStderr.
  log::Sink log;
  // The /dev/fuse fd of <root>/mnt kept by a previous process of the daemon (systemd's file
  // descriptor store): Open registers the stored models first, then serves that same
  // connection, so containers' mounts of models survive a daemon crash or restart. -1: mount
  // afresh.
  int inherited_fuse_fd = -1;
};

// What a ModelSnapshotter works with. Open builds the real ones from its options; tests pass
// fakes (mounter, content store, registry) and real ones in a temp dir (metadata store, cache).
struct ModelSnapshotterParts {
  // The clock of every deadline the snapshotter sets: waits for a model's registration, calls
  // to containerd's content store. Not owned; never null.
  Clock* clock = Clock::Real();
  // What serves the models (host/model_service.h): Open's is a ModelHost (ModelHost::Open),
  // tests make theirs (ModelHost::Create with a fake mounter, or a fake service). It must keep
  // its records under <root>/models and read the layers content_reader holds from there
  // (ModelHostConfig::preferred). Required.
  std::unique_ptr<ModelService> host;
  // Ordinary layers, and the metadata store of every snapshot. Required.
  std::unique_ptr<OverlaySnapshotter> base;
  // containerd's content store; null: image volumes naming a model stay empty. Not owned unless
  // it is owned_content_store.
  ContentStore* content_store = nullptr;
  std::unique_ptr<ContentStore> owned_content_store;
  // The verified reader of the content store's layers (the host's tree reads through it):
  // required with a content store, null without one.
  std::unique_ptr<ContentStoreBlobReader> content_reader;
  // <root>/lock, flock()ed by the caller; held (and closed) by the snapshotter. -1: none.
  int root_lock_fd = -1;
};

struct RemotePrepareCounts {
  uint64_t mounted = 0;   // answered ALREADY_EXISTS with a lazily mounted model
  uint64_t fallback = 0;  // model labels present, but unpacked the ordinary way
  uint64_t error = 0;     // refused (verification failure, or a model host not allowed)
  // lazy_images: lower layers of an image served lazily, unpacked by the snapshotter
  // (answered ALREADY_EXISTS; not counted in `mounted`).
  uint64_t lazy_lowers = 0;
};

class ModelSnapshotter final : public Snapshotter, public NodeAdmin {
 public:
  // Opens the metadata and cache under options.root, mounts <root>/mnt (cleaning up a stale
  // mount a crashed daemon left) and starts re-registering stored models in the background.
  // Errors: kFailedPrecondition (another daemon holds the root), kUnavailable (FUSE mount
  // failed), kInternal (I/O, SQLite).
  static absl::StatusOr<std::unique_ptr<ModelSnapshotter>> Open(ModelSnapshotterOptions options);
  // The same with the collaborators given: mounts <root>/mnt through parts.host and starts
  // re-registering the models whose snapshots parts.base holds. options.cache,
  // options.registry, options.prefetch, options.insecure_stream, options.overlay,
  // options.containerd_address and options.content_store are not read (the parts stand for
  // them). Errors: kInvalidArgument (a required part is missing), the mounter's, kInternal
  // (I/O, SQLite).
  static absl::StatusOr<std::unique_ptr<ModelSnapshotter>> Create(ModelSnapshotterOptions options,
                                                                  ModelSnapshotterParts parts);
  ~ModelSnapshotter() override;

  // Stops background work and unmounts <root>/mnt (lazily when containers still use it), or,
  // with keep_mount (the fd is kept in a file descriptor store for the next process), stops
  // serving and leaves the mount and its connection in place. Idempotent.
  absl::Status Shutdown(bool keep_mount = false);

  // The /dev/fuse fd of <root>/mnt, to hand to a file descriptor store.
  int fuse_fd() const { return host_->fuse_fd(); }

  absl::StatusOr<std::vector<Mount>> Prepare(const std::string& key, const std::string& parent,
                                             const Labels& labels) override;
  absl::StatusOr<std::vector<Mount>> View(const std::string& key, const std::string& parent,
                                          const Labels& labels) override;
  absl::StatusOr<std::vector<Mount>> Mounts(const std::string& key) override;
  absl::Status Commit(const std::string& name, const std::string& key,
                      const Labels& labels) override;
  absl::Status Remove(const std::string& key) override;
  absl::StatusOr<SnapshotInfo> Stat(const std::string& key) override;
  absl::StatusOr<SnapshotInfo> Update(const SnapshotInfo& info,
                                      const std::vector<std::string>& paths) override;
  absl::Status Walk(const std::vector<std::string>& filters,
                    const std::function<absl::Status(const SnapshotInfo&)>& fn) override;
  absl::StatusOr<Usage> GetUsage(const std::string& key) override;
  absl::Status Cleanup() override;

  // Waits until the models found at Open are registered (or failed). False on timeout.
  bool WaitRestored(absl::Duration timeout);
  // Names (sha256-<hex>) of registered models.
  std::vector<std::string> ActiveModels() const;
  CacheStats cache_stats() const { return host_->cache_stats(); }
  bool cache_disk_full() const { return host_->cache_disk_full(); }
  // One layer as the cache knows it (references held by registered models). kNotFound when the
  // cache knows nothing about it.
  absl::StatusOr<BlobCache::LayerInfo> cache_layer_info(const Digest& layer) const {
    return host_->CachedLayer(layer);
  }
  RemotePrepareCounts remote_counts() const;
  // Refusals by the policy, by reason (empty without a policy).
  std::map<std::string, uint64_t> policy_refusals() const;
  // Prepares require_equivalence refused, by reason (AttestationGate's), for
  // modelfs_equivalence_refusals_total.
  std::map<std::string, uint64_t> equivalence_refusals() const;
  // Policy evaluations that asked a registry (kept verdicts excluded).
  uint64_t policy_evaluations() const;
  std::filesystem::path mount_dir() const { return mnt_dir_; }

  // The node's admin verbs (model_snapshotter_node.cc; `modelfs node`, over the admin socket).
  //
  // Status: the models, the snapshots that hold each, the cache against its bound, layers
  // quarantined or being scrubbed, the last error per registry (node_status.h).
  NodeStatus Status() override;
  // Warms a model before pods arrive: resolves `reference` as a pod's Prepare does (the same
  // registry access, model_hosts and signature policy; a tag is resolved to a digest first and
  // the policy judges that digest), registers its model, held without a snapshot until Evict,
  // and fetches every byte through the cache, which verifies each before keeping it. Calls
  // `progress` as it goes (about every `interval`); `cancelled` is asked as often (the caller
  // went away: the model stays registered and its fetch goes on). OK once every layer is
  // sealed. Errors: kInvalidArgument (not a reference), kPermissionDenied (the policy,
  // model_hosts), kDataLoss (a layer failed verification: quarantined, named), kUnavailable (a
  // registry, named with its last error), kDeadlineExceeded (nothing landed for `stall`),
  // kCancelled.
  absl::Status Prefetch(const std::string& reference,
                        const std::function<void(const PrefetchProgress&)>& progress,
                        const std::function<bool()>& cancelled,
                        absl::Duration interval = absl::Milliseconds(250),
                        absl::Duration stall = absl::Minutes(2)) override;
  // Drops the cached bytes of the model `reference` names (V's reference or digest, or M's
  // digest): a model held only by a prefetch is unregistered first. Layers another model
  // references stay. Safe against a Prepare of the same model: Evict excludes every Prepare
  // (evict_mu_), so a Prepare either finished before (its snapshot holds the model: refused)
  // or starts after, finds the model gone and registers and fetches it afresh. Errors:
  // kFailedPrecondition naming the snapshots that hold it (or a prefetch still running),
  // kNotFound (a digest of no registered model), kInvalidArgument, resolution errors (a tag
  // of a model that is not registered is resolved through its registry).
  absl::StatusOr<EvictOutcome> Evict(const std::string& reference) override;

 private:
  enum class ModelState { kLoading, kReady, kFailed };
  struct ModelEntry {
    ModelState state = ModelState::kLoading;
    absl::Status error;
    std::string model_ref;  // M's digest: the cache's reference
    std::set<int64_t> snapshot_ids;
    // Registered by Prefetch: kept without a snapshot until Evict. `prefetching`: Prefetch
    // calls fetching it now (Evict refuses meanwhile).
    bool prefetched = false;
    int prefetching = 0;
  };
  // Where a registered model came from, for Status.
  struct ModelOrigin {
    std::string reference;
    std::string volume_digest;
    std::string registry;
    std::string repository;
  };
  // Records rm as the origin of model `name` (Status shows it).
  void DescribeModel(const std::string& name, const ResolvedModel& rm);
  // A resolution of the daemon's own (Prepare, Prefetch) failed on `registry` (Status shows
  // the last one).
  void NoteRegistryError(const std::string& registry, const absl::Status& st);
  // The registered model `reference` names (see Evict): its name; nullopt when none is.
  std::optional<std::string> FindModel(const std::string& reference);

  // The volume image of a model snapshot: the reference the pod named and the manifest digest
  // containerd pinned.
  struct VolumeOrigin {
    ImageReference image;
    Digest digest;
  };

  ModelSnapshotter(ModelSnapshotterOptions options, ModelSnapshotterParts parts);
  void Log(const log::Event& event) const;
  // An info event whose message is `line`.
  void Log(const std::string& line) const;
  // The end of a remote Prepare that serves model `name` (registered already): prepares `key`
  // on `parent` and commits it as `target` with `labels` and kLabelRemoteModel = name,
  // removing `key` when a step after its Prepare fails, then records the snapshot as the
  // model's, from volume image `origin`. With `volume_files` (an image-compatible V), V's
  // `.modelfs/` files are written into the active snapshot's directory first and the snapshot
  // is labelled kLabelRemoteFiles. `count_mounted`: counts it in remote_counts().mounted.
  // `image_tree`: the model is the image's own merged tree (kLabelImageTree).
  // Errors: the overlay snapshotter's, WriteVolumeFiles'.
  absl::Status CommitModelSnapshot(const std::string& key, const std::string& parent,
                                   const std::string& target, const Labels& labels,
                                   const std::string& name, const VolumeOrigin& origin,
                                   const ResolvedModel* volume_files, bool count_mounted,
                                   bool image_tree = false);
  absl::Status PrepareRemote(const std::string& key, const std::string& parent,
                             const std::string& target, const VolumeLabels& volume,
                             const Labels& labels);
  // A layer of V below A (labelled kLabelRole): where V's manifest and config, fetched by the
  // pinned digest, make `target` the chain ID of such a layer on `parent`
  // (CheckVolumeLowerBinding), commits an empty snapshot and returns kAlreadyExists. Any
  // other error: the caller unpacks the layer the ordinary way (it holds only index files).
  absl::Status PrepareRemoteLower(const std::string& key, const std::string& parent,
                                  const std::string& target, const Labels& labels);
  // Whether `image`'s repository is in lazy_images.
  bool LazyImagesList(const ImageReference& image) const;
  // An ordinary image's layer (no modelfs labels, the CRI labels present): with a policy and
  // the image's repository in lazy_images, the policy must accept the image the pod named at
  // the pinned digest, whether or not the image has a volume image; kPermissionDenied (logged
  // and counted by reason) otherwise. OK without a policy or for a repository not listed.
  absl::Status CheckLazyImagePolicy(const Labels& labels);
  // An ordinary image's layer (no modelfs labels) from a repository in lazy_images: looks for
  // a volume image among the image's referrers (one lookup per image, its answer kept) and,
  // when there is one and `target` is the chain ID of the image's top layer, registers V's
  // model and commits the target as a model snapshot (kAlreadyExists). kNotFound when there is
  // none; a lower layer of such an image: PrepareLazyLower; any error: the caller unpacks the
  // layer as ever. The caller has checked the policy first (CheckLazyImagePolicy).
  absl::Status PrepareLazyImage(const std::string& key, const std::string& parent,
                                const std::string& target, const Labels& labels);
  // A lower layer (number `index`, below the top) of an ordinary image that PrepareLazyImage
  // found a volume image for (model_snapshotter_lazy_lower.cc): once V's manifest names the
  // image as its subject, fetches the layer's blob from the image's registry, checks it
  // against the layer digest and the config's diff ID, applies it into the active snapshot's
  // directory as containerd's overlay applier would (layer_applier.h), commits `target` and
  // returns kAlreadyExists, so that containerd fetches no blob of the image. Any other
  // error (nothing committed): the caller unpacks the layer as ever.
  struct LazyImage {
    ImageReference named;
    Digest digest;  // the manifest containerd pinned
    Manifest manifest;
    std::vector<Digest> diff_ids;
    size_t index = 0;  // the layer being prepared
    Digest volume;     // V, a referrer of the image
  };
  absl::Status PrepareLazyLower(const std::string& key, const std::string& parent,
                                const std::string& target, const Labels& labels,
                                const LazyImage& image, RegistryClient& client);
  // The volume image among the referrers of `image` at `digest`, from the kept answers or
  // the registry (kept when the registry answered). nullopt: none.
  absl::StatusOr<std::optional<Descriptor>> LazyVolumeFor(RegistryClient& client,
                                                          const ImageReference& image,
                                                          const Digest& digest);
  // OK unless `parent` is a lower layer of V answered remotely (empty), on which only V's own
  // next layer, answered remotely too, may stand: kFailedPrecondition naming it.
  absl::Status CheckNotOnRemoteLower(const std::string& key, const std::string& parent);
  // OK when volume image `volume` may send the daemon to `repository` on `registry` for its
  // model `model`: V's own repository, or one an entry of model_hosts allows (model_hosts.h).
  // Else kPermissionDenied naming both repositories and the line to add to snapshotter.toml.
  absl::Status CheckModelHost(const ImageReference& volume, const Digest& model,
                              const std::string& registry, const std::string& repository) const;
  // Why a volume layer's Prepare cannot be bound to a pinned volume image: the CRI label that
  // is missing (snapshot annotations off); nullopt when both are there.
  static std::optional<std::string> MissingCriLabel(const Labels& labels);
  // How many snapshots name `key` as their parent.
  absl::StatusOr<int> CountChildren(const std::string& key);
  // With a policy: OK when it accepts `image` at `digest`, else kPermissionDenied (logged).
  // Without one: OK.
  // With require_equivalence naming the image's repository, an accepted equivalence
  // attestation is required too (AttestationGate).
  absl::Status CheckPolicy(const ImageReference& image, const Digest& digest,
                           const std::string& what);
  // The signature policy alone (CheckModelLocation: M's location needs no attestation of its
  // own, V's is what the pod named).
  absl::Status CheckSignaturePolicy(const ImageReference& image, const Digest& digest,
                                    const std::string& what);
  // With a policy, M's location when V names M in another repository: the policy must accept
  // M there, under M's own scope.
  absl::Status CheckModelLocation(const ResolvedModel& rm);
  // Commits a remote snapshot only where V's verified manifest and config make `target` the
  // chain ID of its volume layer on `parent` (CheckVolumeSnapshotBinding). Errors:
  // kFailedPrecondition (the caller then unpacks the layer the ordinary way), registry errors.
  absl::Status CheckBinding(RegistryClient& client, const ResolvedModel& rm,
                            const std::string& parent, const std::string& target);
  // Stores rm's record and registers it unless it is already; waits for a registration of
  // the same model in progress elsewhere.
  // Waits while another call registers model `name`. True: this call is to register it (it is
  // marked loading); false: it is ready. Errors: kDeadlineExceeded (still loading after
  // model_wait), kUnavailable (shutting down).
  absl::StatusOr<bool> BeginRegistration(const std::string& name, const std::string& model_ref);
  // Ends what BeginRegistration began: ready, or failed with `st` (forgotten when no snapshot
  // uses it); wakes the waiters. Returns `st`.
  absl::Status FinishRegistration(const std::string& name, absl::Status st);
  absl::Status EnsureModel(const std::string& name, const ResolvedModel& rm);
  absl::Status RegisterModel(const std::string& name, const ResolvedModel& rm,
                             PrefetchStart prefetch);
  // Image volumes naming M itself (model_snapshotter_content.cc). PrepareFromContentStore:
  // kFailedPrecondition / kInvalidArgument / kNotFound / kUnavailable mean "not served from the
  // content store" (the caller makes the ordinary snapshot); kDataLoss is a verification
  // failure and kPermissionDenied a refusal by the policy, both returned to containerd.
  absl::StatusOr<std::vector<Mount>> PrepareFromContentStore(const std::string& key,
                                                             const ImageVolumeKey& volume,
                                                             const Labels& labels);
  // With a policy: the policy must accept M under every image name containerd's image store
  // gives M's manifest (kPermissionDenied otherwise, or when there is none).
  absl::Status CheckContentModelPolicy(const ImageVolumeKey& volume);
  // Whether M has a .tar+gzip or .tar+zstd layer, which the content-store path cannot serve in
  // place; RegisterDecodedContentModel then registers the model with the cache, every layer
  // read from the content store of `ns` (compressed ones decoded and checked against M's
  // diffIds). Errors: LoadModel's.
  static bool HasCompressedLayer(const ResolvedModel& rm);
  absl::Status RegisterDecodedContentModel(const std::string& name, const ResolvedModel& rm,
                                           const std::string& ns);
  // Registers M from the content store of `ns` unless it is registered (by either path).
  absl::Status EnsureContentModel(const std::string& name, const ResolvedModel& rm,
                                  const std::string& ns);
  // The mounts of an image-volume snapshot with kLabelContentModel (registering the model
  // again after a restart); nullopt for any other snapshot.
  std::optional<absl::StatusOr<std::vector<Mount>>> ContentMounts(const std::string& key);
  // Registers the model of content-store snapshot `key` (id `id`) again and ties the snapshot
  // to it; for Open (after a restart) and ContentMounts.
  absl::Status RestoreContentSnapshot(const std::string& key, int64_t id, const std::string& name,
                                      const std::string& ns);
  struct ContentSnapshot {
    std::string key;
    int64_t id = 0;
    std::string name;  // the model's directory
    std::string ns;
  };
  // The snapshots served from the content store, from their labels.
  absl::StatusOr<std::vector<ContentSnapshot>> ListContentSnapshots();
  void RestoreContentSnapshots(const std::vector<ContentSnapshot>& snapshots);
  void RestoreModels(std::vector<std::string> names);
  // Waits until every model below `parent` (itself included) is registered, and starts the
  // prefetch of those models (first use).
  absl::Status WaitForModelsBelow(const std::string& parent);
  absl::Status WaitForModelIds(const std::vector<int64_t>& ids);
  // The lower directory of committed snapshot `id` when it is a model snapshot (the
  // overlay snapshotter's LowerResolver); nullopt otherwise.
  std::optional<OverlaySnapshotter::LowerDir> ModelDirFor(int64_t id);
  // With mu_ held: waits, on clock_, until changes_ moves or `deadline` passes (releasing mu_
  // meanwhile). True when the deadline passed first, as absl::CondVar::WaitWithDeadline.
  bool TimedOutWaitingForChange(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ModelSnapshotterOptions options_;
  const std::filesystem::path mnt_dir_;
  int lock_fd_ = -1;
  Clock* const clock_;

  std::unique_ptr<ContentStore> owned_content_store_;       // the client of containerd_address
  ContentStore* content_store_ = nullptr;                   // null without containerd_address
  std::unique_ptr<ContentStoreBlobReader> content_reader_;  // null without a content store
  // What serves the models: the registry clients (one per registry: V's, and M's when V's
  // record names another), the cache, the tree (reading content_reader_'s layers there, the
  // rest from the cache), the FUSE mount of <root>/mnt and the records under <root>/models.
  // Declared after content_reader_, which it reads through. Null when a required part was
  // missing (Create refuses that).
  std::unique_ptr<ModelService> host_;
  std::unique_ptr<OverlaySnapshotter> base_;
  std::thread restorer_;
  std::atomic<bool> stopping_{false};

  // Prepare holds it shared from start to end; Evict, and Remove of a snapshot that holds a
  // model, exclusively. So neither falls between a Prepare finding its model registered and
  // committing the snapshot that holds it.
  // Lock order: evict_mu_ first (before the overlay snapshotter's locks and mu_).
  absl::Mutex evict_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  std::map<std::string, ModelOrigin> origins_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, NodeRegistryError> resolve_errors_ ABSL_GUARDED_BY(mu_);
  // Counts changes of a model's state (and the shutdown), for waiters.
  uint64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, ModelEntry> models_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, std::string> model_of_snapshot_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<PolicyGate> policy_gate_;            // null without a policy
  std::unique_ptr<AttestationGate> attestation_gate_;  // null without require_equivalence
  std::map<std::string, std::unique_ptr<RegistrySignatureStore>> signature_stores_
      ABSL_GUARDED_BY(mu_);
  // The volume image (reference and manifest digest, from the Prepare's labels) of each model
  // snapshot, checked against the policy whenever a container is to use the snapshot.
  std::map<int64_t, VolumeOrigin> volume_of_snapshot_ ABSL_GUARDED_BY(mu_);
  // lazy_images: each image manifest's volume image among its referrers (nullopt: none).
  std::map<Digest, std::optional<Descriptor>> lazy_volumes_ ABSL_GUARDED_BY(mu_);
  // Model snapshots (image-compatible V) whose own directory holds `.modelfs/`.
  std::set<int64_t> with_volume_files_ ABSL_GUARDED_BY(mu_);
  // Model snapshots whose model directory is the whole merged tree of the layers below them
  // too (kLabelImageTree).
  std::set<int64_t> image_trees_ ABSL_GUARDED_BY(mu_);
  RemotePrepareCounts counts_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace modelfs::snapshotter
