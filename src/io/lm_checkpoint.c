/* lm_checkpoint.c — training checkpoints: a directory a run can resume from and that
 * `transformers` loads as a model.
 *
 *   <out>/ckpt-00000100/config.json          the model (Hugging Face config)
 *                      /model.safetensors    parameters, by their Hugging Face names
 *                      /tokenizer.json       when the run has a tokenizer
 *                      /optimizer.safetensors  AdamW's moments and step
 *                      /trainer.json         step, data position, seed (and the loss
 *                                            scaler's state, when the run scales)
 *   <out>/latest                             "ckpt-00000100\n"
 *
 * Atomicity: a checkpoint is written into ckpt-<step>.tmp, which is renamed to
 * ckpt-<step> only when every file in it is complete and flushed; then `latest` is
 * replaced by renaming a new file over it, and older checkpoints are removed. A process
 * killed at any point leaves `latest` naming a whole checkpoint. */
#define _DEFAULT_SOURCE 1
#include "alloc.h"
#include "gradus_lm.h"
#include "file_read.h"
#include "lm_checkpoint.h"
#include "hf_weights.h"
#include "llama2c.h"
#include "json.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The states gd_optimizer_adamw and the trainer make, per parameter and per graph. */
static const char *const param_state_suffixes[] = {"adam_m", "adam_v", "grad_acc", NULL};
static const char *const graph_states[] = {"optim.step", NULL};

static gd_status fail(gd_ctx *ctx, gd_status s, const char *path, const char *what)
{
    return gd_ctx_fail(ctx, s, "checkpoint %s: %s", path, what);
}

/* ---- files and directories ---------------------------------------------------------------- */

static int write_file_atomic(const char *path, const char *data, size_t n)
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return -1;
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, data + done, n - done);
        if (w <= 0) {
            close(fd);
            unlink(tmp);
            return -1;
        }
        done += (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        unlink(tmp);
        return -1;
    }
    return rename(tmp, path);
}

static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static void sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* ---- reading tensors of a graph to the host ------------------------------------------------- */

typedef struct host_set {
    gd_st_entry *e;
    void **buf;
    char **names;
    int n, cap;
} host_set;

static void set_free(host_set *s)
{
    for (int i = 0; i < s->n; i++) {
        gd_free(s->buf[i]);
        gd_free(s->names[i]);
    }
    gd_free(s->e);
    gd_free(s->buf);
    gd_free(s->names);
}

/* Adds tensor t (read from the graph) under `name`; returns a status. */
static gd_status set_add(gd_ctx *ctx, host_set *s, gd_tensor *t, const char *name)
{
    if (s->n == s->cap) {
        int c = s->cap ? s->cap * 2 : 64;
        gd_st_entry *e = gd_realloc(s->e, sizeof *e * (size_t)c);
        void **b = e != NULL ? gd_realloc(s->buf, sizeof *b * (size_t)c) : NULL;
        char **nm = b != NULL ? gd_realloc(s->names, sizeof *nm * (size_t)c) : NULL;
        if (e != NULL) s->e = e;
        if (b != NULL) s->buf = b;
        if (nm == NULL) return gd_ctx_fail(ctx, GD_ERR_NOMEM, "checkpoint: out of memory");
        s->names = nm;
        s->cap = c;
    }
    size_t bytes = (size_t)gd_tensor_numel(t) * gd_dtype_size(gd_tensor_dtype(t));
    void *buf = gd_malloc(bytes ? bytes : 1);
    char *nm = gd_strdup(name);
    if (buf == NULL || nm == NULL) {
        gd_free(buf);
        gd_free(nm);
        return gd_ctx_fail(ctx, GD_ERR_NOMEM, "checkpoint: out of memory for %s (%zu bytes)", name, bytes);
    }
    gd_status st = gd_tensor_read(t, buf, bytes);
    if (st != GD_OK) {
        gd_free(buf);
        gd_free(nm);
        return st;
    }
    gd_st_entry *x = &s->e[s->n];
    memset(x, 0, sizeof *x);
    x->name = nm;
    x->dtype = gd_tensor_dtype(t);
    x->ndim = gd_tensor_ndim(t);
    for (int k = 0; k < x->ndim; k++) x->shape[k] = gd_tensor_dim(t, k);
    x->data = buf;
    s->buf[s->n] = buf;
    s->names[s->n] = nm;
    s->n++;
    return GD_OK;
}

/* ---- saving --------------------------------------------------------------------------------- */

static gd_status write_trainer_json(gd_ctx *ctx, const char *path, const gd_lm_state *st)
{
    gd_json_out o = {0};
    gd_json_begin_object(&o);
    gd_json_key(&o, "format");
    gd_json_cstring(&o, "gradus-trainer");
    gd_json_key(&o, "version");
    gd_json_int(&o, 1);
    gd_json_key(&o, "step");
    gd_json_int(&o, st->step);
    gd_json_key(&o, "seed");
    gd_json_int(&o, (int64_t)st->seed);
    gd_json_key(&o, "data");
    gd_json_begin_object(&o);
    gd_json_key(&o, "seed");
    gd_json_int(&o, (int64_t)st->pos.seed);
    gd_json_key(&o, "epoch");
    gd_json_int(&o, st->pos.epoch);
    gd_json_key(&o, "index");
    gd_json_int(&o, st->pos.index);
    gd_json_end_object(&o);
    if (st->loss_scale > 0) { /* absent for runs without a scaler: their files stay as they were */
        gd_json_key(&o, "loss_scale");
        gd_json_begin_object(&o);
        gd_json_key(&o, "scale");
        gd_json_number(&o, st->loss_scale);
        gd_json_key(&o, "good_steps");
        gd_json_int(&o, st->scale_good_steps);
        gd_json_key(&o, "skipped_steps");
        gd_json_int(&o, st->skipped_steps);
        gd_json_end_object(&o);
    }
    gd_json_end_object(&o);
    gd_status s = GD_OK;
    if (o.failed) s = gd_ctx_fail(ctx, GD_ERR_NOMEM, "checkpoint: out of memory");
    else if (write_file_atomic(path, o.buf, o.len) != 0) s = fail(ctx, GD_ERR_IO, path, strerror(errno));
    gd_json_out_free(&o);
    return s;
}

gd_status gd_lm_checkpoint_save(gd_ctx *ctx, gd_graph *g, const gd_lm_config *cfg, const gd_tokenizer *tok,
                             const gd_lm_state *st, const char *out_dir, char *written, size_t cap)
{
    return gd_lm_checkpoint_save_with(ctx, g, cfg, tok, st, out_dir, NULL, 0, written, cap);
}

gd_status gd_lm_checkpoint_save_with(gd_ctx *ctx, gd_graph *g, const gd_lm_config *cfg, const gd_tokenizer *tok,
                                     const gd_lm_state *st, const char *out_dir, const gd_st_entry *extra, int n_extra,
                                     char *written, size_t cap)
{
    char dir[1024], tmp[1100], path[1200];
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) return fail(ctx, GD_ERR_IO, out_dir, strerror(errno));
    /* A name no directory has: `latest` may name an existing ckpt-<step> (a run restarted
     * in the same directory, a step saved twice), and that one must stay whole until
     * `latest` names the new one. */
    struct stat sb;
    snprintf(dir, sizeof dir, "%s/ckpt-%08lld", out_dir, (long long)st->step);
    for (int k = 1; stat(dir, &sb) == 0 && k < 1000; k++)
        snprintf(dir, sizeof dir, "%s/ckpt-%08lld-%d", out_dir, (long long)st->step, k);
    snprintf(tmp, sizeof tmp, "%s.tmp", dir);
    remove_tree(tmp); /* what a killed run left */
    if (mkdir(tmp, 0755) != 0) return fail(ctx, GD_ERR_IO, tmp, strerror(errno));

    host_set model = {0}, optim = {0};
    gd_status s = GD_OK;
    for (int i = 0; i < gd_graph_param_count(g) && s == GD_OK; i++) {
        gd_tensor *p = gd_graph_param(g, i);
        s = set_add(ctx, &model, p, gd_tensor_name(p));
        for (const char *const *suf = param_state_suffixes; *suf != NULL && s == GD_OK; suf++) {
            char name[512];
            snprintf(name, sizeof name, "%s.%s", gd_tensor_name(p), *suf);
            gd_tensor *t = gd_graph_find(g, name);
            if (t != NULL) s = set_add(ctx, &optim, t, name);
        }
    }
    for (const char *const *n = graph_states; *n != NULL && s == GD_OK; n++) {
        gd_tensor *t = gd_graph_find(g, *n);
        if (t != NULL) s = set_add(ctx, &optim, t, *n);
    }
    const char *meta_k[1] = {"format"}, *meta_v[1] = {"pt"}; /* what transformers expects of weights */
    if (s == GD_OK) {
        snprintf(path, sizeof path, "%s/model.safetensors", tmp);
        s = gd_st_write(ctx, path, model.e, model.n, meta_k, meta_v, 1);
    }
    if (s == GD_OK) {
        snprintf(path, sizeof path, "%s/optimizer.safetensors", tmp);
        /* states kept elsewhere (another rank's share of a sharded optimizer) join the graph's */
        gd_st_entry *all = n_extra > 0 ? gd_malloc(sizeof *all * (size_t)(optim.n + n_extra)) : optim.e;
        if (all == NULL && n_extra > 0) {
            s = gd_ctx_fail(ctx, GD_ERR_NOMEM, "checkpoint: out of memory");
        } else {
            if (n_extra > 0) {
                if (optim.n > 0) memcpy(all, optim.e, sizeof *all * (size_t)optim.n);
                memcpy(all + optim.n, extra, sizeof *all * (size_t)n_extra);
            }
            s = gd_st_write(ctx, path, all, optim.n + n_extra, NULL, NULL, 0);
            if (all != optim.e) gd_free(all);
        }
    }
    set_free(&model);
    set_free(&optim);
    if (s == GD_OK) {
        snprintf(path, sizeof path, "%s/config.json", tmp);
        s = gd_lm_config_write(ctx, cfg, path);
    }
    if (s == GD_OK && tok != NULL) {
        snprintf(path, sizeof path, "%s/tokenizer.json", tmp);
        s = gd_tokenizer_save(ctx, tok, path);
    }
    if (s == GD_OK) {
        snprintf(path, sizeof path, "%s/trainer.json", tmp);
        s = write_trainer_json(ctx, path, st);
    }
    if (s != GD_OK) {
        remove_tree(tmp);
        return s;
    }
    sync_dir(tmp);
    if (rename(tmp, dir) != 0) {
        s = fail(ctx, GD_ERR_IO, dir, strerror(errno));
        remove_tree(tmp);
        return s;
    }
    sync_dir(out_dir);
    char latest[1100], line[300];
    const char *base = strrchr(dir, '/') + 1;
    snprintf(latest, sizeof latest, "%s/latest", out_dir);
    int n = snprintf(line, sizeof line, "%s\n", base);
    if (write_file_atomic(latest, line, (size_t)n) != 0) return fail(ctx, GD_ERR_IO, latest, strerror(errno));
    sync_dir(out_dir);
    /* older checkpoints and leftovers go, now that `latest` names the new one */
    line[n - 1] = '\0'; /* the new one's name */
    DIR *d = opendir(out_dir);
    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strncmp(e->d_name, "ckpt-", 5) != 0 || strcmp(e->d_name, line) == 0) continue;
            char p[1400];
            snprintf(p, sizeof p, "%s/%s", out_dir, e->d_name);
            remove_tree(p);
        }
        closedir(d);
    }
    if (written != NULL) snprintf(written, cap, "%s", dir);
    return GD_OK;
}

/* ---- loading ---------------------------------------------------------------------------------- */

gd_status gd_lm_checkpoint_resolve(gd_ctx *ctx, const char *dir, char *path, size_t cap)
{
    if (dir == NULL || path == NULL) return gd_ctx_fail(ctx, GD_ERR_INVALID, "checkpoint: NULL directory");
    char p[1200];
    struct stat sb;
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (stat(p, &sb) == 0) {
        snprintf(path, cap, "%s", dir);
        return GD_OK;
    }
    snprintf(p, sizeof p, "%s/latest", dir);
    FILE *f = fopen(p, "r");
    if (f == NULL)
        return fail(ctx, GD_ERR_IO, dir, "neither a checkpoint (no config.json) nor a training directory (no latest)");
    char name[256] = "";
    char *got = fgets(name, sizeof name, f);
    fclose(f);
    size_t l = got != NULL ? strcspn(name, "\r\n") : 0;
    name[l] = '\0';
    if (l == 0 || strchr(name, '/') != NULL || strncmp(name, "ckpt-", 5) != 0)
        return fail(ctx, GD_ERR_FORMAT, p, "does not name a checkpoint directory");
    snprintf(path, cap, "%s/%s", dir, name);
    return GD_OK;
}

/* Writes the safetensors entry `name` into graph tensor t, checking dtype and shape. */
static gd_status load_tensor(gd_ctx *ctx, const gd_st_file *f, const char *file, const char *name, gd_tensor *t)
{
    gd_dtype dt;
    int nd;
    int64_t shape[GD_MAX_DIMS];
    const void *data;
    size_t bytes;
    if (!gd_st_find(f, name, &dt, &nd, shape, &data, &bytes))
        return gd_ctx_fail(ctx, GD_ERR_FORMAT, "checkpoint %s: no tensor %s", file, name);
    int same = dt == gd_tensor_dtype(t) && nd == gd_tensor_ndim(t);
    for (int k = 0; same && k < nd; k++) same = shape[k] == gd_tensor_dim(t, k);
    if (!same) {
        char want[128];
        return gd_ctx_fail(ctx, GD_ERR_FORMAT, "checkpoint %s: tensor %s is %s with %d dims, the model wants %s", file,
                           name, gd_dtype_name(dt), nd, gd_tensor_describe(t, want, sizeof want));
    }
    return gd_tensor_write(t, data, bytes);
}

gd_status gd_lm_state_parse(gd_ctx *ctx, const char *path, const char *text, size_t n, gd_lm_state *st)
{
    char err[160];
    gd_json_doc *d = gd_json_parse(text, n, 8, err, sizeof err);
    if (d == NULL) return gd_ctx_fail(ctx, GD_ERR_FORMAT, "checkpoint %s: %s", path, err);
    const gd_json *r = gd_json_root(d), *data = gd_json_get(r, "data"), *ls = gd_json_get(r, "loss_scale");
    int64_t step, seed, dseed, epoch, index, version, good = 0, skipped = 0;
    double scale = 0;
    const char *format = gd_json_get_str(r, "format");
    int ok = format != NULL && strcmp(format, "gradus-trainer") == 0 && gd_json_get_int(r, "version", &version) &&
             version == 1 && gd_json_get_int(r, "step", &step) && step >= 0 && gd_json_get_int(r, "seed", &seed) &&
             gd_json_get_int(data, "seed", &dseed) && gd_json_get_int(data, "epoch", &epoch) && epoch >= 0 &&
             gd_json_get_int(data, "index", &index) && index >= 0;
    /* the scaler's state, optional: a scale that is a positive finite number, counts >= 0 */
    int ls_ok = ls == NULL || (gd_json_get_num(ls, "scale", &scale) && isfinite(scale) && scale > 0 &&
                               gd_json_get_int(ls, "good_steps", &good) && good >= 0 &&
                               gd_json_get_int(ls, "skipped_steps", &skipped) && skipped >= 0 && skipped <= step);
    gd_json_free(d);
    if (!ok) return fail(ctx, GD_ERR_FORMAT, path, "is not a gradus trainer state (format, version 1, step, seed, data)");
    if (!ls_ok)
        return fail(ctx, GD_ERR_FORMAT, path,
                    "has a loss_scale that is not {scale > 0, good_steps >= 0, skipped_steps from 0 to step}");
    st->step = step;
    st->seed = (uint64_t)seed;
    st->pos = (gd_data_pos){.seed = (uint64_t)dseed, .epoch = epoch, .index = index};
    st->loss_scale = scale;
    st->scale_good_steps = good;
    st->skipped_steps = skipped;
    return GD_OK;
}

static gd_status read_trainer_json(gd_ctx *ctx, const char *path, gd_lm_state *st)
{
    char *buf;
    size_t n;
    gd_status rs = gd_read_whole_file(ctx, path, 1 << 16, "a gradus trainer state", &buf, &n);
    if (rs != GD_OK) return rs;
    rs = gd_lm_state_parse(ctx, path, buf, n, st);
    gd_free(buf);
    return rs;
}

static int regular_file(const char *path)
{
    struct stat sb;
    return path != NULL && stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int same_model(const gd_lm_config *a, const gd_lm_config *b)
{
    return a->arch == b->arch && a->dim == b->dim && a->n_layers == b->n_layers && a->n_heads == b->n_heads &&
           a->n_kv_heads == b->n_kv_heads && a->head_dim == b->head_dim && a->hidden_dim == b->hidden_dim &&
           a->vocab_size == b->vocab_size && a->qk_norm == b->qk_norm && a->tied_embeddings == b->tied_embeddings;
}

gd_status gd_lm_model_config(gd_ctx *ctx, const char *where, gd_lm_config *cfg)
{
    if (where == NULL || cfg == NULL) return gd_ctx_fail(ctx, GD_ERR_INVALID, "gd_lm_model_config: NULL argument");
    if (regular_file(where)) {
        if (!gd_l2c_sniff(where))
            return fail(ctx, GD_ERR_FORMAT, where, "is a file but not a llama2.c checkpoint (a model directory holds config.json)");
        gd_l2c *m = NULL;
        gd_status s = gd_l2c_open(ctx, where, &m, cfg);
        gd_l2c_close(m);
        return s;
    }
    char dir[1100], path[1300];
    gd_status s = gd_lm_checkpoint_resolve(ctx, where, dir, sizeof dir);
    if (s != GD_OK) return s;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if ((s = gd_lm_config_read(ctx, path, cfg)) != GD_OK) return s;
    return gd_lm_config_check(ctx, cfg);
}

gd_status gd_lm_model_dtype(gd_ctx *ctx, const char *where, gd_dtype *out)
{
    gd_lm_config cfg;
    gd_status s = gd_lm_model_config(ctx, where, &cfg);
    if (s != GD_OK || out == NULL) return s != GD_OK ? s : gd_ctx_fail(ctx, GD_ERR_INVALID, "gd_lm_model_dtype: NULL argument");
    if (regular_file(where)) { /* llama2.c checkpoints hold f32 */
        *out = GD_F32;
        return GD_OK;
    }
    char dir[1100];
    gd_hf_weights *w = NULL;
    if ((s = gd_lm_checkpoint_resolve(ctx, where, dir, sizeof dir)) != GD_OK) return s;
    if ((s = gd_hf_weights_open(ctx, dir, &w)) != GD_OK) return s;
    s = gd_hf_weights_dtype(ctx, w, cfg.arch == GD_LM_GPT2 ? "transformer.wte.weight" : "model.embed_tokens.weight", out);
    gd_hf_weights_close(w);
    return s;
}

/* The parameters of g from a llama2.c checkpoint file. */
static gd_status load_llama2c(gd_ctx *ctx, gd_graph *g, const gd_lm_config *cfg, const char *path)
{
    gd_l2c *m = NULL;
    gd_lm_config saved;
    gd_status s = gd_l2c_open(ctx, path, &m, &saved);
    if (s == GD_OK && !same_model(&saved, cfg)) s = fail(ctx, GD_ERR_FORMAT, path, "describes another model than the graph's");
    for (int i = 0; i < gd_graph_param_count(g) && s == GD_OK; i++) {
        gd_tensor *p = gd_graph_param(g, i);
        s = gd_l2c_load(ctx, m, gd_tensor_name(p), p);
    }
    gd_l2c_close(m);
    return s;
}

gd_status gd_lm_checkpoint_load(gd_ctx *ctx, gd_graph *g, const gd_lm_config *cfg, const char *where, int with_optimizer,
                             gd_lm_state *st)
{
    if (regular_file(where)) {
        if (with_optimizer) return fail(ctx, GD_ERR_FORMAT, where, "is a model file: it holds no optimizer state to resume");
        return load_llama2c(ctx, g, cfg, where);
    }
    char dir[1100], path[1300];
    gd_status s = gd_lm_checkpoint_resolve(ctx, where, dir, sizeof dir);
    if (s != GD_OK) return s;
    gd_lm_config saved;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if ((s = gd_lm_config_read(ctx, path, &saved)) != GD_OK) return s;
    if ((s = gd_lm_config_check(ctx, &saved)) != GD_OK) return s;
    if (!same_model(&saved, cfg))
        return fail(ctx, GD_ERR_FORMAT, path, "describes another model than the one being trained");
    /* the model's weights as Hugging Face saves them (one file or shards, f32/f16/bf16) */
    gd_hf_weights *w = NULL;
    if ((s = gd_hf_weights_open(ctx, dir, &w)) != GD_OK) return s;
    for (int i = 0; i < gd_graph_param_count(g) && s == GD_OK; i++) {
        gd_tensor *p = gd_graph_param(g, i);
        const char *name = gd_tensor_name(p);
        /* a tied model's head, kept apart (quantized for inference), is its embedding */
        if (cfg->tied_embeddings && cfg->arch == GD_LM_LLAMA && strcmp(name, "lm_head.weight") == 0)
            name = "model.embed_tokens.weight";
        s = gd_hf_weights_load(ctx, w, name, p);
    }
    gd_hf_weights_close(w);
    if (s != GD_OK || !with_optimizer) return s;
    gd_st_file *f = NULL;
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    if ((s = gd_st_open(ctx, path, &f)) != GD_OK) return s;
    for (int i = 0; i < gd_graph_param_count(g) && s == GD_OK; i++) {
        gd_tensor *p = gd_graph_param(g, i);
        for (const char *const *suf = param_state_suffixes; *suf != NULL && s == GD_OK; suf++) {
            char name[512];
            snprintf(name, sizeof name, "%s.%s", gd_tensor_name(p), *suf);
            gd_tensor *t = gd_graph_find(g, name);
            /* gradient accumulators are zero at every checkpoint: a run that had none (no
             * accumulation, or several ranks) resumes into one that has them */
            gd_dtype dt;
            int nd;
            int64_t shp[GD_MAX_DIMS];
            const void *data;
            size_t bytes;
            if (t != NULL && strcmp(*suf, "grad_acc") == 0 && !gd_st_find(f, name, &dt, &nd, shp, &data, &bytes)) continue;
            if (t != NULL) s = load_tensor(ctx, f, path, name, t);
        }
    }
    for (const char *const *n = graph_states; *n != NULL && s == GD_OK; n++) {
        gd_tensor *t = gd_graph_find(g, *n);
        if (t != NULL) s = load_tensor(ctx, f, path, *n, t);
    }
    gd_st_close(f);
    if (s != GD_OK) return s;
    snprintf(path, sizeof path, "%s/trainer.json", dir);
    return read_trainer_json(ctx, path, st);
}
