/* testdev_internal.h — what the test device's source files share: how its memory is
 * addressed, and the hooks between the instance (testdev.c), the collective module
 * (collective.c) and the graph pass (graph_pass.c). */
#ifndef GRADUS_TESTDEV_INTERNAL_H
#define GRADUS_TESTDEV_INTERNAL_H

#include "gradus_plugin.h"

#include <stdint.h>

/* Device pointers carry a tag bit the host must not dereference (a fault if it does),
 * except in the host-visible variant. */
#ifdef TESTDEV_HOST_VISIBLE
#define HOST_VISIBLE 1
#define DEV_TAG ((uintptr_t)0)
#else
#define HOST_VISIBLE 0
#define DEV_TAG ((uintptr_t)1 << 62)
#endif
static inline void *dev_to_host(const void *p) { return (void *)((uintptr_t)p & ~DEV_TAG); }
static inline void *host_to_dev(void *p) { return (void *)((uintptr_t)p | DEV_TAG); }

/* Runs the segments an instance holds back (the host-visible variant's queue). */
void td_drain_queue(void *be);

extern const gdp_collective td_collective;

/* The host an instance was given at init (graph_pass.c logs through it). */
const gdp_host *td_host(void *be);
extern const gdp_graph_pass td_graph_pass;

#endif
