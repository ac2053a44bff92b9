#!/usr/bin/env python3
"""A stand-in for systemd's service manager, for tests of daemon restarts without systemd.

Runs COMMAND with NOTIFY_SOCKET set, and implements the parts of sd_notify(3) a restart test
needs: READY=1 (writes STATE_DIR/ready with the daemon's pid), FDSTORE=1 with FDNAME= (keeps the
passed file descriptors, as FileDescriptorStoreMax= does) and STOPPING=1. On SIGUSR1 it kills the
daemon with SIGKILL (a crash), on SIGUSR2 it stops it with SIGTERM (a restart), and either way
starts it again with the stored fds passed back as LISTEN_FDS, LISTEN_FDNAMES and LISTEN_PID, as
systemd does. On SIGTERM it stops the daemon with SIGTERM and exits.

With --listen PATH it also holds a listening unix socket at PATH, as a socket unit does, and
passes it to every daemon it starts (LISTEN_FDNAMES "snapshotter.socket"): connections made
while the daemon restarts wait in the socket's queue.

Usage: fd_store_supervisor.py [--listen PATH] STATE_DIR COMMAND [ARGS...]
"""
import os
import signal
import socket
import sys
import threading
import time

args = sys.argv[1:]
listener = None
if args[:1] == ["--listen"]:
    listen_path = args[1]
    args = args[2:]
    if os.path.exists(listen_path):
        os.unlink(listen_path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(listen_path)
    os.chmod(listen_path, 0o600)
    listener.listen(1024)
state_dir = args[0]
command = args[1:]
os.makedirs(state_dir, exist_ok=True)
notify_path = os.path.join(state_dir, "notify.sock")
if os.path.exists(notify_path):
    os.unlink(notify_path)
notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
notify.bind(notify_path)

lock = threading.RLock()
stored = {}  # name -> fd
child = None
generation = 0


def log(msg):
    sys.stderr.write(f"fd_store_supervisor: {msg}\n")
    sys.stderr.flush()


def spawn():
    global child, generation
    generation += 1
    names = sorted(stored)
    fds = [stored[n] for n in names]
    if listener is not None:
        names.append("snapshotter.socket")
        fds.append(listener.fileno())
    pid = os.fork()
    if pid == 0:
        env = dict(os.environ)
        env["NOTIFY_SOCKET"] = notify_path
        # The passed fds go to 3, 4, ... as sd_listen_fds(3) expects.
        tmp = [os.dup(fd) for fd in fds]
        for i, fd in enumerate(tmp):
            os.dup2(fd, 3 + i, inheritable=True)
        if fds:
            env["LISTEN_FDS"] = str(len(fds))
            env["LISTEN_FDNAMES"] = ":".join(names)
            env["LISTEN_PID"] = str(os.getpid())
        os.execvpe(command[0], command, env)
    child = pid
    log(f"started generation {generation}: pid {pid}, passing {names}")


def receive():
    while True:
        msg, ancdata, _flags, _addr = notify.recvmsg(4096, socket.CMSG_SPACE(16 * 4))
        fds = []
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                n = len(data) // 4
                fds.extend(int.from_bytes(data[i * 4:i * 4 + 4], sys.byteorder) for i in range(n))
        fields = dict(line.split("=", 1) for line in msg.decode().splitlines() if "=" in line)
        with lock:
            if fields.get("FDSTORE") == "1" and fds:
                name = fields.get("FDNAME", "stored")
                old = stored.get(name)
                stored[name] = fds[0]
                if old is not None and old != fds[0]:
                    os.close(old)
                for extra in fds[1:]:
                    os.close(extra)
                log(f"stored fd for {name}")
            else:
                for fd in fds:
                    os.close(fd)
            if fields.get("READY") == "1":
                tmp = os.path.join(state_dir, "ready.tmp")
                with open(tmp, "w") as f:
                    f.write(f"{child} {generation}\n")
                os.replace(tmp, os.path.join(state_dir, "ready"))


def restart(sig, _frame):
    with lock:
        try:
            os.unlink(os.path.join(state_dir, "ready"))
        except FileNotFoundError:
            pass
        kind = signal.SIGKILL if sig == signal.SIGUSR1 else signal.SIGTERM
        os.kill(child, kind)
        _, status = os.waitpid(child, 0)
        log(f"stopped the daemon with {signal.Signals(kind).name} (status {status})")
        spawn()


def stop(_sig, _frame):
    with lock:
        os.kill(child, signal.SIGTERM)
        deadline = time.time() + 20
        while time.time() < deadline:
            pid, _ = os.waitpid(child, os.WNOHANG)
            if pid:
                break
            time.sleep(0.05)
        else:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
        for fd in stored.values():
            os.close(fd)
    os._exit(0)


threading.Thread(target=receive, daemon=True).start()
signal.signal(signal.SIGUSR1, restart)
signal.signal(signal.SIGUSR2, restart)
signal.signal(signal.SIGTERM, stop)
with lock:
    spawn()
while True:
    # Reap a daemon that exits on its own; the supervisor then exits with its status.
    time.sleep(0.2)
    with lock:
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid:
            log(f"daemon exited with status {status}")
            os._exit(1)
