/* file_read.c — see file_read.h. Reads by read(2) into a buffer that doubles, rather than
 * trusting st_size, so pipes and files that change size while read still come out whole. */
#include "file_read.h"

#include "alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

gd_status gd_read_whole_file(gd_ctx *ctx, const char *path, size_t limit, const char *what, char **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return gd_ctx_fail(ctx, GD_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || S_ISDIR(sb.st_mode)) {
        int e = errno;
        close(fd);
        return S_ISDIR(sb.st_mode) ? gd_ctx_fail(ctx, GD_ERR_IO, "%s: is a directory, not %s", path, what)
                                   : gd_ctx_fail(ctx, GD_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = gd_malloc(cap);
    gd_status st = GD_OK;
    while (buf != NULL && st == GD_OK) {
        if (len + 1 == cap) { /* room for one more byte and the NUL */
            char *bigger = cap <= SIZE_MAX / 2 ? gd_realloc(buf, cap * 2) : NULL;
            if (bigger == NULL) gd_free(buf);
            buf = bigger;
            cap *= 2;
            continue;
        }
        ssize_t k = read(fd, buf + len, cap - 1 - len);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) st = gd_ctx_fail(ctx, GD_ERR_IO, "%s: read error: %s", path, strerror(errno));
        if (k <= 0) break;
        len += (size_t)k;
        if (limit > 0 && len > limit)
            st = gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: over %zu bytes: not %s", path, limit, what);
    }
    close(fd);
    if (buf == NULL) return gd_ctx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory reading it", path);
    if (st != GD_OK) {
        gd_free(buf);
        return st;
    }
    buf[len] = '\0';
    *out = buf;
    *n = len;
    return GD_OK;
}
