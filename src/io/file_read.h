/* file_read.h — a whole file read into memory, for the loaders of small text formats
 * (tokenizer.json, config.json, trainer.json, the documents of a corpus). */
#ifndef GD_FILE_READ_H
#define GD_FILE_READ_H

#include "gradus.h"

#include <stddef.h>

/* Reads all of path into *out (allocated with gd_malloc, free with gd_free), NUL-terminated
 * after its *n bytes. A file of more than `limit` bytes (0: no limit) is refused as
 * GD_ERR_FORMAT, "PATH: over LIMIT bytes: not WHAT"; so is a directory. Messages go to ctx
 * and name the file. */
gd_status gd_read_whole_file(gd_ctx *ctx, const char *path, size_t limit, const char *what, char **out, size_t *n);

#endif
