/* inflate.h — a DEFLATE (RFC 1951) and gzip (RFC 1952) decoder.
 *
 * Written here rather than linked from zlib so that a machine with only a C compiler can
 * read the gzip-compressed datasets. Decoding only: nothing in gradus writes gzip.
 * Errors come back as a status (gradus.h) and a message in err[]; callers prefix the
 * file name. */
#ifndef GD_INFLATE_H
#define GD_INFLATE_H

#include "gradus.h"

#include <stddef.h>
#include <stdint.h>

/* CRC-32 (ISO 3309, the one gzip stores); pass crc = 0 to start, the result to continue. */
uint32_t gd_crc32(uint32_t crc, const void *data, size_t n);

/* 1 when the bytes start with the gzip magic 1f 8b. */
int gd_is_gzip(const uint8_t *p, size_t n);

/* Decodes one raw DEFLATE stream from in[0..n), appending to the malloc'd buffer
 * *out (*out_n bytes used, *out_cap allocated; all may start as NULL/0). *out_n never
 * grows past max_out: producing more fails as soon as it happens, with *out_n = max_out
 * and that prefix of the output in place, because a few megabytes of DEFLATE can expand
 * to gigabytes and a reader that knows how much it wants should not pay for the rest.
 * On success *consumed is the number of input bytes the stream occupied, up to its final
 * block. */
gd_status gd_inflate(const uint8_t *in, size_t n, size_t max_out, size_t *consumed, uint8_t **out,
                     size_t *out_n, size_t *out_cap, char *err, size_t err_cap);

/* Decodes a whole gzip file (one or more concatenated members), checking each member's
 * header, CRC-32 and ISIZE. On success *out is a malloc'd buffer of *out_n bytes (NULL
 * when there are none). Decoding stops with an error as soon as the output would pass
 * max_out bytes (SIZE_MAX: no bound). On failure *out is NULL and *out_n the number of
 * bytes decoded when it was found: more than max_out tells that the bound stopped it. */
gd_status gd_gunzip(const uint8_t *in, size_t n, size_t max_out, uint8_t **out, size_t *out_n, char *err,
                    size_t err_cap);

/* The first `want` decoded bytes of a gzip file into out[0..want), decoding no further,
 * for a reader that must see a header before it knows how large the data may be. Those
 * bytes are not covered by a CRC yet (the member is unfinished); the full decode checks
 * them. *got is want, or less when the whole file decodes (and checks) to fewer bytes. */
gd_status gd_gunzip_head(const uint8_t *in, size_t n, size_t want, uint8_t *out, size_t *got, char *err,
                         size_t err_cap);

#endif
