// InheritedListener: serves a gRPC server on a listening unix socket that the daemon did not
// create, such as the one systemd's modelfs-snapshotter.socket holds (socket activation).
// systemd keeps the socket open while the daemon restarts, so containerd's connection attempts
// queue in the kernel's backlog instead of failing, and the next process accepts them.
//
// gRPC 1.51 cannot take over a listening fd, so each accepted connection is handed to the
// server with grpc::AddInsecureChannelFromFd, which serves one connected socket.
//
// Thread safety: Start and the destructor on one thread; the accept loop runs on its own.
#pragma once

#include <memory>
#include <thread>

#include "absl/status/statusor.h"

namespace grpc {
class Server;
}

namespace modelfs::snapshotter {

class InheritedListener {
 public:
  // Accepts connections on `listen_fd` (a listening SOCK_STREAM socket) for `server`, which
  // must be started and outlive the listener. Takes ownership of `listen_fd` (closing it does
  // not close systemd's copy). Errors: kInvalidArgument (not a listening stream socket),
  // kInternal (pipe).
  static absl::StatusOr<std::unique_ptr<InheritedListener>> Start(int listen_fd,
                                                                  grpc::Server* server);
  // Stops accepting; connections not yet accepted stay queued for the next process.
  ~InheritedListener();
  InheritedListener(const InheritedListener&) = delete;
  InheritedListener& operator=(const InheritedListener&) = delete;

 private:
  InheritedListener(int listen_fd, int stop_read, int stop_write, grpc::Server* server);
  void AcceptLoop();

  const int listen_fd_;
  const int stop_read_;
  const int stop_write_;
  grpc::Server* const server_;
  std::thread thread_;
};

// Whether `fd` is a listening unix stream socket (what a socket unit passes).
bool IsListeningUnixSocket(int fd);

}  // namespace modelfs::snapshotter
