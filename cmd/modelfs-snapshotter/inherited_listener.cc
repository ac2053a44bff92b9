// Accepting on an inherited listening socket (see inherited_listener.h).
#include "cmd/modelfs-snapshotter/inherited_listener.h"

#include <errno.h>
#include <fcntl.h>
#include <grpcpp/server.h>
#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace modelfs::snapshotter {

bool IsListeningUnixSocket(int fd) {
  int type = 0;
  int listening = 0;
  sockaddr_storage addr{};
  socklen_t len = sizeof(type);
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) return false;
  len = sizeof(listening);
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) {
    return false;
  }
  len = sizeof(addr);
  return ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 &&
         addr.ss_family == AF_UNIX;
}

absl::StatusOr<std::unique_ptr<InheritedListener>> InheritedListener::Start(int listen_fd,
                                                                            grpc::Server* server) {
  if (!IsListeningUnixSocket(listen_fd)) {
    return absl::InvalidArgumentError(
        absl::StrCat("fd ", listen_fd, " is not a listening unix stream socket"));
  }
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  ::fcntl(listen_fd, F_SETFD, FD_CLOEXEC);
  std::unique_ptr<InheritedListener> l(
      new InheritedListener(listen_fd, pipe_fds[0], pipe_fds[1], server));
  l->thread_ = std::thread([raw = l.get()] { raw->AcceptLoop(); });
  return l;
}

InheritedListener::InheritedListener(int listen_fd, int stop_read, int stop_write,
                                     grpc::Server* server)
    : listen_fd_(listen_fd), stop_read_(stop_read), stop_write_(stop_write), server_(server) {}

InheritedListener::~InheritedListener() {
  char b = 1;
  (void)!::write(stop_write_, &b, 1);
  if (thread_.joinable()) thread_.join();
  ::close(stop_read_);
  ::close(stop_write_);
  ::close(listen_fd_);
}

void InheritedListener::AcceptLoop() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_read_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      fprintf(stderr, "modelfs-snapshotter: poll on the inherited socket: %s\n", strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    // gRPC's endpoints are non-blocking.
    int conn = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (conn < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      fprintf(stderr, "modelfs-snapshotter: accept on the inherited socket: %s\n", strerror(errno));
      // EMFILE and the like pass; do not spin on them.
      ::poll(nullptr, 0, 100);
      continue;
    }
    grpc::AddInsecureChannelFromFd(server_, conn);
  }
}

}  // namespace modelfs::snapshotter
