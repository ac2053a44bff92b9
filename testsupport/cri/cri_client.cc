#include "testsupport/cri/cri_client.h"

#include <errno.h>
#include <string.h>
#include <sys/mount.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "containerd/services/snapshots/v1/snapshots.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "runtime/v1/api.grpc.pb.h"

namespace modelfs::testing {
namespace {

namespace snapshots = ::containerd::services::snapshots::v1;

absl::Status FromGrpc(const grpc::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, ": ", s.error_message()));
}

std::vector<SnapshotMount> FromProto(
    const google::protobuf::RepeatedPtrField<containerd::types::Mount>& mounts) {
  std::vector<SnapshotMount> out;
  for (const auto& m : mounts) {
    out.push_back({m.type(), m.source(), {m.options().begin(), m.options().end()}});
  }
  return out;
}

SnapshotInfo FromProto(const snapshots::Info& info) {
  SnapshotInfo out;
  out.name = info.name();
  out.parent = info.parent();
  out.kind = static_cast<SnapshotInfo::Kind>(info.kind());
  out.labels = {info.labels().begin(), info.labels().end()};
  return out;
}

bool IsMounted(const std::string& target) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    if (f.size() > 4 && f[4] == target) return true;
  }
  return false;
}

void SetDeadline(grpc::ClientContext& ctx, absl::Duration timeout) {
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

void FillSandboxConfig(const CriPodSpec& pod, runtime::v1::PodSandboxConfig& c) {
  auto* m = c.mutable_metadata();
  m->set_name(pod.name);
  m->set_uid(pod.uid);
  m->set_namespace_(pod.ns);
  m->set_attempt(0);
  c.set_log_directory(pod.log_directory);
  auto* ns = c.mutable_linux()->mutable_security_context()->mutable_namespace_options();
  ns->set_network(runtime::v1::NODE);
  ns->set_pid(runtime::v1::CONTAINER);
  ns->set_ipc(runtime::v1::POD);
}

}  // namespace

std::string ParseCriLog(const std::string& log, const std::string& stream) {
  std::string out;
  for (absl::string_view line : absl::StrSplit(log, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(' ', 3));
    if (f.size() < 3 || f[1] != stream) continue;
    if (f.size() == 4) out.append(f[3].data(), f[3].size());
    if (f[2] == "F") out.push_back('\n');
  }
  return out;
}

std::string DescribeMounts(const std::vector<SnapshotMount>& mounts) {
  std::vector<std::string> parts;
  for (const auto& m : mounts) {
    parts.push_back(absl::StrCat("type=", m.type, " source=", m.source,
                                 " options=", absl::StrJoin(m.options, ",")));
  }
  return absl::StrJoin(parts, "; ");
}

// ---------------------------------------------------------------------------------------------

struct CriImageClient::Impl {
  std::unique_ptr<runtime::v1::ImageService::Stub> stub;
};

CriImageClient::CriImageClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CriImageClient::~CriImageClient() = default;

absl::StatusOr<std::unique_ptr<CriImageClient>> CriImageClient::Connect(const std::string& target) {
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  if (channel == nullptr) return absl::InternalError(absl::StrCat("gRPC channel to ", target));
  auto impl = std::make_unique<Impl>();
  impl->stub = runtime::v1::ImageService::NewStub(channel);
  return std::unique_ptr<CriImageClient>(new CriImageClient(std::move(impl)));
}

absl::StatusOr<std::string> CriImageClient::PullImage(const std::string& image,
                                                      absl::Duration timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  runtime::v1::PullImageRequest req;
  req.mutable_image()->set_image(image);
  runtime::v1::PullImageResponse resp;
  absl::Status s = FromGrpc(impl_->stub->PullImage(&ctx, req, &resp), "CRI PullImage " + image);
  if (!s.ok()) return s;
  return resp.image_ref();
}

absl::StatusOr<std::string> CriImageClient::PullImageForPod(const std::string& image,
                                                            const CriPodSpec& pod,
                                                            absl::Duration timeout) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, timeout);
  runtime::v1::PullImageRequest req;
  req.mutable_image()->set_image(image);
  FillSandboxConfig(pod, *req.mutable_sandbox_config());
  runtime::v1::PullImageResponse resp;
  absl::Status s = FromGrpc(impl_->stub->PullImage(&ctx, req, &resp), "CRI PullImage " + image);
  if (!s.ok()) return s;
  return resp.image_ref();
}

absl::StatusOr<std::optional<CriImage>> CriImageClient::ImageStatus(const std::string& image,
                                                                    absl::Duration timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  runtime::v1::ImageStatusRequest req;
  req.mutable_image()->set_image(image);
  runtime::v1::ImageStatusResponse resp;
  absl::Status s = FromGrpc(impl_->stub->ImageStatus(&ctx, req, &resp), "CRI ImageStatus " + image);
  if (!s.ok()) return s;
  if (!resp.has_image()) return std::optional<CriImage>();
  const auto& i = resp.image();
  return std::optional<CriImage>(CriImage{i.id(),
                                          {i.repo_tags().begin(), i.repo_tags().end()},
                                          {i.repo_digests().begin(), i.repo_digests().end()},
                                          i.size()});
}

absl::Status CriImageClient::RemoveImage(const std::string& image, absl::Duration timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  runtime::v1::RemoveImageRequest req;
  req.mutable_image()->set_image(image);
  runtime::v1::RemoveImageResponse resp;
  return FromGrpc(impl_->stub->RemoveImage(&ctx, req, &resp), "CRI RemoveImage " + image);
}

// ---------------------------------------------------------------------------------------------

struct CriRuntimeClient::Impl {
  std::unique_ptr<runtime::v1::RuntimeService::Stub> stub;
};

CriRuntimeClient::CriRuntimeClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CriRuntimeClient::~CriRuntimeClient() = default;

absl::StatusOr<std::unique_ptr<CriRuntimeClient>> CriRuntimeClient::Connect(
    const std::string& target) {
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  if (channel == nullptr) return absl::InternalError(absl::StrCat("gRPC channel to ", target));
  auto impl = std::make_unique<Impl>();
  impl->stub = runtime::v1::RuntimeService::NewStub(channel);
  return std::unique_ptr<CriRuntimeClient>(new CriRuntimeClient(std::move(impl)));
}

absl::StatusOr<std::string> CriRuntimeClient::RunPodSandbox(const CriPodSpec& pod,
                                                            absl::Duration timeout) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, timeout);
  runtime::v1::RunPodSandboxRequest req;
  FillSandboxConfig(pod, *req.mutable_config());
  runtime::v1::RunPodSandboxResponse resp;
  absl::Status s =
      FromGrpc(impl_->stub->RunPodSandbox(&ctx, req, &resp), "CRI RunPodSandbox " + pod.name);
  if (!s.ok()) return s;
  return resp.pod_sandbox_id();
}

absl::Status CriRuntimeClient::StopPodSandbox(const std::string& sandbox_id,
                                              absl::Duration timeout) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, timeout);
  runtime::v1::StopPodSandboxRequest req;
  req.set_pod_sandbox_id(sandbox_id);
  runtime::v1::StopPodSandboxResponse resp;
  return FromGrpc(impl_->stub->StopPodSandbox(&ctx, req, &resp),
                  "CRI StopPodSandbox " + sandbox_id);
}

absl::Status CriRuntimeClient::RemovePodSandbox(const std::string& sandbox_id,
                                                absl::Duration timeout) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, timeout);
  runtime::v1::RemovePodSandboxRequest req;
  req.set_pod_sandbox_id(sandbox_id);
  runtime::v1::RemovePodSandboxResponse resp;
  return FromGrpc(impl_->stub->RemovePodSandbox(&ctx, req, &resp),
                  "CRI RemovePodSandbox " + sandbox_id);
}

absl::StatusOr<std::string> CriRuntimeClient::CreateContainer(const std::string& sandbox_id,
                                                              const CriContainerSpec& container,
                                                              const CriPodSpec& pod,
                                                              absl::Duration timeout) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, timeout);
  runtime::v1::CreateContainerRequest req;
  req.set_pod_sandbox_id(sandbox_id);
  FillSandboxConfig(pod, *req.mutable_sandbox_config());
  auto* c = req.mutable_config();
  c->mutable_metadata()->set_name(container.name);
  c->mutable_image()->set_image(container.image);
  for (const auto& a : container.command) c->add_command(a);
  for (const auto& a : container.args) c->add_args(a);
  for (const auto& m : container.mounts) {
    auto* pm = c->add_mounts();
    pm->set_container_path(m.container_path);
    pm->set_host_path(m.host_path);
    pm->set_readonly(m.readonly);
    if (!m.image.empty()) pm->mutable_image()->set_image(m.image);
    if (!m.image_sub_path.empty()) pm->set_image_sub_path(m.image_sub_path);
  }
  c->set_log_path(container.log_path);
  // The kubelet repeats the pod's namespaces in each container's security context.
  *c->mutable_linux()->mutable_security_context()->mutable_namespace_options() =
      req.sandbox_config().linux().security_context().namespace_options();
  runtime::v1::CreateContainerResponse resp;
  absl::Status s =
      FromGrpc(impl_->stub->CreateContainer(&ctx, req, &resp),
               absl::StrCat("CRI CreateContainer ", container.name, " in ", sandbox_id));
  if (!s.ok()) return s;
  return resp.container_id();
}

absl::Status CriRuntimeClient::StartContainer(const std::string& container_id,
                                              absl::Duration timeout) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, timeout);
  runtime::v1::StartContainerRequest req;
  req.set_container_id(container_id);
  runtime::v1::StartContainerResponse resp;
  return FromGrpc(impl_->stub->StartContainer(&ctx, req, &resp),
                  "CRI StartContainer " + container_id);
}

absl::Status CriRuntimeClient::StopContainer(const std::string& container_id,
                                             absl::Duration grace) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, grace + absl::Minutes(1));
  runtime::v1::StopContainerRequest req;
  req.set_container_id(container_id);
  req.set_timeout(absl::ToInt64Seconds(grace));
  runtime::v1::StopContainerResponse resp;
  return FromGrpc(impl_->stub->StopContainer(&ctx, req, &resp),
                  "CRI StopContainer " + container_id);
}

absl::Status CriRuntimeClient::RemoveContainer(const std::string& container_id,
                                               absl::Duration timeout) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, timeout);
  runtime::v1::RemoveContainerRequest req;
  req.set_container_id(container_id);
  runtime::v1::RemoveContainerResponse resp;
  return FromGrpc(impl_->stub->RemoveContainer(&ctx, req, &resp),
                  "CRI RemoveContainer " + container_id);
}

absl::StatusOr<CriContainerStatus> CriRuntimeClient::ContainerStatus(
    const std::string& container_id, absl::Duration timeout) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, timeout);
  runtime::v1::ContainerStatusRequest req;
  req.set_container_id(container_id);
  runtime::v1::ContainerStatusResponse resp;
  absl::Status s = FromGrpc(impl_->stub->ContainerStatus(&ctx, req, &resp),
                            "CRI ContainerStatus " + container_id);
  if (!s.ok()) return s;
  const auto& st = resp.status();
  CriContainerStatus out;
  out.id = st.id();
  out.state = static_cast<CriContainerStatus::State>(st.state());
  out.exit_code = st.exit_code();
  out.reason = st.reason();
  out.message = st.message();
  out.log_path = st.log_path();
  return out;
}

absl::StatusOr<CriContainerStatus> CriRuntimeClient::WaitForExit(const std::string& container_id,
                                                                 absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    absl::StatusOr<CriContainerStatus> st = ContainerStatus(container_id);
    if (!st.ok() || st->state == CriContainerStatus::State::kExited) return st;
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("container ", container_id, " still in state ", static_cast<int>(st->state),
                       " after ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
}

// ---------------------------------------------------------------------------------------------

struct SnapshotsClient::Impl {
  std::unique_ptr<snapshots::Snapshots::Stub> stub;
  std::string snapshotter;
  std::string ns;

  void Setup(grpc::ClientContext& ctx) const {
    ctx.AddMetadata("containerd-namespace", ns);
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Minutes(2)));
  }
};

SnapshotsClient::SnapshotsClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SnapshotsClient::~SnapshotsClient() = default;

absl::StatusOr<std::unique_ptr<SnapshotsClient>> SnapshotsClient::Connect(
    const std::string& target, const std::string& snapshotter, const std::string& ns) {
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  if (channel == nullptr) return absl::InternalError(absl::StrCat("gRPC channel to ", target));
  auto impl = std::make_unique<Impl>();
  impl->stub = snapshots::Snapshots::NewStub(channel);
  impl->snapshotter = snapshotter;
  impl->ns = ns;
  return std::unique_ptr<SnapshotsClient>(new SnapshotsClient(std::move(impl)));
}

absl::StatusOr<std::vector<SnapshotMount>> SnapshotsClient::Prepare(
    const std::string& key, const std::string& parent,
    const std::map<std::string, std::string>& labels) {
  grpc::ClientContext ctx;
  impl_->Setup(ctx);
  snapshots::PrepareSnapshotRequest req;
  req.set_snapshotter(impl_->snapshotter);
  req.set_key(key);
  req.set_parent(parent);
  req.mutable_labels()->insert(labels.begin(), labels.end());
  snapshots::PrepareSnapshotResponse resp;
  absl::Status s = FromGrpc(impl_->stub->Prepare(&ctx, req, &resp),
                            absl::StrCat("Prepare ", key, " (parent ", parent, ")"));
  if (!s.ok()) return s;
  return FromProto(resp.mounts());
}

absl::StatusOr<std::vector<SnapshotMount>> SnapshotsClient::View(
    const std::string& key, const std::string& parent,
    const std::map<std::string, std::string>& labels) {
  grpc::ClientContext ctx;
  impl_->Setup(ctx);
  snapshots::ViewSnapshotRequest req;
  req.set_snapshotter(impl_->snapshotter);
  req.set_key(key);
  req.set_parent(parent);
  req.mutable_labels()->insert(labels.begin(), labels.end());
  snapshots::ViewSnapshotResponse resp;
  absl::Status s = FromGrpc(impl_->stub->View(&ctx, req, &resp),
                            absl::StrCat("View ", key, " (parent ", parent, ")"));
  if (!s.ok()) return s;
  return FromProto(resp.mounts());
}

absl::StatusOr<std::vector<SnapshotMount>> SnapshotsClient::Mounts(const std::string& key) {
  grpc::ClientContext ctx;
  impl_->Setup(ctx);
  snapshots::MountsRequest req;
  req.set_snapshotter(impl_->snapshotter);
  req.set_key(key);
  snapshots::MountsResponse resp;
  absl::Status s = FromGrpc(impl_->stub->Mounts(&ctx, req, &resp), "Mounts " + key);
  if (!s.ok()) return s;
  return FromProto(resp.mounts());
}

absl::Status SnapshotsClient::Remove(const std::string& key) {
  grpc::ClientContext ctx;
  impl_->Setup(ctx);
  snapshots::RemoveSnapshotRequest req;
  req.set_snapshotter(impl_->snapshotter);
  req.set_key(key);
  google::protobuf::Empty resp;
  return FromGrpc(impl_->stub->Remove(&ctx, req, &resp), "Remove " + key);
}

absl::StatusOr<SnapshotInfo> SnapshotsClient::Stat(const std::string& key) {
  grpc::ClientContext ctx;
  impl_->Setup(ctx);
  snapshots::StatSnapshotRequest req;
  req.set_snapshotter(impl_->snapshotter);
  req.set_key(key);
  snapshots::StatSnapshotResponse resp;
  absl::Status s = FromGrpc(impl_->stub->Stat(&ctx, req, &resp), "Stat " + key);
  if (!s.ok()) return s;
  return FromProto(resp.info());
}

absl::StatusOr<std::vector<SnapshotInfo>> SnapshotsClient::List(
    const std::vector<std::string>& filters) {
  grpc::ClientContext ctx;
  impl_->Setup(ctx);
  snapshots::ListSnapshotsRequest req;
  req.set_snapshotter(impl_->snapshotter);
  for (const auto& f : filters) req.add_filters(f);
  auto reader = impl_->stub->List(&ctx, req);
  std::vector<SnapshotInfo> out;
  snapshots::ListSnapshotsResponse resp;
  while (reader->Read(&resp)) {
    for (const auto& info : resp.info()) out.push_back(FromProto(info));
  }
  absl::Status s = FromGrpc(reader->Finish(), "List");
  if (!s.ok()) return s;
  return out;
}

// ---------------------------------------------------------------------------------------------

absl::Status MountAll(const std::vector<SnapshotMount>& mounts, const std::string& target) {
  for (const auto& m : mounts) {
    unsigned long flags = 0;
    bool bind = m.type == "bind" || m.type == "rbind";
    std::vector<std::string> data;
    for (const auto& o : m.options) {
      if (o == "ro") {
        flags |= MS_RDONLY;
      } else if (o == "rw") {
      } else if (o == "bind") {
        flags |= MS_BIND;
        bind = true;
      } else if (o == "rbind") {
        flags |= MS_BIND | MS_REC;
        bind = true;
      } else if (o == "nosuid") {
        flags |= MS_NOSUID;
      } else if (o == "nodev") {
        flags |= MS_NODEV;
      } else if (o == "noexec") {
        flags |= MS_NOEXEC;
      } else {
        data.push_back(o);
      }
    }
    if (bind) flags |= MS_BIND;
    std::string joined = absl::StrJoin(data, ",");
    const char* type = bind ? nullptr : m.type.c_str();
    const unsigned long first_flags = bind ? (flags & ~MS_RDONLY) : flags;
    if (mount(m.source.c_str(), target.c_str(), type, first_flags,
              joined.empty() ? nullptr : joined.c_str()) != 0) {
      return absl::InternalError(absl::StrCat("mount type=", m.type, " source=", m.source,
                                              " options=", absl::StrJoin(m.options, ","), " on ",
                                              target, ": ", strerror(errno)));
    }
    // A bind mount ignores MS_RDONLY until remounted.
    if (bind && (flags & MS_RDONLY)) {
      if (mount(nullptr, target.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0) {
        int e = errno;
        umount2(target.c_str(), MNT_DETACH);
        return absl::InternalError(
            absl::StrCat("remount read-only ", target, " (bind of ", m.source, "): ", strerror(e)));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status UnmountAll(const std::string& target, bool lazy) {
  for (int i = 0; i < 16 && IsMounted(target); ++i) {
    if (umount2(target.c_str(), lazy ? MNT_DETACH : 0) != 0) {
      return absl::InternalError(absl::StrCat("umount ", target, ": ", strerror(errno)));
    }
  }
  return absl::OkStatus();
}

}  // namespace modelfs::testing
