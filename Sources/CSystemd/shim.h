/* The C library comes from Swift's own module of it, not textually from here: otherwise, in a
   whole-module build of a program that imports both (tokenctl, release), the socket and errno
   declarations would belong to this module, and files importing only Glibc would not see them. */
#pragma clang module import SwiftGlibc
#include <systemd/sd-bus.h>
#include <systemd/sd-daemon.h>
#include <systemd/sd-journal.h>
#include <sys/uio.h>
#include <sys/prctl.h>
#include <sys/resource.h>

/* prctl(2) is variadic, which Swift cannot call. */
static inline int tokend_set_dumpable(int dumpable) {
    return prctl(PR_SET_DUMPABLE, dumpable, 0, 0, 0);
}
