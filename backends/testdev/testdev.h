/* testdev.h — what the tests may see of the test device: the counters an instance keeps
 * and the process-wide state its "driver" shares between instances.
 *
 * A backend normally exposes nothing but gradus_plugin_init. The test device also lets
 * the tests count what the host asked of it (allocations, executor prepares, event waits)
 * so that they can check the runtime's contracts: `plugin.backend` of a loaded testdev
 * points at its instance, which starts with a testdev_stats. */
#ifndef GRADUS_TESTDEV_H
#define GRADUS_TESTDEV_H

#include <stdint.h>

typedef struct testdev_stats {
    int32_t id;                 /* unique per instance in this process (1, 2, ...) */
    int32_t host_visible;       /* the variant: 1 when the host may read its memory */
    /* device module */
    int64_t allocs, frees;      /* alloc and free calls */
    int64_t bytes, peak;        /* device bytes held now, and at most */
    int64_t syncs;              /* synchronize calls */
    int64_t event_records, event_syncs, stream_waits;
    int64_t polls;              /* poll_error calls */
    /* kernels */
    int64_t launches;           /* kernels run (launched alone or inside a segment) */
    int64_t strided_launches;   /* ... given at least one input that is not contiguous */
    int64_t workspace_launches; /* ... that used the workspace the host planned for them */
    /* executor */
    int64_t prepares, runs, releases;
    int64_t segment_nodes;      /* nodes in segments prepared so far */
    /* configure */
    int64_t threads;            /* the last "threads" setting */
} testdev_stats;

static inline const testdev_stats *testdev_stats_of(const void *backend) { return (const testdev_stats *)backend; }

/* Exported by the plugin: instances alive in the process and the device bytes they hold
 * between them (what a real driver would know). */
#define TESTDEV_DRIVER_SYMBOL "gradus_testdev_driver"
typedef void (*testdev_driver_fn)(int32_t *instances, int64_t *bytes);

#endif
