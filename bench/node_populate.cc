// modelfs-node-populate: registers models and snapshots in a running modelfs-snapshotter as
// containerd's CRI would, for bench/node_ls_bench.sh: for each of N volume images
// REGISTRY/PREFIX-<i>:v1-volume (pushed by the script), the remote Prepare of its layer A
// (pinned to its digest, with CRI's labels: the model is registered, no weight byte fetched)
// and K active snapshots on top (keys "k8s.io/<n>/<64 hex>", as a container's root filesystem).
//
// Usage: modelfs-node-populate SOCKET REGISTRY PREFIX N K    (exit 0, or 1 naming the failure)
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "containerd/services/snapshots/v1/snapshots.grpc.pb.h"
#include "core/oci/manifest.h"
#include "snapshotter/model/model_snapshotter.h"
#include "testsupport/harness/publish_test_env.h"

namespace v1 = containerd::services::snapshots::v1;
using modelfs::snapshotter::Labels;

namespace {

grpc::Status Prepare(v1::Snapshots::Stub& stub, const std::string& key, const std::string& parent,
                     const Labels& labels) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  v1::PrepareSnapshotRequest req;
  req.set_snapshotter("modelfs");
  req.set_key(key);
  req.set_parent(parent);
  req.mutable_labels()->insert(labels.begin(), labels.end());
  v1::PrepareSnapshotResponse resp;
  return stub.Prepare(&ctx, req, &resp);
}

int Fail(const std::string& what) {
  fprintf(stderr, "modelfs-node-populate: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: modelfs-node-populate SOCKET REGISTRY PREFIX N K\n");
    return 2;
  }
  const std::string socket = argv[1], registry = argv[2], prefix = argv[3];
  const int n = atoi(argv[4]), k = atoi(argv[5]);
  auto stub = v1::Snapshots::NewStub(
      grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  auto client = modelfs::testing::ConnectPlainHttp(registry);
  if (!client.ok()) return Fail(client.status().ToString());
  int counter = 0;
  for (int i = 0; i < n; ++i) {
    const std::string repo = absl::StrCat(prefix, "-", i);
    auto v = (*client)->GetManifest(repo, "v1-volume");
    if (!v.ok()) return Fail(v.status().ToString());
    auto vm = modelfs::ParseManifest(v->bytes);
    if (!vm.ok()) return Fail(vm.status().ToString());
    const std::string chain = vm->layers[0].digest.str();
    Labels labels(vm->layers[0].annotations.begin(), vm->layers[0].annotations.end());
    labels[modelfs::snapshotter::kLabelTargetRef] = chain;
    labels[modelfs::snapshotter::kLabelCriImageRef] =
        absl::StrCat(registry, "/", repo, ":v1-volume");
    labels[modelfs::snapshotter::kLabelCriManifestDigest] = v->digest.str();
    grpc::Status st =
        Prepare(*stub, absl::StrCat("k8s.io/", ++counter, "/extract-", i), "", labels);
    if (st.error_code() != grpc::StatusCode::ALREADY_EXISTS) {
      return Fail(absl::StrCat(repo, ": Prepare of layer A: ", st.error_message()));
    }
    for (int j = 0; j < k; ++j) {
      const std::string key =
          absl::StrCat("k8s.io/", ++counter, "/", absl::StrFormat("%064x", i * 100000 + j));
      st = Prepare(*stub, key, chain, {});
      if (!st.ok()) return Fail(absl::StrCat(key, ": ", st.error_message()));
    }
  }
  printf("%d models, %d snapshots\n", n, n * (k + 1));
  return 0;
}
