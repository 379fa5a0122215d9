/* fuzz_tokenizer_json — libFuzzer target for the tokenizer.json reader and the encoder.
 *
 * The input is read as a tokenizer.json; a tokenizer that loads must encode and decode
 * (the input itself as text) without fault, and give back the bytes exactly when no added
 * token strips spaces. The input is also encoded as text by tokenizers built once from a
 * fixed text, one per pre-tokenizer (GPT-2, Llama 3, Qwen2 with NFC), whose round trip
 * must always hold: that reaches the matchers, the merge loops and NFC with any bytes.
 *
 * That covers the reader (tokenizer_json.c), the encoder and decoder (bpe.c, bpe_encode.c),
 * the trainer that builds the fixed tokenizers (bpe_train.c), the pre-tokenizers
 * (pretok.c), NFC (unicode_nfc.c) and the tables (unicode_tables.c, unicode_nfc_tables.c).
 *
 * Built and run by CMake with -DGRADUS_FUZZ=ON (clang); seeds in tests/fuzz/corpus/tokenizer_json
 * and dictionary tests/fuzz/tokenizer_json.dict.
 */
#include "gradus_lm.h"
#include "io/bpe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static gd_tokenizer *fixed[3];

static void round_trip(const gd_tokenizer *t, const uint8_t *s, size_t n, int must_match)
{
    int32_t *ids = NULL;
    uint8_t *back = NULL;
    size_t k = 0, m = 0;
    if (gd_tokenizer_encode(NULL, t, s, n, &ids, &k) != GD_OK) return; /* out of memory only */
    if (gd_tokenizer_decode(NULL, t, ids, k, &back, &m) != GD_OK) {
        fprintf(stderr, "decode failed on ids encode made\n");
        abort();
    }
    if (must_match && (m != n || memcmp(back, s, n) != 0)) {
        fprintf(stderr, "round trip of %zu bytes gave %zu\n", n, m);
        abort();
    }
    gd_free_mem(ids);
    gd_free_mem(back);
}

static void init_fixed(void)
{
    static const char text[] =
        "In the beginning God created the heaven and the earth. And the earth was without form, and void;\n"
        "It's 2024: caf\xc3\xa9 na\xc3\xafve \xe4\xbd\xa0\xe5\xa5\xbd \xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 "
        "12345 67 8\t\ttabs  spaces   \r\n\r\nx'll y'VE e\xcc\x81 \xe1\x84\x80\xe1\x85\xa1<|endoftext|>next doc";
    for (int k = 0; k < 3; k++) {
        if (gd_tokenizer_train(NULL, (const uint8_t *)text, sizeof text - 1, 300, &fixed[k]) != GD_OK) abort();
        fixed[k]->pretok = k == 0 ? GD_PRETOK_GPT2 : k == 1 ? GD_PRETOK_LLAMA3 : GD_PRETOK_QWEN2;
        fixed[k]->nfc = k == 2;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (fixed[0] == NULL) init_fixed();
    gd_tokenizer *t = NULL;
    if (gd_tokenizer_from_json(NULL, "fuzz.json", (const char *)data, size, &t) == GD_OK) {
        int strips = 0;
        for (int i = 0; i < t->n_added; i++) strips |= t->added[i].lstrip | t->added[i].rstrip;
        round_trip(t, data, size, !strips && !t->nfc);
        size_t len;
        for (int32_t id = -1; id <= gd_tokenizer_vocab_size(t) && id < 1000; id++) gd_tokenizer_token(t, id, &len);
        gd_tokenizer_free(t);
    }
    round_trip(fixed[0], data, size, 1);
    round_trip(fixed[1], data, size, 1);
    round_trip(fixed[2], data, size, 0); /* NFC changes text by design */
    return 0;
}
