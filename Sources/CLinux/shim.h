// Linux interfaces Swift's Glibc module leaves out: epoll and eventfd for the
// server's accepting thread (VarlinkNIO's FrontLoop), and accept4, which
// glibc declares only under _GNU_SOURCE.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

int accept4(int fd, struct sockaddr *address, socklen_t *length, int flags);
