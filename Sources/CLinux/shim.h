// Linux interfaces Swift's Glibc module leaves out: epoll and eventfd for the
// server loop, accept4 (declared by glibc only under _GNU_SOURCE), and
// malloc_trim, which hands memory freed after a burst back to the system.
#include <malloc.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

int accept4(int fd, struct sockaddr *address, socklen_t *length, int flags);
