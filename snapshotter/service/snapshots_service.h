// SnapshotsService: the containerd.services.snapshots.v1.Snapshots gRPC service (what a
// containerd proxy plugin talks to) over a Snapshotter. The only place where
// absl::Status becomes grpc::Status (ToGrpcStatus).
//
// Thread-safety: gRPC calls handlers concurrently; the snapshotter is thread-safe and the
// service holds no other state.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "containerd/services/snapshots/v1/snapshots.grpc.pb.h"
#include "snapshotter/store/snapshotter.h"

namespace modelfs::snapshotter {

// Maps canonical codes one to one (they are the gRPC codes) and keeps the message.
grpc::Status ToGrpcStatus(const absl::Status& status);

class SnapshotsService final : public containerd::services::snapshots::v1::Snapshots::Service {
 public:
  // `snapshotter` must outlive the service. List streams at most `list_batch` infos per message.
  explicit SnapshotsService(Snapshotter* snapshotter, int list_batch = 100)
      : snapshotter_(snapshotter), list_batch_(list_batch) {}

  // Receives one line per call of every method when set (the daemon's --log-level debug): the
  // method, its arguments and labels, and the outcome. Every string from the caller is quoted
  // with control characters escaped, so a key holding a newline cannot forge a log line. Set
  // before serving.
  void set_call_log(std::function<void(const std::string&)> log) { call_log_ = std::move(log); }

  using Ctx = grpc::ServerContext;
  grpc::Status Prepare(Ctx*, const containerd::services::snapshots::v1::PrepareSnapshotRequest*,
                       containerd::services::snapshots::v1::PrepareSnapshotResponse*) override;
  grpc::Status View(Ctx*, const containerd::services::snapshots::v1::ViewSnapshotRequest*,
                    containerd::services::snapshots::v1::ViewSnapshotResponse*) override;
  grpc::Status Mounts(Ctx*, const containerd::services::snapshots::v1::MountsRequest*,
                      containerd::services::snapshots::v1::MountsResponse*) override;
  grpc::Status Commit(Ctx*, const containerd::services::snapshots::v1::CommitSnapshotRequest*,
                      google::protobuf::Empty*) override;
  grpc::Status Remove(Ctx*, const containerd::services::snapshots::v1::RemoveSnapshotRequest*,
                      google::protobuf::Empty*) override;
  grpc::Status Stat(Ctx*, const containerd::services::snapshots::v1::StatSnapshotRequest*,
                    containerd::services::snapshots::v1::StatSnapshotResponse*) override;
  grpc::Status Update(Ctx*, const containerd::services::snapshots::v1::UpdateSnapshotRequest*,
                      containerd::services::snapshots::v1::UpdateSnapshotResponse*) override;
  grpc::Status List(
      Ctx*, const containerd::services::snapshots::v1::ListSnapshotsRequest*,
      grpc::ServerWriter<containerd::services::snapshots::v1::ListSnapshotsResponse>*) override;
  grpc::Status Usage(Ctx*, const containerd::services::snapshots::v1::UsageRequest*,
                     containerd::services::snapshots::v1::UsageResponse*) override;
  grpc::Status Cleanup(Ctx*, const containerd::services::snapshots::v1::CleanupRequest*,
                       google::protobuf::Empty*) override;

 private:
  // Logs `method` with the arguments `describe` renders (only called when logging) and the
  // outcome; returns `status`.
  grpc::Status Logged(const char* method, const std::function<std::string()>& describe,
                      grpc::Status status) const;

  Snapshotter* snapshotter_;
  int list_batch_;
  std::function<void(const std::string&)> call_log_;
};

}  // namespace modelfs::snapshotter
