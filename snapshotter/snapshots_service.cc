// gRPC glue for the snapshots service (see snapshots_service.h).
#include "snapshotter/snapshots_service.h"

#include <google/protobuf/util/time_util.h>

#include <string>
#include <vector>

namespace modelfs::snapshotter {
namespace v1 = containerd::services::snapshots::v1;
namespace {

Labels FromProto(const google::protobuf::Map<std::string, std::string>& m) {
  return Labels(m.begin(), m.end());
}

google::protobuf::Timestamp ToTimestamp(absl::Time t) {
  return google::protobuf::util::TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(t));
}

void ToProto(const SnapshotInfo& info, v1::Info* out) {
  out->set_name(info.name);
  out->set_parent(info.parent);
  out->set_kind(static_cast<v1::Kind>(static_cast<int>(info.kind)));
  *out->mutable_created_at() = ToTimestamp(info.created);
  *out->mutable_updated_at() = ToTimestamp(info.updated);
  out->mutable_labels()->insert(info.labels.begin(), info.labels.end());
}

template <typename Response>
grpc::Status FillMounts(const absl::StatusOr<std::vector<Mount>>& mounts, Response* response) {
  if (!mounts.ok()) return ToGrpcStatus(mounts.status());
  for (const Mount& m : *mounts) {
    containerd::types::Mount* pm = response->add_mounts();
    pm->set_type(m.type);
    pm->set_source(m.source);
    pm->set_target(m.target);
    for (const std::string& o : m.options) pm->add_options(o);
  }
  return grpc::Status::OK;
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(static_cast<int>(status.code())),
                      std::string(status.message()));
}

grpc::Status SnapshotsService::Logged(const char* method, const std::string& key,
                                      const std::string& parent, grpc::Status status) const {
  if (call_log_) {
    std::string line = std::string(method) + " key=\"" + key + "\"";
    if (!parent.empty()) line += " parent=\"" + parent + "\"";
    line += status.ok() ? std::string(" ok")
                        : " -> code " + std::to_string(static_cast<int>(status.error_code())) +
                              ": " + status.error_message();
    call_log_(line);
  }
  return status;
}

grpc::Status SnapshotsService::Prepare(Ctx*, const v1::PrepareSnapshotRequest* req,
                                       v1::PrepareSnapshotResponse* resp) {
  return Logged(
      "Prepare", req->key(), req->parent(),
      FillMounts(snapshotter_->Prepare(req->key(), req->parent(), FromProto(req->labels())), resp));
}

grpc::Status SnapshotsService::View(Ctx*, const v1::ViewSnapshotRequest* req,
                                    v1::ViewSnapshotResponse* resp) {
  return Logged(
      "View", req->key(), req->parent(),
      FillMounts(snapshotter_->View(req->key(), req->parent(), FromProto(req->labels())), resp));
}

grpc::Status SnapshotsService::Mounts(Ctx*, const v1::MountsRequest* req,
                                      v1::MountsResponse* resp) {
  return Logged("Mounts", req->key(), "", FillMounts(snapshotter_->Mounts(req->key()), resp));
}

grpc::Status SnapshotsService::Commit(Ctx*, const v1::CommitSnapshotRequest* req,
                                      google::protobuf::Empty*) {
  return Logged(
      "Commit", req->key(), "",
      ToGrpcStatus(snapshotter_->Commit(req->name(), req->key(), FromProto(req->labels()))));
}

grpc::Status SnapshotsService::Remove(Ctx*, const v1::RemoveSnapshotRequest* req,
                                      google::protobuf::Empty*) {
  return Logged("Remove", req->key(), "", ToGrpcStatus(snapshotter_->Remove(req->key())));
}

grpc::Status SnapshotsService::Stat(Ctx*, const v1::StatSnapshotRequest* req,
                                    v1::StatSnapshotResponse* resp) {
  absl::StatusOr<SnapshotInfo> info = snapshotter_->Stat(req->key());
  if (!info.ok()) return ToGrpcStatus(info.status());
  ToProto(*info, resp->mutable_info());
  return grpc::Status::OK;
}

grpc::Status SnapshotsService::Update(Ctx*, const v1::UpdateSnapshotRequest* req,
                                      v1::UpdateSnapshotResponse* resp) {
  SnapshotInfo info;
  info.name = req->info().name();
  info.labels = FromProto(req->info().labels());
  std::vector<std::string> paths(req->update_mask().paths().begin(),
                                 req->update_mask().paths().end());
  absl::StatusOr<SnapshotInfo> updated = snapshotter_->Update(info, paths);
  if (!updated.ok()) return ToGrpcStatus(updated.status());
  ToProto(*updated, resp->mutable_info());
  return grpc::Status::OK;
}

grpc::Status SnapshotsService::List(Ctx*, const v1::ListSnapshotsRequest* req,
                                    grpc::ServerWriter<v1::ListSnapshotsResponse>* writer) {
  std::vector<std::string> filters(req->filters().begin(), req->filters().end());
  v1::ListSnapshotsResponse batch;
  auto flush = [&]() -> absl::Status {
    if (batch.info_size() == 0) return absl::OkStatus();
    if (!writer->Write(batch)) return absl::CancelledError("list: client went away");
    batch.Clear();
    return absl::OkStatus();
  };
  absl::Status st = snapshotter_->Walk(filters, [&](const SnapshotInfo& info) -> absl::Status {
    ToProto(info, batch.add_info());
    if (batch.info_size() >= list_batch_) return flush();
    return absl::OkStatus();
  });
  if (st.ok()) st = flush();
  return ToGrpcStatus(st);
}

grpc::Status SnapshotsService::Usage(Ctx*, const v1::UsageRequest* req, v1::UsageResponse* resp) {
  absl::StatusOr<snapshotter::Usage> usage = snapshotter_->GetUsage(req->key());
  if (!usage.ok()) return ToGrpcStatus(usage.status());
  resp->set_size(usage->size);
  resp->set_inodes(usage->inodes);
  return grpc::Status::OK;
}

grpc::Status SnapshotsService::Cleanup(Ctx*, const v1::CleanupRequest*, google::protobuf::Empty*) {
  return ToGrpcStatus(snapshotter_->Cleanup());
}

}  // namespace modelfs::snapshotter
