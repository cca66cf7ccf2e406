/* The physical limit for tokend's socket API: a minimal epoll server on a
 * Unix stream socket that answers every NUL-terminated request with a canned
 * reply of a given size (GetToken's), doing no other work.
 *
 * A connection whose request has "more":true is a subscriber: on SIGUSR1
 * the server writes one event frame (a refresh's, of the same size) to every
 * subscriber, the floor for tokend's fan-out of one refresh.
 *
 *   limit_server PATH REPLY_BYTES
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_CONNS 65536

struct conn {
    char *out;        /* pending reply bytes */
    size_t out_len, out_cap;
    int want_out;     /* registered for EPOLLOUT */
    int subscriber;
};

static struct conn conns[MAX_CONNS];
static char *reply;
static size_t reply_len;
static char *event_frame;
static volatile sig_atomic_t fire;

static void on_usr1(int signal) {
    (void)signal;
    fire = 1;
}

static void queue_replies(struct conn *c, int count) {
    size_t need = c->out_len + (size_t)count * reply_len;
    if (need > c->out_cap) {
        c->out_cap = need * 2;
        c->out = realloc(c->out, c->out_cap);
    }
    for (int i = 0; i < count; i++) {
        memcpy(c->out + c->out_len, reply, reply_len);
        c->out_len += reply_len;
    }
}

static int flush_out(int fd, struct conn *c) {
    while (c->out_len > 0) {
        ssize_t n = write(fd, c->out, c->out_len);
        if (n < 0) return errno == EAGAIN ? 1 : -1;
        memmove(c->out, c->out + n, c->out_len - (size_t)n);
        c->out_len -= (size_t)n;
    }
    return 0;
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    if (argc != 3) {
        fprintf(stderr, "usage: limit_server PATH REPLY_BYTES\n");
        return 64;
    }
    reply_len = (size_t)atoi(argv[2]);
    reply = malloc(reply_len);
    /* A JSON-looking reply of the requested size, NUL-terminated. */
    memset(reply, 'x', reply_len);
    memcpy(reply, "{\"parameters\":{\"pad\":\"", 22);
    memcpy(reply + reply_len - 4, "\"}}", 3);
    reply[reply_len - 1] = 0;
    event_frame = malloc(reply_len);
    memset(event_frame, 'x', reply_len);
    const char *event_start = "{\"parameters\":{\"event\":\"refreshed\",\"pad\":\"";
    memcpy(event_frame, event_start, strlen(event_start));
    memcpy(event_frame + reply_len - 4, "\"}}", 3);
    event_frame[reply_len - 1] = 0;
    struct sigaction action = {.sa_handler = on_usr1};
    sigaction(SIGUSR1, &action, NULL);

    int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    strncpy(address.sun_path, argv[1], sizeof address.sun_path - 1);
    unlink(argv[1]);
    if (bind(listener, (struct sockaddr *)&address, sizeof address) < 0 || listen(listener, 4096) < 0) {
        perror("bind/listen");
        return 1;
    }
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event event = {.events = EPOLLIN, .data.fd = listener};
    epoll_ctl(ep, EPOLL_CTL_ADD, listener, &event);
    printf("ready\n");
    fflush(stdout);
    static struct epoll_event events[1024];
    static char buffer[65536];
    for (;;) {
        int n = epoll_wait(ep, events, 1024, -1);
        if (fire) {
            fire = 0;
            for (int fd = 0; fd < MAX_CONNS; fd++) {
                if (!conns[fd].subscriber) continue;
                if (write(fd, event_frame, reply_len) < 0 && errno != EAGAIN) conns[fd].subscriber = 0;
            }
        }
        for (int i = 0; i < n; i++) {
            int fd = events[i].data.fd;
            if (fd == listener) {
                int client;
                while ((client = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    if (client >= MAX_CONNS) { close(client); continue; }
                    struct epoll_event e = {.events = EPOLLIN, .data.fd = client};
                    epoll_ctl(ep, EPOLL_CTL_ADD, client, &e);
                }
                continue;
            }
            struct conn *c = &conns[fd];
            if (events[i].events & EPOLLIN) {
                ssize_t got = read(fd, buffer, sizeof buffer);
                if (got <= 0) {
                    if (got < 0 && errno == EAGAIN) continue;
                    epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
                    close(fd);
                    c->out_len = 0;
                    c->subscriber = 0;
                    continue;
                }
                if (memmem(buffer, (size_t)got, "\"more\":true", 11)) c->subscriber = 1;
                int requests = 0;
                for (char *p = buffer; (p = memchr(p, 0, (size_t)(buffer + got - p))) != NULL; p++) requests++;
                queue_replies(c, requests);
            }
            int state = flush_out(fd, c);
            if (state < 0) {
                epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
                close(fd);
                c->out_len = 0;
                c->want_out = 0;
            } else if ((state == 1) != c->want_out) {
                c->want_out = state == 1;
                struct epoll_event e = {.events = EPOLLIN | (c->want_out ? EPOLLOUT : 0), .data.fd = fd};
                epoll_ctl(ep, EPOLL_CTL_MOD, fd, &e);
            }
        }
    }
}
