/* atomic_file.h — writing a file so that a reader sees either the old file or the whole
 * new one, never a part.
 *
 * The bytes go to a temporary file beside the target (the same directory, so the same
 * filesystem, where rename is atomic), which is flushed to disk before it is renamed over
 * the target; the directory is flushed after, so that the rename survives a crash too. A
 * failure at any step removes the temporary file and leaves the target as it was.
 * Messages go to ctx (may be NULL) and name the target.
 */
#ifndef GD_ATOMIC_FILE_H
#define GD_ATOMIC_FILE_H

#include "gradus.h"

typedef struct gd_atomic_file {
    int fd;
    char *path; /* the target */
    char *tmp;  /* the temporary file, NULL once renamed or removed */
} gd_atomic_file;

gd_status gd_atomic_open(gd_ctx *ctx, const char *path, gd_atomic_file *f);
/* Writes all n bytes (short writes and interrupts are retried); `what` (may be NULL)
 * says what was being written, for the message. */
gd_status gd_atomic_write(gd_ctx *ctx, gd_atomic_file *f, const void *p, size_t n, const char *what);
/* Flushes, closes and renames; the file is released whatever the outcome. */
gd_status gd_atomic_commit(gd_ctx *ctx, gd_atomic_file *f);
/* Removes the temporary file and releases f (after a failure, or to give up). */
void gd_atomic_abort(gd_atomic_file *f);

#endif
