/* The core names no op and no backend (docs/architecture.md, "Rooms"): no source file of
 * src/core holds a string literal that is the name of a registered op or of a backend in
 * backends/. Ops reach the core through the registry and its hooks, backends through the
 * plugin ABI and the generated list of built-ins; a literal "matmul" or "cuda" in the core
 * would be a dependency pointing the wrong way. */
#include "testutil.h"

#include "core.h"

#include <dirent.h>
#include <stdlib.h>

/* The whole file, NUL-terminated (NULL if it cannot be read). */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    char *buf = size >= 0 ? malloc((size_t)size + 1) : NULL;
    if (buf != NULL && (fseek(f, 0, SEEK_SET) != 0 || fread(buf, 1, (size_t)size, f) != (size_t)size)) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf != NULL) buf[size] = '\0';
    return buf;
}

/* Counts the files checked; a hit is a failure naming the file and the name. */
static int check_dir(const char *dir, const char *const *names, int n_names)
{
    DIR *d = opendir(dir);
    CHECK(d != NULL, "cannot open %s", dir);
    if (d == NULL) return 0;
    int files = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t l = strlen(e->d_name);
        if (l < 3 || (strcmp(e->d_name + l - 2, ".c") != 0 && strcmp(e->d_name + l - 2, ".h") != 0)) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        char *text = slurp(path);
        CHECK(text != NULL, "cannot read %s", path);
        if (text == NULL) continue;
        files++;
        for (int i = 0; i < n_names; i++) {
            char lit[96];
            snprintf(lit, sizeof lit, "\"%s\"", names[i]);
            CHECK(strstr(text, lit) == NULL, "src/core/%s names %s: the core must not name an op or a backend",
                  e->d_name, lit);
        }
        free(text);
    }
    closedir(d);
    return files;
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    /* every registered op, and every backend directory */
    const char *names[512];
    int n = 0;
    for (int i = 0; i < gd_registry_count(ctx->reg) && n < 500; i++) names[n++] = gd_registry_get(ctx->reg, i)->name;
    CHECK(n > 50, "only %d ops registered", n);
    char own[16][64];
    int n_own = 0;
    DIR *d = opendir(GD_SOURCE_DIR "/backends");
    CHECK(d != NULL, "cannot open backends/");
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL && n_own < 16;) {
        if (e->d_name[0] == '.') continue;
        snprintf(own[n_own], sizeof own[n_own], "%s", e->d_name);
        names[n++] = own[n_own++];
    }
    if (d != NULL) closedir(d);
    CHECK(n_own >= 2, "only %d backends found in backends/", n_own);
    int files = check_dir(GD_SOURCE_DIR "/src/core", names, n);
    CHECK(files >= 10, "only %d source files checked in src/core", files);
    return tu_finish("rooms");
}
