#include "core/base/background_priority.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <thread>

namespace modelfs {

namespace {

// linux/ioprio.h, which glibc does not wrap.
constexpr int kIoprioWhoProcess = 1;
constexpr int kIoprioClassIdle = 3;
constexpr int kIoprioClassShift = 13;

}  // namespace

void RunAtBackgroundPriority(const std::function<void()>& work) {
  std::thread t([&work] {
    // On Linux both apply to the calling thread only (its tid), not to the process.
    const pid_t tid = static_cast<pid_t>(syscall(SYS_gettid));
    (void)setpriority(PRIO_PROCESS, static_cast<id_t>(tid), 19);
    (void)syscall(SYS_ioprio_set, kIoprioWhoProcess, tid, kIoprioClassIdle << kIoprioClassShift);
    work();
  });
  t.join();
}

}  // namespace modelfs
