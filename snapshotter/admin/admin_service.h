// The daemon's admin service, modelfs.admin.v1.Admin (proto/modelfs/admin/v1/admin.proto), over
// a NodeAdmin (ModelSnapshotter), and the root-only unix socket it is served on
// (docs/snapshotter.md, "Admin socket"). `modelfs node` is its client.
//
// Thread-safety: the service's methods run on gRPC's threads, concurrently; NodeAdmin is
// thread-safe. AdminServer is started and stopped by one owner.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "modelfs/admin/v1/admin.grpc.pb.h"
#include "snapshotter/model/node_status.h"

namespace modelfs::snapshotter {

// NodeStatus and the others as their messages (what List, Prefetch and Evict answer).
void ToProto(const NodeStatus& status, modelfs::admin::v1::ListResponse* out);
void ToProto(const PrefetchProgress& progress, modelfs::admin::v1::PrefetchProgress* out);
void ToProto(const EvictOutcome& outcome, modelfs::admin::v1::EvictResponse* out);

class AdminService final : public modelfs::admin::v1::Admin::Service {
 public:
  // `node` must outlive the service.
  explicit AdminService(NodeAdmin* node) : node_(node) {}

  grpc::Status List(grpc::ServerContext* context, const modelfs::admin::v1::ListRequest* request,
                    modelfs::admin::v1::ListResponse* response) override;
  // Progress at most every 250 ms; the call ends when the model is sealed (OK), with the
  // prefetch's error, or CANCELLED when the client goes away (the fetch goes on).
  grpc::Status Prefetch(grpc::ServerContext* context,
                        const modelfs::admin::v1::PrefetchRequest* request,
                        grpc::ServerWriter<modelfs::admin::v1::PrefetchProgress>* writer) override;
  grpc::Status Evict(grpc::ServerContext* context, const modelfs::admin::v1::EvictRequest* request,
                     modelfs::admin::v1::EvictResponse* response) override;

 private:
  NodeAdmin* const node_;
};

// The admin service listening on unix socket `path`: its directory is created mode 0700 when
// missing, a socket left at the path by an earlier process is replaced, and the socket is
// made mode 0600 (only root, the daemon's user, may connect: the service can make the node
// fetch and drop models). Errors: kInvalidArgument when `path` exists and is not a socket
// (the daemon refuses to start rather than remove a file it did not make), or is too long for
// a unix socket; kUnavailable when the server cannot listen.
// The checks Start makes before it listens: OK when `path` is absolute, fits a unix socket
// address, and is absent or a socket. For the daemon to refuse a bad path before it mounts.
absl::Status CheckAdminSocketPath(const std::string& path);

class AdminServer {
 public:
  static absl::StatusOr<std::unique_ptr<AdminServer>> Start(const std::string& path,
                                                            NodeAdmin* node);
  // Stops serving (calls in progress get a second) and removes the socket.
  ~AdminServer();
  const std::string& path() const { return path_; }

 private:
  AdminServer(std::string path, NodeAdmin* node) : path_(std::move(path)), service_(node) {}
  const std::string path_;
  AdminService service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace modelfs::snapshotter
