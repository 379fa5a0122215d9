/* baddata.cu — bad data found by kernels on the device, reported by the host-facing calls.
 *
 * An index out of range (embedding, index_select and their gradients, a cross_entropy
 * target), a cache position or a key length that does not fit cannot fail the launch: the
 * kernel finds it long after launch returned, maybe inside a replayed CUDA graph. So a
 * kernel that meets one records the first bad value into a small record in mapped pinned
 * memory (cu_report in cuda_internal.h), and the device module's synchronize,
 * event_synchronize, copy_d2h and poll_error turn it into GDP_ERR_INVALID naming the node
 * and the value. poll_error only reads the mapped record: it never waits.
 *
 * The record holds a site index; a site describes the node (id, label, op) and what was
 * checked, so that the message reads like the reference's. Sites are taken at launch (and
 * so at capture, where a graph's launches happen once) from a table allocated at open:
 * nothing is allocated while a program runs. Launches of the same node find their site
 * again; when the table is full, the message names the node by id only.
 */
#include "cuda_internal.h"

#include <stdlib.h>
#include <string.h>

gdp_status cu_bad_open(cu_backend *be, gdp_err *err)
{
    be->sites = (cu_site *)calloc(CU_MAX_SITES, sizeof *be->sites);
    if (be->sites == NULL) return gdp_fail(err, GDP_ERR_NOMEM, "cuda: out of host memory");
    void *h = NULL, *d = NULL;
    CU_TRY(cudaHostAlloc(&h, sizeof(cu_bad_host), cudaHostAllocMapped));
    be->bad_host = (cu_bad_host *)h;
    memset(h, 0, sizeof(cu_bad_host));
    CU_TRY(cudaHostGetDevicePointer(&d, h, 0));
    be->bad_dev = (cu_bad_host *)d;
    CU_TRY(cudaMalloc((void **)&be->bad_claim, sizeof(int32_t)));
    CU_TRY(cudaMemset(be->bad_claim, 0, sizeof(int32_t)));
    return GDP_OK;
}

void cu_bad_close(cu_backend *be)
{
    if (be->bad_claim != NULL) (void)cudaFree(be->bad_claim);
    if (be->bad_host != NULL) (void)cudaFreeHost(be->bad_host);
    free(be->sites);
    be->bad_claim = NULL;
    be->bad_host = be->bad_dev = NULL;
    be->sites = NULL;
    be->n_sites = 0;
}

cu_bad cu_bad_for(cu_backend *be, const gdp_node *node, int kind, int64_t bound, int64_t extra,
                  const gdp_tensor *shape)
{
    cu_site s;
    memset(&s, 0, sizeof s); /* sites are compared with memcmp: padding too */
    s.id = node->id;
    s.kind = kind;
    snprintf(s.op, sizeof s.op, "%s", node->op != NULL ? node->op : "?");
    snprintf(s.label, sizeof s.label, "%s", node->label != NULL ? node->label : "");
    s.bound = bound;
    s.extra = extra;
    if (shape != NULL) {
        s.ndim = shape->ndim;
        for (int d = 0; d < shape->ndim && d < GDP_MAX_DIMS; d++) s.shape[d] = shape->shape[d];
    }
    cu_bad b;
    b.host = be->bad_dev;
    b.claim = be->bad_claim;
    b.site = -1;
    b.node_id = node->id;
    pthread_mutex_lock(&be->mu);
    for (int i = 0; i < be->n_sites && b.site < 0; i++)
        if (be->sites[i].id == s.id && memcmp(&be->sites[i], &s, sizeof s) == 0) b.site = i;
    if (b.site < 0 && be->sites != NULL && be->n_sites < CU_MAX_SITES) {
        be->sites[be->n_sites] = s;
        b.site = be->n_sites++;
    }
    pthread_mutex_unlock(&be->mu);
    return b;
}

/* "name[1, 2]" for flat position pos in a tensor of the site's shape; "name" for a scalar. */
static void position(const cu_site *s, const char *name, int64_t pos, char *buf, size_t cap)
{
    int64_t idx[GDP_MAX_DIMS];
    for (int d = s->ndim - 1; d >= 0; d--) {
        int64_t n = s->shape[d] > 0 ? s->shape[d] : 1;
        idx[d] = pos % n;
        pos /= n;
    }
    size_t used = (size_t)snprintf(buf, cap, "%s", name);
    if (s->ndim == 0) return;
    for (int d = 0; d < s->ndim && used < cap; d++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%lld", d == 0 ? "[" : ", ", (long long)idx[d]);
    if (used < cap) snprintf(buf + used, cap - used, "]");
}

static void describe(const cu_site *s, int64_t v, int64_t pos, char *buf, size_t cap)
{
    char at[160];
    switch (s->kind) {
    case CU_BAD_ROW:
        position(s, "ids", pos, at, sizeof at);
        snprintf(buf, cap, "%s = %lld is out of range for a table of %lld rows", at, (long long)v, (long long)s->bound);
        break;
    case CU_BAD_INDEX:
        position(s, "idx", pos, at, sizeof at);
        snprintf(buf, cap, "%s = %lld is out of range for axis %lld of size %lld", at, (long long)v,
                 (long long)s->extra, (long long)s->bound);
        break;
    case CU_BAD_TARGET:
        position(s, "targets", pos, at, sizeof at);
        snprintf(buf, cap, "%s = %lld is not a class of [0, %lld) nor ignore_index %lld", at, (long long)v,
                 (long long)s->bound, (long long)s->extra);
        break;
    /* pos and kv_len: a scalar (batch row 0) or one per batch row, `pos` the row, as the
     * reference's messages name it */
    case CU_BAD_POS:
        snprintf(buf, cap, "pos = %lld (batch row %lld): steps [%lld, %lld) do not fit the cache's %lld", (long long)v,
                 (long long)pos, (long long)v, (long long)(v + s->extra), (long long)s->bound);
        break;
    case CU_BAD_LEN:
        snprintf(buf, cap, "kv_len = %lld (batch row %lld) is outside [0, %lld], the keys k has", (long long)v,
                 (long long)pos, (long long)s->bound);
        break;
    default: snprintf(buf, cap, "bad value %lld at position %lld", (long long)v, (long long)pos);
    }
}

gdp_status cu_bad_take(cu_backend *be, gdp_err *err)
{
    volatile cu_bad_host *h = be->bad_host;
    if (h == NULL || h->ready == 0) return GDP_OK;
    __sync_synchronize(); /* the fields were written before the flag */
    int32_t site = h->site, id = h->node_id;
    int64_t value = h->value, pos = h->pos;
    h->ready = 0;
    __sync_synchronize();
    h->epoch = h->epoch + 1; /* lets the next report be claimed */
    char what[400];
    pthread_mutex_lock(&be->mu);
    if (site >= 0 && site < be->n_sites) {
        const cu_site *s = &be->sites[site];
        describe(s, value, pos, what, sizeof what);
        pthread_mutex_unlock(&be->mu);
        return gdp_fail(err, GDP_ERR_INVALID, "node %d '%s' (%s): %s", (int)s->id, s->label, s->op, what);
    }
    pthread_mutex_unlock(&be->mu);
    return gdp_fail(err, GDP_ERR_INVALID, "node %d: value %lld at position %lld is out of range", (int)id,
                    (long long)value, (long long)pos);
}

gdp_status cu_ws(const gdp_node *node, size_t bytes, char **base, gdp_err *err)
{
    *base = NULL;
    if (bytes == 0) return GDP_OK;
    size_t need = cu_ws_declare(bytes);
    if (node->workspace == NULL || node->workspace_bytes < need)
        return gdp_fail(err, GDP_ERR_INVALID, "cuda %s: needs a workspace of %zu bytes, the node has %zu", node->op,
                        need, node->workspace != NULL ? node->workspace_bytes : (size_t)0);
    uintptr_t p = ((uintptr_t)node->workspace + CU_WS_ALIGN - 1) & ~(uintptr_t)(CU_WS_ALIGN - 1);
    *base = (char *)p;
    return GDP_OK;
}
