/* bench/viewers.c and bench/viewers_ws.c, the compiled viewer client: what they share (each includes it once). */
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
typedef struct { char host[300], path[1024], hostport[300]; struct sockaddr_storage addr; socklen_t addrlen; } Url;

typedef struct {
    int fd, state, url, msg_op;  /* msg_op: the fragmented message's opcode, 0 when none */
    double deadline;
    char *in, *msg, *out;  /* unparsed bytes (a partial frame or handshake), a fragmented message, bytes unwritten */
    size_t in_len, in_cap, msg_len, msg_cap, out_len, out_off;
    int64_t max_step;
    uint64_t seen[WIN / 64];
} Conn;

extern Url urls[MAX_URLS];
extern int nurls, count, hub, epfd;
extern Conn *conns;
extern double timeout_s;
extern const char *origin;
extern char *resume_text;
extern size_t resume_len;
extern long n_connected, n_failed, n_dropped, n_duplicates, n_too_old, n_pairs;
extern long long n_messages, n_bytes;

double now(void);
void *xrealloc(void *p, size_t n);
void error_kind(const char *kind);
void scan(Conn *c, const char *p, size_t n, double t);   /* viewers.c: the series' steps in a message */
/* viewers_ws.c: the sockets and the protocol */
void fail(Conn *c, const char *kind), want_write(Conn *c, int on), flush_out(Conn *c), start_conn(int i);
void send_handshake(Conn *c), on_readable(Conn *c);
int parse_url(const char *s, Url *u);
