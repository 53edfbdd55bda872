/* The viewers' sockets and WebSocket protocol (RFC 6455, client side), included by bench/viewers.c: non-blocking
   connects, the upgrade handshake, masked client frames, partial reads and frames, fragmented messages, pings,
   closes. */

static char rbuf[1 << 20];

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
    char k64[25] = "", req[2048];  /* 16 random bytes in base64: 21 digits, one of 4 (2 bits), "==" */
    for (int i = 0; i < 21; i++) k64[i] = B64[random() & 63];
    k64[21] = "AQgw"[random() & 3];
    memcpy(k64 + 22, "==", 2);
    Url *u = &urls[c->url];
    int n = snprintf(req, sizeof req,
                     "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nOrigin: %s\r\n"
                     "User-Agent: observatory-bench-viewers\r\n\r\n", u->path, u->hostport, k64, origin);
    c->state = S_HANDSHAKE;
    queue(c, req, (size_t)n);
    flush_out(c);
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
    c->state = S_OPEN, n_connected++;
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
        if (fin && op) { on_message(c, op, pl, (size_t)len, t); continue; }  /* a whole message */
        if (!op == !c->msg_op) { fail(c, "protocol"); return off; }  /* a fragment: first, or a continuation */
        if (op) { c->msg_op = op; c->msg_len = 0; }
        if (c->msg_len + len > c->msg_cap) c->msg = xrealloc(c->msg, c->msg_cap = (c->msg_len + len) * 2 + 1024);
        memcpy(c->msg + c->msg_len, pl, (size_t)len);
        c->msg_len += (size_t)len;
        if (fin) {
            int mop = c->msg_op;
            c->msg_op = 0;
            on_message(c, mop, c->msg, c->msg_len, t);
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
    else c->state = S_OPEN, n_connected++;
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
    char host[300];
    snprintf(host, sizeof host, "%s", u->host);
    if (host[0] == '[') { memmove(host, host + 1, strlen(host)); host[strcspn(host, "]")] = 0; }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
    if (getaddrinfo(host, port, &hints, &ai)) return -1;
    memcpy(&u->addr, ai->ai_addr, ai->ai_addrlen);
    u->addrlen = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

