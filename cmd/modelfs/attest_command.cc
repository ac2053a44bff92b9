// `modelfs attest equivalence REF_DERIVED --source REF_SOURCE [--sign-key KEY]`: both models read
// lazily through a verified cache (every chunk checked against V's index or the layer digest,
// each byte fetched once), compared tensor by tensor (core/attest/equivalence.h), and the result
// printed as an in-toto statement or, signed, stored as cosign stores attestations
// (core/attest/attestation.h). And `modelfs verify REF --attestation equivalence --key K`.
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cmd/modelfs/cli.h"
#include "core/attest/attestation.h"
#include "core/attest/equivalence.h"
#include "core/cache/blob_cache.h"
#include "core/model/blob_range_reader.h"
#include "core/resolve/model_ref.h"
#include "core/status/status_macros.h"
#include "core/text/escape.h"
#include "core/trust/enforce.h"
#include "host/model_host.h"

namespace modelfs::cli {
namespace {

namespace fs = std::filesystem;

struct AttestCli {
  std::string derived, source;
  std::string sign_key;
  std::string cache_dir;
  double max_rel_l2 = -1, min_cosine = -1, max_abs_rel = -1;
  RegistryFlags reg;
};

// A private cache directory, removed when the command ends (unless --cache-dir named one).
class ScratchDir {
 public:
  static absl::StatusOr<ScratchDir> Make(const std::string& given) {
    if (!given.empty()) return ScratchDir(given, false);
    const char* tmp = getenv("TMPDIR");
    std::string pattern =
        absl::StrCat(tmp != nullptr && *tmp ? tmp : "/tmp", "/modelfs-attest-XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::InternalError(absl::StrCat("mkdtemp ", pattern, ": ", strerror(errno)));
    }
    return ScratchDir(pattern, true);
  }
  ScratchDir(ScratchDir&& o) noexcept : path_(std::move(o.path_)), owned_(o.owned_) {
    o.owned_ = false;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (owned_) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  ScratchDir(std::string path, bool owned) : path_(std::move(path)), owned_(owned) {}
  std::string path_;
  bool owned_;
};

struct OpenedModel {
  ImageReference ref;
  ResolvedModel rm;
  AttestedModel attested;
  Descriptor subject;  // what REF resolves to: V, or M
  std::vector<ModelFileReader> files;
};

absl::StatusOr<OpenedModel> Resolve(RegistryClients& clients, const std::string& arg) {
  OpenedModel m;
  ASSIGN_OR_RETURN(m.ref, ImageReference::Parse(arg));
  ASSIGN_OR_RETURN(std::shared_ptr<RegistryClient> client, clients.For(m.ref.registry()));
  ASSIGN_OR_RETURN(m.rm, ResolveModel(*client, m.ref, clients.Connector(), NotingLocation(m.ref)));
  if (m.rm.image) {
    return absl::InvalidArgumentError(
        absl::StrCat(arg, " is a container image, not a model: attest compares model files"));
  }
  RETURN_IF_ERROR(clients.For(m.rm.registry).status());
  m.subject = m.rm.volume_descriptor ? *m.rm.volume_descriptor : m.rm.model_descriptor;
  m.attested.reference = m.ref.String();
  m.attested.name = m.ref.Name();
  m.attested.digest = m.subject.digest;
  if (m.rm.volume_descriptor) m.attested.model = m.rm.model_descriptor.digest.str();
  return m;
}

// The model's weight files as range readers over the verified cache, in the model's order.
absl::Status OpenFiles(ModelHost& host, OpenedModel& m) {
  ASSIGN_OR_RETURN(LoadedModel loaded, host.Load(m.rm, m.attested.reference));
  for (const TreeFile& f : loaded.files) {
    if (f.kind != TreeFile::Kind::kFile) continue;
    if (!absl::EndsWith(f.path, ".safetensors") && !absl::EndsWith(f.path, ".gguf")) continue;
    m.files.push_back({f.path, std::make_unique<BlobRangeReader>(
                                   &host.reader(), f.layer, f.offset_in_layer, f.size, f.path)});
  }
  if (m.files.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(m.attested.reference, " has no .safetensors or .gguf file"));
  }
  return absl::OkStatus();
}

std::string Fmt(double v) { return absl::StrFormat("%.7g", v); }

void PrintReport(const OpenedModel& src, const OpenedModel& dst, const EquivalenceReport& r,
                 uint64_t fetched, double seconds) {
  auto e = [](const std::string& s) { return EscapeUntrusted(s); };
  printf("source     %s (%s)\n", e(src.attested.reference).c_str(),
         src.attested.digest.str().c_str());
  printf("derived    %s (%s)\n", e(dst.attested.reference).c_str(),
         dst.attested.digest.str().c_str());
  if (r.name_map == "identity") {
    printf("name map   identity\n");
  } else {
    printf("name map   %s (heads %u, kv heads %u, experts %u)\n", r.name_map.c_str(),
           r.arch_params.n_head, r.arch_params.n_head_kv, r.arch_params.n_expert);
  }
  for (const auto& [pair, t] : r.tolerances) {
    printf("tolerance  %s: relative L2 <= %s, cosine >= %s, max abs <= %s of the largest\n",
           pair.c_str(), Fmt(t.max_rel_l2).c_str(), Fmt(t.min_cosine).c_str(),
           Fmt(t.max_abs_rel).c_str());
  }
  double worst = 0, min_cos = 1;
  std::string worst_name;
  for (const TensorComparison& t : r.tensors) {
    if (!(t.rel_l2 <= worst)) {
      worst = t.rel_l2;
      worst_name = t.derived;
    }
    min_cos = std::min(min_cos, t.cosine);
  }
  printf(
      "tensors    %zu compared, %zu within tolerance, %zu missing, %zu extra; worst relative "
      "L2 %s (%s), lowest cosine %s\n",
      r.tensors.size(), r.tensors.size() - r.failed(), r.missing.size(), r.extra.size(),
      Fmt(worst).c_str(), e(worst_name).c_str(), Fmt(min_cos).c_str());
  printf(
      "read       source %s bytes, derived %s bytes (tensors %s + %s); %s bytes fetched from "
      "the registry in %.2f s\n",
      WithCommas(r.source_bytes_read).c_str(), WithCommas(r.derived_bytes_read).c_str(),
      WithCommas(r.source_tensor_bytes).c_str(), WithCommas(r.derived_tensor_bytes).c_str(),
      WithCommas(fetched).c_str(), seconds);
}

absl::Status RunAttest(const AttestCli& c) {
  if (c.source.empty())
    return absl::InvalidArgumentError("attest equivalence: --source is required");
  ToleranceOverride tol;
  if (c.max_rel_l2 >= 0) tol.max_rel_l2 = c.max_rel_l2;
  if (c.min_cosine >= 0) tol.min_cosine = c.min_cosine;
  if (c.max_abs_rel >= 0) tol.max_abs_rel = c.max_abs_rel;
  std::optional<PrivateKey> key;
  if (!c.sign_key.empty()) {
    ASSIGN_OR_RETURN(key, LoadSigningKey(c.sign_key));
  }
  const absl::Time start = absl::Now();
  auto clients = std::make_unique<RegistryClients>(AccessOptions(c.reg));
  ASSIGN_OR_RETURN(OpenedModel src, Resolve(*clients, c.source));
  ASSIGN_OR_RETURN(OpenedModel dst, Resolve(*clients, c.derived));
  ASSIGN_OR_RETURN(std::shared_ptr<RegistryClient> derived_client,
                   clients->For(dst.ref.registry()));

  ASSIGN_OR_RETURN(ScratchDir scratch, ScratchDir::Make(c.cache_dir));
  // A private host over the scratch cache: no mount, no prefetch, layers fetched as they are
  // (compressed ones whole).
  ModelHostConfig hc;
  hc.clients = std::move(clients);
  hc.cache.dir = scratch.path();
  hc.options.prefetch = PrefetchPolicy::kNone;
  hc.decode = false;
  hc.mount = false;
  ASSIGN_OR_RETURN(std::unique_ptr<ModelHost> host, ModelHost::Open(std::move(hc)));
  RETURN_IF_ERROR(OpenFiles(*host, src));
  RETURN_IF_ERROR(OpenFiles(*host, dst));

  ASSIGN_OR_RETURN(EquivalenceReport report, CompareModels(src.files, dst.files, tol));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const uint64_t fetched = host->cache().stats().bytes_fetched;
  const nlohmann::json statement =
      EquivalenceStatement(src.attested, dst.attested, report, MODELFS_VERSION);
  if (c.reg.json) {
    printf("%s\n", statement.dump(2).c_str());
  } else {
    PrintReport(src, dst, report, fetched, seconds);
  }
  if (!report.equivalent) {
    if (!c.reg.json) printf("verdict    not equivalent\n");
    return absl::FailedPreconditionError(
        absl::StrCat(dst.attested.reference, " is not equivalent to ", src.attested.reference,
                     key ? " (nothing signed)" : "", ":\n", report.Refusal()));
  }
  if (!c.reg.json) printf("verdict    equivalent\n");
  if (!key) return absl::OkStatus();

  ASSIGN_OR_RETURN(std::string envelope,
                   SignDsseEnvelope(kInTotoPayloadType, statement.dump(), *key));
  ASSIGN_OR_RETURN(StoredAttestation stored,
                   StoreAttestation(*derived_client, dst.ref.repository(), dst.subject.digest,
                                    dst.subject.media_type, dst.subject.size, envelope,
                                    kEquivalencePredicateType));
  const std::string line = absl::StrCat(
      "stored     ", dst.ref.Name(), ":", stored.tag, " (", stored.att_manifest.str(), "), ",
      stored.envelopes, " envelope(s); referrer ",
      stored.referrer ? stored.referrer->str() : "none (the registry has no referrers API)");
  fprintf(c.reg.json ? stderr : stdout, "%s\n", EscapeUntrusted(line).c_str());
  return absl::OkStatus();
}

}  // namespace

absl::Status RunVerifyAttestation(const VerifyRefCli& c) {
  if (c.attestation != "equivalence") {
    return absl::InvalidArgumentError(absl::StrCat(
        "verify ", c.ref, ": --attestation \"", c.attestation, "\": the one kind is equivalence"));
  }
  if (c.key.empty() || !c.policy.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("verify ", c.ref, ": --attestation takes --key PUB (not --policy)"));
  }
  ASSIGN_OR_RETURN(ImageReference ref, ImageReference::Parse(c.ref));
  ASSIGN_OR_RETURN(PublicKey pub, PublicKey::FromFile(c.key));
  const RegistryAccessOptions access = AccessOptions(
      {.plain_http = c.plain_http, .hosts_dir = c.hosts_dir, .docker_config = c.docker_config});
  ASSIGN_OR_RETURN(auto client, ConnectRegistry(ref, HostCapability::kPull, access));
  ASSIGN_OR_RETURN(Digest digest, ResolveManifestDigest(*client, ref));
  std::vector<PublicKey> keys;
  keys.push_back(pub);
  ASSIGN_OR_RETURN(AttestationVerdict v, VerifyAttestations(*client, ref.repository(), digest, keys,
                                                            kEquivalencePredicateType));
  const nlohmann::json& p = v.statement.is_object() && v.statement.contains("predicate")
                                ? v.statement["predicate"]
                                : nlohmann::json::object();
  if (c.json) {
    nlohmann::json out = {{"reference", ref.String()},
                          {"digest", digest.str()},
                          {"attestation", "equivalence"},
                          {"predicateType", kEquivalencePredicateType},
                          {"key", pub.name()},
                          {"envelopes", v.envelopes},
                          {"accepted", v.accepted},
                          {"reason", v.accepted ? "" : v.reason},
                          {"detail", v.detail}};
    if (v.accepted) {
      out["source"] = p.value("source", nlohmann::json());
      out["summary"] = p.value("summary", nlohmann::json());
      out["tolerances"] = p.value("tolerances", nlohmann::json());
    }
    printf("%s\n", out.dump(2).c_str());
  } else {
    printf("reference    %s\n", EscapeUntrusted(ref.String()).c_str());
    printf("digest       %s\n", digest.str().c_str());
    printf("attestations %s:%s, %zu envelope(s)\n", EscapeUntrusted(ref.Name()).c_str(),
           AttestationTag(digest).c_str(), v.envelopes);
    if (v.accepted && p.contains("source") && p["source"].is_object()) {
      printf("source       %s (%s)\n", EscapeUntrusted(p["source"].value("reference", "")).c_str(),
             EscapeUntrusted(p["source"].value("digest", "")).c_str());
      if (p.contains("summary") && p["summary"].is_object()) {
        printf("summary      %s tensors within tolerance, worst relative L2 %s\n",
               EscapeUntrusted(p["summary"].value("passed", nlohmann::json(0)).dump()).c_str(),
               EscapeUntrusted(p["summary"].value("worstRelL2", nlohmann::json(0)).dump()).c_str());
      }
    }
    printf("verdict      %s\n",
           EscapeUntrusted(v.accepted ? absl::StrCat("accepted (", v.detail, ")")
                                      : absl::StrCat("refused: ", v.reason, ": ", v.detail))
               .c_str());
  }
  if (v.accepted) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat(ref.String(), " (", digest.str(),
                   ") has no accepted equivalence attestation: ", v.reason, ": ", v.detail));
}

void RegisterAttest(CLI::App& app, Context& ctx) {
  CLI::App* attest = app.add_subcommand("attest", "Make attestations about models");
  attest->require_subcommand(1);
  auto c = std::make_shared<AttestCli>();
  CLI::App* cmd = attest->add_subcommand(
      "equivalence",
      "Compare a derived model (a conversion or quantization) with its source tensor by tensor "
      "and print, or sign and store, an in-toto equivalence attestation");
  cmd->add_option("REF_DERIVED", c->derived, "the derived model: registry/repo:tag (V or M)")
      ->required();
  cmd->add_option("--source", c->source, "the source model: registry/repo:tag (V or M)")
      ->required();
  cmd->add_option("--sign-key", c->sign_key,
                  "ECDSA P-256 private key: sign the statement (DSSE) and store it in the "
                  "derived model's sha256-<hex>.att tag (COSIGN_PASSWORD opens an encrypted key)");
  cmd->add_option("--max-rel-l2", c->max_rel_l2, "override every pair's relative L2 error bound");
  cmd->add_option("--min-cosine", c->min_cosine, "override every pair's cosine similarity bound");
  cmd->add_option("--max-abs-rel", c->max_abs_rel,
                  "override every pair's max abs error bound (a fraction of the source tensor's "
                  "largest magnitude)");
  cmd->add_option("--cache-dir", c->cache_dir,
                  "where the verified chunks are kept while comparing (default: a private "
                  "directory under $TMPDIR, removed at the end)");
  AddRegistryFlags(cmd, c->reg);
  cmd->get_option("--json")->description("Print the in-toto statement as JSON");
  cmd->footer(
      "Exit codes: 0 equivalent (and, with --sign-key, stored); 1 not equivalent (the first "
      "tensors that differ are named; nothing is signed), or a registry failure; 2 bad reference, "
      "key, flag, or a model that cannot be compared");
  cmd->callback([c, &ctx] { ctx.status = RunAttest(*c); });
}

}  // namespace modelfs::cli
