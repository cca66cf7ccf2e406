/* Load client for tokend and the limit server (and, in oneshot mode, for
 * oidc-agent). No allocation per request.
 *
 *   load latency    PATH COUNT REQUEST          sequential round trips on one connection
 *   load throughput PATH CONNS DEPTH SECONDS REQUEST
 *                                               DEPTH calls in flight per connection
 *   load burst      PATH CLIENTS REQUEST        connect all, one call each at once, then again (cached)
 *   load oneshot    PATH COUNT CONNS REQUEST    one plain-JSON request per connection, no framing
 *                                               (oidc-agent's protocol), CONNS client threads
 *   load hold       PATH N REQUEST MARK         hold N connections (REQUEST "-": idle ones), see hold()
 *
 * REQUEST is sent with a NUL terminator (except in oneshot mode). Results are
 * printed as one JSON object.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int connect_to(const char *path) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    strncpy(address.sun_path, path, sizeof address.sun_path - 1);
    if (connect(fd, (struct sockaddr *)&address, sizeof address) < 0) {
        perror("connect");
        exit(2);
    }
    return fd;
}

static void raise_fd_limit(void) {
    struct rlimit limit;
    getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void print_percentiles(const char *mode, double *samples, long n, const char *extra) {
    qsort(samples, (size_t)n, sizeof *samples, compare);
    printf("{\"mode\":\"%s\",\"count\":%ld,\"p50_us\":%.1f,\"p90_us\":%.1f,\"p99_us\":%.1f,\"max_us\":%.1f%s}\n", mode, n,
           samples[n / 2] * 1e6, samples[n * 9 / 10] * 1e6, samples[n * 99 / 100] * 1e6, samples[n - 1] * 1e6, extra);
}

/* Reads until `count` NUL-terminated replies have arrived; returns bytes of the last reply seen. */
static int read_replies(int fd, int count, char *buffer, size_t size) {
    while (count > 0) {
        ssize_t got = read(fd, buffer, size);
        if (got <= 0) return -1;
        for (char *p = buffer; (p = memchr(p, 0, (size_t)(buffer + got - p))) != NULL; p++) count--;
    }
    return 0;
}

static int latency(const char *path, long count, const char *request) {
    int fd = connect_to(path);
    size_t len = strlen(request) + 1;
    double *samples = malloc(sizeof(double) * (size_t)count);
    static char buffer[65536];
    for (long i = 0; i < count + count / 10; i++) { /* the first tenth warms up */
        double t0 = now();
        if (write(fd, request, len) != (ssize_t)len || read_replies(fd, 1, buffer, sizeof buffer) < 0) {
            fprintf(stderr, "connection failed\n");
            return 1;
        }
        if (i >= count / 10) samples[i - count / 10] = now() - t0;
    }
    print_percentiles("latency", samples, count, "");
    return 0;
}

static int throughput(const char *path, int conns, int depth, double seconds, const char *request) {
    raise_fd_limit();
    size_t len = strlen(request) + 1;
    char *batch = malloc(len * (size_t)depth);
    for (int i = 0; i < depth; i++) memcpy(batch + i * len, request, len);
    int ep = epoll_create1(0);
    int *fds = malloc(sizeof(int) * (size_t)conns);
    for (int i = 0; i < conns; i++) {
        fds[i] = connect_to(path);
        struct epoll_event e = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &e);
        if (write(fds[i], batch, len * (size_t)depth) < 0) return 1;
    }
    static char buffer[262144];
    static struct epoll_event events[4096];
    long done = 0, counted = 0;
    double start = now(), warm = start + seconds * 0.2, end = warm + seconds;
    int warmed = 0;
    while (now() < end) {
        int n = epoll_wait(ep, events, 4096, 100);
        for (int i = 0; i < n; i++) {
            int fd = fds[events[i].data.u32];
            ssize_t got = read(fd, buffer, sizeof buffer);
            if (got <= 0) { fprintf(stderr, "connection closed\n"); return 1; }
            int replies = 0;
            for (char *p = buffer; (p = memchr(p, 0, (size_t)(buffer + got - p))) != NULL; p++) replies++;
            done += replies;
            /* keep DEPTH in flight: one new call per reply */
            for (int r = 0; r < replies; r += depth) {
                int k = replies - r < depth ? replies - r : depth;
                if (write(fd, batch, len * (size_t)k) < 0) return 1;
            }
        }
        if (!warmed && now() >= warm) { warmed = 1; counted = done; start = now(); }
    }
    double elapsed = now() - start;
    printf("{\"mode\":\"throughput\",\"connections\":%d,\"depth\":%d,\"seconds\":%.2f,\"requests\":%ld,\"rps\":%.0f,"
           "\"total_requests\":%ld}\n", conns, depth, elapsed, done - counted, (done - counted) / elapsed, done);
    return 0;
}

static double wall(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Sends REQUEST once on every connection and waits for every reply (connections
   stay open: closing them while tokend still answers would add teardown work to
   what is measured). Fills samples (send -> reply) and returns the wall-clock
   time of the last reply, or -1. */
static double send_all_and_collect(int ep, int *fds, int clients, const char *request, double *sent, double *samples,
                                   int *errors, double *send_all) {
    if (clients <= 0) return -1;
    size_t len = strlen(request) + 1;
    static char buffer[65536];
    static struct epoll_event events[4096];
    double start = now();
    for (int i = 0; i < clients; i++) {
        sent[i] = now();
        if (write(fds[i], request, len) != (ssize_t)len) return -1;
    }
    *send_all = now() - start;
    int received = 0;
    double last = 0;
    char *answered = calloc((size_t)clients, 1);
    while (received < clients) {
        int n = epoll_wait(ep, events, 4096, 30000);
        if (n <= 0) { fprintf(stderr, "timed out with %d of %d replies\n", received, clients); return -1; }
        for (int i = 0; i < n; i++) {
            int k = (int)events[i].data.u32;
            ssize_t got = read(fds[k], buffer, sizeof buffer);
            if (got <= 0 || answered[k] || !memchr(buffer, 0, (size_t)got)) continue;
            if (memmem(buffer, (size_t)got, "\"error\"", 7)) (*errors)++;
            answered[k] = 1;
            samples[received++] = now() - sent[k];
            last = wall();
        }
    }
    free(answered);
    return last;
}

/* The stampede: all CLIENTS connect, then each sends REQUEST once (the token
   needs a refresh: they all wait for one upstream call); then, on the same
   connections, each sends it again (now cached). Reports the waiters'
   latencies, the wall-clock time of the last waiter's reply, and how long the
   cached round took from its first send to its last reply. */
static int burst(const char *path, int clients, const char *request) {
    raise_fd_limit();
    int ep = epoll_create1(0);
    int *fds = malloc(sizeof(int) * (size_t)clients);
    double *sent = malloc(sizeof(double) * (size_t)clients);
    double *samples = malloc(sizeof(double) * (size_t)clients);
    double *cached = malloc(sizeof(double) * (size_t)clients);
    for (int i = 0; i < clients; i++) {
        fds[i] = connect_to(path);
        struct epoll_event e = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &e);
    }
    usleep(200000); /* let tokend accept them all */
    int errors = 0, cached_errors = 0;
    double send_all = 0, cached_send_all = 0;
    double last_waiter = send_all_and_collect(ep, fds, clients, request, sent, samples, &errors, &send_all);
    if (last_waiter < 0) return 1;
    double cached_start = now();
    if (send_all_and_collect(ep, fds, clients, request, sent, cached, &cached_errors, &cached_send_all) < 0) return 1;
    double cached_all = now() - cached_start;
    char extra[256];
    snprintf(extra, sizeof extra,
             ",\"errors\":%d,\"send_all_ms\":%.1f,\"last_reply_wall\":%.6f,\"cached_round_ms\":%.1f,\"cached_errors\":%d",
             errors, send_all * 1e3, last_waiter, cached_all * 1e3, cached_errors);
    print_percentiles("burst", samples, clients, extra);
    return 0;
}

struct oneshot_args {
    const char *path, *request;
    long count;
    double *samples;
};

/* oidc-agent: one request per connection; the reply is one JSON object, then the agent closes. */
static void *oneshot_worker(void *raw) {
    struct oneshot_args *args = raw;
    char buffer[65536];
    size_t len = strlen(args->request);
    for (long i = 0; i < args->count; i++) {
        double t0 = now();
        int fd = connect_to(args->path);
        if (write(fd, args->request, len) != (ssize_t)len) exit(1);
        int depth = 0, seen = 0, in_string = 0, escaped = 0, complete = 0;
        while (!complete) {
            ssize_t got = read(fd, buffer, sizeof buffer);
            if (got <= 0) break;
            for (ssize_t j = 0; j < got && !complete; j++) {
                char ch = buffer[j];
                if (in_string) {
                    if (escaped) escaped = 0;
                    else if (ch == '\\') escaped = 1;
                    else if (ch == '"') in_string = 0;
                } else if (ch == '"') in_string = 1;
                else if (ch == '{') { depth++; seen = 1; }
                else if (ch == '}' && --depth == 0 && seen) complete = 1;
            }
        }
        close(fd);
        if (!complete) { fprintf(stderr, "incomplete reply\n"); exit(1); }
        args->samples[i] = now() - t0;
    }
    return NULL;
}

static int oneshot(const char *path, long count, int threads, const char *request) {
    pthread_t ids[256];
    struct oneshot_args args[256];
    double *samples = malloc(sizeof(double) * (size_t)count);
    long per = count / threads;
    double start = now();
    for (int t = 0; t < threads; t++) {
        args[t] = (struct oneshot_args){path, request, per, samples + t * per};
        pthread_create(&ids[t], NULL, oneshot_worker, &args[t]);
    }
    for (int t = 0; t < threads; t++) pthread_join(ids[t], NULL);
    double elapsed = now() - start;
    char extra[128];
    snprintf(extra, sizeof extra, ",\"clients\":%d,\"rps\":%.0f", threads, per * threads / elapsed);
    print_percentiles("oneshot", samples, per * threads, extra);
    return 0;
}

/* Hold N connections, each having sent REQUEST (a Subscribe with "more", or
 * nothing when REQUEST is "-") and read its first reply; print "ready"; on a
 * line from stdin, count until every connection has received a frame
 * containing MARK, and print the time that took from the line. */
static int hold(const char *path, int n, const char *request, const char *mark) {
    raise_fd_limit();
    int *fds = malloc(sizeof(int) * (size_t)n);
    char *seen = calloc((size_t)n, 1);
    static char buffer[65536];
    int ep = epoll_create1(0);
    for (int i = 0; i < n; i++) {
        fds[i] = connect_to(path);
        if (strcmp(request, "-") != 0) {
            size_t len = strlen(request) + 1;
            if (write(fds[i], request, len) != (ssize_t)len || read_replies(fds[i], 1, buffer, sizeof buffer) < 0) {
                fprintf(stderr, "subscribe failed at %d\n", i);
                return 1;
            }
        }
        struct epoll_event e = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &e);
    }
    printf("ready\n");
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin) || strcmp(request, "-") == 0) return 0;
    double start = now(), first = 0;
    int remaining = n;
    static struct epoll_event events[4096];
    while (remaining > 0) {
        int k = epoll_wait(ep, events, 4096, 30000);
        if (k <= 0) { fprintf(stderr, "%d subscribers did not get the event\n", remaining); return 1; }
        for (int i = 0; i < k; i++) {
            int index = (int)events[i].data.u32;
            ssize_t got = read(fds[index], buffer, sizeof buffer);
            if (got > 0 && !seen[index] && memmem(buffer, (size_t)got, mark, strlen(mark))) {
                if (remaining == n) first = now();
                seen[index] = 1;
                remaining--;
            }
        }
    }
    double end = now();
    printf("{\"mode\":\"fanout\",\"subscribers\":%d,\"all_received_ms\":%.1f,\"first_to_last_ms\":%.1f}\n", n,
           (end - start) * 1e3, (end - first) * 1e3);
    return 0;
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    if (argc >= 5 && strcmp(argv[1], "latency") == 0) return latency(argv[2], atol(argv[3]), argv[4]);
    if (argc >= 7 && strcmp(argv[1], "throughput") == 0)
        return throughput(argv[2], atoi(argv[3]), atoi(argv[4]), atof(argv[5]), argv[6]);
    if (argc >= 5 && strcmp(argv[1], "burst") == 0) return burst(argv[2], atoi(argv[3]), argv[4]);
    if (argc >= 6 && strcmp(argv[1], "oneshot") == 0) return oneshot(argv[2], atol(argv[3]), atoi(argv[4]), argv[5]);
    if (argc >= 6 && strcmp(argv[1], "hold") == 0) return hold(argv[2], atoi(argv[3]), argv[4], argv[5]);
    fprintf(stderr, "usage: see the comment at the top of load.c\n");
    return 64;
}
