// Serving one FUSE connection across a restart of the serving process. The kernel keeps a
// connection, its mount and every inode and open file on it alive for as long as some process
// holds the /dev/fuse file open (systemd's fd store keeps a duplicate). A successor then serves
// the same connection (FuseMount::Adopt) without the kernel's help, because the kernel sends
// FUSE_INIT only once per connection and knows nothing of the new process:
//  - a synthetic FUSE_INIT primes libfuse (InjectSyntheticInit, also used after Mount, where
//    the real INIT is answered by FuseMount itself);
//  - FUSE_NOTIFY_RESEND asks the kernel to queue again the requests the predecessor took but
//    did not answer;
//  - the open-files table the predecessor kept in its state file (OpenFiles::Inherit,
//    passthrough.h) carries each open handle's I/O mode and backing id over.
// FuseMount::Detach is the other half: stop serving without unmounting or aborting.
// Not for use outside fuse/.
#pragma once

struct fuse_session;

namespace modelfs::fuse_internal {

// Feeds libfuse a FUSE_INIT the kernel never sent, so that it serves a connection whose INIT it
// did not see. The outcome shows in the session (exited) and in whether OpInit ran.
void InjectSyntheticInit(fuse_session* se);

}  // namespace modelfs::fuse_internal
