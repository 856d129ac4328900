/* cuda_emu.c - see cuda_emu.h.
 *
 * Each thread of a block is a fiber (ucontext) with its own stack, all on
 * the calling thread; the scheduler below runs one at a time until it
 * waits at a barrier or a shuffle, or returns from the kernel, and then
 * resumes the next runnable fiber in emu_order. A run is deterministic,
 * and a switch costs a function call, not a system's thread wake-up. When
 * no fiber can run and some still wait, the kernel deadlocked: the launch
 * fails, naming the wait, instead of hanging.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include "cuda_emu.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
/* ASan must be told which stack is live after each switch. (Its
 * swapcontext interceptor still prints, once per test process, that it
 * "doesn't fully support makecontext/swapcontext": the annotations below
 * are what it asks for instead; the line is expected in `make sanitize`.) */
#define FIBER_LEAVE(save, bottom, size) __sanitizer_start_switch_fiber((save), (bottom), (size))
#define FIBER_ARRIVE(save, bottom, size) __sanitizer_finish_switch_fiber((save), (bottom), (size))
#else
#define FIBER_LEAVE(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#define FIBER_ARRIVE(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#endif

#define EMU_MAX_THREADS 1024
#define EMU_WARP        32
#define EMU_STACK       (256u << 10)

struct emu_dim3 threadIdx, blockIdx, blockDim, gridDim;
int emu_order = EMU_ASCENDING;

union emu_slot {
    double d;
    float  f;
    int    i;
};

/* A barrier: it opens when `arrived` reaches its count. */
struct emu_gate {
    unsigned    arrived;
    const char *what;
};

enum { RUNNABLE, WAITING, BLOCK_DONE };

struct emu_fiber {
    ucontext_t       ctx;
    char            *stack;
    int              state;
    struct emu_gate *gate;                       /* WAITING: on this */
};

static struct {
    ucontext_t        sched;                     /* the launching thread */
    const void       *sched_bottom;              /* its stack, for ASan */
    size_t            sched_size;
    void             *fake;                      /* ASan's fake stack of the side left */
    struct emu_fiber *f;
    unsigned          n;                         /* threads per block */
    unsigned          live;                      /* of this block, not yet returned */
    unsigned          cur;                       /* the fiber running */
    unsigned          block;                     /* linear index of the block running */
    void            (*body)(void *);
    void             *arg;
    struct emu_gate   sync;                      /* __syncthreads: every live thread */
    struct emu_gate   group[EMU_MAX_THREADS];    /* a shuffle group, by its first thread */
    union emu_slot    slot[EMU_MAX_THREADS];     /* a shuffle's values, by thread */
    const unsigned   *mma_a[EMU_MAX_THREADS];    /* an mma's fragments, by thread */
    const unsigned   *mma_b[EMU_MAX_THREADS];
    int               broken;
    char              why[256];
} g;

static void emu_break(const char *fmt, ...)
{
    if (g.broken)
        return;
    g.broken = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g.why, sizeof g.why, fmt, ap);
    va_end(ap);
}

/* Every fiber waiting on gt may run again. */
static void gate_open(struct emu_gate *gt)
{
    gt->arrived = 0;
    for (unsigned i = 0; i < g.n; i++)
        if (g.f[i].state == WAITING && g.f[i].gate == gt) {
            g.f[i].state = RUNNABLE;
            g.f[i].gate = NULL;
        }
}

/* From the running fiber back to the scheduler. */
static void fiber_yield(void)
{
    struct emu_fiber *f = &g.f[g.cur];
    FIBER_LEAVE(&g.fake, g.sched_bottom, g.sched_size);
    if (swapcontext(&f->ctx, &g.sched) != 0)
        abort();   /* cannot happen: both contexts are valid; nothing could continue */
    FIBER_ARRIVE(g.fake, &g.sched_bottom, &g.sched_size);
}

/* Arrive at gt, one of `count`: the last opens it and runs on, the others
 * yield until it opens. */
static void gate_wait(struct emu_gate *gt, unsigned count, const char *what)
{
    gt->what = what;
    if (++gt->arrived >= count) {
        gate_open(gt);
        return;
    }
    struct emu_fiber *f = &g.f[g.cur];
    f->state = WAITING;
    f->gate = gt;
    while (f->state == WAITING)
        fiber_yield();
}

void __syncthreads(void)
{
    gate_wait(&g.sync, g.live, "__syncthreads");
}

/* The exchange behind every __shfl_xor_sync: CUDA's rules checked, then
 * each lane of the group posts its value, all wait, each reads its
 * partner's, all wait again (so no slot is overwritten before it is read). */
static union emu_slot shfl_xor(unsigned mask, union emu_slot v, int lane_mask, int width)
{
    unsigned tid = g.cur, lane = tid % EMU_WARP;
    int shape_ok = width >= 1 && width <= EMU_WARP && !(width & (width - 1));
    unsigned want = !shape_ok ? 0 : width == EMU_WARP ? 0xFFFFFFFFu
                  : ((1u << width) - 1) << (lane / (unsigned)width * (unsigned)width);
    if (!shape_ok || lane_mask < 0 || lane_mask >= width || mask != want) {
        emu_break("block %u, thread %u: __shfl_xor_sync(mask 0x%x, lane_mask %d, width %d): "
                  "the mask must be the lane's group of width lanes (0x%x) and lane_mask "
                  "below width", g.block, tid, mask, lane_mask, width, want);
        return v;
    }
    unsigned first = tid - lane % (unsigned)width;
    g.slot[tid] = v;
    gate_wait(&g.group[first], (unsigned)width, "a shuffle");
    union emu_slot r = g.slot[tid ^ (unsigned)lane_mask];
    gate_wait(&g.group[first], (unsigned)width, "a shuffle");
    return r;
}

double emu_shfl_xor_d(unsigned mask, double v, int lane_mask, int width)
{
    union emu_slot s = { .d = v };
    return shfl_xor(mask, s, lane_mask, width).d;
}

float emu_shfl_xor_f(unsigned mask, float v, int lane_mask, int width)
{
    union emu_slot s = { .f = v };
    return shfl_xor(mask, s, lane_mask, width).f;
}

int emu_shfl_xor_i(unsigned mask, int v, int lane_mask, int width)
{
    union emu_slot s = { .i = v };
    return shfl_xor(mask, s, lane_mask, width).i;
}

/* A bf16 (the high half of a float's bits) as a float. */
static float bf16_float(unsigned bits)
{
    unsigned u = (bits & 0xffffu) << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Element (row, col) of the warp's A (16 x 16) and (k, col) of its B
 * (16 x 8), read from the fragments the lanes posted (first: lane 0). */
static float mma_a_at(unsigned first, int row, int col)
{
    unsigned lane = (unsigned)(row % 8) * 4 + (unsigned)(col % 8) / 2;
    int reg = (row >= 8) + 2 * (col >= 8);
    return bf16_float(g.mma_a[first + lane][reg] >> (16 * (col & 1)));
}

static float mma_b_at(unsigned first, int k, int col)
{
    unsigned lane = (unsigned)col * 4 + (unsigned)(k % 8) / 2;
    return bf16_float(g.mma_b[first + lane][k >= 8] >> (16 * (k & 1)));
}

void emu_mma_bf16_16816(float *d, const unsigned *a, const unsigned *b)
{
    unsigned tid = g.cur, lane = tid % EMU_WARP, first = tid - lane;
    if (g.n % EMU_WARP != 0) {
        emu_break("block %u, thread %u: mma.sync in a block of %u threads: a warp-wide "
                  "instruction needs whole warps", g.block, tid, g.n);
        return;
    }
    g.mma_a[tid] = a;
    g.mma_b[tid] = b;
    gate_wait(&g.group[first], EMU_WARP, "an mma.sync");
    int gr = (int)lane / 4, t = (int)lane % 4;
    float out[4];
    for (int i = 0; i < 4; i++) {
        int row = gr + 8 * (i / 2), col = 2 * t + (i & 1);
        float acc = d[i];
        for (int k = 0; k < 16; k++)
            acc += mma_a_at(first, row, k) * mma_b_at(first, k, col);
        out[i] = acc;
    }
    /* every lane has read every fragment before any lane goes on to change its own */
    gate_wait(&g.group[first], EMU_WARP, "an mma.sync");
    memcpy(d, out, sizeof out);
}

/* A fiber's life: the kernel once, for one block. */
static void fiber_main(void)
{
    FIBER_ARRIVE(NULL, &g.sched_bottom, &g.sched_size);
    g.body(g.arg);
    struct emu_fiber *f = &g.f[g.cur];
    f->state = BLOCK_DONE;
    /* returned: barriers now wait for one thread fewer */
    if (--g.live > 0 && g.sync.arrived >= g.live)
        gate_open(&g.sync);
    FIBER_LEAVE(NULL, g.sched_bottom, g.sched_size);   /* this fiber's stack dies */
    setcontext(&g.sched);
    abort();       /* setcontext returns only on failure: the scheduler is gone */
}

/* The fiber to run after g.cur, or -1 when none is runnable. */
static int next_runnable(void)
{
    if (emu_order == EMU_AHEAD) {
        for (unsigned i = 0; i < g.n; i++)
            if (g.f[i].state == RUNNABLE)
                return (int)i;
        return -1;
    }
    for (unsigned k = 1; k <= g.n; k++) {
        unsigned i = emu_order == EMU_ASCENDING ? (g.cur + k) % g.n : (g.cur + g.n - k) % g.n;
        if (g.f[i].state == RUNNABLE)
            return (int)i;
    }
    return -1;
}

/* From the scheduler to fiber i, until it yields or returns. (Functions
 * of their own, these two: nothing of run_block's is live across
 * getcontext or swapcontext, which return twice.) */
__attribute__((noinline)) static int fiber_resume(unsigned i)
{
    g.cur = i;
    threadIdx.x = i % blockDim.x;
    threadIdx.y = i / blockDim.x % blockDim.y;
    threadIdx.z = i / (blockDim.x * blockDim.y);
    FIBER_LEAVE(&g.fake, g.f[i].stack, EMU_STACK);
    if (swapcontext(&g.sched, &g.f[i].ctx) != 0)
        return -1;
    FIBER_ARRIVE(g.fake, NULL, NULL);
    return 0;
}

/* Fiber i, ready to run the kernel from its start. */
__attribute__((noinline)) static int fiber_make(unsigned i)
{
    struct emu_fiber *f = &g.f[i];
    if (getcontext(&f->ctx) != 0)
        return -1;
    f->ctx.uc_stack.ss_sp = f->stack;
    f->ctx.uc_stack.ss_size = EMU_STACK;
    f->ctx.uc_link = NULL;
    makecontext(&f->ctx, fiber_main, 0);
    f->state = RUNNABLE;
    f->gate = NULL;
    g.group[i].arrived = 0;
    return 0;
}

static int run_block(void)
{
    for (unsigned i = 0; i < g.n; i++)
        if (fiber_make(i) != 0)
            return -1;
    g.live = g.n;
    g.sync.arrived = 0;
    /* the order's first fiber starts: next_runnable counts from g.cur + 1 */
    g.cur = emu_order == EMU_ASCENDING ? g.n - 1 : 0;
    for (;;) {
        int i = next_runnable();
        if (i < 0) {
            int waiting = -1;
            for (unsigned k = 0; k < g.n; k++)
                if (g.f[k].state == WAITING)
                    waiting = (int)k;
            if (waiting < 0)
                return 0;                        /* every fiber returned */
            emu_break("block %u: thread %d waits at %s that the block's other threads "
                      "never reach (they returned or wait elsewhere)", g.block, waiting,
                      g.f[waiting].gate->what);
            for (unsigned k = 0; k < g.n; k++)   /* let them run out */
                if (g.f[k].state == WAITING)
                    gate_open(g.f[k].gate);
            continue;
        }
        if (fiber_resume((unsigned)i) != 0)
            return -1;
    }
}

int emu_launch(struct emu_dim3 grid, struct emu_dim3 block, void (*body)(void *), void *arg,
               char *why, size_t why_len)
{
    size_t n = (size_t)block.x * block.y * block.z;
    size_t blocks = (size_t)grid.x * grid.y * grid.z;
    if (n == 0 || n > EMU_MAX_THREADS || blocks == 0) {
        snprintf(why, why_len, "launch of %ux%ux%u blocks of %ux%ux%u threads: a block has "
                 "1 to %d threads, a grid at least one block", grid.x, grid.y, grid.z,
                 block.x, block.y, block.z, EMU_MAX_THREADS);
        return -1;
    }
    g.f = calloc(n, sizeof *g.f);
    int rc = g.f ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (!(g.f[i].stack = malloc(EMU_STACK)))
            rc = -1;
    if (rc != 0) {
        snprintf(why, why_len, "out of memory for %zu fibers", n);
    } else {
        gridDim = grid;
        blockDim = block;
        g.n = (unsigned)n;
        g.body = body;
        g.arg = arg;
        g.broken = 0;
        g.why[0] = '\0';
        for (size_t b = 0; rc == 0 && b < blocks; b++) {
            g.block = (unsigned)b;
            blockIdx.x = (unsigned)(b % grid.x);
            blockIdx.y = (unsigned)(b / grid.x % grid.y);
            blockIdx.z = (unsigned)(b / ((size_t)grid.x * grid.y));
            if (run_block() != 0) {
                snprintf(why, why_len, "block %zu: getcontext/swapcontext failed", b);
                rc = -1;
            }
        }
        if (rc == 0 && g.broken) {
            snprintf(why, why_len, "%s", g.why);
            rc = -1;
        }
    }
    for (size_t i = 0; g.f && i < n; i++)
        free(g.f[i].stack);
    free(g.f);
    g.f = NULL;
    return rc;
}
