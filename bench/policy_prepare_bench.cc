// policy_prepare_bench: what a signature policy costs a Prepare, beside the same Prepare
// without a policy, measured in the same run. Not a test.
//
// A local docker-registry holds the test model M and its volume image V (`modelfs push`), V
// signed with a P-256 key made here. For each mode (no policy; a policy that wants V signed by
// that key) and each of N rounds, a ModelSnapshotter on a fresh root (real FUSE) times:
//   remote Prepare     V's layer, the model registered (with a policy: the first verdict,
//                      i.e. the .sig manifest and payload fetched and verified)
//   again, kept        the same after Remove (the model registered again; the verdict kept)
//   View on top        what CreateContainer asks (with a policy: the kept verdict checked)
// and prints the median of each; and, first, PolicyGate::Check alone (first verdict and kept),
// the policy's own share without the noise of the rest of a Prepare. Needs root and /dev/fuse.
//
//   policy_prepare_bench [rounds]
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/oci/manifest.h"
#include "core/trust/keys.h"
#include "core/trust/sign.h"
#include "core/trust/signature_store.h"
#include "nlohmann/json.hpp"
#include "snapshotter/model/model_snapshotter.h"
#include "snapshotter/policy/policy_gate.h"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

using snapshotter::Labels;
using snapshotter::ModelSnapshotter;
using snapshotter::ModelSnapshotterOptions;

int Fail(const std::string& what, const absl::Status& st) {
  fprintf(stderr, "policy_prepare_bench: %s: %s\n", what.c_str(), st.ToString().c_str());
  return 1;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double Ms(absl::Time t0) { return absl::ToDoubleMilliseconds(absl::Now() - t0); }

int Run(int rounds) {
  testing::TempDir tmp;
  absl::StatusOr<std::unique_ptr<testing::RegistryFixture>> registry =
      testing::RegistryFixture::Start();
  if (!registry.ok()) return Fail("registry", registry.status());
  const std::string host = (*registry)->host_port();
  const std::string repo = "bench/llama";
  const std::string v_ref = absl::StrCat(host, "/", repo, ":v1-volume");
  const std::string src = tmp.Join("model").string();
  if (absl::Status st = testing::WriteTestModel(src, 5).status(); !st.ok()) {
    return Fail("model", st);
  }
  absl::StatusOr<testing::ProcessResult> push = testing::RunModelfs(
      {"push", "--plain-http", "--json", absl::StrCat(host, "/", repo, ":v1"), src});
  if (!push.ok() || push->exit_code != 0) {
    return Fail("push", push.ok() ? absl::InternalError(push->err) : push.status());
  }
  const nlohmann::json pushed = testing::ParseJsonOutput(push->out);
  const std::string v_digest = pushed["volume"]["digest"];

  // The labels a CRI pull gives V's (single) layer.
  absl::StatusOr<std::unique_ptr<RegistryClient>> client = testing::ConnectPlainHttp(host);
  if (!client.ok()) return Fail("client", client.status());
  absl::StatusOr<ManifestResult> v = (*client)->GetManifest(repo, v_digest);
  if (!v.ok()) return Fail("V", v.status());
  absl::StatusOr<Manifest> vm = ParseManifest(v->bytes);
  if (!vm.ok()) return Fail("V", vm.status());
  const std::string chain = vm->layers[0].digest.str();
  Labels labels(vm->layers[0].annotations.begin(), vm->layers[0].annotations.end());
  labels[snapshotter::kLabelTargetRef] = chain;
  labels[snapshotter::kLabelCriImageRef] = v_ref;
  labels[snapshotter::kLabelCriManifestDigest] = v_digest;

  // Sign V; the policy trusts that key for the repository and nothing else.
  EVP_PKEY* pkey = EVP_EC_gen("P-256");
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, pkey, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  absl::StatusOr<PrivateKey> key = PrivateKey::FromPem(std::string(data, n), "bench", "");
  BIO_free(bio);
  EVP_PKEY_free(pkey);
  if (!key.ok()) return Fail("key", key.status());
  const std::string pub = tmp.WriteFile("bench.pub", key->public_key().Pem()).string();
  RegistrySignatureStore store(client->get());
  absl::StatusOr<ImageReference> image = ImageReference::Parse(v_ref);
  absl::StatusOr<Digest> digest = Digest::Parse(v_digest);
  if (!image.ok() || !digest.ok()) return Fail("reference", image.status());
  if (absl::Status st = SignImage(store, *image, *digest, *key).status(); !st.ok()) {
    return Fail("sign", st);
  }
  const nlohmann::json policy = {
      {"default", {{{"type", "reject"}}}},
      {"transports",
       {{"docker",
         {{absl::StrCat(host, "/", repo), {{{"type", "sigstoreSigned"}, {"keyPath", pub}}}}}}}}};
  const std::string policy_path = tmp.WriteFile("policy.json", policy.dump()).string();

  // The policy's own share, apart from the rest of a Prepare: PolicyGate::Check on a fresh
  // gate (policy read, .sig manifest and payload fetched, signature verified) and again (kept).
  {
    std::vector<double> gate_cold, gate_kept;
    for (int r = 0; r < rounds * 4; ++r) {
      snapshotter::PolicyGate gate(
          policy_path,
          [&](const std::string&) -> absl::StatusOr<SignatureStore*> { return &store; });
      absl::Time t0 = absl::Now();
      absl::Status first = gate.Check(*image, *digest).status;
      gate_cold.push_back(Ms(t0));
      t0 = absl::Now();
      absl::Status second = gate.Check(*image, *digest).status;
      gate_kept.push_back(Ms(t0));
      if (!first.ok() || !second.ok()) return Fail("gate", first.ok() ? second : first);
    }
    printf(
        "policy_prepare_bench: PolicyGate::Check alone, %d rounds: first verdict %.3f ms, "
        "kept %.4f ms (medians)\n",
        rounds * 4, Median(gate_cold), Median(gate_kept));
  }
  printf("policy_prepare_bench: %d rounds, medians in ms (registry on loopback)\n", rounds);
  printf("%-10s | %-24s | %-24s | %-14s\n", "mode", "remote Prepare (cold)",
         "remote Prepare (kept)", "View on top");
  for (bool with_policy : {false, true}) {
    std::vector<double> cold, kept, view;
    for (int r = 0; r < rounds; ++r) {
      ModelSnapshotterOptions o;
      o.root = tmp.Join(absl::StrCat(with_policy ? "p" : "n", r));
      o.registry.hosts.plain_http_hosts = {host};
      o.prefetch = PrefetchPolicy::kNone;
      o.log = [](const log::Event&) {};
      if (with_policy) o.policy = policy_path;
      absl::StatusOr<std::unique_ptr<ModelSnapshotter>> s = ModelSnapshotter::Open(o);
      if (!s.ok()) return Fail("open", s.status());
      absl::Time t0 = absl::Now();
      absl::Status st = (*s)->Prepare("extract-1", "", labels).status();
      cold.push_back(Ms(t0));
      if (!absl::IsAlreadyExists(st)) return Fail("remote Prepare", st);
      if (absl::Status rm = (*s)->Remove(chain); !rm.ok()) return Fail("remove", rm);
      t0 = absl::Now();
      st = (*s)->Prepare("extract-2", "", labels).status();
      kept.push_back(Ms(t0));
      if (!absl::IsAlreadyExists(st)) return Fail("remote Prepare again", st);
      t0 = absl::Now();
      absl::Status viewed = (*s)->View("view-1", chain, {}).status();
      view.push_back(Ms(t0));
      if (!viewed.ok()) return Fail("view", viewed);
      (void)(*s)->Remove("view-1");
      (void)(*s)->Shutdown();
    }
    printf("%-10s | %24.2f | %24.2f | %14.3f\n", with_policy ? "policy" : "no policy", Median(cold),
           Median(kept), Median(view));
  }
  return 0;
}

}  // namespace
}  // namespace modelfs

int main(int argc, char** argv) { return modelfs::Run(argc > 1 ? std::atoi(argv[1]) : 5); }
