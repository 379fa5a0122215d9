/* plugin.c — finding, loading and checking backends.
 *
 * Where plugins are looked for, in order: GRADUS_PLUGIN_PATH (or the context option), the
 * directory `gradus/plugins` beside the loaded libgradus, and the installed plugin
 * directory; never the build tree, whose path is not compiled into the library (the
 * `gradus` command adds its own tree's directory to the option). Files named
 * libgradus_<name>.so. The first file of a given name wins. GRADUS_DISABLE_<NAME>=1 (or
 * GRADUS_DISABLE=name,name) skips one.
 * A plugin that fails or is refused leaves one log line; one that declines (no device
 * here) leaves only its note for `gradus devices`, and a log line under GRADUS_TRACE.
 * gradus goes on with the others. */
#define _GNU_SOURCE 1
#include "core.h"

#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <time.h>

/* Backends linked into libgradus, listed by the build (gd_builtins.h): each is started
 * through its gdp_init_fn like a plugin file, so the core names none of them. */
#define GD_BUILTIN(init, name) gdp_status init(const gdp_host *host, gdp_plugin *plugin, gdp_err *err);
#include "gd_builtins.h"
#undef GD_BUILTIN

/* The host pointer handed to plugins is the backend's host_ctx. */
typedef struct gd_host_ctx host_ctx;

/* "op/f32" or "op/bf16,bf16->f32": a kernel's key in messages. */
static const char *key_str(const gdp_kernel *k, const char *sig, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s", k->op, sig != NULL ? sig : gd_dtype_name((gd_dtype)k->dtype));
    return buf;
}

static int op_declares(const gd_op_def *op, const char *sig)
{
    for (const char *const *m = op->mixed; m != NULL && *m != NULL; m++)
        if (strcmp(*m, sig) == 0) return 1;
    return 0;
}

static gdp_status host_register_kernel(void *hp, const gdp_kernel *k, gdp_err *err)
{
    host_ctx *h = hp;
    gd_backend *b = h->b;
    if (k == NULL || k->size < offsetof(gdp_kernel, launch) + sizeof k->launch || k->op == NULL || k->launch == NULL)
        return gdp_fail(err, GDP_ERR_INVALID, "register_kernel: incomplete gdp_kernel");
    const gd_op_def *op = gd_registry_find(h->ctx->reg, k->op);
    size_t used = strlen(b->bad_registrations);
    if (op == NULL) {
        snprintf(b->bad_registrations + used, sizeof b->bad_registrations - used, "unknown op '%s'; ", k->op);
        return gdp_fail(err, GDP_ERR_INVALID, "register_kernel: gradus has no op '%s'", k->op);
    }
    const char *sig = GDP_HAS_FIELD(k, gdp_kernel, signature) ? k->signature : NULL;
    char key[300];
    key_str(k, sig, key, sizeof key);
    if (sig == NULL && (k->dtype < 0 || k->dtype >= GDP_DTYPE_COUNT))
        return gdp_fail(err, GDP_ERR_INVALID, "register_kernel %s: unknown dtype %d", k->op, k->dtype);
    if (sig != NULL && !op_declares(op, sig)) {
        snprintf(b->bad_registrations + used, sizeof b->bad_registrations - used,
                 "%s is not a form the op declares; ", key);
        return gdp_fail(err, GDP_ERR_INVALID, "register_kernel: %s is not a mixed-precision form %s declares", key,
                        k->op);
    }
    for (int i = 0; i < b->n_kernels; i++) {
        const gd_kernel_entry *x = &b->kernels[i];
        int same = x->op == op && (sig == NULL ? x->signature == NULL && x->dtype == k->dtype
                                               : x->signature != NULL && strcmp(x->signature, sig) == 0);
        if (!same) continue;
        b->duplicate_kernels++;
        snprintf(b->bad_registrations + used, sizeof b->bad_registrations - used, "duplicate %s; ", key);
        return gdp_fail(err, GDP_ERR_INVALID, "register_kernel: %s registered twice", key);
    }
    if (GDP_HAS_FIELD(k, gdp_kernel, constrained_attrs) && k->constrained_attrs != NULL) {
        for (const char *const *a = k->constrained_attrs; *a != NULL; a++) {
            size_t nl = strlen(*a);
            const char *s = op->attrs != NULL ? op->attrs : "";
            int found = 0;
            for (const char *p = strstr(s, *a); p != NULL && !found; p = strstr(p + 1, *a))
                found = (p == s || p[-1] == ' ') && p[nl] == ':';
            if (!found) {
                snprintf(b->bad_registrations + used, sizeof b->bad_registrations - used,
                         "%s/%s constrains attribute '%s' the op does not have; ", k->op,
                         gd_dtype_name((gd_dtype)k->dtype), *a);
                return gdp_fail(err, GDP_ERR_INVALID, "register_kernel %s: op has no attribute '%s'", k->op, *a);
            }
        }
    }
    if (b->n_kernels == b->cap_kernels) {
        int c = b->cap_kernels ? b->cap_kernels * 2 : 64;
        gd_kernel_entry *ks = gd_realloc(b->kernels, (size_t)c * sizeof *ks);
        if (ks == NULL) return gdp_fail(err, GDP_ERR_NOMEM, "register_kernel: out of memory");
        b->kernels = ks;
        b->cap_kernels = c;
    }
    char *own_sig = NULL;
    if (sig != NULL && (own_sig = gd_strdup(sig)) == NULL) return gdp_fail(err, GDP_ERR_NOMEM, "register_kernel: out of memory");
    gd_kernel_entry *e = &b->kernels[b->n_kernels++];
    memset(e, 0, sizeof *e);
    e->op = op;
    e->dtype = sig != NULL ? -1 : k->dtype;
    e->signature = own_sig;
    memcpy(&e->k, k, k->size < sizeof e->k ? k->size : sizeof e->k); /* fields it did not know stay 0 */
    e->k.size = sizeof e->k;
    e->k.signature = own_sig;
    return GDP_OK;
}

static void host_log(void *hp, const char *line)
{
    host_ctx *h = hp;
    gd_ctx_log(h->ctx, "%s: %s", h->b->name, line);
}

static const char *host_getenv(void *hp, const char *name)
{
    (void)hp;
    return name != NULL ? getenv(name) : NULL;
}

static uint64_t host_now_ns(void *hp)
{
    (void)hp;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void note(gd_ctx *ctx, const char *name, const char *path, const char *state, const char *reason)
{
    gd_plugin_note *n = gd_realloc(ctx->notes, sizeof *n * (size_t)(ctx->n_notes + 1));
    if (n == NULL) return;
    ctx->notes = n;
    gd_plugin_note *x = &n[ctx->n_notes++];
    snprintf(x->name, sizeof x->name, "%s", name);
    snprintf(x->path, sizeof x->path, "%s", path);
    snprintf(x->state, sizeof x->state, "%s", state);
    snprintf(x->reason, sizeof x->reason, "%s", reason);
}

static int disabled(const char *name)
{
    char var[96];
    snprintf(var, sizeof var, "GRADUS_DISABLE_%s", name);
    for (char *p = var; *p; p++) *p = (char)toupper((unsigned char)*p);
    const char *v = getenv(var);
    if (v != NULL && v[0] != '\0' && strcmp(v, "0") != 0) return 1;
    const char *list = getenv("GRADUS_DISABLE");
    if (list == NULL) return 0;
    size_t nl = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == nl && strncmp(p, name, nl) == 0) return 1;
        if (e == NULL) break;
        p = e + 1;
    }
    return 0;
}

/* Initializes a plugin from its entry point; on success adds it to ctx's backends. */
static gd_status load_from_init(gd_ctx *ctx, const char *name, const char *path, gdp_init_fn init, void *dl)
{
    if (ctx->n_backends >= GD_MAX_BACKENDS) {
        note(ctx, name, path, "failed", "too many backends");
        return GD_ERR_UNSUPPORTED;
    }
    gd_backend *b = gd_calloc(1, sizeof *b);
    if (b == NULL) return GD_ERR_NOMEM;
    snprintf(b->name, sizeof b->name, "%s", name);
    b->dl = dl;
    b->host = (gdp_host){.size = sizeof b->host, .abi_major = GDP_ABI_MAJOR, .abi_minor = GDP_ABI_MINOR,
                         .register_kernel = host_register_kernel, .log = host_log, .getenv = host_getenv,
                         .now_ns = host_now_ns};
    b->host_ctx.ctx = ctx;
    b->host_ctx.b = b;
    b->host.host = &b->host_ctx;
    const gdp_host *host = &b->host;
    gdp_plugin pl;
    memset(&pl, 0, sizeof pl);
    pl.size = sizeof pl;
    gdp_err e = {.size = sizeof e};
    gdp_status s = init(host, &pl, &e);
    char reason[600];
    /* A plugin that fails before it sets its ABI version (checking its arguments, say)
     * leaves 0: its own message says more than "built for ABI 0.0". */
    if (pl.abi_major != GDP_ABI_MAJOR && !(s != GDP_OK && pl.abi_major == 0)) {
        if (pl.abi_major == 1)
            snprintf(reason, sizeof reason,
                     "built for plugin ABI %d.%d, this gradus speaks %d.%d: port it (docs/plugin-abi.md, "
                     "\"Porting a 1.x plugin\") and rebuild",
                     pl.abi_major, pl.abi_minor, GDP_ABI_MAJOR, GDP_ABI_MINOR);
        else
            snprintf(reason, sizeof reason, "built for plugin ABI %d.%d, this gradus speaks %d.%d: rebuild the plugin",
                     pl.abi_major, pl.abi_minor, GDP_ABI_MAJOR, GDP_ABI_MINOR);
        gd_ctx_log(ctx, "plugin %s refused: %s", name, reason);
        note(ctx, name, path, "refused", reason);
        gd_free(b);
        return GD_ERR_VERSION;
    }
    if (s != GDP_OK) {
        int declined = s == GDP_ERR_NODEVICE;
        snprintf(reason, sizeof reason, "%s", e.msg[0] ? e.msg : gd_status_name(s));
        /* No device is the normal case on most machines (the CUDA plugin without a GPU): it
         * is for `gradus devices` and the trace, not a line on every run's stderr. */
        if (!declined || ctx->trace)
            gd_ctx_log(ctx, "plugin %s %s: %s", name, declined ? "declined" : "failed to initialize", reason);
        note(ctx, name, path, declined ? "declined" : "failed", reason);
        gd_free(b);
        return declined ? GD_ERR_NODEVICE : GD_ERR_DEVICE;
    }
    b->plugin = pl;
    if (pl.name != NULL && pl.name[0] != '\0') snprintf(b->name, sizeof b->name, "%s", pl.name);
    b->priority = pl.priority;
    b->host_visible = 1;
    if (pl.device != NULL) {
        size_t n = pl.device->size < sizeof b->dev ? pl.device->size : sizeof b->dev;
        memcpy(&b->dev, pl.device, n); /* fields the plugin did not know stay NULL */
        if (b->dev.alloc == NULL || b->dev.free == NULL || b->dev.copy_h2d == NULL || b->dev.copy_d2h == NULL) {
            note(ctx, b->name, path, "failed", "device module lacks alloc, free, copy_h2d or copy_d2h");
            gd_ctx_log(ctx, "plugin %s failed: its device module lacks a required function", b->name);
            if (pl.shutdown != NULL) pl.shutdown(pl.backend);
            gd_free(b);
            return GD_ERR_DEVICE;
        }
        b->has_dev = 1;
        b->host_visible = b->dev.host_visible != 0;
        if (b->dev.stream_create != NULL && b->dev.stream_create(pl.backend, &b->stream, &e) != GDP_OK) {
            note(ctx, b->name, path, "failed", e.msg);
            gd_ctx_log(ctx, "plugin %s failed: stream_create: %s", b->name, e.msg);
            if (pl.shutdown != NULL) pl.shutdown(pl.backend);
            gd_free(b);
            return GD_ERR_DEVICE;
        }
    }
    if (pl.profiler != NULL && pl.profiler->size >= sizeof(size_t)) {
        size_t n = pl.profiler->size < sizeof b->prof_mod ? pl.profiler->size : sizeof b->prof_mod;
        memcpy(&b->prof_mod, pl.profiler, n); /* functions it does not know of stay NULL */
        b->has_prof = 1;
    }
    if (GDP_HAS_FIELD(&pl, gdp_plugin, executor) && pl.executor != NULL) {
        size_t n = pl.executor->size < sizeof b->exec ? pl.executor->size : sizeof b->exec;
        memcpy(&b->exec, pl.executor, n);
        b->has_exec = b->exec.prepare != NULL && b->exec.run != NULL;
    }
    if (GDP_HAS_FIELD(&pl, gdp_plugin, collective) && pl.collective != NULL && pl.collective->size >= sizeof(size_t)) {
        size_t n = pl.collective->size < sizeof b->coll ? pl.collective->size : sizeof b->coll;
        memcpy(&b->coll, pl.collective, n);
        b->has_coll = b->coll.unique_id != NULL && b->coll.comm_open != NULL && b->coll.allreduce_sum != NULL &&
                      b->coll.comm_close != NULL && b->coll.id_bytes > 0;
    }
    const char *sync = getenv("GRADUS_SYNC");
    b->sync_every_kernel = sync != NULL && sync[0] != '\0' && strcmp(sync, "0") != 0;
    b->index = ctx->n_backends;
    ctx->backends[ctx->n_backends++] = b;
    if (pl.register_kernels != NULL) {
        if (pl.register_kernels(pl.backend, host, &e) != GDP_OK) {
            /* A failed registration leaves the kernels registered so far; the sweep
             * reports what was refused. The backend stays usable. */
            gd_ctx_log(ctx, "plugin %s: registering kernels: %s", b->name, e.msg);
        }
    }
    note(ctx, b->name, path, "loaded", "");
    return GD_OK;
}

/* The ELF machine this process runs as (0: not known here, not checked). */
#if defined(__x86_64__)
#define GD_ELF_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define GD_ELF_MACHINE EM_AARCH64
#elif defined(__i386__)
#define GD_ELF_MACHINE EM_386
#elif defined(__arm__)
#define GD_ELF_MACHINE EM_ARM
#elif defined(__powerpc64__)
#define GD_ELF_MACHINE EM_PPC64
#elif defined(__riscv)
#define GD_ELF_MACHINE EM_RISCV
#else
#define GD_ELF_MACHINE 0
#endif

/* 1 when the table of n entries of size each at off lies within size bytes; its end in *end. */
static int elf_within(uint64_t off, uint64_t n, uint64_t each, uint64_t size, uint64_t *end)
{
    uint64_t bytes;
    if (__builtin_mul_overflow(n, each, &bytes) || __builtin_add_overflow(off, bytes, end)) {
        *end = UINT64_MAX;
        return 0;
    }
    return *end <= size;
}

/* Checks that path is a whole shared object for this process before dlopen sees it.
 * dlopen maps segments straight from the file, and a segment of a file cut short (an
 * install or copy interrupted) is mapped past the file's end: the loader's first touch of
 * such a page raises SIGBUS and kills the process, with no error to return. So the ELF
 * header must match this process, and the program header table, every loaded segment,
 * the section header table and every section with file data must lie within the file.
 * 0 when it passes; else -1 with the reason in why. (The file can still change between
 * this check and dlopen; only installing by rename closes that window.) */
static int elf_check(const char *path, char *why, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, cap, "cannot open: %s", strerror(errno));
        return -1;
    }
    struct stat st;
    ElfW(Ehdr) eh;
    ElfW(Phdr) *ph = NULL;
    uint64_t size = 0, end = 0;
    ssize_t got = 0;
    int ok = 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(why, cap, "not a regular file");
        goto done;
    }
    size = (uint64_t)st.st_size;
    memset(&eh, 0, sizeof eh);
    got = pread(fd, &eh, sizeof eh, 0);
    if (got < 0 || memcmp(eh.e_ident, ELFMAG, (size_t)got < SELFMAG ? (size_t)got : SELFMAG) != 0) {
        snprintf(why, cap, "not an ELF file");
        goto done;
    }
    if ((size_t)got < sizeof eh) { /* an empty file, too: what an interrupted copy leaves first */
        snprintf(why, cap, "truncated: the ELF header ends at byte %zu but the file has %llu bytes", sizeof eh,
                 (unsigned long long)size);
        goto done;
    }
    if (eh.e_ident[EI_CLASS] != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32)) {
        snprintf(why, cap, "a %s-bit ELF file, this process is %d-bit", eh.e_ident[EI_CLASS] == ELFCLASS64 ? "64" : "32",
                 (int)sizeof(void *) * 8);
        goto done;
    }
    if (eh.e_ident[EI_DATA] != (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB)) {
        snprintf(why, cap, "ELF file of the other byte order");
        goto done;
    }
    if (eh.e_type != ET_DYN) {
        snprintf(why, cap, "not a shared object (ELF type %d)", (int)eh.e_type);
        goto done;
    }
    if (GD_ELF_MACHINE != 0 && eh.e_machine != GD_ELF_MACHINE) {
        snprintf(why, cap, "built for another machine (ELF machine %d, this process %d)", (int)eh.e_machine,
                 (int)GD_ELF_MACHINE);
        goto done;
    }
    if (eh.e_phnum == 0 || eh.e_phentsize != sizeof *ph) {
        snprintf(why, cap, "no usable program header table (%d entries of %d bytes)", (int)eh.e_phnum,
                 (int)eh.e_phentsize);
        goto done;
    }
    if (!elf_within(eh.e_phoff, eh.e_phnum, sizeof *ph, size, &end)) {
        snprintf(why, cap, "truncated: the program header table ends at byte %llu but the file has %llu bytes",
                 (unsigned long long)end, (unsigned long long)size);
        goto done;
    }
    ph = gd_malloc((size_t)eh.e_phnum * sizeof *ph);
    if (ph == NULL || pread(fd, ph, (size_t)eh.e_phnum * sizeof *ph, (off_t)eh.e_phoff) != (ssize_t)(eh.e_phnum * sizeof *ph)) {
        snprintf(why, cap, "cannot read the program header table");
        goto done;
    }
    for (int i = 0; i < eh.e_phnum; i++) {
        if (ph[i].p_type == PT_LOAD && !elf_within(ph[i].p_offset, ph[i].p_filesz, 1, size, &end)) {
            snprintf(why, cap, "truncated: segment %d ends at byte %llu but the file has %llu bytes", i,
                     (unsigned long long)end, (unsigned long long)size);
            goto done;
        }
    }
    if (eh.e_shoff != 0) {
        /* 0 entries with a table present: the count is in entry 0's sh_size (more than 65279 sections) */
        ElfW(Shdr) sh;
        uint64_t n = eh.e_shnum;
        if (eh.e_shentsize != sizeof sh) {
            snprintf(why, cap, "section headers of %d bytes, not %zu", (int)eh.e_shentsize, sizeof sh);
            goto done;
        }
        if (!elf_within(eh.e_shoff, n > 0 ? n : 1, sizeof sh, size, &end)) {
            snprintf(why, cap, "truncated: the section header table ends at byte %llu but the file has %llu bytes",
                     (unsigned long long)end, (unsigned long long)size);
            goto done;
        }
        for (uint64_t k = 0; k < (n > 0 ? n : 1); k++) {
            if (pread(fd, &sh, sizeof sh, (off_t)(eh.e_shoff + k * sizeof sh)) != (ssize_t)sizeof sh) {
                snprintf(why, cap, "cannot read section header %llu", (unsigned long long)k);
                goto done;
            }
            if (k == 0 && n == 0) {
                n = sh.sh_size;
                if (!elf_within(eh.e_shoff, n, sizeof sh, size, &end)) {
                    snprintf(why, cap, "truncated: the section header table ends at byte %llu but the file has %llu bytes",
                             (unsigned long long)end, (unsigned long long)size);
                    goto done;
                }
            }
            if (sh.sh_type != SHT_NOBITS && !elf_within(sh.sh_offset, sh.sh_size, 1, size, &end)) {
                snprintf(why, cap, "truncated: section %llu ends at byte %llu but the file has %llu bytes",
                         (unsigned long long)k, (unsigned long long)end, (unsigned long long)size);
                goto done;
            }
        }
    }
    ok = 1;
done:
    gd_free(ph);
    close(fd);
    return ok ? 0 : -1;
}

gd_status gd_plugin_load_file(gd_ctx *ctx, const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    char name[64];
    const char *p = strncmp(base, "libgradus_", 10) == 0 ? base + 10 : base;
    size_t l = strcspn(p, ".");
    snprintf(name, sizeof name, "%.*s", (int)(l < sizeof name ? l : sizeof name - 1), p);
    for (int i = 0; i < ctx->n_notes; i++)
        if (strcmp(ctx->notes[i].name, name) == 0) return GD_OK; /* first found wins */
    if (disabled(name)) {
        note(ctx, name, path, "disabled", "disabled by environment");
        return GD_OK;
    }
    char bad[256];
    if (elf_check(path, bad, sizeof bad) != 0) {
        gd_ctx_log(ctx, "plugin %s could not be loaded: %s: %s", name, path, bad);
        note(ctx, name, path, "failed", bad);
        return gd_fail(ctx, GD_ERR_DEVICE, "plugin %s: %s", path, bad);
    }
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (dl == NULL) {
        const char *why = dlerror();
        gd_ctx_log(ctx, "plugin %s could not be loaded: %s", name, why ? why : "?");
        note(ctx, name, path, "failed", why ? why : "dlopen failed");
        return gd_fail(ctx, GD_ERR_DEVICE, "plugin %s: %s", path, why ? why : "dlopen failed");
    }
    gdp_init_fn init;
    void *sym = dlsym(dl, GDP_INIT_SYMBOL);
    memcpy(&init, &sym, sizeof init);
    if (sym == NULL) {
        note(ctx, name, path, "failed", "no " GDP_INIT_SYMBOL " symbol");
        gd_ctx_log(ctx, "plugin %s: no %s symbol", path, GDP_INIT_SYMBOL);
        dlclose(dl);
        return gd_fail(ctx, GD_ERR_DEVICE, "plugin %s exports no %s", path, GDP_INIT_SYMBOL);
    }
    gd_status s = load_from_init(ctx, name, path, init, dl);
    if (s != GD_OK) {
        dlclose(dl);
        const gd_plugin_note *n = ctx->n_notes > 0 ? &ctx->notes[ctx->n_notes - 1] : NULL;
        if (n != NULL && strcmp(n->path, path) == 0)
            gd_fail(ctx, s, "plugin %s %s: %s", name, n->state, n->reason);
        else
            gd_fail(ctx, s, "plugin %s: %s", name, gd_status_name(s));
    }
    return s;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void scan_dir(gd_ctx *ctx, const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL) return;
    char *names[128];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 128) {
        size_t l = strlen(e->d_name);
        if (strncmp(e->d_name, "libgradus_", 10) == 0 && l > 3 && strcmp(e->d_name + l - 3, ".so") == 0)
            names[n++] = gd_strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_str);
    for (int i = 0; i < n; i++) {
        char path[1024];
        if (names[i] != NULL) {
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
            gd_plugin_load_file(ctx, path);
            ctx->err[0] = '\0'; /* discovery failures are notes and log lines, not errors */
        }
        gd_free(names[i]);
    }
}

static void scan_list(gd_ctx *ctx, const char *list)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ":", &save); tok != NULL; tok = strtok_r(NULL, ":", &save))
        scan_dir(ctx, tok);
}

void gd_plugins_load(gd_ctx *ctx, const gd_ctx_options *opt)
{
#define GD_BUILTIN(init, name)                                                              \
    if (disabled(name)) note(ctx, name, "(built in)", "disabled", "disabled by environment"); \
    else load_from_init(ctx, name, "(built in)", init, NULL);
#include "gd_builtins.h"
#undef GD_BUILTIN
    const char *path = NULL;
    if (opt != NULL && GDP_HAS_FIELD(opt, gd_ctx_options, plugin_path)) path = opt->plugin_path;
    if (path == NULL) path = getenv("GRADUS_PLUGIN_PATH");
    if (path != NULL && path[0] != '\0') scan_list(ctx, path);
    Dl_info info;
    if (dladdr((void *)&gd_plugins_load, &info) != 0 && info.dli_fname != NULL) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s", info.dli_fname);
        char *slash = strrchr(dir, '/');
        if (slash != NULL) {
            snprintf(slash, sizeof dir - (size_t)(slash - dir), "/gradus/plugins");
            scan_dir(ctx, dir);
        }
    }
#ifdef GD_PLUGIN_DIR_INSTALLED
    scan_dir(ctx, GD_PLUGIN_DIR_INSTALLED);
#endif
}
