// `modelfs push`, `modelfs convert` and `modelfs pull`: the publishing side (core/publish).
#include <cstdio>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cmd/modelfs/cli.h"
#include "core/base/clock.h"
#include "core/publish/pull.h"
#include "core/publish/push.h"
#include "core/resolve/model_ref.h"
#include "core/status/status_macros.h"
#include "core/text/escape.h"
#include "core/text/number_format.h"

namespace modelfs::cli {

void AddRegistryFlags(CLI::App* cmd, RegistryFlags& f) {
  cmd->add_flag("--plain-http", f.plain_http,
                "Talk plain HTTP to this registry (only for hosts you trust, e.g. loopback)");
  cmd->add_option("--hosts-dir", f.hosts_dir,
                  "containerd-style certs.d directory with <host>/hosts.toml")
      ->default_str("/etc/containerd/certs.d");
  cmd->add_option(
      "--docker-config", f.docker_config,
      "docker config.json with registry credentials (default: $DOCKER_CONFIG or ~/.docker)");
  cmd->add_flag("--json", f.json, "Print JSON");
}

RegistryAccessOptions AccessOptions(const RegistryFlags& f) {
  RegistryAccessOptions o;
  o.hosts.plain_http = f.plain_http;
  o.hosts.certs_dir = f.hosts_dir.empty() ? "/etc/containerd/certs.d" : f.hosts_dir;
  o.docker_config = f.docker_config;
  return o;
}

namespace {

// A one-line progress display on stderr, only when stdout is a terminal, redrawn at most every
// 100 ms of `clock`.
ProgressFn MakeProgress(bool json, Clock* clock = Clock::Real()) {
  if (json || !StdoutIsTty()) return nullptr;
  auto last = std::make_shared<absl::Time>(absl::InfinitePast());
  return [last, clock](const TransferProgress& p) {
    absl::Time now = clock->Now();
    bool done = p.done >= p.total;
    if (!done && now - *last < absl::Milliseconds(100)) return;
    *last = now;
    int pct = p.total ? static_cast<int>(100.0 * static_cast<double>(p.done) / p.total) : 100;
    fprintf(stderr, "\r\033[K%s: %s / %s (%d%%)%s", EscapeUntrusted(p.name).c_str(),
            HumanBytes(p.done).c_str(), HumanBytes(p.total).c_str(), pct, done ? "\n" : "");
    fflush(stderr);
  };
}

// The last lines of push and convert: V pinned by digest, alone on the last line so that it can
// be copied (or taken with `tail -n1`) into a pod's image volume. Pods must pin V, not M.
void PrintVolumePinLast(const PushResult& r) {
  printf("pin pods to the volume image (volumes[].image.reference):\n%s@%s\n", r.repository.c_str(),
         r.volume.digest.str().c_str());
}

struct PushCli {
  RegistryFlags reg;
  std::string ref;
  std::vector<std::string> inputs;
  bool tar = false;
  std::string compress;  // "" or "zstd"
  std::string volume_tag;
  std::vector<std::string> annotations;
  std::vector<std::string> mount_from;
  std::string revision;
  std::string name;
  bool allow_pickle = false;
  ModelIdentity identity;  // identity-record flags
  std::string base_model;
  std::string path_prefix;
  bool image_compatible = false;
  bool no_tensor_index = false;
  std::string sign_key;
  std::string chunk_size;  // "" = by the model's size
  std::string chunk_digest = "blake3";
};

// --chunk-size and --chunk-digest, shared by push and convert. Errors: kInvalidArgument.
absl::Status ParseChunkFlags(const std::string& size, const std::string& digest,
                             uint64_t* chunk_size, ChunkDigestAlgorithm* algorithm) {
  ASSIGN_OR_RETURN(*algorithm, ParseChunkDigestName(digest));
  *chunk_size = 0;
  if (size.empty()) return absl::OkStatus();
  absl::StatusOr<uint64_t> n = ParseByteSize(size);
  if (!n.ok() || !ChunkIndex::ValidChunkSize(*n)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--chunk-size ", size, ": want a power of two from 64KiB to 64MiB, e.g. 1MiB"));
  }
  *chunk_size = *n;
  return absl::OkStatus();
}

absl::Status RunPush(const PushCli& c) {
  ASSIGN_OR_RETURN(ImageReference ref, ImageReference::Parse(c.ref));
  // The key is opened before anything is uploaded: a wrong passphrase costs no push.
  std::optional<PrivateKey> key;
  if (!c.sign_key.empty()) {
    ASSIGN_OR_RETURN(key, LoadSigningKey(c.sign_key));
  }
  PushOptions o;
  RETURN_IF_ERROR(ParseChunkFlags(c.chunk_size, c.chunk_digest, &o.chunk_size, &o.chunk_digest));
  o.inputs = c.inputs;
  o.tar = c.tar;
  o.compress_zstd = c.compress == "zstd";
  o.volume_tag = c.volume_tag;
  o.mount_from = c.mount_from;
  o.revision = c.revision;
  o.name = c.name;
  o.allow_pickle = c.allow_pickle;
  o.identity = c.identity;
  if (!c.base_model.empty()) o.identity.base_models = absl::StrSplit(c.base_model, ',');
  o.path_prefix = c.path_prefix;
  o.image_compatible = c.image_compatible;
  o.tensor_index = !c.no_tensor_index;
  for (const auto& a : c.annotations) {
    std::vector<std::string> kv = absl::StrSplit(a, absl::MaxSplits('=', 1));
    if (kv.size() != 2 || kv[0].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--annotation '", a, "': want KEY=VALUE"));
    }
    o.annotations[kv[0]] = kv[1];
  }
  o.progress = MakeProgress(c.reg.json);
  ASSIGN_OR_RETURN(auto client, ConnectRegistry(ref, HostCapability::kPush, AccessOptions(c.reg)));
  ASSIGN_OR_RETURN(PushResult r, PushModel(*client, ref, o));
  nlohmann::json signatures = nlohmann::json::array();
  if (key.has_value()) {
    // M and V each by its own tag, so either verifies under matchRepoDigestOrExact.
    for (const auto& [tag, digest] :
         {std::pair{r.model_tag, r.model.digest}, std::pair{r.volume_tag, r.volume.digest}}) {
      ASSIGN_OR_RETURN(ImageReference tagged,
                       ImageReference::Parse(absl::StrCat(ref.Name(), ":", tag)));
      ASSIGN_OR_RETURN(nlohmann::json sj, SignAndReport(*client, tagged, digest, *key, c.reg.json));
      signatures.push_back(std::move(sj));
    }
  }
  if (c.reg.json) {
    nlohmann::json j = PushResultToJson(r);
    if (key.has_value()) j["signatures"] = signatures;
    printf("%s\n", j.dump(2).c_str());
    return absl::OkStatus();
  }
  for (const auto& b : r.blobs) {
    printf("%-8s %s %14s  %s\n", b.action.c_str(),
           std::string(b.descriptor.digest.short_hex()).c_str(),
           WithCommas(b.descriptor.size).c_str(), EscapeUntrusted(b.role).c_str());
  }
  printf("%d blob(s) uploaded, %d already present, %d mounted; %s bytes sent\n", r.uploaded,
         r.present, r.mounted, WithCommas(r.bytes_uploaded).c_str());
  if (r.uncompressed_bytes > 0) {
    printf("zstd: %s of %s tar bytes (%.3f), %s bytes saved\n",
           WithCommas(r.compressed_bytes).c_str(), WithCommas(r.uncompressed_bytes).c_str(),
           static_cast<double>(r.compressed_bytes) / static_cast<double>(r.uncompressed_bytes),
           WithCommas(r.uncompressed_bytes > r.compressed_bytes
                          ? r.uncompressed_bytes - r.compressed_bytes
                          : 0)
               .c_str());
  }
  printf("model  %s:%s  %s\n", r.repository.c_str(), r.model_tag.c_str(),
         r.model.digest.str().c_str());
  printf("volume %s:%s  %s\n", r.repository.c_str(), r.volume_tag.c_str(),
         r.volume.digest.str().c_str());
  const ModelIdentity& id = r.identity;
  if (!id.source_url.empty()) {
    printf("origin %s @ %s%s\n", EscapeUntrusted(id.source_url).c_str(),
           EscapeUntrusted(id.revision).c_str(),
           r.lock.empty() ? "" : " (every file checked against the lock)");
  }
  if (!id.licenses.empty()) {
    printf("license %s\n", EscapeUntrusted(absl::StrJoin(id.licenses, " AND ")).c_str());
  }
  if (!id.base_models.empty()) {
    printf("base model %s%s\n", EscapeUntrusted(absl::StrJoin(id.base_models, ", ")).c_str(),
           id.base_model_relation.empty()
               ? ""
               : absl::StrCat(" (", EscapeUntrusted(id.base_model_relation), ")").c_str());
  }
  if (!id.tokenizer_sha256.empty()) printf("tokenizer %s\n", id.tokenizer_sha256.c_str());
  printf("model artifact (modelfs pull/mount, signing): %s@%s\n", r.repository.c_str(),
         r.model.digest.str().c_str());
  PrintVolumePinLast(r);
  return absl::OkStatus();
}

struct ConvertCli {
  RegistryFlags reg;
  std::string ref;
  std::string to;
  std::string volume_tag;
  std::string path_prefix;
  bool image_compatible = false;
  bool no_tensor_index = false;
  std::string sign_key;
  std::string chunk_size;
  std::string chunk_digest = "blake3";
};

// Whether a reference as typed names a tag (ImageReference fills in "latest" otherwise).
bool HasExplicitTag(const std::string& text) {
  size_t slash = text.rfind('/');
  std::string last = text.substr(slash == std::string::npos ? 0 : slash + 1);
  return last.find(':') != std::string::npos;
}

absl::Status RunConvert(const ConvertCli& c) {
  ASSIGN_OR_RETURN(ImageReference ref, ImageReference::Parse(c.ref));
  std::optional<PrivateKey> key;
  if (!c.sign_key.empty()) {
    ASSIGN_OR_RETURN(key, LoadSigningKey(c.sign_key));
  }
  ConvertOptions o;
  RETURN_IF_ERROR(ParseChunkFlags(c.chunk_size, c.chunk_digest, &o.chunk_size, &o.chunk_digest));
  o.volume_tag = c.volume_tag;
  o.path_prefix = c.path_prefix;
  o.image_compatible = c.image_compatible;
  o.tensor_index = !c.no_tensor_index;
  o.progress = MakeProgress(c.reg.json);
  const RegistryAccessOptions access = AccessOptions(c.reg);
  PushResult r;
  std::unique_ptr<RegistryClient> volume_client;  // where V was written
  std::string volume_name;                        // registry/repo of V
  if (c.to.empty()) {
    ASSIGN_OR_RETURN(auto client, ConnectRegistry(ref, HostCapability::kPush, access));
    ASSIGN_OR_RETURN(r, ConvertModel(*client, ref, o));
    volume_client = std::move(client);
    volume_name = ref.Name();
  } else {
    // V goes where we may push; M and its weights stay where they are, read through SRC's
    // hosts (mirrors included) with SRC's credentials.
    ASSIGN_OR_RETURN(ImageReference to, ImageReference::Parse(c.to));
    if (to.digest()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--to ", c.to, ": name a repository and optionally a tag, not a digest"));
    }
    if (HasExplicitTag(c.to)) {
      if (!o.volume_tag.empty() && o.volume_tag != to.tag()) {
        return absl::InvalidArgumentError(absl::StrCat("--to ", c.to, " names tag ", to.tag(),
                                                       " and --volume-tag says ", o.volume_tag));
      }
      o.volume_tag = to.tag();
    }
    ASSIGN_OR_RETURN(auto source, ConnectRegistry(ref, HostCapability::kPull, access));
    ASSIGN_OR_RETURN(auto target, ConnectRegistry(to, HostCapability::kPush, access));
    ASSIGN_OR_RETURN(r, ConvertModelTo(*source, ref, *target, to.repository(), o));
    volume_client = std::move(target);
    volume_name = to.Name();
  }
  nlohmann::json signature;
  if (key.has_value()) {
    ASSIGN_OR_RETURN(ImageReference tagged,
                     ImageReference::Parse(absl::StrCat(volume_name, ":", r.volume_tag)));
    ASSIGN_OR_RETURN(signature,
                     SignAndReport(*volume_client, tagged, r.volume.digest, *key, c.reg.json));
  }
  if (c.reg.json) {
    nlohmann::json j = PushResultToJson(r);
    if (key.has_value()) j["signatures"] = nlohmann::json::array({signature});
    printf("%s\n", j.dump(2).c_str());
    return absl::OkStatus();
  }
  const std::string& model_repo = r.model_repository.empty() ? r.repository : r.model_repository;
  printf("indexed %zu layer(s) of %s@%s; %s bytes sent\n", r.blobs.size() - 2, model_repo.c_str(),
         r.model.digest.str().c_str(), WithCommas(r.bytes_uploaded).c_str());
  printf("volume %s:%s  %s\n", r.repository.c_str(), r.volume_tag.c_str(),
         r.volume.digest.str().c_str());
  for (const Digest& d : r.verified_whole) {
    printf(
        "layer %s is compressed in one zstd frame, which cannot be entered in the middle; "
        "mounts fetch it whole, verify and decompress it before serving its files\n",
        d.str().c_str());
  }
  if (!r.model_repository.empty()) {
    printf("the weights stay in %s; the volume image reads them from there\n", model_repo.c_str());
  }
  PrintVolumePinLast(r);
  return absl::OkStatus();
}

struct PullCli {
  RegistryFlags reg;
  std::string ref;
  std::string dest;
  int parallel = 4;
  std::string policy;
};

absl::Status RunPull(const PullCli& c) {
  ASSIGN_OR_RETURN(ImageReference ref, ImageReference::Parse(c.ref));
  if (c.parallel < 1 || c.parallel > 64) {
    return absl::InvalidArgumentError("--parallel must be between 1 and 64");
  }
  PullOptions o;
  o.parallel = c.parallel;
  o.progress = MakeProgress(c.reg.json);
  // One client per registry: a volume image's model may live on another one.
  RegistryClients clients(AccessOptions(c.reg));
  ASSIGN_OR_RETURN(std::shared_ptr<RegistryClient> client, clients.For(ref.registry()));
  // Verified before anything is fetched; what is pulled is the digest that was verified.
  ASSIGN_OR_RETURN(ref, EnforcePolicyFlag(c.policy, *client, ref));
  o.connect = clients.Connector();
  o.check_location = NotingLocation(ref);
  ASSIGN_OR_RETURN(PullResult r, PullModel(*client, ref, c.dest, o));
  if (c.reg.json) {
    printf("%s\n", PullResultToJson(r).dump(2).c_str());
    return absl::OkStatus();
  }
  for (const auto& f : r.files) {
    // Paths are checked for control characters, and escaped all the same: this line is what
    // a reader trusts.
    printf("verified %s %14s  %s\n", std::string(f.layer.short_hex()).c_str(),
           WithCommas(f.size).c_str(), EscapeUntrusted(f.path).c_str());
  }
  printf("pulled %s (%zu files, %s bytes) into %s\n", r.model.digest.str().c_str(), r.files.size(),
         WithCommas(r.bytes).c_str(), c.dest.c_str());
  return absl::OkStatus();
}

// --chunk-size and --chunk-digest, as push and convert take them (parsed by ParseChunkFlags).
void AddChunkFlags(CLI::App* cmd, std::string* chunk_size, std::string* chunk_digest) {
  cmd->add_option("--chunk-size", *chunk_size,
                  "Chunk size of the chunk indexes, a power of two from 64KiB to 64MiB "
                  "(default: 1MiB, larger for models whose indexes would not fit the volume "
                  "layer's 4 MiB: 16MiB for 1 TiB)");
  cmd->add_option("--chunk-digest", *chunk_digest,
                  "Hash of the chunk indexes: blake3 (default, about 3x less CPU per byte "
                  "verified) or sha256 (the version 1 index every modelfs reads)")
      ->check(CLI::IsMember({"blake3", "sha256"}));
}

}  // namespace

void RegisterRegistryCommands(CLI::App& app, Context& ctx) {
  {
    auto c = std::make_shared<PushCli>();
    CLI::App* cmd = app.add_subcommand(
        "push", "Publish files as a ModelPack artifact plus a modelfs volume image");
    cmd->add_option("REF", c->ref, "Target reference, registry/repo:tag")->required();
    cmd->add_option("FILES", c->inputs, "Files and directories")->required();
    cmd->add_flag("--tar", c->tar, "One .tar layer per file instead of .raw");
    cmd->add_option("--compress", c->compress,
                    "zstd: one .tar+zstd layer per file (implies --tar), in independent frames "
                    "of one chunk each, level 3")
        ->check(CLI::IsMember({"zstd"}));
    cmd->add_option("--volume-tag", c->volume_tag,
                    "Tag for the volume image (default <tag>-volume)");
    cmd->add_option("--annotation", c->annotations, "KEY=VALUE annotation on the model manifest");
    cmd->add_option("--mount-from", c->mount_from,
                    "Repository on the same registry to mount existing blobs from");
    cmd->add_option("--revision", c->revision, "Source revision (e.g. Hugging Face commit)");
    cmd->add_option("--name", c->name, "Model name (default: the repository's last part)");
    cmd->add_flag("--allow-pickle", c->allow_pickle,
                  "Push pickle checkpoints (*.bin *.pt *.pth *.pkl *.pickle *.ckpt), which can run "
                  "code when loaded; they are scanned and recorded in the manifest's annotations");
    // The identity record (docs/cli.md "The identity record"); each overrides README.md's
    // model card front matter.
    cmd->add_option("--license", c->identity.licenses,
                    "SPDX license expression (repeatable; default: the model card's license)");
    cmd->add_option("--base-model", c->base_model,
                    "Model this one derives from, e.g. meta-llama/Llama-3.1-8B (comma-separated)");
    cmd->add_option("--base-model-relation", c->identity.base_model_relation,
                    "How it derives: finetune, quantized, merge or adapter");
    cmd->add_option("--quantization", c->identity.quantization,
                    "Quantization (config.quantization), e.g. q4_k_m, awq, gptq");
    cmd->add_option("--quantization-recipe", c->identity.quantization_recipe,
                    "How it was quantized (tool, version, settings)");
    cmd->add_option("--dataset", c->identity.datasets,
                    "Training dataset, a Hub id or a URL (repeatable; descriptor.datasetsURL)");
    cmd->add_option("--eval-id", c->identity.eval_ids, "Evaluation run id (repeatable)");
    cmd->add_option("--path-prefix", c->path_prefix,
                    "Directory the volume image shows the files under (\"models\" for KServe's "
                    "oci+native://, which mounts it with subPath: models); the model's own paths "
                    "are unchanged");
    cmd->add_flag("--image-compatible", c->image_compatible,
                  "With --tar: the volume image's layers are the model's own tars (then its "
                  ".modelfs/ layer), so a node without modelfs pulls the model as an ordinary "
                  "image; the tars' members go under --path-prefix");
    cmd->add_flag("--no-tensor-index", c->no_tensor_index,
                  "Leave the tensor index out of the volume image (as builds before it wrote "
                  "it); diff and inspect --tensors then read the files' headers and hash them");
    AddChunkFlags(cmd, &c->chunk_size, &c->chunk_digest);
    cmd->add_option("--sign-key", c->sign_key,
                    "Sign the ModelPack artifact and the volume image with this ECDSA P-256 key "
                    "(PEM, or cosign's encrypted key with COSIGN_PASSWORD); see docs/signing.md");
    AddRegistryFlags(cmd, c->reg);
    cmd->callback([c, &ctx] { ctx.status = RunPush(*c); });
  }
  {
    auto c = std::make_shared<ConvertCli>();
    CLI::App* cmd = app.add_subcommand(
        "convert",
        "Write a modelfs volume image for an existing ModelPack artifact or an ordinary image "
        "such as a KServe modelcar (weights are streamed once to verify and index them, not "
        "uploaded again)");
    cmd->add_option("REF", c->ref, "The ModelPack artifact or image")->required();
    cmd->add_option("--to", c->to,
                    "Write the volume image into this repository (registry/repo[:tag]) instead "
                    "of REF's, e.g. one you can push to; the weights stay in REF's repository");
    cmd->add_option("--volume-tag", c->volume_tag,
                    "Tag for the volume image (default <tag>-volume)");
    cmd->add_option("--path-prefix", c->path_prefix,
                    "Directory the volume image shows the files under (\"models\" for KServe's "
                    "oci+native://)");
    cmd->add_flag("--image-compatible", c->image_compatible,
                  "The volume image's layers are the model's own tars (every layer must be an "
                  "uncompressed .tar; with --path-prefix every member under it), then its "
                  ".modelfs/ layer: a node without modelfs pulls the model as an ordinary image");
    cmd->add_flag("--no-tensor-index", c->no_tensor_index,
                  "Leave the tensor index out of the volume image (as builds before it wrote "
                  "it); diff and inspect --tensors then read the files' headers and hash them");
    AddChunkFlags(cmd, &c->chunk_size, &c->chunk_digest);
    cmd->add_option("--sign-key", c->sign_key,
                    "Sign the volume image with this ECDSA P-256 key (PEM, or cosign's encrypted "
                    "key with COSIGN_PASSWORD)");
    AddRegistryFlags(cmd, c->reg);
    cmd->callback([c, &ctx] { ctx.status = RunConvert(*c); });
  }
  {
    auto c = std::make_shared<PullCli>();
    CLI::App* cmd = app.add_subcommand(
        "pull", "Download a model (ModelPack artifact or volume image) and verify every byte");
    cmd->add_option("REF", c->ref, "registry/repo:tag or registry/repo@sha256:...")->required();
    cmd->add_option("DEST", c->dest, "Destination directory")->required();
    cmd->add_option("--parallel", c->parallel, "Concurrent layer downloads")->default_val(4);
    cmd->add_option("--policy", c->policy,
                    "containers-policy.json: REF's signatures are verified before anything is "
                    "fetched; a refusal exits 1 (docs/signing.md)");
    AddRegistryFlags(cmd, c->reg);
    cmd->callback([c, &ctx] { ctx.status = RunPull(*c); });
  }
}

}  // namespace modelfs::cli
