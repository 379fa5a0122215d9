/* cli.h — the `gradus` command.
 *
 * Each subcommand lives in its own file, src/cli/cmd_<name>.c, as one function
 * `int cmd_<name>(int argc, char **argv)` (argv[0] is the subcommand's name; the return
 * value is the exit status). Adding one is: write the file, declare the function below,
 * add a row to the table in main.c. */
#ifndef GD_CLI_H
#define GD_CLI_H

#include "gradus.h"
#include "gradus_lm.h"

#include <stdint.h>

typedef struct cli_command {
    const char *name;
    const char *summary;              /* one line for `gradus --help` */
    int (*run)(int argc, char **argv);
} cli_command;

int cmd_train(int argc, char **argv);
int cmd_train_lm(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_sweep(int argc, char **argv);
int cmd_devices(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_plot(int argc, char **argv);

/* Helpers shared by the commands (main.c). Each parses `value`, the argument of option
 * `opt`, and on failure prints "gradus: bad value ... for --opt" to stderr and returns 0. */
int cli_int(const char *opt, const char *value, int64_t lo, int64_t hi, int64_t *out);
int cli_double(const char *opt, const char *value, double lo, double hi, double *out);
/* `gradus generate --batch B` (generate_batch.c): B continuations of the prompt (n ids;
 * its text, or NULL) decoded together and printed one per line; 1 on success, else 0
 * with the error printed. */
int cli_generate_batch(gd_ctx *ctx, const char *dir, const gd_tokenizer *tok, const char *prompt, const int32_t *ids,
                       int64_t n, int64_t B, const gd_lm_generate_config *gc, int print_ids);
/* --quantize: "int8" (weights) or "w8a8" (weights and activations). */
int cli_quantize(const char *opt, const char *value, gd_lm_quant *out);
/* A compute dtype: "f32", "bf16" or "f16". */
int cli_float_dtype(const char *opt, const char *value, gd_dtype *out);
/* For options with an argument: returns argv[*i + 1] and advances *i, or prints
 * "option --x needs a value" and returns NULL. */
const char *cli_value(int argc, char **argv, int *i);
/* Whether `a` is one of the NULL-terminated `names` (a command's options that take values). */
int cli_is_one_of(const char *a, const char *const *names);
/* Prints `gradus CMD: unknown option "a"` (or unexpected argument, for a word that does not
 * start with '-'), pointing at CMD's --help; returns 2, the exit status for a bad command line. */
int cli_unknown(const char *cmd, const char *a);
/* The tokenizer for a model: the --tokenizer file when given, else the tokenizer.json of the
 * checkpoint or training directory `model` (dir gets the checkpoint resolved, or the model
 * path when it is a file, as a llama2.c checkpoint; a training directory's `latest` file
 * stands for the directory). *tok is NULL when there is none and
 * none was asked for. 0 with the reason printed (an unreadable tokenizer, an unknown model). */
int cli_model_tokenizer(gd_ctx *ctx, const char *cmd, const char *model, const char *tokenizer, char *dir, size_t cap,
                        gd_tokenizer **tok);
/* Creates a context, prefers `backend` when it is not NULL, prints errors; NULL on failure. */
gd_ctx *cli_ctx(const char *backend);

/* Profiling for commands that train or generate (cmd_profile.c). --profile FILE: starts
 * recording (path NULL: nothing to do); 0 with the reason printed when the file cannot be
 * written. When the work is done: writes the trace (of --profile, or of GRADUS_PROFILE)
 * and prints its summary; 0 with the reason printed when it could not be written, which
 * loses the trace only. A command adds profiling with these two calls. */
int cli_profile_start(gd_ctx *ctx, const char *cmd, const char *path);
int cli_profile_finish(gd_ctx *ctx, const char *cmd);

/* mkdir -p: the directory and its parents; 0 with "gradus CMD: PATH: reason" printed. */
int cli_mkdirs(const char *cmd, const char *path);

/* Text of the --data paths (files, or directories walked in sorted order, hidden entries
 * skipped), up to cap bytes in all (corpus.c). Set cap, leave buf NULL: the first read
 * allocates it; free(buf) when done. 0, with "gradus CMD: PATH: reason" printed, when a
 * path cannot be read. */
typedef struct cli_corpus {
    uint8_t *buf;
    size_t len, cap;
    int64_t files;
} cli_corpus;
int cli_corpus_read(const char *cmd, cli_corpus *c, const char *path);

#endif
