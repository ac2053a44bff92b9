// Must NOT compile with the project's warning flags: it reads a guarded member without its
// mutex. The ctest thread_safety_is_checked passes only when the compiler refuses this file,
// which proves -Wthread-safety is on and an error for our code: the lock annotations are only
// worth writing while the compiler checks them.
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

class Counter {
 public:
  int Get() const { return value_; }  // the violation: no lock held

 private:
  mutable absl::Mutex mu_;
  int value_ ABSL_GUARDED_BY(mu_) = 0;
};

int main() { return Counter().Get(); }
