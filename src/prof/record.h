/* record.h — what a profile holds in memory while it records, shared by the files of
 * src/prof that fill it (prof.c: starting, stopping, the application's spans and
 * counters; hooks.c: the core's hooks and the backends' spans) and the one that writes
 * it (trace_write.c).
 *
 * Events are fixed-size records appended to one array; names are interned strings;
 * programs are snapshots of what their nodes were (label, op, shapes, cost), taken when
 * the profile first sees a program, so a trace can be written after the program is gone.
 * Nothing here allocates in the steady state: arrays grow by doubling and stop growing
 * at the event cap, past which events are counted as dropped. */
#ifndef GD_PROF_RECORD_H
#define GD_PROF_RECORD_H

#include "core.h"
#include "prof.h"

#include <stdint.h>

/* Categories: the "cat" of a trace event. The summary reads GD_PCAT_NODE and
 * GD_PCAT_DEVSEG (device time), GD_PCAT_RUN (steps). */
enum gd_pcat {
    GD_PCAT_COMPILE = 0, /* a whole gd_compile */
    GD_PCAT_PHASE,       /* one compile phase (or a re-bind inside a run) */
    GD_PCAT_RUN,         /* a gd_program_run */
    GD_PCAT_LAUNCH,      /* the host launching a node on a device */
    GD_PCAT_SEGMENT,     /* the host running a prepared segment */
    GD_PCAT_COPY,        /* a copy between backends inside a run */
    GD_PCAT_TRANSFER,    /* gd_tensor_write / gd_tensor_read */
    GD_PCAT_SYNC,        /* the host waiting for a device */
    GD_PCAT_USER,        /* gd_profile_begin/end */
    GD_PCAT_NODE,        /* a node executing on its backend */
    GD_PCAT_DEVSEG,      /* a prepared segment executing on its device, timed as a whole */
    GD_PCAT_DEVICE,      /* device work no launch of this profile accounts for */
    GD_PCAT_COUNTER,     /* a counter sample */
    GD_PCAT_N
};
extern const char *const gd_pcat_names[GD_PCAT_N];

typedef struct gd_pev {
    uint64_t t0, t1;     /* ns; counters: t0 = t1 = the sample's time */
    int32_t name;        /* interned; -1: named after its node, segment or program */
    uint8_t cat;         /* enum gd_pcat */
    uint8_t _pad;
    int16_t track;
    int32_t prog;        /* index into gd_prof.progs, -1 */
    int32_t run;         /* the program's run number (1-based), -1 */
    int32_t node;        /* node index in the program snapshot; segments: the segment; -1 */
    int32_t seg;         /* a node span: the segment it ran in, -1 */
    double val;          /* counters: the value; copies and transfers: bytes; unset: 0 */
} gd_pev;

/* A node of a program, as the trace describes it. */
typedef struct gd_pnode_info {
    int32_t id;          /* gdp_node.id */
    int32_t backend;     /* index into ctx->backends */
    int32_t seg;         /* the executor segment holding it, -1 */
    int32_t dtype;       /* of its first output (what peaks are looked up by) */
    int32_t label, op, shapes; /* interned */
    double bytes, flops; /* from the op's cost function; -1 when it has none */
} gd_pnode_info;

typedef struct gd_pprog {
    int32_t serial;      /* 1-based, in the order the profile met programs */
    int32_t flags;       /* gd_compile's */
    int32_t desc;        /* interned: what the program computes */
    int32_t runs;        /* runs so far in this profile */
    int32_t n_nodes;     /* kernel actions, in program order (index = descriptor index) */
    gd_pnode_info *nodes;
    int32_t max_id;
    int32_t *by_id;      /* node id -> index, -1 */
    int32_t n_segs;
    int32_t *seg_first, *seg_count; /* node ranges */
} gd_pprog;

/* A launch the host made on a device whose profiler module will report it: spans are
 * matched to these in order. */
typedef struct gd_plaunch {
    int32_t prog, run;
    int32_t node;        /* node index, or -1 for a whole segment */
    int32_t seg;         /* the segment (of the segment itself, or of a node run in one), -1 */
    int32_t node_id;     /* gdp_node.id, -1 for a segment */
    int32_t _pad;
    uint64_t t;          /* when the host launched it */
} gd_plaunch;

typedef struct gd_pbackend {
    int profiled;        /* its profiler module started: device spans come from it */
    int host_timed;      /* kernels run on the calling thread and no module: the core times them */
    int16_t track;       /* default track (stream 0) */
    double peak_flops[GDP_DTYPE_COUNT], peak_bw[GDP_DTYPE_COUNT]; /* 0: not reported */
    size_t mem_last;
    int mem_seen;
    gd_plaunch *q;       /* launches whose spans have not come yet, from q_head */
    size_t q_head, q_len, q_cap;
} gd_pbackend;

typedef struct gd_ptrack {
    int32_t pid, tid;
    int32_t name;        /* thread name */
} gd_ptrack;

#define GD_PROF_STACK 64

struct gd_prof {
    gd_ctx *ctx;
    char *path;
    uint64_t t_start;
    uint64_t session;    /* programs carry the session that snapshotted them */
    /* events */
    gd_pev *ev;
    size_t n_ev, cap_ev, max_ev;
    uint64_t dropped;
    int said_dropped;
    /* strings: NUL-terminated, at offsets into one buffer, found through a hash table */
    char *str;
    size_t str_len, str_cap;
    uint32_t *str_off;
    int32_t n_str, cap_str;
    int32_t *hash;       /* open addressing: string id or -1 */
    int32_t cap_hash;
    /* tracks */
    gd_ptrack tracks[64];
    int n_tracks;
    int16_t host_track;
    /* programs */
    gd_pprog *progs;
    int32_t n_progs, cap_progs;
    int32_t cur_prog, cur_run; /* the run in progress (hooks between run_begin and run_end) */
    /* backends */
    gd_pbackend be[GD_MAX_BACKENDS];
    int n_be;
    gdp_span *spans;     /* buffer for the modules' collect */
    int32_t cap_spans;
    uint64_t clamped;    /* device spans whose start was moved to their launch */
    uint64_t unmatched;  /* device spans no launch of this profile accounts for */
    /* the application's open spans */
    struct { int32_t name; uint64_t t0; } stack[GD_PROF_STACK];
    int depth, overflow;
    int failed_memory;   /* an allocation failed: some records are missing */
};

/* Interned id of s (-1 when out of memory). */
int32_t gd_prof_str(gd_prof *pr, const char *s);
const char *gd_prof_str_at(const gd_prof *pr, int32_t id);
/* Track of (pid, tid), made when new ("name" for its thread); -1 when full. */
int16_t gd_prof_track(gd_prof *pr, int32_t pid, int32_t tid, const char *name);
/* A new event (zeroed but for prog/run/node/seg = -1, name = -1), or NULL when the cap is
 * reached or memory is out: the event is then counted as dropped. */
gd_pev *gd_prof_event(gd_prof *pr, int cat, int16_t track, uint64_t t0, uint64_t t1);
/* The snapshot of p, made on first sight; -1 when out of memory. */
int32_t gd_prof_program(gd_prof *pr, gd_program *p);
/* Collects what backend modules have; all = 1 waits for every device first (whose
 * failure, bad data found by a kernel included, is returned with the message in ctx). */
gd_status gd_prof_collect(gd_prof *pr, int all);
/* The profile's state of backend b (a backend loaded since the profile started joins). */
gd_pbackend *gd_prof_backend(gd_prof *pr, const gd_backend *b);
/* pid of backend b's tracks (the host is 1). */
static inline int32_t gd_prof_backend_pid(int b) { return 2 + b; }

/* Writes the trace to path (atomically: a temporary file renamed). GD_OK, or GD_ERR_IO
 * with the reason in err. */
gd_status gd_prof_write(gd_prof *pr, const char *path, char *err, size_t cap);

#endif
