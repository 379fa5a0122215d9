/* cupti_trace.c — the start and end of every kernel a program runs, graph nodes included,
 * as the GPU timed them: a CUDA injection library (the driver loads the library named by
 * CUDA_INJECTION64_PATH at cuInit and calls its InitializeInjection), which turns on CUPTI's
 * concurrent-kernel activity records and writes one CSV line per kernel at exit. Events
 * time a replayed graph only as a whole; these records place each node in it, overlap from
 * programmatic dependent launch included. bench/kernel_timeline.py sums them.
 *
 *   cc -shared -fPIC -O2 -DKREC=CUpti_ActivityKernelN -I$CUPTI/include bench/inject/cupti_trace.c \
 *      -L$CUPTI/lib64 -lcupti -o cupti_trace.so
 *   CUPTI_TRACE_OUT=k.csv CUDA_INJECTION64_PATH=$PWD/cupti_trace.so PROGRAM ...
 *
 * KREC: the newest kernel record type of the CUPTI headers it is built with (the version
 * the library fills in); bench/run_gpu_engine.sh's profile step picks it.
 */
#include <cupti.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef KREC
#error "define KREC as the CUPTI headers' newest CUpti_ActivityKernelN"
#endif

#define TRACE_BUF (16u << 20)

static FILE *out;

static void CUPTIAPI want_buffer(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = (uint8_t *)aligned_alloc(8, TRACE_BUF);
    *size = *buffer != NULL ? TRACE_BUF : 0;
    *max_records = 0;
}

static void CUPTIAPI got_buffer(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *rec = NULL;
    while (out != NULL && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
        const KREC *k = (const KREC *)rec;
        fprintf(out, "%llu,%llu,%u,%u,%u,%u,%s\n", (unsigned long long)k->start, (unsigned long long)k->end,
                (unsigned)k->streamId, (unsigned)k->gridX, (unsigned)k->gridY, (unsigned)k->blockX,
                k->name != NULL ? k->name : "?");
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped > 0 && out != NULL)
        fprintf(out, "# dropped %zu records\n", dropped);
    free(buffer);
}

static void finish(void)
{
    cuptiActivityFlushAll(1);
    if (out != NULL) fclose(out);
    out = NULL;
}

int InitializeInjection(void)
{
    const char *path = getenv("CUPTI_TRACE_OUT");
    out = fopen(path != NULL ? path : "kernels.csv", "w");
    if (out == NULL) return 0;
    fprintf(out, "start_ns,end_ns,stream,grid_x,grid_y,block_x,name\n");
    if (cuptiActivityRegisterCallbacks(want_buffer, got_buffer) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        fclose(out);
        out = NULL;
        return 0;
    }
    atexit(finish);
    return 1;
}
