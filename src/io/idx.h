/* idx.h — decoding IDX datasets held in memory.
 *
 * gd_dataset_load_idx reads two files and hands their bytes here; the decoder is apart so
 * that tests and the fuzz targets can feed it bytes without touching the file system. */
#ifndef GD_IDX_H
#define GD_IDX_H

#include "gradus_classifier.h"

#include <stddef.h>
#include <stdint.h>

/* Decodes an image file and a label file (each plain IDX or gzip of it) into *out, as
 * gd_dataset_load_idx does; the names stand for the files in messages. On failure *out
 * is left empty and the context's message names the file and what is wrong with it. */
gd_status gd_idx_decode(gd_ctx *ctx, const char *images_name, const uint8_t *images, size_t images_n,
                        const char *labels_name, const uint8_t *labels, size_t labels_n, gd_dataset *out);

#endif
