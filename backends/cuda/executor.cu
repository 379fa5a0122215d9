/* executor.cu — the executor module: a segment of nodes captured once into a CUDA graph
 * and replayed by each run with one cudaGraphLaunch, instead of one launch (and, for
 * cuBLAS and cuDNN, a few library calls) per node.
 *
 * prepare() puts the segment's stream into capture mode and calls each node's launch
 * function as the host would: kernels, memsets, device copies, cuBLASLt and cuDNN calls
 * are recorded, nothing runs. That works because no kernel does anything at launch that
 * depends on the data or that capture forbids: runtime values (positions, lengths,
 * learning rates) are read on the device, scratch is the node's planned workspace, bad
 * data is reported through a mapped record (baddata.cu), and one-time setup (library
 * handles, cuDNN plans, shared-memory opt-ins) happens at open or when the host asks for
 * the workspace at compile time. Descriptors, data pointers and workspaces do not change
 * between prepare and release (the ABI's promise), so the graph stays valid.
 *
 * No kernel of this plugin is known to break capture. Should one fail anyway (a library
 * doing something capture forbids), prepare ends the capture, says so once in the log,
 * and answers GDP_ERR_UNSUPPORTED: the host then launches that segment node by node.
 *
 * The optimizer's updates, one node per parameter, are captured as batched launches of a
 * few parameters each (cu_updates_batch in optim.cu), and a training step's casts of its
 * master weights likewise (cu_casts_batch in layout.cu): the replay saves their launches.
 *
 * Profiling: a replayed graph is timed as a whole, one span per segment run (node_id -1,
 * named after its first and last nodes); GRADUS_CUDA_GRAPHS=0 gives a span per node.
 */
#include "cuda_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct cu_graph {
    cudaGraphExec_t exec; /* NULL: the segment put no work on the stream (empty tensors) */
    int n_nodes;
    char name[CU_NAME];   /* the profiler's span name */
} cu_graph;

static cu_backend *BE(void *b) { return (cu_backend *)b; }

/* Ends a capture that went wrong, leaving no graph and no pending error behind. */
static void abandon(cu_backend *be, cudaStream_t s)
{
    cudaGraph_t g = NULL;
    (void)cudaStreamEndCapture(s, &g);
    if (g != NULL) (void)cudaGraphDestroy(g);
    (void)cudaGetLastError();
    be->capturing = 0;
}

static gdp_status not_captured(cu_backend *be, const gdp_segment *seg, const char *why, gdp_err *err)
{
    if (!be->capture_logged) {
        be->capture_logged = 1;
        cu_log(be, "a segment of %d nodes (from '%s') is not captured into a CUDA graph: %s; such segments run "
                   "node by node", (int)seg->n_nodes, seg->nodes[0]->label != NULL ? seg->nodes[0]->label : "?", why);
    }
    return gdp_fail(err, GDP_ERR_UNSUPPORTED, "cuda: segment not captured: %s", why);
}

static gdp_status exec_prepare(void *backend, const gdp_segment *seg, void **handle, gdp_err *err)
{
    cu_backend *be = BE(backend);
    *handle = NULL;
    if (!be->graphs) return gdp_fail(err, GDP_ERR_UNSUPPORTED, "cuda: CUDA graphs are off (GRADUS_CUDA_GRAPHS=0)");
    if (be->sync_each) return gdp_fail(err, GDP_ERR_UNSUPPORTED, "cuda: GRADUS_SYNC=1 launches node by node");
    if (seg == NULL || seg->n_nodes < 1 || seg->nodes == NULL || seg->launch == NULL)
        return gdp_fail(err, GDP_ERR_UNSUPPORTED, "cuda: empty segment");
    cudaStream_t s = cu_stream(be, seg->stream);
    CU_TRY(cudaSetDevice(be->device));
    (void)cudaGetLastError(); /* an old non-sticky error must not be blamed on the capture */
    /* Thread-local: calls that capture forbids fail when this thread makes them, other
     * threads (another gradus context) are not affected. */
    cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return not_captured(be, seg, cudaGetErrorString(e), err);
    }
    be->capturing = 1;
    gdp_err lerr;
    memset(&lerr, 0, sizeof lerr);
    lerr.size = sizeof lerr;
    for (int i = 0; i < seg->n_nodes; i++) {
        gdp_status bst = GDP_OK;
        int batched = cu_updates_batch(be, seg, i, s, &bst, &lerr);
        if (batched == 0 && bst == GDP_OK) batched = cu_casts_batch(be, seg, i, s, &bst, &lerr);
        if (batched > 0 && bst == GDP_OK) {
            i += batched - 1;
            continue;
        }
        if (bst != GDP_OK || seg->launch[i](be, seg->nodes[i], seg->stream, &lerr) != GDP_OK) {
            abandon(be, s);
            char why[600];
            snprintf(why, sizeof why, "node %d '%s': %s", (int)seg->nodes[i]->id,
                     seg->nodes[i]->label != NULL ? seg->nodes[i]->label : "?", lerr.msg);
            return not_captured(be, seg, why, err);
        }
    }
    be->capturing = 0;
    cudaGraph_t g = NULL;
    e = cudaStreamEndCapture(s, &g);
    if (e != cudaSuccess || g == NULL) {
        (void)cudaGetLastError();
        if (g != NULL) (void)cudaGraphDestroy(g);
        return not_captured(be, seg, cudaGetErrorString(e), err);
    }
    size_t n_graph_nodes = 0;
    cudaGraphExec_t exec = NULL;
    e = cudaGraphGetNodes(g, NULL, &n_graph_nodes);
    if (e == cudaSuccess && n_graph_nodes > 0) e = cudaGraphInstantiate(&exec, g, 0);
    (void)cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return not_captured(be, seg, cudaGetErrorString(e), err);
    }
    cu_graph *h = (cu_graph *)calloc(1, sizeof *h);
    if (h == NULL) {
        if (exec != NULL) (void)cudaGraphExecDestroy(exec);
        return gdp_fail(err, GDP_ERR_NOMEM, "cuda: out of host memory");
    }
    h->exec = exec;
    h->n_nodes = seg->n_nodes;
    const char *first = seg->nodes[0]->label, *last = seg->nodes[seg->n_nodes - 1]->label;
    snprintf(h->name, sizeof h->name, "graph of %d: %.36s .. %.36s", (int)seg->n_nodes, first != NULL ? first : "?",
             last != NULL ? last : "?");
    *handle = h;
    return GDP_OK;
}

static gdp_status exec_run(void *backend, void *handle, void *stream, gdp_err *err)
{
    cu_backend *be = BE(backend);
    cu_graph *h = (cu_graph *)handle;
    if (h == NULL) return gdp_fail(err, GDP_ERR_INVALID, "cuda executor: NULL handle");
    if (h->exec == NULL) return GDP_OK;
    cudaStream_t s = cu_stream(be, stream);
    CU_TRY(cudaSetDevice(be->device));
    cudaEvent_t start = NULL;
    if (be->prof.on) cu_prof_begin(be, s, &start);
    cudaError_t e = cudaGraphLaunch(h->exec, s);
    if (start != NULL) cu_prof_end(be, s, h->name, -1, start);
    CU_TRY(e);
    return GDP_OK;
}

static void exec_release(void *backend, void *handle)
{
    cu_backend *be = BE(backend);
    cu_graph *h = (cu_graph *)handle;
    if (h == NULL) return;
    (void)cudaSetDevice(be->device);
    /* A graph still running is freed when it completes. */
    if (h->exec != NULL) (void)cudaGraphExecDestroy(h->exec);
    (void)cudaGetLastError();
    free(h);
}

const gdp_executor cu_executor_module = {sizeof(gdp_executor), exec_prepare, exec_run, exec_release};
