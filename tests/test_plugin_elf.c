/* A plugin file that is not a whole shared object for this process — cut short by an
 * interrupted install, not ELF at all, built for another machine — is reported as failed
 * with the reason, and never reaches dlopen (which would die of SIGBUS mapping segments
 * past the end of a short file). The test device plugin is copied, truncated to many
 * lengths (inside the ELF header, the program headers, each loaded segment, the section
 * data and the section header table), into a plugin directory of its own, and a context
 * is created with that directory as its plugin path. */
#include "core.h"

#include <elf.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

static unsigned char *image;
static long image_size;
static char dir[256];

static int write_file(const char *path, const void *data, long n)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL) return 0;
    int ok = (n == 0 || fwrite(data, 1, (size_t)n, f) == (size_t)n);
    return fclose(f) == 0 && ok;
}

/* The note discovery left for the plugin file named `file`, or NULL. */
static const gd_plugin_note *note_of(gd_ctx *c, const char *file)
{
    for (int i = 0; i < c->n_notes; i++) {
        const char *slash = strrchr(c->notes[i].path, '/');
        if (slash != NULL && strcmp(slash + 1, file) == 0) return &c->notes[i];
    }
    return NULL;
}

/* Puts data[0..n) in the plugin directory as the only plugin and creates a context that
 * discovers it; checks the outcome: loaded, or failed with a reason containing `want`. */
static void discover(const void *data, long n, const char *want, const char *what)
{
    char path[512];
    snprintf(path, sizeof path, "%s/libgradus_td.so", dir);
    if (!write_file(path, data, n)) {
        CHECK(0, "%s: cannot write %s", what, path);
        return;
    }
    gd_ctx *c = NULL;
    gd_status s = gd_ctx_create(&c, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .plugin_path = dir});
    CHECK(s == GD_OK && c != NULL, "%s: gd_ctx_create: %s", what, gd_status_name(s));
    if (c == NULL) return;
    const gd_plugin_note *nt = note_of(c, "libgradus_td.so");
    CHECK(nt != NULL, "%s: no note for the plugin", what);
    if (nt != NULL && want == NULL)
        CHECK(strcmp(nt->state, "loaded") == 0, "%s: %s: %s", what, nt->state, nt->reason);
    if (nt != NULL && want != NULL)
        CHECK(strcmp(nt->state, "failed") == 0 && strstr(nt->reason, want) != NULL,
              "%s: state %s, reason '%s', want failed with '%s'", what, nt->state, nt->reason, want);
    gd_ctx_free(c);
    unlink(path);
}

/* Cut to n bytes: failed, and the reason says how many bytes the file has. */
static void truncated_at(long n)
{
    char what[64], want[96];
    snprintf(what, sizeof what, "cut to %ld of %ld bytes", n, image_size);
    snprintf(want, sizeof want, "but the file has %ld bytes", n);
    discover(image, n, want, what);
}

int main(void)
{
    char src[1024];
    snprintf(src, sizeof src, "%s/plugins-test/libgradus_testdev.so", GD_BUILD_DIR);
    FILE *f = fopen(src, "rb");
    if (f == NULL) {
        printf("no %s: skipped\n", src);
        return 77;
    }
    fseek(f, 0, SEEK_END);
    image_size = ftell(f);
    fseek(f, 0, SEEK_SET);
    image = malloc((size_t)image_size);
    if (image == NULL || fread(image, 1, (size_t)image_size, f) != (size_t)image_size) return 1;
    fclose(f);
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/gradus-elf-XXXXXX", tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror(dir);
        return 1;
    }

    /* the whole file loads */
    discover(image, image_size, NULL, "the whole plugin");

    /* every region of the file, cut at its start, just inside and just before its end */
    const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)image;
    long cuts[256];
    int n = 0;
    const long fixed[] = {0, 1, 3, 4, 16, 63, (long)sizeof *eh - 1, (long)sizeof *eh, (long)sizeof *eh + 1};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) cuts[n++] = fixed[i];
    long ph_end = (long)(eh->e_phoff + (uint64_t)eh->e_phnum * eh->e_phentsize);
    cuts[n++] = ph_end - 1;
    const ElfW(Phdr) *ph = (const ElfW(Phdr) *)(image + eh->e_phoff);
    int loads = 0;
    for (int i = 0; i < eh->e_phnum && n < 240; i++) {
        if (ph[i].p_type != PT_LOAD || ph[i].p_filesz == 0) continue;
        long a = (long)ph[i].p_offset, b = (long)(ph[i].p_offset + ph[i].p_filesz);
        loads++;
        cuts[n++] = a + 1;
        cuts[n++] = a + (b - a) / 2;
        cuts[n++] = b - 1;
        if (b < image_size) cuts[n++] = b;
    }
    CHECK(loads >= 2, "the test device has %d loaded segments", loads);
    long sh = (long)eh->e_shoff;
    if (sh > 0) {
        cuts[n++] = sh - 1;
        cuts[n++] = sh;
        cuts[n++] = sh + 1;
    }
    cuts[n++] = image_size - 1;
    for (long c = 4096 + 7; c < image_size && n < 256; c += 4096) cuts[n++] = c;
    for (int i = 0; i < n; i++)
        if (cuts[i] >= 0 && cuts[i] < image_size) truncated_at(cuts[i]);

    /* the reason names the segment, where it ends and the file's size */
    long last_end = 0;
    int last = -1;
    for (int i = 0; i < eh->e_phnum; i++)
        if (ph[i].p_type == PT_LOAD && (long)(ph[i].p_offset + ph[i].p_filesz) > last_end)
            last_end = (long)(ph[i].p_offset + ph[i].p_filesz), last = i;
    char want[160];
    snprintf(want, sizeof want, "truncated: segment %d ends at byte %ld but the file has %ld bytes", last, last_end,
             last_end - 10);
    discover(image, last_end - 10, want, "cut 10 bytes before the end of the last segment");

    /* not ELF, another machine, another class, not a shared object */
    discover("#!/bin/sh\necho this is not a plugin\n", 35, "not an ELF file", "a text file");
    unsigned char *alt = malloc((size_t)image_size);
    if (alt != NULL) {
        memcpy(alt, image, (size_t)image_size);
        ((ElfW(Ehdr) *)alt)->e_machine = EM_S390 == ((ElfW(Ehdr) *)image)->e_machine ? EM_X86_64 : EM_S390;
        discover(alt, image_size, "another machine", "e_machine changed");
        memcpy(alt, image, (size_t)image_size);
        alt[EI_CLASS] = alt[EI_CLASS] == ELFCLASS64 ? ELFCLASS32 : ELFCLASS64;
        discover(alt, image_size, "-bit ELF file", "class changed");
        memcpy(alt, image, (size_t)image_size);
        ((ElfW(Ehdr) *)alt)->e_type = ET_EXEC;
        discover(alt, image_size, "not a shared object", "e_type changed");
        memcpy(alt, image, (size_t)image_size);
        ((ElfW(Phdr) *)(alt + eh->e_phoff))[last].p_filesz += (uint64_t)image_size; /* claims more than the file has */
        discover(alt, image_size, "truncated: segment", "a segment claiming bytes past the end");
        free(alt);
    }

    /* the same through gd_plugin_load_file: an error naming the file, the context usable */
    char path[512];
    snprintf(path, sizeof path, "%s/libgradus_cut.so", dir);
    write_file(path, image, image_size / 2);
    CHECK(tu_open_ctx(), "context");
    gd_status s = gd_plugin_load_file(ctx, path);
    CHECK(s == GD_ERR_DEVICE && strstr(gd_ctx_error(ctx), path) != NULL && strstr(gd_ctx_error(ctx), "truncated") != NULL,
          "load_file of a truncated plugin: %d %s", s, gd_ctx_error(ctx));
    unlink(path);
    rmdir(dir);
    free(image);
    return tu_finish("test_plugin_elf");
}
