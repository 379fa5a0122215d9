/* gtf.h — what the parts of the TensorFlow bridge share: the gradus context behind the
 * GRADUS device, the backend it drives, and a stream as TensorFlow holds it.
 *
 * TensorFlow calls the bridge from many threads at once, and a gradus context is used by
 * one thread at a time, so every call into gradus or into the backend's device module
 * holds gtf.lock. */
#ifndef GTF_H
#define GTF_H

#include "gradus.h"
#include "gradus_plugin.h"

#include <pthread.h>

typedef struct gtf_state {
    int ready;                 /* 1 once the context and backend are set up */
    int disabled;              /* GRADUS_TF_DISABLE=1: TensorFlow sees no device */
    int sync;                  /* GRADUS_SYNC=1: wait for the device after every op */
    gd_ctx *ctx;
    char backend[64];          /* the gradus backend behind the device */
    const gdp_device *dev;     /* its device module; NULL when its memory is host memory */
    void *inst;                /* the instance the module's functions take */
    void *stream;              /* gradus's stream on that backend (NULL: the implicit one) */
    char hw_name[128];
    char error[512];           /* why setting up failed, when it did */
    pthread_mutex_t lock;
} gtf_state;

extern gtf_state gtf;

/* Sets gtf up once (thread-safe); 0 when the device is usable, -1 otherwise (gtf.error
 * says why, or gtf.disabled is set). */
int gtf_init(void);

/* A stream as TensorFlow holds it: the backend's stream its work is ordered on. */
typedef struct gtf_stream {
    void *gs;                  /* a stream of the device module, or gtf.stream */
    int owned;                 /* made by stream_create (destroyed with it) */
} gtf_stream;

/* Waits for the work on a gradus stream (caller holds the lock); GDP_OK or a message. */
gdp_status gtf_sync_locked(void *gs, gdp_err *err);

/* The profiler (prof.c): whether TensorFlow is profiling, the clock of its timeline, and a
 * span of one gradus op a kernel ran (names are static strings). */
int gtf_prof_on(void);
uint64_t gtf_prof_now(void);
void gtf_prof_span(const char *tf_op, const char *gd_op, uint64_t start_ns, uint64_t end_ns);

#endif
