/* gd_dist without a launcher: a process alone is a job of one; three forked processes
 * meet at a TCP rendezvous and sum in rank order (values chosen so that another order
 * gives other bits), in buckets smaller than the data, broadcast from a rank other than
 * 0, and fail with a message naming the waiting rank when one of them never comes back —
 * within the timeout, not forever. Bad launch variables are refused by name. */
#include "gradus_dist.h"
#include "testutil.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N 1000
#define RANKS 3

static float value(int rank, int i)
{
    /* large and small values: (a + b) + c differs from a + (b + c) for many i */
    static const float big[RANKS] = {1e8f, 3.0f, -1e8f};
    return big[rank] + (float)((i * 7 + rank * 13) % 17) * 0.37f;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A port no one listens on now: the one the kernel gives a socket bound to port 0 (a fixed
 * pick could be taken, by another test running beside this one or by an outgoing
 * connection's ephemeral port). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = 0};
    socklen_t len = sizeof a;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port > 0 ? port : 30000 + (int)(getpid() % 20000);
}

/* One rank of the job; the exit status says what went wrong (0: all as expected). The job
 * where every rank answers has time to spare on a loaded machine; the one where a rank
 * stops answering checks the 3-second timeout itself. */
static int rank_main(int rank, int port, int vanish)
{
    char p[16], r[16];
    snprintf(p, sizeof p, "%d", port);
    snprintf(r, sizeof r, "%d", rank);
    setenv("RANK", r, 1);
    setenv("WORLD_SIZE", "3", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", p, 1);
    gd_ctx *c = NULL;
    if (gd_ctx_create(&c, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .no_plugins = 1}) != GD_OK) return 10;
    gd_dist *d = NULL;
    gd_dist_options o = {.size = sizeof o, .timeout_s = vanish ? 3 : 30, .bucket_bytes = 64}; /* 16 floats a bucket */
    if (gd_dist_open(c, &o, &d) != GD_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, gd_ctx_error(c));
        return 11;
    }
    if (gd_dist_rank(d) != rank || gd_dist_size(d) != RANKS || strcmp(gd_dist_transport(d), "tcp") != 0) return 12;
    float *x = malloc(N * sizeof *x);
    for (int i = 0; i < N; i++) x[i] = value(rank, i);
    if (gd_dist_allreduce_f32(d, x, N, "test values") != GD_OK) return 13;
    for (int i = 0; i < N; i++) {
        float want = value(0, i);
        for (int k = 1; k < RANKS; k++) want += value(k, i);
        if (memcmp(&want, &x[i], sizeof want) != 0) {
            fprintf(stderr, "rank %d: element %d is %.9g, the sum in rank order is %.9g\n", rank, i, x[i], want);
            return 14;
        }
    }
    double y[3] = {rank, rank * 10.0, 0.5};
    if (gd_dist_allreduce_f64(d, y, 3, "doubles") != GD_OK || y[0] != 3 || y[1] != 30 || y[2] != 1.5) return 15;
    char msg[100];
    snprintf(msg, sizeof msg, "%s", rank == 2 ? "from rank 2, more than one bucket of bytes long......" : "");
    if (gd_dist_broadcast(d, msg, sizeof msg, 2, "a message") != GD_OK ||
        strcmp(msg, "from rank 2, more than one bucket of bytes long......") != 0)
        return 16;
    if (vanish && rank == 1) {
        /* rank 1 stops answering; the others must give up after the timeout */
        sleep(5);
        _exit(0);
    }
    double t0 = now_s();
    gd_status st = gd_dist_barrier(d, "the barrier after the broadcast");
    double took = now_s() - t0;
    int rc = 0;
    if (vanish) {
        char want[64];
        snprintf(want, sizeof want, "rank %d of 3: the barrier after the broadcast: ", rank);
        if (st == GD_OK || strstr(gd_ctx_error(c), want) == NULL || !gd_dist_broken(d)) rc = 17;
        if (rank == 0 && strstr(gd_ctx_error(c), "no answer from rank 1 within 3 s") == NULL) rc = 18;
        if (took > 10) rc = 19;
        if (rc != 0) fprintf(stderr, "rank %d after %.1f s: %s\n", rank, took, gd_ctx_error(c));
    } else if (st != GD_OK) {
        rc = 20;
    }
    free(x);
    gd_dist_close(d);
    gd_ctx_free(c);
    return rc;
}

static void job(int port, int vanish, const char *name)
{
    pid_t pids[RANKS];
    for (int r = RANKS - 1; r >= 0; r--) { /* rank 0 last: the others wait for it to listen */
        pids[r] = fork();
        if (pids[r] == 0) _exit(rank_main(r, port, vanish));
    }
    for (int r = 0; r < RANKS; r++) {
        int status = 0;
        waitpid(pids[r], &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: rank %d exited with %d", name, r,
              WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
}

int main(void)
{
    if (gd_ctx_create(&ctx, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .no_plugins = 1}) != GD_OK) return 1;
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMI_SIZE");
    unsetenv("PMIX_RANK");
    unsetenv("WORLD_SIZE");
    CHECK(!gd_dist_launched(), "no launch variables: not launched");
    gd_dist *d = NULL;
    CHECK(gd_dist_open(ctx, NULL, &d) == GD_OK && gd_dist_size(d) == 1 && gd_dist_rank(d) == 0 &&
              strcmp(gd_dist_transport(d), "single") == 0,
          "alone: a job of one: %s", gd_ctx_error(ctx));
    float v[2] = {1.5f, -2.0f};
    CHECK(gd_dist_allreduce_f32(d, v, 2, "x") == GD_OK && v[0] == 1.5f && v[1] == -2.0f, "a sum over one rank");
    gd_dist_close(d);
    CHECK(gd_dist_allreduce_f32(NULL, v, 2, "x") != GD_OK && gd_dist_broadcast(NULL, v, 8, 0, "x") != GD_OK &&
              gd_dist_size(NULL) == 1 && gd_dist_open(ctx, NULL, NULL) != GD_OK,
          "NULL arguments refused");

    setenv("WORLD_SIZE", "2", 1);
    setenv("RANK", "5", 1);
    CHECK(gd_dist_launched(), "WORLD_SIZE set: launched");
    CHECK(gd_dist_open(ctx, NULL, &d) == GD_ERR_INVALID && strstr(gd_ctx_error(ctx), "RANK=5, WORLD_SIZE=2") != NULL,
          "RANK outside WORLD_SIZE: %s", gd_ctx_error(ctx));
    setenv("RANK", "1", 1);
    unsetenv("MASTER_ADDR");
    CHECK(gd_dist_open(ctx, NULL, &d) == GD_ERR_INVALID && strstr(gd_ctx_error(ctx), "MASTER_ADDR and MASTER_PORT") != NULL,
          "no rendezvous: %s", gd_ctx_error(ctx));
    setenv("GRADUS_DIST_TIMEOUT", "soon", 1);
    CHECK(gd_dist_open(ctx, NULL, &d) == GD_ERR_INVALID && strstr(gd_ctx_error(ctx), "GRADUS_DIST_TIMEOUT=soon") != NULL,
          "a bad timeout: %s", gd_ctx_error(ctx));
    unsetenv("GRADUS_DIST_TIMEOUT");
    unsetenv("WORLD_SIZE");
    unsetenv("RANK");

    fflush(stdout);
    fflush(stderr);
    job(free_port(), 0, "three ranks");
    job(free_port(), 1, "a rank that stops answering");
    return tu_finish("test_dist");
}
