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
