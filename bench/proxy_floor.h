// What bench/proxy_floor.swift needs from C that Glibc does not bring: epoll.
#include <sys/epoll.h>
