/* fuzz_token_file — libFuzzer target for the token-file reader: any bytes are either
 * refused or give a reader whose batches hold ids inside the vocabulary, targets shifted
 * by one, and whose positions advance. Each input is read twice: as it is, and with its
 * checksums made right, so that mutations reach the checks behind them (sizes, the
 * document table, token ranges, the split) instead of all stopping at a checksum.
 * The reader is tokens.c (gd_token_data_from_memory); tokens_build.c writes these files.
 *
 * Built and run by CMake with -DGRADUS_FUZZ=ON (clang); seeds in tests/fuzz/corpus/token_file.
 */
#include "gradus_lm.h"
#include "io/tokens.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rd(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; k--) v = v << 8 | p[k];
    return v;
}

static void wr(uint8_t *p, uint64_t v)
{
    for (int k = 0; k < 8; k++) p[k] = (uint8_t)(v >> (8 * k));
}

static void fix_checksums(uint8_t *p, size_t n)
{
    uint64_t width = rd(p + 12, 4), nt = rd(p + 24, 8), nd = rd(p + 32, 8);
    if ((width == 2 || width == 4) && nt < ((uint64_t)1 << 40) && nd < ((uint64_t)1 << 40)) {
        uint64_t area = (nt * width + 7) & ~(uint64_t)7, table = (nd + 1) * 8;
        if (GD_TOKFILE_HEADER + area + table == n) {
            wr(p + 40, gd_toksum(GD_TOKSUM_INIT, p + GD_TOKFILE_HEADER, area));
            wr(p + 48, gd_toksum(GD_TOKSUM_INIT, p + GD_TOKFILE_HEADER + area, table));
        }
    }
    wr(p + 56, gd_toksum(GD_TOKSUM_INIT, p, 56));
}

static void check(const uint8_t *data, size_t size)
{
    gd_token_data *d = NULL;
    double frac = size > 0 ? (data[size - 1] % 4) * 0.25 : 0.1;
    if (gd_token_data_from_memory(NULL, "fuzz.tok", data, size, frac, &d) != GD_OK) return;
    int32_t vocab = gd_token_data_vocab(d);
    int64_t train = gd_token_data_tokens(d, GD_SPLIT_TRAIN), val = gd_token_data_tokens(d, GD_SPLIT_VAL);
    if (train < 0 || val < 0) abort();
    int32_t x[3 * 5], y[3 * 5];
    gd_data_pos pos = {.seed = size, .epoch = 0, .index = 0};
    for (int split = 0; split < 2; split++)
        for (int64_t T = 1; T <= 5; T += 2) {
            for (int rep = 0; rep < 3; rep++) {
                if (gd_token_data_batch(d, split, 3, T, &pos, x, y) != GD_OK) break;
                for (int64_t i = 0; i < 3 * T; i++) {
                    if (x[i] < 0 || x[i] >= vocab || y[i] < 0 || y[i] >= vocab) abort();
                    if (i % T != T - 1 && x[i + 1] != y[i]) abort();
                }
            }
        }
    gd_token_data_close(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check(data, size);
    if (size >= GD_TOKFILE_HEADER) {
        uint8_t *copy = malloc(size);
        if (copy == NULL) return 0;
        memcpy(copy, data, size);
        fix_checksums(copy, size);
        check(copy, size);
        free(copy);
    }
    return 0;
}
