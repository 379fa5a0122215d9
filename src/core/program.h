/* program.h — a compiled program, shared by the files that build and run it:
 * compile.c (the phases), layout.c (views and placement), plan.c (memory), pass.c (graph
 * passes over the program's nodes) and run.c (running it, data in and out).
 *
 * A program owns its list of nodes (the graph's, plus those its graph passes and its
 * planner made), where each value lives (a view of a root buffer, on each backend that
 * reads it), the actions a run performs, and the node descriptors kernels receive, built
 * once at compile time. */
#ifndef GD_PROGRAM_H
#define GD_PROGRAM_H

#include "core.h"

/* A node of the program. */
typedef struct gd_pnode {
    gd_node *node;                  /* the graph's, or `owned` (made by a pass or the planner) */
    int owned;
    int dead;                       /* removed by a graph pass */
    gd_backend *be;
    const gd_kernel_entry *kernel;  /* NULL: the reference kernel (or a view) */
    int fallback;                   /* placed below the preferred backend */
    int view;                       /* its output is a view of its input 0: no kernel runs */
    int contig_in;                  /* bitmask: inputs the kernel needs contiguous */
} gd_pnode;

/* Where a value lives in this program: a view (offset, strides) of its root's buffer. A
 * root is a value with storage of its own: a leaf, the output of a kernel, or the
 * in-place output of an update (which shares its input's storage). */
typedef struct gd_vinfo {
    int root;                       /* value id owning the buffer */
    int64_t offset;                 /* elements from the root's start */
    int64_t stride[GDP_MAX_DIMS];
    int contiguous;
    int producer;                   /* pnode index producing the value, -1 for leaves */
} gd_vinfo;

enum { GD_SLOT_PLANNED = 0, GD_SLOT_LEAF, GD_SLOT_WORKSPACE };

/* A buffer on one backend: a root's storage there (its home or a mirror), or a
 * workspace. Planned slots get an offset in the graph's arena of that backend. */
typedef struct gd_slot {
    int root;                       /* value id (-1 for workspaces) */
    gd_backend *be;
    size_t bytes;
    int kind;                       /* GD_SLOT_* */
    int first, last;                /* action range it must survive */
    size_t offset;                  /* planned: in the arena */
    void *leaf_ptr;                 /* leaf: the leaf's own storage */
} gd_slot;

enum { GD_ACT_KERNEL, GD_ACT_COPY };

typedef struct gd_action {
    int kind;
    int pnode;                      /* kernel */
    int in[GDP_MAX_INPUTS], out[GDP_MAX_OUTPUTS]; /* kernel: slots of the operands' roots */
    int ws;                         /* kernel: workspace slot or -1 */
    int desc;                       /* kernel: index of its descriptor */
    int src, dst;                   /* copy: slots */
    int staging;                    /* copy between two devices: host slot or -1 */
    int segment;                    /* index of the executor segment it belongs to, or -1 */
    int wait_before;                /* host-side action: wait for this action's event first (-1: none) */
    int record_after;               /* record this action's event after it */
    int hook_after;                 /* a gd_program_on_ready callback fires after it */
    int sync_before;                /* host-side action: bitmask of devices to synchronize first,
                                       for device work queued before this run (see plan.c) */
} gd_action;

/* A kernel's view of one node, built at compile time and re-pointed when an arena moves. */
typedef struct gd_desc {
    gdp_node node;
    gdp_tensor t[GDP_MAX_INPUTS + GDP_MAX_OUTPUTS];
    const gdp_tensor *in[GDP_MAX_INPUTS];
    const gdp_tensor *out[GDP_MAX_OUTPUTS];
    char label[96];
} gd_desc;

typedef struct gd_segment_run {
    gd_backend *be;
    int first_act, n_acts;          /* the kernel actions it covers, consecutive */
    void *handle;                   /* from the executor's prepare; NULL: launched node by node */
    const gdp_node **nodes;
    gdp_launch_fn *launch;
} gd_segment_run;

struct gd_program {
    gd_graph *g;
    int flags;
    /* nodes */
    gd_pnode *pn;
    int n_pn, cap_pn;
    /* values: the graph's at compile time, then the program's own (contiguous copies) */
    gd_tensor **vals;
    int n_vals, cap_vals, n_graph_vals;
    gd_vinfo *vi;
    int *readers;                   /* per value: pnodes reading it */
    /* targets and what their results are read from (a contiguous value) */
    gd_tensor **targets;
    int *target_val;
    int n_targets;
    gd_backend *dev;                /* preferred backend when compiled */
    /* plan */
    gd_slot *slots;
    int n_slots, cap_slots;
    int *slot_of;                   /* [root * n_backends + backend] -> slot, -1 */
    int n_backends;
    gd_action *acts;
    int n_acts, cap_acts;
    size_t planned[GD_MAX_BACKENDS];/* bytes of arena this program needs per backend */
    /* run */
    gd_desc *descs;
    int n_descs;
    gd_segment_run *segs;
    int n_segs;
    /* gd_program_on_ready: hooks sorted by the action after which they fire */
    struct gd_ready_hook *hooks;
    int n_hooks;
    void **events;                  /* per action, where record_after (NULL otherwise) */
    uint64_t bound_gen[GD_MAX_BACKENDS]; /* arena generations the descriptors point into */
    int bound;
    gdp_attrs pass_attrs;           /* what a graph pass's node_attrs last handed out */
    /* the profile that has a snapshot of this program (src/prof), and its index there */
    uint64_t prof_session;
    int prof_prog;
};

/* A callback for when a target's value is final within a run (run.c). */
typedef struct gd_ready_hook {
    int *targets, n;                /* indices in targets */
    gd_ready_fn fn;
    void *user;
    int at;                         /* fires after this action (n_acts: at the end of the run) */
    int last;                       /* the target that action finishes */
} gd_ready_hook;

/* compile phases (compile.c, layout.c, plan.c, pass.c) */
gd_status gd_prog_select(gd_program *p, int n_targets, gd_tensor *const *targets);
gd_status gd_prog_passes(gd_program *p);
gd_status gd_prog_layout(gd_program *p);
gd_status gd_prog_actions(gd_program *p);
gd_status gd_prog_plan_memory(gd_program *p);
gd_status gd_prog_describe_nodes(gd_program *p);
gd_status gd_prog_segments(gd_program *p);
/* Segments again (after hooks moved where they end); the next run prepares them. */
gd_status gd_prog_resegment(gd_program *p);
/* (Re)points descriptors at the arenas and prepares executor segments; run.c calls it
 * when an arena moved since. */
gd_status gd_prog_bind(gd_program *p);
void gd_prog_unbind(gd_program *p);

/* helpers */
int gd_prog_add_pnode(gd_program *p, gd_node *n, int owned);
int gd_prog_add_value(gd_program *p, gd_tensor *t);
void *gd_slot_ptr(const gd_program *p, int slot);
const char *gd_pnode_sig(const gd_program *p, int pn, char *buf, size_t cap);
int gd_program_fallbacks(const gd_program *p);

/* Guard bytes (the sweep): written before and checked after every run. */
gd_status gd_program_check_guards(gd_program *p);

#endif
