// gRPC glue for the snapshots service (see snapshots_service.h).
#include "snapshotter/service/snapshots_service.h"

#include <google/protobuf/util/time_util.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "core/text/escape.h"

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

// A caller's string in a log line: quoted, escaped as EscapeUntrusted does (so it holds no
// control character), and its quotes escaped too (after the backslashes, so it stays
// unambiguous).
std::string Quoted(absl::string_view s) {
  return absl::StrCat(
      "\"",
      absl::StrReplaceAll(EscapeUntrusted(std::string_view(s.data(), s.size())), {{"\"", "\\\""}}),
      "\"");
}

// key="..." parent="..." labels={"k"="v", ...}; empty arguments are left out.
std::string Args(std::initializer_list<std::pair<const char*, absl::string_view>> fields,
                 const google::protobuf::Map<std::string, std::string>* labels = nullptr) {
  std::string out;
  for (const auto& [name, value] : fields) {
    if (value.empty()) continue;
    absl::StrAppend(&out, out.empty() ? "" : " ", name, "=", Quoted(value));
  }
  if (labels != nullptr && !labels->empty()) {
    const std::map<std::string, std::string> sorted(labels->begin(), labels->end());
    absl::StrAppend(&out, out.empty() ? "" : " ", "labels={",
                    absl::StrJoin(sorted, ", ",
                                  [](std::string* o, const auto& kv) {
                                    absl::StrAppend(o, Quoted(kv.first), "=", Quoted(kv.second));
                                  }),
                    "}");
  }
  return out;
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

grpc::Status SnapshotsService::Logged(const char* method,
                                      const std::function<std::string()>& describe,
                                      grpc::Status status) const {
  if (call_log_) {
    std::string args = describe();
    call_log_(absl::StrCat(method, args.empty() ? "" : " ", args,
                           status.ok() ? " ok"
                                       : absl::StrCat(" -> code ", status.error_code(), ": ",
                                                      Quoted(status.error_message()))));
  }
  return status;
}

grpc::Status SnapshotsService::Prepare(Ctx*, const v1::PrepareSnapshotRequest* req,
                                       v1::PrepareSnapshotResponse* resp) {
  return Logged(
      "Prepare",
      [&] {
        return Args({{"key", req->key()}, {"parent", req->parent()}}, &req->labels());
      },
      FillMounts(snapshotter_->Prepare(req->key(), req->parent(), FromProto(req->labels())), resp));
}

grpc::Status SnapshotsService::View(Ctx*, const v1::ViewSnapshotRequest* req,
                                    v1::ViewSnapshotResponse* resp) {
  return Logged(
      "View",
      [&] {
        return Args({{"key", req->key()}, {"parent", req->parent()}}, &req->labels());
      },
      FillMounts(snapshotter_->View(req->key(), req->parent(), FromProto(req->labels())), resp));
}

grpc::Status SnapshotsService::Mounts(Ctx*, const v1::MountsRequest* req,
                                      v1::MountsResponse* resp) {
  return Logged(
      "Mounts",
      [&] {
        return Args({{"key", req->key()}});
      },
      FillMounts(snapshotter_->Mounts(req->key()), resp));
}

grpc::Status SnapshotsService::Commit(Ctx*, const v1::CommitSnapshotRequest* req,
                                      google::protobuf::Empty*) {
  return Logged(
      "Commit",
      [&] {
        return Args({{"name", req->name()}, {"key", req->key()}}, &req->labels());
      },
      ToGrpcStatus(snapshotter_->Commit(req->name(), req->key(), FromProto(req->labels()))));
}

grpc::Status SnapshotsService::Remove(Ctx*, const v1::RemoveSnapshotRequest* req,
                                      google::protobuf::Empty*) {
  return Logged(
      "Remove",
      [&] {
        return Args({{"key", req->key()}});
      },
      ToGrpcStatus(snapshotter_->Remove(req->key())));
}

grpc::Status SnapshotsService::Stat(Ctx*, const v1::StatSnapshotRequest* req,
                                    v1::StatSnapshotResponse* resp) {
  absl::StatusOr<SnapshotInfo> info = snapshotter_->Stat(req->key());
  if (info.ok()) ToProto(*info, resp->mutable_info());
  return Logged(
      "Stat",
      [&] {
        return Args({{"key", req->key()}});
      },
      ToGrpcStatus(info.status()));
}

grpc::Status SnapshotsService::Update(Ctx*, const v1::UpdateSnapshotRequest* req,
                                      v1::UpdateSnapshotResponse* resp) {
  SnapshotInfo info;
  info.name = req->info().name();
  info.labels = FromProto(req->info().labels());
  std::vector<std::string> paths(req->update_mask().paths().begin(),
                                 req->update_mask().paths().end());
  absl::StatusOr<SnapshotInfo> updated = snapshotter_->Update(info, paths);
  if (updated.ok()) ToProto(*updated, resp->mutable_info());
  return Logged(
      "Update",
      [&] {
        return Args({{"name", req->info().name()}, {"paths", absl::StrJoin(paths, ",")}},
                    &req->info().labels());
      },
      ToGrpcStatus(updated.status()));
}

grpc::Status SnapshotsService::List(Ctx*, const v1::ListSnapshotsRequest* req,
                                    grpc::ServerWriter<v1::ListSnapshotsResponse>* writer) {
  std::vector<std::string> filters(req->filters().begin(), req->filters().end());
  v1::ListSnapshotsResponse batch;
  int listed = 0;
  auto flush = [&]() -> absl::Status {
    if (batch.info_size() == 0) return absl::OkStatus();
    if (!writer->Write(batch)) return absl::CancelledError("list: client went away");
    batch.Clear();
    return absl::OkStatus();
  };
  absl::Status st = snapshotter_->Walk(filters, [&](const SnapshotInfo& info) -> absl::Status {
    ToProto(info, batch.add_info());
    ++listed;
    if (batch.info_size() >= list_batch_) return flush();
    return absl::OkStatus();
  });
  if (st.ok()) st = flush();
  return Logged(
      "List",
      [&] {
        return absl::StrCat(Args({{"filters", absl::StrJoin(filters, " ")}}),
                            filters.empty() ? "" : " ", listed, " snapshots");
      },
      ToGrpcStatus(st));
}

grpc::Status SnapshotsService::Usage(Ctx*, const v1::UsageRequest* req, v1::UsageResponse* resp) {
  absl::StatusOr<snapshotter::Usage> usage = snapshotter_->GetUsage(req->key());
  if (usage.ok()) {
    resp->set_size(usage->size);
    resp->set_inodes(usage->inodes);
  }
  return Logged(
      "Usage",
      [&] {
        return Args({{"key", req->key()}});
      },
      ToGrpcStatus(usage.status()));
}

grpc::Status SnapshotsService::Cleanup(Ctx*, const v1::CleanupRequest*, google::protobuf::Empty*) {
  return Logged(
      "Cleanup", [] { return std::string(); }, ToGrpcStatus(snapshotter_->Cleanup()));
}

}  // namespace modelfs::snapshotter
