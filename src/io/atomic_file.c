/* atomic_file.c — temporary file, fsync, rename: see atomic_file.h. */
#include "atomic_file.h"

#include "alloc.h"
#include "checked.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Distinguishes temporary files of one process (several threads may save at once). */
static unsigned tmp_counter;

gd_status gd_atomic_open(gd_ctx *ctx, const char *path, gd_atomic_file *f)
{
    if (f == NULL) return gd_ctx_fail(ctx, GD_ERR_INVALID, "gd_atomic_open: f is NULL");
    f->fd = -1;
    f->path = f->tmp = NULL;
    if (path == NULL || path[0] == '\0') return gd_ctx_fail(ctx, GD_ERR_INVALID, "writing a file: the path is NULL or empty");
    size_t len = strlen(path), cap;
    /* ".tmp.<pid>.<n>": 5 + 20 + 1 + 10 digits at most, and the NUL */
    if (gd_add_size(len, 40, &cap) != 0) return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: the path is too long", path);
    f->path = gd_strdup(path);
    f->tmp = gd_malloc(cap);
    if (f->path == NULL || f->tmp == NULL) {
        gd_atomic_abort(f);
        return gd_ctx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory", path);
    }
    /* O_EXCL with names unique to this process and call: never another writer's file.
     * Mode 0666 lets the umask decide, as for any new file. */
    for (int attempt = 0; attempt < 100; attempt++) {
        unsigned n = __atomic_fetch_add(&tmp_counter, 1u, __ATOMIC_RELAXED);
        snprintf(f->tmp, cap, "%s.tmp.%ld.%u", path, (long)getpid(), n);
        f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (f->fd >= 0 || errno != EEXIST) break;
    }
    if (f->fd < 0) {
        int e = errno;
        gd_free(f->tmp);
        f->tmp = NULL;
        gd_atomic_abort(f);
        return gd_ctx_fail(ctx, GD_ERR_IO, "%s: cannot create a temporary file beside it: %s", path, strerror(e));
    }
    return GD_OK;
}

gd_status gd_atomic_write(gd_ctx *ctx, gd_atomic_file *f, const void *p, size_t n, const char *what)
{
    const char *b = p;
    while (n > 0) {
        /* one call writes at most this much on Linux anyway; keeps the count in ssize_t */
        size_t chunk = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        ssize_t w = write(f->fd, b, chunk);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            const char *why = w < 0 ? strerror(errno) : "nothing written";
            return gd_ctx_fail(ctx, GD_ERR_IO, "%s: writing %s: %s", f->path, what != NULL ? what : "data", why);
        }
        b += w;
        n -= (size_t)w;
    }
    return GD_OK;
}

/* Flushes the directory holding path so that a rename in it is on disk. Best effort: some
 * filesystems refuse fsync on directories, and the file itself is already safe. */
static void sync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = NULL;
    if (slash == NULL) {
        dir = gd_strdup(".");
    } else {
        size_t len = slash == path ? 1 : (size_t)(slash - path);
        dir = gd_malloc(len + 1);
        if (dir != NULL) {
            memcpy(dir, path, len);
            dir[len] = '\0';
        }
    }
    if (dir == NULL) return;
    int fd = open(dir, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    gd_free(dir);
}

gd_status gd_atomic_commit(gd_ctx *ctx, gd_atomic_file *f)
{
    gd_status st = GD_OK;
    if (fsync(f->fd) != 0) st = gd_ctx_fail(ctx, GD_ERR_IO, "%s: flushing to disk: %s", f->path, strerror(errno));
    int fd = f->fd;
    f->fd = -1;
    if (close(fd) != 0 && st == GD_OK) st = gd_ctx_fail(ctx, GD_ERR_IO, "%s: closing: %s", f->path, strerror(errno));
    if (st == GD_OK && rename(f->tmp, f->path) != 0)
        st = gd_ctx_fail(ctx, GD_ERR_IO, "%s: renaming the temporary file over it: %s", f->path, strerror(errno));
    if (st == GD_OK) {
        gd_free(f->tmp);
        f->tmp = NULL;
        sync_dir(f->path);
    }
    gd_atomic_abort(f);
    return st;
}

void gd_atomic_abort(gd_atomic_file *f)
{
    if (f == NULL) return;
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    if (f->tmp != NULL) unlink(f->tmp);
    gd_free(f->tmp);
    gd_free(f->path);
    f->tmp = f->path = NULL;
}
