/* dist_tcp.c — gd_dist over TCP, for jobs launched with RANK, WORLD_SIZE, MASTER_ADDR and
 * MASTER_PORT (the rendezvous) instead of mpirun. Needs nothing but sockets.
 *
 * A star: rank 0 listens at the rendezvous and every other rank connects to it. A sum is
 * every rank sending its bucket to rank 0, which adds them in rank order and sends the
 * result back; a broadcast goes through rank 0. Simple rather than fast (rank 0 moves
 * N buckets each way): it is the path that works anywhere; MPI and the device collectives
 * are the fast ones.
 *
 * Every message has a header (kind, sequence number, size), so ranks that fall out of step
 * are named instead of mixing data; every wait is bounded by the timeout. */
#include "alloc.h"
#include "dist_impl.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAGIC 0x53444447u /* "GDDS" */
enum { K_HELLO = 1, K_REDUCE = 2, K_RESULT = 3, K_BCAST = 4 };

typedef struct hdr {
    uint32_t magic, kind;
    uint64_t seq, bytes;
} hdr;

typedef struct tcp_state {
    int *fd;          /* rank 0: a socket per rank (fd[0] unused); others: fd[0] is rank 0 */
    uint64_t seq;
    void *scratch;
    size_t scratch_bytes;
} tcp_state;

static int wait_fd(int fd, short ev, double deadline)
{
    for (;;) {
        double left = deadline - gd_dist_now();
        if (left <= 0) return 0;
        struct pollfd p = {.fd = fd, .events = ev};
        int ms = left > 1e6 ? 1000000000 : (int)(left * 1000) + 1;
        int r = poll(&p, 1, ms);
        if (r > 0) return 1;
        if (r < 0 && errno != EINTR) return -1;
    }
}

/* 0 on success; -1 timeout; -2 the peer closed or the socket failed (errno) */
static int send_all(int fd, const void *buf, size_t n, double deadline)
{
    const char *p = buf;
    while (n > 0) {
        int w = wait_fd(fd, POLLOUT, deadline);
        if (w == 0) return -1;
        if (w < 0) return -2;
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k <= 0) return -2;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int recv_all(int fd, void *buf, size_t n, double deadline)
{
    char *p = buf;
    while (n > 0) {
        int w = wait_fd(fd, POLLIN, deadline);
        if (w == 0) return -1;
        if (w < 0) return -2;
        ssize_t k = recv(fd, p, n, 0);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k <= 0) {
            errno = k == 0 ? ECONNRESET : errno;
            return -2;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static gd_status io_fail(gd_dist *d, const char *what, int rc, int peer, const char *doing)
{
    if (rc == -1)
        return gd_dist_fail(d, GD_ERR_DEVICE, what,
                            "no answer from rank %d within %g s (%s): a rank died, hangs or stopped early", peer,
                            d->timeout_s, doing);
    return gd_dist_fail(d, GD_ERR_DEVICE, what, "lost the connection to rank %d (%s): %s", peer, doing,
                        strerror(errno));
}

static gd_status send_msg(gd_dist *d, int peer, int fd, uint32_t kind, const void *buf, size_t n, double deadline,
                          const char *what)
{
    tcp_state *t = d->impl;
    hdr h = {MAGIC, kind, t->seq, n};
    int rc = send_all(fd, &h, sizeof h, deadline);
    if (rc == 0 && n > 0) rc = send_all(fd, buf, n, deadline);
    return rc == 0 ? GD_OK : io_fail(d, what, rc, peer, "sending");
}

static gd_status recv_msg(gd_dist *d, int peer, int fd, uint32_t kind, void *buf, size_t n, double deadline,
                          const char *what)
{
    tcp_state *t = d->impl;
    hdr h;
    int rc = recv_all(fd, &h, sizeof h, deadline);
    if (rc != 0) return io_fail(d, what, rc, peer, "receiving");
    if (h.magic != MAGIC || h.kind != kind || h.seq != t->seq || h.bytes != n)
        return gd_dist_fail(d, GD_ERR_DEVICE, what,
                            "rank %d is out of step: it sent message %llu of kind %u with %llu bytes, this rank "
                            "expected message %llu of kind %u with %zu bytes",
                            peer, (unsigned long long)h.seq, h.kind, (unsigned long long)h.bytes,
                            (unsigned long long)t->seq, kind, n);
    rc = n > 0 ? recv_all(fd, buf, n, deadline) : 0;
    return rc == 0 ? GD_OK : io_fail(d, what, rc, peer, "receiving");
}

static gd_status tcp_allreduce(gd_dist *d, void *buf, size_t n, gd_dist_elem e, const char *what)
{
    tcp_state *t = d->impl;
    size_t bytes = n * gd_dist_elem_size(e);
    double deadline = gd_dist_now() + d->timeout_s;
    gd_status st = GD_OK;
    t->seq++;
    if (d->rank != 0) {
        st = send_msg(d, 0, t->fd[0], K_REDUCE, buf, bytes, deadline, what);
        if (st == GD_OK) st = recv_msg(d, 0, t->fd[0], K_RESULT, buf, bytes, deadline, what);
        return st;
    }
    size_t need = bytes * (size_t)d->size;
    if (need > t->scratch_bytes) {
        void *s = gd_realloc(t->scratch, need);
        if (s == NULL) return gd_dist_fail(d, GD_ERR_NOMEM, what, "out of memory for %zu bytes of scratch", need);
        t->scratch = s;
        t->scratch_bytes = need;
    }
    memcpy(t->scratch, buf, bytes);
    for (int r = 1; r < d->size && st == GD_OK; r++)
        st = recv_msg(d, r, t->fd[r], K_REDUCE, (char *)t->scratch + (size_t)r * bytes, bytes, deadline, what);
    if (st != GD_OK) return st;
    gd_dist_sum_in_order(buf, t->scratch, d->size, n, e);
    for (int r = 1; r < d->size && st == GD_OK; r++) st = send_msg(d, r, t->fd[r], K_RESULT, buf, bytes, deadline, what);
    return st;
}

static gd_status tcp_broadcast(gd_dist *d, void *buf, size_t bytes, int root, const char *what)
{
    tcp_state *t = d->impl;
    double deadline = gd_dist_now() + d->timeout_s;
    gd_status st = GD_OK;
    t->seq++;
    if (d->rank != 0) {
        if (d->rank == root) st = send_msg(d, 0, t->fd[0], K_BCAST, buf, bytes, deadline, what);
        if (st == GD_OK) st = recv_msg(d, 0, t->fd[0], K_RESULT, buf, bytes, deadline, what);
        return st;
    }
    if (root != 0) st = recv_msg(d, root, t->fd[root], K_BCAST, buf, bytes, deadline, what);
    for (int r = 1; r < d->size && st == GD_OK; r++) st = send_msg(d, r, t->fd[r], K_RESULT, buf, bytes, deadline, what);
    return st;
}

static void tcp_close(gd_dist *d, int broken)
{
    tcp_state *t = d->impl;
    if (t == NULL) return;
    for (int r = 0; r < d->size; r++)
        if (t->fd[r] >= 0) close(t->fd[r]);
    gd_free(t->fd);
    gd_free(t->scratch);
    gd_free(t);
    d->impl = NULL;
}

static const gd_dist_ops tcp_ops = {"tcp", tcp_allreduce, tcp_broadcast, tcp_close};

/* Rank 0: listens at the rendezvous and takes one connection from every other rank. */
static gd_status accept_all(gd_dist *d, struct addrinfo *ai, const char *where, double deadline)
{
    tcp_state *t = d->impl;
    int ls = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol), one = 1;
    if (ls < 0) return gd_dist_fail(d, GD_ERR_IO, "rendezvous", "socket: %s", strerror(errno));
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(ls, ai->ai_addr, ai->ai_addrlen) != 0 || listen(ls, d->size) != 0) {
        gd_status st = gd_dist_fail(d, GD_ERR_IO, "rendezvous", "cannot listen at %s: %s", where, strerror(errno));
        close(ls);
        return st;
    }
    gd_status st = GD_OK;
    for (int got = 1; got < d->size && st == GD_OK;) {
        int w = wait_fd(ls, POLLIN, deadline);
        if (w <= 0) {
            st = gd_dist_fail(d, GD_ERR_DEVICE, "rendezvous", "%d of %d ranks connected to %s within %g s", got,
                              d->size, where, d->timeout_s);
            break;
        }
        int fd = accept(ls, NULL, NULL);
        if (fd < 0) continue;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        hdr h;
        int rc = recv_all(fd, &h, sizeof h, deadline);
        int r = (int)h.seq;
        if (rc != 0 || h.magic != MAGIC || h.kind != K_HELLO || h.bytes != (uint64_t)d->size || r < 1 ||
            r >= d->size || t->fd[r] >= 0) {
            /* not one of ours, or a rank that came twice */
            st = rc == 0 && h.magic == MAGIC && h.kind == K_HELLO
                     ? gd_dist_fail(d, GD_ERR_INVALID, "rendezvous",
                                    "a process said it is rank %d of %llu (this job: %d ranks, rank %d already %s)", r,
                                    (unsigned long long)h.bytes, d->size, r,
                                    r >= 1 && r < d->size && t->fd[r] >= 0 ? "joined" : "impossible")
                     : GD_OK;
            close(fd);
            continue;
        }
        t->fd[r] = fd;
        got++;
    }
    close(ls);
    hdr ok = {MAGIC, K_HELLO, 0, (uint64_t)d->size};
    for (int r = 1; r < d->size && st == GD_OK; r++) {
        int rc = send_all(t->fd[r], &ok, sizeof ok, deadline);
        if (rc != 0) st = io_fail(d, "rendezvous", rc, r, "welcoming");
    }
    return st;
}

/* Any other rank: connects to the rendezvous (rank 0 may not be listening yet). */
static gd_status connect_root(gd_dist *d, struct addrinfo *ai, const char *where, double deadline)
{
    tcp_state *t = d->impl;
    int one = 1;
    for (;;) {
        int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd < 0) return gd_dist_fail(d, GD_ERR_IO, "rendezvous", "socket: %s", strerror(errno));
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            t->fd[0] = fd;
            break;
        }
        int e = errno;
        close(fd);
        if (gd_dist_now() > deadline)
            return gd_dist_fail(d, GD_ERR_DEVICE, "rendezvous", "cannot reach rank 0 at %s within %g s: %s", where,
                                d->timeout_s, strerror(e));
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    hdr h = {MAGIC, K_HELLO, (uint64_t)d->rank, (uint64_t)d->size};
    int rc = send_all(t->fd[0], &h, sizeof h, deadline);
    if (rc == 0) rc = recv_all(t->fd[0], &h, sizeof h, deadline);
    if (rc != 0) return io_fail(d, "rendezvous", rc, 0, "joining");
    if (h.magic != MAGIC || h.kind != K_HELLO || h.bytes != (uint64_t)d->size)
        return gd_dist_fail(d, GD_ERR_INVALID, "rendezvous", "rank 0 at %s answered as a job of %llu ranks", where,
                            (unsigned long long)h.bytes);
    return GD_OK;
}

gd_status gd_dist_tcp_open(gd_dist *d, int rank, int size, int local_rank, const char *addr, const char *port)
{
    d->rank = rank;
    d->size = size;
    d->local_rank = local_rank;
    tcp_state *t = gd_calloc(1, sizeof *t);
    int *fd = t != NULL ? gd_malloc(sizeof *fd * (size_t)size) : NULL;
    if (fd == NULL) {
        gd_free(t);
        return gd_ctx_fail(d->ctx, GD_ERR_NOMEM, "gd_dist_open: out of memory");
    }
    for (int r = 0; r < size; r++) fd[r] = -1;
    t->fd = fd;
    d->impl = t;
    d->ops = &tcp_ops;
    char where[300];
    snprintf(where, sizeof where, "%s:%s", addr, port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int g = getaddrinfo(addr, port, &hints, &ai);
    gd_status st = g != 0 ? gd_dist_fail(d, GD_ERR_INVALID, "rendezvous", "MASTER_ADDR:MASTER_PORT %s: %s", where,
                                         gai_strerror(g))
                          : GD_OK;
    double deadline = gd_dist_now() + d->timeout_s;
    if (st == GD_OK) st = rank == 0 ? accept_all(d, ai, where, deadline) : connect_root(d, ai, where, deadline);
    if (ai != NULL) freeaddrinfo(ai);
    if (st != GD_OK) {
        tcp_close(d, 1);
        d->ops = NULL;
    }
    return st;
}
