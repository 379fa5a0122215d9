/* cmd_devices.c — `gradus devices`: backends loaded, plugins declined, refused or
 * disabled (with the reason), and each device's memory. */
#include "cli.h"
#include "core.h"

#include <stdio.h>
#include <string.h>

int cmd_devices(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            printf("usage: gradus devices\n\nLists backends: loaded ones with their device and memory, and plugins\n"
                   "found but declined, refused, failed or disabled, with the reason. Plugins are looked\n"
                   "for in GRADUS_PLUGIN_PATH, in the plugin directory of the tree this command is in\n"
                   "(lib/gradus/plugins installed, plugins/ in a build tree), beside the library and in\n"
                   "the install directory; GRADUS_DISABLE_<NAME>=1 disables one.\n");
            return 0;
        }
        fprintf(stderr, "gradus devices: unknown option %s\n", argv[i]);
        return 2;
    }
    gd_ctx *ctx = cli_ctx(NULL);
    if (ctx == NULL) return 1;
    printf("%-8s %-9s %-8s %5s  %s\n", "backend", "state", "priority", "kernels", "device");
    for (int i = 0; i < ctx->n_backends; i++) {
        gd_backend *b = ctx->backends[i];
        char dev[256] = "host memory";
        if (b->has_dev) {
            size_t fr = 0, tot = 0;
            gdp_err e = {.size = sizeof e};
            if (b->dev.memory_info != NULL && b->dev.memory_info(b->plugin.backend, &fr, &tot, &e) == GDP_OK && tot > 0)
                snprintf(dev, sizeof dev, "%s, %.1f GiB free of %.1f GiB%s", b->dev.name ? b->dev.name : "device",
                         (double)fr / 1073741824.0, (double)tot / 1073741824.0, b->host_visible ? ", host-visible" : "");
            else
                snprintf(dev, sizeof dev, "%s", b->dev.name ? b->dev.name : "device");
        }
        int n_k = b->is_ref ? gd_registry_count(ctx->reg) : b->n_kernels;
        printf("%-8s %-9s %-8d %5d    %s%s%s\n", b->name, b->is_ref ? "built-in" : "loaded", b->priority, n_k, dev,
               i == ctx->preferred ? "  (preferred)" : "", b->is_ref ? "  (the reference: every op)" : "");
    }
    for (int i = 0; i < ctx->n_notes; i++) {
        gd_plugin_note *n = &ctx->notes[i];
        if (strcmp(n->state, "loaded") == 0) continue;
        printf("%-8s %-9s %s: %s\n", n->name, n->state, n->path, n->reason);
    }
    gd_ctx_free(ctx);
    return 0;
}
