/* tokens.h — the token file (gradus_lm.h's gd_tokens_build and gd_token_data_*).
 *
 * Layout, little-endian:
 *
 *     0   8  magic "GDTOKENS"
 *     8   4  version (1)
 *    12   4  bytes per token: 2 (vocabularies up to 65536) or 4
 *    16   4  vocabulary size
 *    20   4  end-of-document id (0xFFFFFFFF: none)
 *    24   8  tokens N
 *    32   8  documents D
 *    40   8  checksum of the token area
 *    48   8  checksum of the document table
 *    56   8  checksum of bytes 0..55
 *    64      tokens: N tokens, zero-padded to a multiple of 8 bytes
 *     .      document table: D + 1 u64, the token where each document starts, then N
 *
 * Each document is a file's tokens followed by the end-of-document id. The table comes
 * last so that a build can stream tokens to disk and write the table and header at the
 * end. The file's size follows from the header, so a truncated file is seen at once; the
 * checksums and a check that every token is below the vocabulary size catch the rest.
 */
#ifndef GD_TOKENS_H
#define GD_TOKENS_H

#include "gradus_lm.h"

#define GD_TOKFILE_MAGIC "GDTOKENS"
#define GD_TOKFILE_VERSION 1
#define GD_TOKFILE_HEADER 64

/* The checksum of n bytes (n a multiple of 8), continuing from h (start: GD_TOKSUM_INIT). */
#define GD_TOKSUM_INIT 0xCBF29CE484222325ull
uint64_t gd_toksum(uint64_t h, const uint8_t *p, size_t n);

/* Opens a token file held in memory (`name` for messages): what gd_token_data_open does
 * after mapping the file; the data must outlive the reader. The fuzz target calls it. */
gd_status gd_token_data_from_memory(gd_ctx *ctx, const char *name, const uint8_t *data, size_t n, double val_fraction,
                                    gd_token_data **out);

#endif
