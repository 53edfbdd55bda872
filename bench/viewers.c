/* Many WebSocket viewers of one run in one process: the load generator of bench/fanout.py (--client c).

   A compiled client, so that the viewers are not what a fan-out measurement measures (issue 23): epoll,
   non-blocking sockets, no third-party library, no permessage-deflate offered. bench/fanout.py builds it with
   gcc on demand (bench/viewer_client.py) and reads its one JSON line.

     viewers --url ws://127.0.0.1:8080/live/runs/<id>/lite/ [--url ...] --count N [--rate R] [--hub]
             [--resume FILE] [--origin http://127.0.0.1] [--series train/loss] [--timeout S] [--seconds S]

   --hub: the web server's /ws/runs/<id>/ as a browser opens it: Origin header, read the "hello" frame, then send
   FILE's resume (a JSON object without its closing brace; `,"after_step":<hello's run.last_step or -1>}` is
   appended) as a masked text frame. Without --hub (nchan's /live/runs/): frames only.
   Viewers round-robin over the URLs and start at R per second (0: all at once, a reconnect storm).

   Control: stdout gets "ready <connected> <failed>\n" once every viewer connected or failed; then stdin's
   "count\n" answers "count <(viewer, step) pairs so far> <connected> <dropped>\n" (tests wait on it), and
   "stop <unix time>\n" (or its end, or --seconds after ready) ends the run at that time, and stdout gets one JSON
   line: connected, failed, dropped, errors {kind: n}, duplicates, too_old, cpu_s, messages and bytes (data
   messages received, the hub's hello excepted, and their payload), and per step of the series
   (found in each frame like bench/fanout_viewers.py's regex: "<series>":{"steps":[...]}) how many viewers got it,
   its first arrival in this process (unix s) and a histogram of (arrival - first arrival) per viewer in ms bins
   (bin_ms() in bench/viewer_client.py inverts them: exact below 128 ms, 1/32 relative width above).

   Frames: partial reads and frames, fragmented messages (continuations, control frames between them), pings
   (answered with a pong), closes (answered, counted as dropped with the code as the error kind). */

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

enum { S_CONNECTING, S_HANDSHAKE, S_HELLO, S_OPEN, S_DONE };

typedef struct {
    char host[256], path[1024], hostport[300];
    struct sockaddr_storage addr;
    socklen_t addrlen;
} Url;

typedef struct {
    int fd, state, url;
    double deadline;
    char *in;            /* unparsed bytes (partial frame or handshake) */
    size_t in_len, in_cap;
    char *msg;           /* a fragmented message being reassembled */
    size_t msg_len, msg_cap;
    int msg_op;          /* its opcode, 0 when none */
    char *out;           /* bytes not yet written */
    size_t out_len, out_off;
    int64_t max_step;
    uint64_t seen[WIN / 64];
    int got_any;
} Conn;

typedef struct {
    int64_t step;
    double first;
    uint32_t n;
    uint32_t *hist;
} StepRec;

static Url urls[MAX_URLS];
static int nurls;
static Conn *conns;
static int count, hub, epfd;
static double rate = 0, timeout_s = 120, run_seconds = -1;
static const char *origin = "http://127.0.0.1";
static char *resume_text;
static size_t resume_len;
static char needle[512];
static size_t needle_len;
static long n_connected, n_failed, n_dropped, n_duplicates, n_too_old, n_pairs;
static long long n_messages, n_bytes; /* data messages received after the hello, and their payload bytes */
static struct { char kind[64]; long n; } errors[64];
static int nerrors;
static StepRec *steps;
static size_t nsteps, steps_cap;
static int64_t *slots; /* open addressing: step -> index in steps + 1, 0 = empty */
static size_t slots_cap;
static char rbuf[1 << 20];

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
    if (nerrors < 64) { snprintf(errors[nerrors].kind, sizeof errors[0].kind, "%s", kind); errors[nerrors++].n = 1; }
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

static StepRec *step_rec(int64_t step) {
    if (nsteps * 2 >= slots_cap) {
        size_t cap = slots_cap ? slots_cap * 2 : 4096;
        int64_t *ns = calloc(cap, sizeof *ns);
        if (!ns) exit(2);
        for (size_t i = 0; i < nsteps; i++) {
            size_t h = (uint64_t)steps[i].step * 0x9E3779B97F4A7C15ull & (cap - 1);
            while (ns[h]) h = (h + 1) & (cap - 1);
            ns[h] = (int64_t)i + 1;
        }
        free(slots);
        slots = ns;
        slots_cap = cap;
    }
    size_t h = (uint64_t)step * 0x9E3779B97F4A7C15ull & (slots_cap - 1);
    while (slots[h]) {
        if (steps[slots[h] - 1].step == step) return &steps[slots[h] - 1];
        h = (h + 1) & (slots_cap - 1);
    }
    if (nsteps == steps_cap) {
        steps_cap = steps_cap ? steps_cap * 2 : 1024;
        steps = xrealloc(steps, steps_cap * sizeof *steps);
    }
    StepRec *r = &steps[nsteps];
    r->step = step;
    r->first = 0;
    r->n = 0;
    r->hist = calloc(NBINS, sizeof(uint32_t));
    if (!r->hist) exit(2);
    slots[h] = (int64_t)++nsteps;
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
    StepRec *r = step_rec(s);
    if (r->n == 0) r->first = t;
    r->n++;
    n_pairs++;
    r->hist[bin_of((t - r->first) * 1000.0)]++;
}

/* What bench/fanout_viewers.py's LOSS_STEPS regex finds: every "<series>":{"steps":[digits,commas]}. */
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

/* ---- sockets ---- */

static void close_conn(Conn *c, int state) {
    if (c->fd >= 0) { epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL); close(c->fd); }
    c->fd = -1;
    c->state = state;
    free(c->in); free(c->msg); free(c->out);
    c->in = c->msg = c->out = NULL;
    c->in_len = c->in_cap = c->msg_len = c->msg_cap = c->out_len = c->out_off = 0;
}

/* A viewer ends: before it was open it failed, after it dropped (its kind noted either way). */
static void fail(Conn *c, const char *kind) {
    if (c->state == S_DONE) return;
    error_kind(kind);
    if (c->state == S_OPEN) n_dropped++; else n_failed++;
    close_conn(c, S_DONE);
}

static void want_write(Conn *c, int on) {
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | (on ? EPOLLOUT : 0), .data.u32 = (uint32_t)(c - conns)};
    epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

static void flush_out(Conn *c) {
    while (c->out_off < c->out_len) {
        ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) { want_write(c, 1); return; }
            fail(c, "write_error");
            return;
        }
        c->out_off += (size_t)w;
    }
    if (c->out_len) want_write(c, 0);
    c->out_len = c->out_off = 0;
}

static void queue(Conn *c, const char *p, size_t n) {
    c->out = xrealloc(c->out, c->out_len + n);
    memcpy(c->out + c->out_len, p, n);
    c->out_len += n;
}

/* A client frame: FIN, masked (RFC 6455 §5.3). */
static void send_frame(Conn *c, int op, const char *p, size_t n) {
    unsigned char h[14];
    size_t hl = 0;
    h[hl++] = 0x80 | (unsigned char)op;
    if (n < 126) h[hl++] = 0x80 | (unsigned char)n;
    else if (n < 65536) { h[hl++] = 0x80 | 126; h[hl++] = n >> 8; h[hl++] = n & 255; }
    else {
        h[hl++] = 0x80 | 127;
        for (int i = 7; i >= 0; i--) h[hl++] = (unsigned char)(((uint64_t)n >> (8 * i)) & 255);
    }
    uint32_t k = (uint32_t)random();
    unsigned char *mask = h + hl;
    memcpy(mask, &k, 4);
    hl += 4;
    queue(c, (char *)h, hl);
    size_t at = c->out_len;
    queue(c, p, n);
    for (size_t i = 0; i < n; i++) c->out[at + i] ^= mask[i & 3];
    flush_out(c);
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void start_conn(int i) {
    Conn *c = &conns[i];
    memset(c, 0, sizeof *c);
    c->url = i % nurls;
    c->max_step = -1;
    c->deadline = now() + timeout_s;
    Url *u = &urls[c->url];
    c->fd = socket(u->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        c->state = S_CONNECTING;
        fail(c, errno == EMFILE || errno == ENFILE ? "EMFILE" : "socket");
        return;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->state = S_CONNECTING;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP, .data.u32 = (uint32_t)i};
    epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev);
    if (connect(c->fd, (struct sockaddr *)&u->addr, u->addrlen) < 0 && errno != EINPROGRESS) {
        fail(c, errno == ECONNREFUSED ? "ECONNREFUSED" : errno == EADDRNOTAVAIL ? "EADDRNOTAVAIL" : "connect");
        return;
    }
}

static void send_handshake(Conn *c) {
    unsigned char key[16];
    char k64[25], req[2048];
    for (int i = 0; i < 16; i++) key[i] = (unsigned char)random();
    for (int i = 0, o = 0; i < 18; i += 3) {
        uint32_t v = key[i] << 16 | (i + 1 < 16 ? key[i + 1] << 8 : 0) | (i + 2 < 16 ? key[i + 2] : 0);
        k64[o++] = B64[v >> 18 & 63];
        k64[o++] = B64[v >> 12 & 63];
        k64[o++] = i + 1 < 16 ? B64[v >> 6 & 63] : '=';
        k64[o++] = i + 2 < 16 ? B64[v & 63] : '=';
    }
    k64[24] = 0;
    Url *u = &urls[c->url];
    int n = snprintf(req, sizeof req,
                     "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nOrigin: %s\r\n"
                     "User-Agent: observatory-bench-viewers\r\n\r\n", u->path, u->hostport, k64, origin);
    c->state = S_HANDSHAKE;
    queue(c, req, (size_t)n);
    flush_out(c);
}

static void opened(Conn *c) {
    c->state = S_OPEN;
    n_connected++;
}

/* The hub's hello: its run's last_step (a browser resumes after it), or -1. */
static void on_hello(Conn *c, const char *p, size_t n) {
    const char *end = p + n;
    if (!memmem(p, n, "\"type\":\"hello\"", 14) && !memmem(p, n, "\"type\": \"hello\"", 15)) {
        fail(c, "no_hello");
        return;
    }
    long long last = -1;
    const char *run = memmem(p, n, "\"run\":", 6);
    const char *ls = run ? memmem(run, end - run, "\"last_step\":", 12) : NULL;
    if (ls) {
        ls += 12;
        while (ls < end && *ls == ' ') ls++;
        if (ls < end && *ls >= '0' && *ls <= '9') last = strtoll(ls, NULL, 10);
    }
    if (resume_text) {
        char tail[64];
        int tl = snprintf(tail, sizeof tail, ",\"after_step\":%lld}", last);
        char *frame = malloc(resume_len + (size_t)tl);
        memcpy(frame, resume_text, resume_len);
        memcpy(frame + resume_len, tail, (size_t)tl);
        send_frame(c, 1, frame, resume_len + (size_t)tl);
        free(frame);
        if (c->state == S_DONE) return;
    }
    opened(c);
}

static void on_message(Conn *c, int op, const char *p, size_t n, double t) {
    if (c->state == S_HELLO) { on_hello(c, p, n); return; }
    if (op == 1 || op == 2) {
        n_messages++;
        n_bytes += (long long)n;
        scan(c, p, n, t);
    }
}

/* Parses whole frames from p[0..n); returns how many bytes it consumed (the rest waits for more). */
static size_t frames(Conn *c, char *p, size_t n, double t) {
    size_t off = 0;
    while (c->state == S_OPEN || c->state == S_HELLO) {
        if (n - off < 2) break;
        unsigned char *h = (unsigned char *)p + off;
        int fin = h[0] & 0x80, op = h[0] & 15, masked = h[1] & 0x80;
        uint64_t len = h[1] & 127;
        size_t hl = 2;
        if (len == 126) { if (n - off < 4) break; len = (uint64_t)h[2] << 8 | h[3]; hl = 4; }
        else if (len == 127) {
            if (n - off < 10) break;
            len = 0;
            for (int i = 0; i < 8; i++) len = len << 8 | h[2 + i];
            hl = 10;
        }
        if (masked) hl += 4;
        if (len > (1ull << 30)) { fail(c, "frame_too_large"); return off; }
        if (n - off < hl + len) break;
        char *pl = p + off + hl;
        if (masked) for (uint64_t i = 0; i < len; i++) pl[i] ^= h[hl - 4 + (i & 3)];
        off += hl + (size_t)len;
        if (op >= 8) {  /* control frames: may come between a message's fragments */
            if (op == 9) send_frame(c, 10, pl, (size_t)len);
            else if (op == 8) {
                char kind[32] = "closed";
                if (len >= 2)
                    snprintf(kind, sizeof kind, "closed_%d", (unsigned char)pl[0] << 8 | (unsigned char)pl[1]);
                send_frame(c, 8, pl, len >= 2 ? 2 : 0);
                fail(c, kind);
                return off;
            }
            continue;
        }
        if (op == 0) {  /* a continuation */
            if (!c->msg_op) { fail(c, "protocol"); return off; }
            if (c->msg_len + len > c->msg_cap) {
                c->msg_cap = (c->msg_len + (size_t)len) * 2;
                c->msg = xrealloc(c->msg, c->msg_cap);
            }
            memcpy(c->msg + c->msg_len, pl, (size_t)len);
            c->msg_len += (size_t)len;
            if (fin) {
                int mop = c->msg_op;
                c->msg_op = 0;
                on_message(c, mop, c->msg, c->msg_len, t);
                c->msg_len = 0;
            }
        } else if (!fin) {  /* a message's first fragment */
            if (c->msg_op) { fail(c, "protocol"); return off; }
            c->msg_op = op;
            if ((size_t)len > c->msg_cap) {
                c->msg_cap = (size_t)len * 2 + 1024;
                c->msg = xrealloc(c->msg, c->msg_cap);
            }
            memcpy(c->msg, pl, (size_t)len);
            c->msg_len = (size_t)len;
        } else {
            on_message(c, op, pl, (size_t)len, t);
        }
    }
    return off;
}

/* The server's 101 answer; returns bytes consumed, 0 when incomplete (fails the viewer on any other answer). */
static size_t handshake(Conn *c, const char *p, size_t n) {
    const char *e = memmem(p, n, "\r\n\r\n", 4);
    if (!e) {
        if (n > 16384) fail(c, "handshake_too_long");
        return 0;
    }
    if (n < 12 || memcmp(p, "HTTP/1.1 101", 12)) {
        char kind[32] = "http_error";
        if (n >= 12 && !memcmp(p, "HTTP/1.", 7)) snprintf(kind, sizeof kind, "http_%.3s", p + 9);
        fail(c, kind);
        return 0;
    }
    if (hub) c->state = S_HELLO;
    else opened(c);
    return (size_t)(e + 4 - p);
}

static size_t consume(Conn *c, char *p, size_t n, double t) {
    size_t off = 0;
    if (c->state == S_HANDSHAKE) {
        off = handshake(c, p, n);
        if (!off) return 0;
    }
    return off + frames(c, p + off, n - off, t);
}

static void on_readable(Conn *c) {
    for (int rounds = 0; rounds < 4 && c->state != S_DONE; rounds++) {
        char *dst;
        size_t room;
        if (c->in_len == 0) { dst = rbuf; room = sizeof rbuf; }
        else {
            if (c->in_cap - c->in_len < 16384) {
                c->in_cap = c->in_len * 2 + 32768;
                c->in = xrealloc(c->in, c->in_cap);
            }
            dst = c->in + c->in_len;
            room = c->in_cap - c->in_len;
        }
        ssize_t r = recv(c->fd, dst, room, 0);
        if (r == 0) { fail(c, c->state == S_OPEN ? "eof" : "eof_in_handshake"); return; }
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            fail(c, errno == ECONNRESET ? "ECONNRESET" : "read_error");
            return;
        }
        double t = now();
        char *p = dst == rbuf ? rbuf : c->in;
        size_t n = dst == rbuf ? (size_t)r : c->in_len + (size_t)r;
        size_t used = consume(c, p, n, t);
        if (c->state == S_DONE) return;
        size_t left = n - used;
        if (left && p == rbuf) {
            if (c->in_cap < left) { c->in_cap = left + 16384; c->in = xrealloc(c->in, c->in_cap); }
            memcpy(c->in, rbuf + used, left);
        } else if (left && used) memmove(c->in, c->in + used, left);
        c->in_len = left;
        if (!left && c->in_cap > 65536) { free(c->in); c->in = NULL; c->in_cap = 0; }  /* 10k viewers: keep it small */
        if ((size_t)r < room) return;
    }
}

static int parse_url(const char *s, Url *u) {
    if (strncmp(s, "ws://", 5)) return -1;
    s += 5;
    const char *slash = strchr(s, '/');
    size_t hp = slash ? (size_t)(slash - s) : strlen(s);
    if (hp >= sizeof u->hostport) return -1;
    memcpy(u->hostport, s, hp);
    u->hostport[hp] = 0;
    snprintf(u->path, sizeof u->path, "%s", slash ? slash : "/");
    char port[16] = "80";
    const char *colon = strrchr(u->hostport, ':');
    if (colon && !strchr(colon, ']')) {
        snprintf(u->host, sizeof u->host, "%.*s", (int)(colon - u->hostport), u->hostport);
        snprintf(port, sizeof port, "%s", colon + 1);
    } else snprintf(u->host, sizeof u->host, "%s", u->hostport);
    char host[256];
    snprintf(host, sizeof host, "%s", u->host);
    if (host[0] == '[') { memmove(host, host + 1, strlen(host)); host[strcspn(host, "]")] = 0; }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
    if (getaddrinfo(host, port, &hints, &ai)) return -1;
    memcpy(&u->addr, ai->ai_addr, ai->ai_addrlen);
    u->addrlen = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        if ((unsigned char)*s >= 32) fputc(*s, f);
    }
    fputc('"', f);
}

static void report(double t_ready) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
    printf("{\"connected\":%ld,\"failed\":%ld,\"dropped\":%ld,\"duplicates\":%ld,\"too_old\":%ld,\"cpu_s\":%.3f,"
           "\"max_rss_kb\":%ld,\"ready_at\":%.6f,\"messages\":%lld,\"bytes\":%lld,\"errors\":{",
           n_connected, n_failed, n_dropped, n_duplicates, n_too_old, cpu, ru.ru_maxrss, t_ready, n_messages, n_bytes);
    for (int i = 0; i < nerrors; i++) {
        if (i) putchar(',');
        json_str(stdout, errors[i].kind);
        printf(":%ld", errors[i].n);
    }
    printf("},\"steps\":[");
    for (size_t i = 0; i < nsteps; i++) {
        StepRec *r = &steps[i];
        printf("%s[%lld,%u,%.6f,[", i ? "," : "", (long long)r->step, r->n, r->first);
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
                    "[--resume FILE] [--origin O] [--series NAME] [--timeout S] [--seconds S]\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *series = "train/loss", *resume_file = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--hub")) { hub = 1; continue; }
        if (!v) usage();
        i++;
        if (!strcmp(a, "--url")) {
            if (nurls == MAX_URLS || parse_url(v, &urls[nurls++])) {
                fprintf(stderr, "viewers: bad url %s\n", v);
                return 2;
            }
        }
        else if (!strcmp(a, "--count")) count = atoi(v);
        else if (!strcmp(a, "--rate")) rate = atof(v);
        else if (!strcmp(a, "--origin")) origin = v;
        else if (!strcmp(a, "--series")) series = v;
        else if (!strcmp(a, "--resume")) resume_file = v;
        else if (!strcmp(a, "--timeout")) timeout_s = atof(v);
        else if (!strcmp(a, "--seconds")) run_seconds = atof(v);
        else usage();
    }
    if (!nurls || count <= 0) usage();
    needle_len = (size_t)snprintf(needle, sizeof needle, "\"%s\":{\"steps\":[", series);
    if (resume_file) {
        FILE *f = fopen(resume_file, "rb");
        if (!f) { perror(resume_file); return 2; }
        fseek(f, 0, SEEK_END);
        long sz = ftell(f);
        fseek(f, 0, SEEK_SET);
        resume_text = malloc((size_t)sz + 1);
        resume_len = fread(resume_text, 1, (size_t)sz, f);
        fclose(f);
        while (resume_len && (resume_text[resume_len - 1] == '\n' || resume_text[resume_len - 1] == ' ')) resume_len--;
    }
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl)) { rl.rlim_cur = rl.rlim_max; setrlimit(RLIMIT_NOFILE, &rl); }
    srandom((unsigned)(getpid() ^ (unsigned)(now() * 1e6)));
    conns = calloc((size_t)count, sizeof *conns);
    for (int i = 0; i < count; i++) conns[i].fd = -1;
    epfd = epoll_create1(EPOLL_CLOEXEC);
    fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
    struct epoll_event sev = {.events = EPOLLIN, .data.u32 = UINT32_MAX};
    int stdin_watched = epoll_ctl(epfd, EPOLL_CTL_ADD, 0, &sev) == 0;
    struct epoll_event evs[1024];
    double t0 = now(), next_check = t0 + 1, t_ready = 0, stop_at = -1;
    int started = 0, ready = 0;
    char ctl[256];
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
            if (run_seconds >= 0) stop_at = t + run_seconds;
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
                    stdin_watched = 0;
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
    (void)stdin_watched;
    report(t_ready);
    return 0;
}
