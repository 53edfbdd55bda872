/* Many WebSocket viewers of one run in one process, of either tier (nchan's /live/, or --hub: the web server's /ws/):
   the load generator of bench/fanout.py (and its --browser). One program; bench/viewers_ws.c (included below) holds
   its sockets and protocol. Compiled (epoll, non-blocking sockets, no library, no permessage-deflate) so that the
   viewers are not what a fan-out measures; bench/viewer_client.py builds it with gcc on first use.

     viewers --url ws://127.0.0.1:8080/live/runs/<id>/lite/ [--url ...] --count N [--rate R] [--hub] [--resume JSON]

   --hub: the web server's /ws/runs/<id>/ as a browser opens it: read the "hello", then send JSON, the resume (an
   object without its closing brace; `,"after_step":<hello's run.last_step or -1>}` appended). Else (nchan): frames
   only. Viewers round-robin over the URLs, starting at R per second (0: all at once, a reconnect storm).
   stdout: "ready <connected> <failed>" once all connected or failed; stdin "count" answers "count <(viewer, step)
   pairs> <connected> <dropped> <messages>"; "stop <unix time>" (or stdin's end) ends the run then, with one JSON
   line: connected, failed, dropped, errors {kind: n}, duplicates, too_old, cpu_s, messages, bytes, and per step of
   train/loss ("train/loss":{"steps":[...]} in a frame) how many viewers got it, its first arrival (unix s) and a
   histogram of (arrival - first) per viewer in ms bins (bin_ms() in viewer_client.py). */

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_URLS 16
#define NBINS 576
#define WIN 256 /* per viewer: which of the last WIN steps it already got */
#define MAX_STEP 50000000 /* steps are recorded in an array indexed by step */

enum { S_CONNECTING, S_HANDSHAKE, S_HELLO, S_OPEN, S_DONE };
typedef struct { char host[300], path[1024], hostport[300]; struct sockaddr_storage addr; socklen_t addrlen; } Url;

typedef struct {
    int fd, state, url, msg_op;  /* msg_op: the fragmented message's opcode, 0 when none */
    double deadline;
    char *in, *msg, *out;  /* unparsed bytes (a partial frame or handshake), a fragmented message, bytes unwritten */
    size_t in_len, in_cap, msg_len, msg_cap, out_len, out_off;
    int64_t max_step;
    uint64_t seen[WIN / 64];
} Conn;
typedef struct { double first; uint32_t n; uint32_t *hist; } StepRec;

static Url urls[MAX_URLS];
static int nurls, count, hub, epfd;
static Conn *conns;
static double rate = 0, timeout_s = 120;  /* timeout_s: for a handshake */
static const char *origin = "http://127.0.0.1";
static char *resume_text;
static size_t resume_len;
static const char needle[] = "\"train/loss\":{\"steps\":[";
static const size_t needle_len = sizeof needle - 1;
static long n_connected, n_failed, n_dropped, n_duplicates, n_too_old, n_pairs;
static long long n_messages, n_bytes; /* data messages received after the hello, and their payload bytes */
static struct { char kind[64]; long n; } errors[64];
static int nerrors;
static StepRec *steps; /* by step: how many viewers got it (0: none yet), when first, the histogram */
static size_t steps_cap;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n);
    if (!q) { fprintf(stderr, "viewers: out of memory\n"); exit(2); }
    return q;
}

static void error_kind(const char *kind) {
    for (int i = 0; i < nerrors; i++)
        if (!strcmp(errors[i].kind, kind)) { errors[i].n++; return; }
    if (nerrors == 64) return;
    snprintf(errors[nerrors].kind, sizeof errors[0].kind, "%s", kind);
    for (char *k = errors[nerrors].kind; *k; k++) if (*k == '"' || *k == '\\' || *k < 32) *k = '_';  /* JSON-safe */
    errors[nerrors++].n = 1;
}

/* ---- per-step records ---- */

static int bin_of(double ms) {
    if (ms < 0) ms = 0;
    uint64_t v = (uint64_t)ms;
    if (v < 128) return (int)v;
    int e = 63 - __builtin_clzll(v);
    if (e > 20) return NBINS - 1;
    int b = 128 + (e - 7) * 32 + (int)((v >> (e - 5)) & 31);
    return b < NBINS ? b : NBINS - 1;
}

static StepRec *step_rec(int64_t step) {  /* steps[step], grown as steps come */
    if ((size_t)step >= steps_cap) {
        size_t cap = steps_cap ? steps_cap : 1024;
        while (cap <= (size_t)step) cap *= 2;
        steps = xrealloc(steps, cap * sizeof *steps);
        memset(steps + steps_cap, 0, (cap - steps_cap) * sizeof *steps);
        steps_cap = cap;
    }
    StepRec *r = &steps[step];
    if (!r->hist && !(r->hist = calloc(NBINS, sizeof(uint32_t)))) exit(2);
    return r;
}

static void got_step(Conn *c, int64_t s, double t) {
    if (s > c->max_step) {
        if (s - c->max_step >= WIN || c->max_step < 0) memset(c->seen, 0, sizeof c->seen);
        else for (int64_t k = c->max_step + 1; k < s; k++) c->seen[(k % WIN) / 64] &= ~(1ull << (k % 64));
        c->max_step = s;
    } else if (s <= c->max_step - WIN) {
        n_too_old++;
        return;
    } else if (c->seen[(s % WIN) / 64] & (1ull << (s % 64))) {
        n_duplicates++;
        return;
    }
    c->seen[(s % WIN) / 64] |= 1ull << (s % 64);
    if (s > MAX_STEP) { error_kind("step_too_large"); return; }
    StepRec *r = step_rec(s);
    if (r->n == 0) r->first = t;
    r->n++;
    n_pairs++;
    r->hist[bin_of((t - r->first) * 1000.0)]++;
}

/* Every "train/loss":{"steps":[digits,commas]} of a message. */
static void scan(Conn *c, const char *p, size_t n, double t) {
    const char *end = p + n;
    while (p < end) {
        const char *m = memmem(p, end - p, needle, needle_len);
        if (!m) return;
        const char *q = m + needle_len, *r = q;
        while (r < end && ((*r >= '0' && *r <= '9') || *r == ',')) r++;
        if (r < end && *r == ']') {
            int64_t v = -1;
            for (const char *x = q; x <= r; x++) {
                if (*x >= '0' && *x <= '9') v = (v < 0 ? 0 : v * 10) + (*x - '0');
                else { if (v >= 0) got_step(c, v, t); v = -1; }
            }
        }
        p = r;
    }
}

#include "viewers_ws.c"  /* the sockets and the WebSocket protocol: one program, two files */

static void report(double t_ready) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
    printf("{\"connected\":%ld,\"failed\":%ld,\"dropped\":%ld,\"duplicates\":%ld,\"too_old\":%ld,\"cpu_s\":%.3f,"
           "\"max_rss_kb\":%ld,\"ready_at\":%.6f,\"messages\":%lld,\"bytes\":%lld,\"errors\":{",
           n_connected, n_failed, n_dropped, n_duplicates, n_too_old, cpu, ru.ru_maxrss, t_ready, n_messages, n_bytes);
    for (int i = 0; i < nerrors; i++) {
        if (i) putchar(',');
        printf("\"%s\":%ld", errors[i].kind, errors[i].n);  /* kinds: this program's words, no quotes */
    }
    printf("},\"steps\":[");
    for (size_t i = 0, k = 0; i < steps_cap; i++) {
        StepRec *r = &steps[i];
        if (!r->n) continue;
        printf("%s[%zu,%u,%.6f,[", k++ ? "," : "", i, r->n, r->first);
        int first = 1;
        for (int b = 0; b < NBINS; b++)
            if (r->hist[b]) { printf("%s%d,%u", first ? "" : ",", b, r->hist[b]); first = 0; }
        printf("]]");
    }
    printf("]}\n");
    fflush(stdout);
}

static void usage(void) {
    fprintf(stderr, "usage: viewers --url ws://HOST:PORT/PATH [--url ...] --count N [--rate R] [--hub] "
                    "[--resume JSON]\n");
    exit(2);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--hub")) { hub = 1; continue; }
        if (!v) usage();
        i++;
        if (!strcmp(a, "--url")) {
            if (nurls == MAX_URLS || parse_url(v, &urls[nurls++]))
                { fprintf(stderr, "viewers: bad url %s\n", v); exit(2); }
        }
        else if (!strcmp(a, "--count")) count = atoi(v);
        else if (!strcmp(a, "--rate")) rate = atof(v);
        else if (!strcmp(a, "--resume")) resume_text = (char *)v;
        else usage();
    }
    if (!nurls || count <= 0) usage();
    if (resume_text) resume_len = strlen(resume_text);
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl)) { rl.rlim_cur = rl.rlim_max; setrlimit(RLIMIT_NOFILE, &rl); }
    srandom((unsigned)(getpid() ^ (unsigned)(now() * 1e6)));
    conns = calloc((size_t)count, sizeof *conns);
    for (int i = 0; i < count; i++) conns[i].fd = -1;
    epfd = epoll_create1(EPOLL_CLOEXEC);
    fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
    struct epoll_event sev = {.events = EPOLLIN, .data.u32 = UINT32_MAX};
    epoll_ctl(epfd, EPOLL_CTL_ADD, 0, &sev);
    struct epoll_event evs[1024];
    double t0 = now(), next_check = t0 + 1, t_ready = 0, stop_at = -1;
    int started = 0, ready = 0;
    char ctl[256];  /* control lines from stdin */
    size_t ctl_len = 0;
    for (;;) {
        double t = now();
        /* start the viewers due by now */
        int due = rate > 0 ? (int)((t - t0) * rate) + 1 : count;
        if (due > count) due = count;
        while (started < due) start_conn(started++);
        if (t >= next_check) {  /* handshake deadlines */
            for (int i = 0; i < started; i++)
                if (conns[i].state < S_OPEN && conns[i].deadline < t) fail(&conns[i], "handshake_timeout");
            next_check = t + 1;
        }
        if (!ready && started == count && n_connected + n_failed + n_dropped >= count) {
            ready = 1;
            t_ready = t;
            printf("ready %ld %ld\n", n_connected, n_failed);
            fflush(stdout);
        }
        if (stop_at >= 0 && t >= stop_at && ready) break;
        double wait = 1.0;
        if (started < count && rate > 0) wait = (t0 + started / rate) - t;
        if (stop_at >= 0 && stop_at - t < wait) wait = stop_at - t;
        if (next_check - t < wait) wait = next_check - t;
        int ms = wait <= 0 ? 0 : (int)(wait * 1000) + 1;
        int k = epoll_wait(epfd, evs, 1024, ms);
        for (int e = 0; e < k; e++) {
            uint32_t id = evs[e].data.u32;
            if (id == UINT32_MAX) {  /* control: "stop <unix time>" or end of input */
                ssize_t r = read(0, ctl + ctl_len, sizeof ctl - 1 - ctl_len);
                if (r <= 0) {
                    if (r < 0 && errno == EAGAIN) continue;
                    if (stop_at < 0) stop_at = now();
                    epoll_ctl(epfd, EPOLL_CTL_DEL, 0, NULL);
                    continue;
                }
                ctl_len += (size_t)r;
                ctl[ctl_len] = 0;
                char *nl;
                while ((nl = strchr(ctl, '\n'))) {
                    *nl = 0;
                    if (!strncmp(ctl, "stop", 4)) stop_at = ctl[4] ? atof(ctl + 5) : now();
                    else if (!strcmp(ctl, "count")) {  /* progress: (viewer, step) pairs so far */
                        printf("count %ld %ld %ld %lld\n", n_pairs, n_connected, n_dropped, n_messages);
                        fflush(stdout);
                    }
                    memmove(ctl, nl + 1, ctl_len - (size_t)(nl + 1 - ctl) + 1);
                    ctl_len = strlen(ctl);
                }
                if (ctl_len > 200) ctl_len = 0;
                continue;
            }
            Conn *c = &conns[id];
            if (c->state == S_DONE) continue;
            if (c->state == S_CONNECTING) {
                int err = 0;
                socklen_t el = sizeof err;
                getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
                if (err) {
                    fail(c, err == ECONNREFUSED ? "ECONNREFUSED" : err == ETIMEDOUT ? "ETIMEDOUT" : "connect");
                    continue;
                }
                if (!(evs[e].events & EPOLLOUT)) continue;
                want_write(c, 0);
                send_handshake(c);
                continue;
            }
            if (evs[e].events & EPOLLOUT) flush_out(c);
            if (c->state != S_DONE && (evs[e].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) on_readable(c);
        }
    }
    report(t_ready);
    return 0;
}
