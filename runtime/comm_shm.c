/* comm_shm.c - struct ddpc_comm over shared memory mapped before fork.
 *
 * Owns the shared region's layout, the process-shared barrier, and the
 * all-reduce / broadcast built on it. Never forks, never signals, never
 * prints: the launcher (launch.c) owns processes, and errors go back in
 * struct ddpc_err.
 *
 * Layout of one region (one mmap, inherited by every worker):
 *
 *   struct comm_shm_region      header: world, slot size, futex word, abort
 *   struct shm_rank[world]      per rank: barrier seq, pid, zero-copy arrive/done
 *   float slots[world][slot]    each rank's input piece (page aligned)
 *   float result[slot]          the reduced piece
 *   float state[3 * slot]       shared_buffer: one copy of parameters and
 *                               optimizer state, never touched here
 *
 * Synchronisation is one barrier primitive: rank r publishes "I have arrived
 * at barrier k" by storing k into ranks[r].seq, then waits until every rank's
 * seq >= k. The sequence numbers double as the diagnosis on a timeout: the
 * ranks with seq < k are the ones that did not arrive.
 *
 * Zero-copy all-reduce (comm.h grad_buffer; the training path): the rank's
 * gradients already sit in its slot. start(tag) stores the call and then,
 * with release order, arrive[tag] = generation; any later start or wait
 * reduces this rank's chunk of every tag whose peers have all arrived
 * (acquire), writes it to result and publishes done[tag] (release); wait
 * returns once every rank's done[tag] has the generation. A rank cannot
 * start generation g + 1 of a tag before everyone's chunk of g is reduced,
 * so one call record and one arrive/done pair per tag and rank suffice,
 * and a rank rewrites its slot (next backward) only after its wait, that
 * is after every reader is done with it. Copy-path collectives reuse the
 * slots, so they are refused while zero-copy tags are outstanding.
 *
 * Copy-path all-reduce, per piece of at most `slot` floats:
 *   1. every rank copies its input piece into its own slot;
 *   2. barrier;
 *   3. rank r reduces its chunk [lo_r, hi_r) of the piece into result,
 *      summing slots 0, 1, ..., W-1 in that order for every element;
 *   4. barrier;
 *   5. every rank copies result out.
 * The order in step 3 depends only on W, so sums are bitwise reproducible.
 * Why this is race-free across consecutive operations: slots are read only
 * between the two barriers of a piece and result is written only after the
 * first barrier, which no rank passes before every rank finished step 5 of
 * the previous piece.
 *
 * Waiting: spin for a few tens of microseconds (a barrier between ranks on
 * idle cores completes in well under that), then sleep on a futex word that
 * every arrival and every abort bumps. Futexes on a MAP_SHARED mapping work
 * across processes as long as FUTEX_PRIVATE_FLAG is not used. Sleeps are
 * capped at 100 ms so a waiter also notices a peer that died without anyone
 * telling it and its own deadline.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include "comm_shm.h"
#include "env.h"

#define SHM_LINE          64
#define SHM_DEFAULT_SLOT  ((size_t)1 << 20)   /* floats: 4 MiB per rank */
#define SHM_SLEEP_CAP_S   0.1                 /* max futex sleep: liveness poll period */
#define SHM_SPIN_S        50e-6               /* default spin before sleeping */
#define SHM_REDUCE_BLOCK  2048                /* floats per L1-resident reduce block */
#define SHM_ALIGN_FLOATS  16                  /* chunk edges on cache lines */
#define SHM_STREAM_FLOATS ((size_t)1 << 20)   /* reduce chunks this large bypass the cache */
#define SHM_WHY_MAX       384
#define SHM_MAX_TAGS      64                  /* zero-copy all-reduces in flight (buckets) */
#define SHM_STATE_SLOTS   3                   /* shared_buffer: params + Adam's m and v */

enum { ABORT_NONE = 0, ABORT_WRITING = 1, ABORT_SET = 2 };

struct shm_rank {
    _Alignas(SHM_LINE) _Atomic uint64_t seq;  /* last barrier this rank arrived at */
    _Atomic int32_t pid;                      /* 0 until attached */
    _Atomic int32_t dead;                     /* set by the launcher */
    /* What the rank passed to its current collective, checked by the others
     * after the first barrier: mismatched calls would read garbage. */
    uint64_t op_count;                        /* floats */
    int32_t  op_root;                         /* broadcast root; -1 otherwise */
    int32_t  op_kind;                         /* 1 all-reduce, 2 broadcast, 3 barrier */
    /* Zero-copy all-reduce, per tag (bucket): arrive[t] = g once this rank's
     * piece of generation g (its g-th start on tag t) is written to its slot;
     * done[t] = g once it reduced its chunk of generation g into result. On
     * their own cache lines: peers poll them while this rank works. */
    _Alignas(SHM_LINE) _Atomic uint64_t arrive[SHM_MAX_TAGS];
    _Alignas(SHM_LINE) _Atomic uint64_t done[SHM_MAX_TAGS];
    /* the call behind arrive[t], checked by each peer before it reduces */
    uint64_t z_off[SHM_MAX_TAGS], z_count[SHM_MAX_TAGS];
    int32_t  z_op[SHM_MAX_TAGS];
};

struct comm_shm_region {
    /* read-only after comm_shm_create */
    int    world;
    size_t slot_floats;
    size_t map_bytes;
    size_t slots_off;                         /* bytes from the region start */
    double spin_s;

    /* written by every rank */
    _Alignas(SHM_LINE) _Atomic uint32_t epoch;  /* futex word */
    _Atomic uint32_t sleepers;                  /* waiters in FUTEX_WAIT */
    _Alignas(SHM_LINE) _Atomic int abort_state;
    int    abort_code;                          /* DDPC_E_ABORTED or DDPC_E_PEER */
    char   why[SHM_WHY_MAX];
    struct shm_rank ranks[];
};

/* One worker's handle; lives in the worker's private memory. */
struct shm_handle {
    struct comm_shm_region *r;
    uint64_t seq;          /* barriers this rank has passed */
    uint64_t ops;          /* collectives started, for messages */
    int      broken;       /* a failed call leaves the barrier counts unmatched */
    int      last_rc;      /* result of the last all_reduce_start, for wait */
    double   op_t0;        /* when the current collective started */
    /* zero-copy all-reduces (see shm_all_reduce_start) */
    uint64_t zgen[SHM_MAX_TAGS];    /* starts on each tag so far */
    uint64_t zpending;              /* tags started whose chunk this rank has not reduced */
    uint64_t zwaiting;              /* tags started and not yet waited for */
    uint64_t zcopy;                 /* tags whose last start took the copy path */
    size_t   zbuf_n;                /* floats handed out by grad_buffer; 0 = none */
};

/* ===== region layout ===== */

static float *region_slot(struct comm_shm_region *r, int rank)
{
    return (float *)((char *)r + r->slots_off) + (size_t)rank * r->slot_floats;
}

static float *region_result(struct comm_shm_region *r)
{
    return region_slot(r, r->world);
}

int comm_shm_create(struct comm_shm_region **out, int world, size_t slot_floats,
                    struct ddpc_err *e)
{
    *out = NULL;
    if (world < 1 || world > DDPC_SHM_MAX_WORLD)
        return DDPC_FAIL(e, DDPC_E_INVALID, "comm_shm: world size %d outside 1..%d",
                         world, DDPC_SHM_MAX_WORLD);
    if (slot_floats == 0)
        slot_floats = SHM_DEFAULT_SLOT;
    /* Round the slot to whole cache lines so rank chunks never share one. */
    slot_floats = (slot_floats + SHM_ALIGN_FLOATS - 1) / SHM_ALIGN_FLOATS * SHM_ALIGN_FLOATS;

    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0)
        page = 4096;
    size_t head = sizeof(struct comm_shm_region) + (size_t)world * sizeof(struct shm_rank);
    size_t slots_off = (head + (size_t)page - 1) / (size_t)page * (size_t)page;
    size_t nslots = (size_t)world + 1 + SHM_STATE_SLOTS;
    if (slot_floats > (SIZE_MAX - slots_off) / sizeof(float) / nslots)
        return DDPC_FAIL(e, DDPC_E_INVALID, "comm_shm: %zu floats x %zu slots overflows",
                         slot_floats, nslots);
    size_t bytes = slots_off + nslots * slot_floats * sizeof(float);

    /* MAP_NORESERVE: only touched pages count; a region is sized for the
     * largest operation but small jobs never touch most of it. */
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return DDPC_FAIL(e, DDPC_E_NOMEM, "comm_shm: mmap of %zu bytes for %d ranks: %s",
                         bytes, world, strerror(errno));
    /* Anonymous mappings are zero-filled: seq 0, no abort, pid 0. */
    struct comm_shm_region *r = m;
    r->world = world;
    r->slot_floats = slot_floats;
    r->map_bytes = bytes;
    r->slots_off = slots_off;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    /* Spinning only pays when every rank has a core of its own; otherwise a
     * spinner steals the time slice of the rank it waits for. */
    r->spin_s = (ncpu > 0 && world <= ncpu) ? SHM_SPIN_S : 0.0;
    if (env_get()->shm_spin_us >= 0)   /* tuning: benchmarks, experiments */
        r->spin_s = env_get()->shm_spin_us * 1e-6;
    for (int i = 0; i < world; i++) {
        atomic_init(&r->ranks[i].seq, 0);
        atomic_init(&r->ranks[i].pid, 0);
        atomic_init(&r->ranks[i].dead, 0);
    }
    atomic_init(&r->epoch, 0);
    atomic_init(&r->sleepers, 0);
    atomic_init(&r->abort_state, ABORT_NONE);
    *out = r;
    return 0;
}

void comm_shm_region_free(struct comm_shm_region *r)
{
    if (!r)
        return;
    /* munmap only fails on bad arguments, which would be a bug here. */
    (void)munmap(r, r->map_bytes);
}

/* ===== waking and aborting ===== */

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
    /* No FUTEX_PRIVATE_FLAG: waiters are in different processes. */
    return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

/* Sleeps until epoch moves from ep, the deadline (0: none) or the liveness
 * poll period, whichever comes first. Returns 0, or the errno of a futex
 * failure that is not one of those ends. */
static int region_nap(struct comm_shm_region *r, uint32_t ep, double deadline, double now)
{
    double nap = SHM_SLEEP_CAP_S;
    if (deadline > 0 && deadline - now < nap)
        nap = deadline - now;
    struct timespec ts = { (time_t)nap, (long)((nap - (double)(time_t)nap) * 1e9) };
    if (ts.tv_sec == 0 && ts.tv_nsec < 1000)
        ts.tv_nsec = 1000;
    atomic_fetch_add(&r->sleepers, 1);
    long rc = futex(&r->epoch, FUTEX_WAIT, ep, &ts);
    int err = errno;
    atomic_fetch_sub(&r->sleepers, 1);
    return rc == -1 && err != EAGAIN && err != ETIMEDOUT && err != EINTR ? err : 0;
}

static void region_wake(struct comm_shm_region *r, int always)
{
    atomic_fetch_add(&r->epoch, 1);
    /* seq_cst: a waiter increments sleepers before it re-reads epoch in
     * FUTEX_WAIT, so either it sees our bump and does not sleep, or we see
     * it here and wake it. */
    if (always || atomic_load(&r->sleepers) > 0)
        (void)futex(&r->epoch, FUTEX_WAKE, INT_MAX, NULL);
}

static void region_abort(struct comm_shm_region *r, int code, const char *why)
{
    int expected = ABORT_NONE;
    if (atomic_compare_exchange_strong(&r->abort_state, &expected, ABORT_WRITING)) {
        r->abort_code = code;
        size_t n = strlen(why);
        if (n >= SHM_WHY_MAX)
            n = SHM_WHY_MAX - 1;
        memcpy(r->why, why, n);
        r->why[n] = '\0';
        atomic_store(&r->abort_state, ABORT_SET);
    }
    region_wake(r, 1);
}

void comm_shm_abort_all(struct comm_shm_region *r, const char *why)
{
    if (r)
        region_abort(r, DDPC_E_ABORTED, why);
}

void comm_shm_mark_dead(struct comm_shm_region *r, int rank, const char *why)
{
    if (!r || rank < 0 || rank >= r->world)
        return;
    atomic_store(&r->ranks[rank].dead, 1);
    region_abort(r, DDPC_E_PEER, why);
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* ===== the barrier ===== */

/* Fills e from the region's abort state; the handle is unusable afterwards. */
static int fail_aborted(struct shm_handle *h, const char *purpose, const char *what,
                        struct ddpc_err *e)
{
    struct comm_shm_region *r = h->r;
    h->broken = 1;
    /* The writer may have been killed between claiming and publishing the
     * reason: wait for it only briefly. */
    for (int i = 0; i < 100000 && atomic_load(&r->abort_state) == ABORT_WRITING; i++)
        cpu_relax();
    if (atomic_load(&r->abort_state) != ABORT_SET)
        return DDPC_FAIL(e, DDPC_E_ABORTED, "%s %s aborted (no reason recorded)", purpose,
                         what);
    return DDPC_FAIL(e, r->abort_code, "%s %s aborted: %s", purpose, what, r->why);
}

/* Appends "1, 3" (the ranks whose seq < target) to buf; returns how many. */
static int list_missing(struct comm_shm_region *r, uint64_t target, char *buf, size_t len)
{
    int n = 0;
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < r->world; i++) {
        if (atomic_load(&r->ranks[i].seq) >= target)
            continue;
        if (n < 16 && used < len) {
            int w = snprintf(buf + used, len - used, "%s%d", n ? ", " : "", i);
            if (w > 0)
                used += (size_t)w;
        } else if (n == 16 && used < len) {
            (void)snprintf(buf + used, len - used, ", ...");
            used = len;
        }
        n++;
    }
    return n;
}

/* 1 if every rank's seq >= target, else 0. */
static int all_arrived(struct comm_shm_region *r, uint64_t target)
{
    for (int i = 0; i < r->world; i++)
        if (atomic_load_explicit(&r->ranks[i].seq, memory_order_acquire) < target)
            return 0;
    return 1;
}

/* A missing rank whose process is gone (and nobody marked it yet). */
static int find_dead_peer(struct comm_shm_region *r, uint64_t target, int *pid_out)
{
    for (int i = 0; i < r->world; i++) {
        if (atomic_load(&r->ranks[i].seq) >= target)
            continue;
        pid_t pid = atomic_load(&r->ranks[i].pid);
        if (atomic_load(&r->ranks[i].dead) || (pid > 0 && kill(pid, 0) == -1 && errno == ESRCH)) {
            *pid_out = pid;
            return i;
        }
    }
    return -1;
}

static int fail_timeout(struct shm_handle *h, int rank, const char *purpose, const char *what,
                        uint64_t target, double t0, struct ddpc_err *e)
{
    struct comm_shm_region *r = h->r;
    char missing[160], msg[SHM_WHY_MAX], why[SHM_WHY_MAX + 16];
    int n = list_missing(r, target, missing, sizeof missing);
    const char *knob = strcmp(purpose, "rank-sync") == 0 ? "rank_sync_timeout" : "nccl_timeout";
    h->broken = 1;
    (void)snprintf(msg, sizeof msg,
                   "%s %s timed out after %.2f s waiting for rank%s %s (did not arrive); "
                   "a rank is stuck or much slower: raise %s if this is expected",
                   purpose, what, ddpc_now() - t0, n == 1 ? "" : "s", missing, knob);
    /* The barrier counts no longer match: take every rank down with a reason
     * instead of letting each wait out its own deadline. */
    (void)snprintf(why, sizeof why, "rank %d: %s", rank, msg);
    region_abort(r, DDPC_E_ABORTED, why);
    return DDPC_FAIL(e, DDPC_E_TIMEOUT, "%s", msg);
}

/* Arrive at the next barrier and wait for every rank. `what` names the
 * public operation for messages ("all-reduce #3 (1000 floats)"). */
static int shm_barrier_wait(struct shm_handle *h, int rank, const char *purpose,
                            const char *what, double deadline, struct ddpc_err *e)
{
    struct comm_shm_region *r = h->r;
    uint64_t target = ++h->seq;
    atomic_store_explicit(&r->ranks[rank].seq, target, memory_order_release);
    region_wake(r, 0);

    double t0 = h->op_t0;
    double spin_until = ddpc_now() + r->spin_s;
    for (unsigned iter = 0;; iter++) {
        uint32_t ep = atomic_load(&r->epoch);
        if (atomic_load(&r->abort_state) != ABORT_NONE)
            return fail_aborted(h, purpose, what, e);
        if (all_arrived(r, target))
            return 0;
        /* Read the clock only now and then: it costs ~20 ns per call. */
        if ((iter & 63) != 0) {
            cpu_relax();
            continue;
        }
        double now = ddpc_now();
        if (deadline > 0 && now >= deadline)
            return fail_timeout(h, rank, purpose, what, target, t0, e);
        if (now < spin_until) {
            cpu_relax();
            continue;
        }
        /* No sched_yield here: on a busy machine it hands the core to an
         * unrelated process for a whole time slice (measured: 0.7 us -> 100 us
         * per small all-reduce), while a futex wake-up costs microseconds. */
        int dead_pid = 0;
        int dead = find_dead_peer(r, target, &dead_pid);
        if (dead >= 0) {
            char why[SHM_WHY_MAX];
            (void)snprintf(why, sizeof why, "rank %d (pid %d) died before reaching %s %s",
                           dead, dead_pid, purpose, what);
            region_abort(r, DDPC_E_PEER, why);
            return fail_aborted(h, purpose, what, e);
        }
        int err = region_nap(r, ep, deadline, now);
        if (err) {
            h->broken = 1;
            return DDPC_FAIL(e, DDPC_E_SYS, "%s %s: futex wait: %s", purpose, what,
                             strerror(err));
        }
    }
}

/* ===== the collectives ===== */

static int check_usable(struct ddpc_comm *c, const char *what, struct ddpc_err *e)
{
    struct shm_handle *h = c->impl;
    h->op_t0 = ddpc_now();
    if (!h->broken && atomic_load(&h->r->abort_state) != ABORT_NONE)
        return fail_aborted(h, c->purpose, what, e);
    if (h->broken)
        return DDPC_FAIL(e, DDPC_E_ABORTED, "%s %s: communicator unusable after an earlier "
                         "failure", c->purpose, what);
    /* The copy path reuses the slots that zero-copy pieces still occupy. */
    if (h->zwaiting & ~h->zcopy)
        return DDPC_FAIL(e, DDPC_E_INVALID, "%s %s: called while zero-copy all-reduces are "
                         "outstanding; wait for every started tag first", c->purpose, what);
    return 0;
}

/* Before the first barrier of a collective: what this rank is about to do. */
static void publish_call(struct comm_shm_region *r, int rank, int kind, size_t n, int root)
{
    r->ranks[rank].op_kind = kind;
    r->ranks[rank].op_count = n;
    r->ranks[rank].op_root = root;
    /* the barrier's release store publishes these plain stores */
}

/* After the first barrier: every rank must have made the same call. */
static int verify_call(struct shm_handle *h, int rank, const char *purpose, const char *what,
                       struct ddpc_err *e)
{
    struct comm_shm_region *r = h->r;
    const struct shm_rank *me = &r->ranks[rank];
    for (int i = 0; i < r->world; i++) {
        const struct shm_rank *o = &r->ranks[i];
        if (o->op_kind == me->op_kind && o->op_count == me->op_count &&
            o->op_root == me->op_root)
            continue;
        static const char *kinds[] = { "?", "all-reduce", "broadcast", "barrier" };
        int mk = me->op_kind >= 1 && me->op_kind <= 3 ? me->op_kind : 0;
        int ok = o->op_kind >= 1 && o->op_kind <= 3 ? o->op_kind : 0;
        char msg[SHM_WHY_MAX];
        (void)snprintf(msg, sizeof msg,
                       "%s %s: ranks disagree: rank %d called %s of %llu floats (root %d), "
                       "rank %d %s of %llu floats (root %d); every rank must make the same "
                       "collective calls in the same order",
                       purpose, what, rank, kinds[mk], (unsigned long long)me->op_count,
                       (int)me->op_root, i, kinds[ok], (unsigned long long)o->op_count,
                       (int)o->op_root);
        h->broken = 1;
        region_abort(r, DDPC_E_ABORTED, msg);
        return DDPC_FAIL(e, DDPC_E_INVALID, "%s", msg);
    }
    return 0;
}

/* Sum (then scale) slots 0..W-1 into result over [lo, hi), rank order.
 * GCC's -O2 cost model leaves these loops scalar (measured: 4x slower on
 * cache-resident pieces), so this one function asks for the vectoriser.
 * Vectorising keeps the per-element order (slot 0, then 1, ...): results
 * stay bitwise identical; no -ffast-math reassociation is involved.
 * The mean divides the ordered sum by W (correctly rounded, a function of W
 * alone). When W is a power of two, multiplying by 1/W is exact and rounds
 * identically, and avoids vdivps (~10 cycles per vector: it was most of
 * the reduction's time). W = 2 gets one fused pass: two loads, an add, a
 * multiply and a store per vector instead of three passes over the block. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic")))
#endif
static void reduce_chunk(struct comm_shm_region *r, size_t lo, size_t hi, enum ddpc_reduce op)
{
    int W = r->world;
    float *restrict res = region_result(r);
    int avg = op == DDPC_REDUCE_AVG;
    int pow2 = (W & (W - 1)) == 0;
    const float inv = 1.0f / (float)W;   /* exact when pow2 */
    const float w = (float)W;
    if (W == 2) {
        const float *restrict s0 = region_slot(r, 0);
        const float *restrict s1 = region_slot(r, 1);
#if defined(__x86_64__)
        if (hi - lo >= SHM_STREAM_FLOATS) {
            /* A chunk larger than a core's cache goes to DRAM anyway:
             * streaming stores skip the read-for-ownership of result, a
             * quarter of the memory traffic. The edges and result's base
             * are 64-byte aligned, except the first chunk's lo. */
            size_t j = lo;
            for (; j < hi && (j & 3); j++)
                res[j] = avg ? (s0[j] + s1[j]) * 0.5f : s0[j] + s1[j];
            const __m128 half = _mm_set1_ps(avg ? 0.5f : 1.0f);
            for (; j + 4 <= hi; j += 4) {
                __m128 v = _mm_add_ps(_mm_loadu_ps(s0 + j), _mm_loadu_ps(s1 + j));
                _mm_stream_ps(res + j, _mm_mul_ps(v, half));   /* x * 1 is exact */
            }
            for (; j < hi; j++)
                res[j] = avg ? (s0[j] + s1[j]) * 0.5f : s0[j] + s1[j];
            /* order the weakly-ordered streaming stores before the release
             * store that publishes this chunk */
            _mm_sfence();
            return;
        }
#endif
        if (avg) {
            for (size_t j = lo; j < hi; j++)
                res[j] = (s0[j] + s1[j]) * 0.5f;
        } else {
            for (size_t j = lo; j < hi; j++)
                res[j] = s0[j] + s1[j];
        }
        return;
    }
    for (size_t b = lo; b < hi; b += SHM_REDUCE_BLOCK) {
        size_t be = b + SHM_REDUCE_BLOCK < hi ? b + SHM_REDUCE_BLOCK : hi;
        const float *restrict s0 = region_slot(r, 0);
        for (size_t j = b; j < be; j++)
            res[j] = s0[j];
        for (int k = 1; k < W; k++) {
            const float *restrict sk = region_slot(r, k);
            for (size_t j = b; j < be; j++)
                res[j] += sk[j];
        }
        if (avg && pow2) {
            for (size_t j = b; j < be; j++)
                res[j] *= inv;
        } else if (avg) {
            for (size_t j = b; j < be; j++)
                res[j] /= w;
        }
    }
}

/* The copy path: for buffers outside the gradient buffer; synchronous. */
static int shm_all_reduce_copy(struct ddpc_comm *c, const float *send, float *recv, size_t n,
                               enum ddpc_reduce op, double deadline, struct ddpc_err *e)
{
    struct shm_handle *h = c->impl;
    struct comm_shm_region *r = h->r;
    char what[96];
    h->ops++;
    (void)snprintf(what, sizeof what, "all-reduce #%llu (%zu floats)",
                   (unsigned long long)h->ops, n);
    h->last_rc = check_usable(c, what, e);
    if (h->last_rc < 0)
        return h->last_rc;

    int W = r->world, rank = c->rank;
    size_t P = r->slot_floats;
    float *mine = region_slot(r, rank);
    float *res = region_result(r);
    publish_call(r, rank, 1, n, -1);
    for (size_t off = 0; off < n || (n == 0 && off == 0); off += P) {
        size_t m = n - off < P ? n - off : P;
        if (m)
            memcpy(mine, send + off, m * sizeof(float));
        int rc = shm_barrier_wait(h, rank, c->purpose, what, deadline, e);
        if (rc == 0 && off == 0)
            rc = verify_call(h, rank, c->purpose, what, e);
        if (rc < 0)
            return h->last_rc = rc;
        /* Chunk edges on cache lines so no two ranks write one line. */
        size_t per = (m + (size_t)W - 1) / (size_t)W;
        per = (per + SHM_ALIGN_FLOATS - 1) / SHM_ALIGN_FLOATS * SHM_ALIGN_FLOATS;
        size_t lo = per * (size_t)rank, hi = lo + per;
        if (lo > m)
            lo = m;
        if (hi > m)
            hi = m;
        reduce_chunk(r, lo, hi, op);
        rc = shm_barrier_wait(h, rank, c->purpose, what, deadline, e);
        if (rc < 0)
            return h->last_rc = rc;
        if (m)
            memcpy(recv + off, res, m * sizeof(float));
        if (n == 0)
            break;
    }
    return h->last_rc = 0;
}


/* ===== zero-copy all-reduce (gradients written straight into the slots) ===== */

/* This rank's chunk of a piece [off, off + n): edges at absolute multiples
 * of SHM_ALIGN_FLOATS, so no two ranks write one cache line of result. */
static void zc_chunk(size_t off, size_t n, int W, int rank, size_t *lo, size_t *hi)
{
    size_t per = (n + (size_t)W - 1) / (size_t)W;
    size_t end = off + n;
    size_t a = off + per * (size_t)rank, b = a + per;
    a = (a + SHM_ALIGN_FLOATS - 1) / SHM_ALIGN_FLOATS * SHM_ALIGN_FLOATS;
    b = (b + SHM_ALIGN_FLOATS - 1) / SHM_ALIGN_FLOATS * SHM_ALIGN_FLOATS;
    if (rank == 0)
        a = off;
    if (rank == W - 1 || b > end)
        b = end;
    if (a > end)
        a = end;
    *lo = a;
    *hi = b > a ? b : a;
}

static void zc_what(struct ddpc_comm *c, int tag, uint64_t gen, char *buf, size_t len)
{
    struct shm_handle *h = c->impl;
    struct comm_shm_region *r = h->r;
    (void)snprintf(buf, len, "all-reduce of bucket %d, call %llu (%llu floats)", tag,
                   (unsigned long long)gen,
                   (unsigned long long)r->ranks[c->rank].z_count[tag]);
}

/* Reduces this rank's chunk of every pending tag whose peers have all
 * arrived. Never blocks. Returns < 0 only on a call mismatch. */
static int zc_progress(struct ddpc_comm *c, struct ddpc_err *e)
{
    struct shm_handle *h = c->impl;
    struct comm_shm_region *r = h->r;
    int W = r->world, rank = c->rank;
    uint64_t todo = h->zpending;
    while (todo) {
        int t = __builtin_ctzll(todo);
        todo &= todo - 1;
        uint64_t g = h->zgen[t];
        int ready = 1;
        for (int i = 0; i < W && ready; i++)
            /* acquire: pairs with the peer's release store in start, so its
             * gradient writes into its slot are visible before we read them */
            ready = atomic_load_explicit(&r->ranks[i].arrive[t], memory_order_acquire) >= g;
        if (!ready)
            continue;
        /* A peer cannot have started generation g + 1 yet (its wait for g
         * needs our done[t] = g), so its call record is still generation g's. */
        const struct shm_rank *me = &r->ranks[rank];
        for (int i = 0; i < W; i++) {
            const struct shm_rank *o = &r->ranks[i];
            if (o->z_off[t] == me->z_off[t] && o->z_count[t] == me->z_count[t] &&
                o->z_op[t] == me->z_op[t])
                continue;
            char msg[SHM_WHY_MAX];
            (void)snprintf(msg, sizeof msg,
                           "%s all-reduce of bucket %d: ranks disagree: rank %d reduces "
                           "floats [%llu, +%llu) op %d, rank %d [%llu, +%llu) op %d; every rank "
                           "must make the same collective calls in the same order",
                           c->purpose, t, rank, (unsigned long long)me->z_off[t],
                           (unsigned long long)me->z_count[t], (int)me->z_op[t], i,
                           (unsigned long long)o->z_off[t], (unsigned long long)o->z_count[t],
                           (int)o->z_op[t]);
            h->broken = 1;
            region_abort(r, DDPC_E_ABORTED, msg);
            return DDPC_FAIL(e, DDPC_E_INVALID, "%s", msg);
        }
        size_t lo, hi;
        zc_chunk((size_t)me->z_off[t], (size_t)me->z_count[t], W, rank, &lo, &hi);
        if (hi > lo)
            reduce_chunk(r, lo, hi, me->z_op[t] == DDPC_REDUCE_AVG ? DDPC_REDUCE_AVG
                                                                   : DDPC_REDUCE_SUM);
        /* release: our result writes are visible to whoever sees done = g */
        atomic_store_explicit(&r->ranks[rank].done[t], g, memory_order_release);
        h->zpending &= ~(1ull << t);
        region_wake(r, 0);
    }
    return 0;
}

static int zc_start(struct ddpc_comm *c, int tag, size_t off, size_t n, enum ddpc_reduce op,
                    struct ddpc_err *e)
{
    struct shm_handle *h = c->impl;
    struct comm_shm_region *r = h->r;
    int rank = c->rank;
    h->ops++;
    h->op_t0 = ddpc_now();
    if (!h->broken && atomic_load(&r->abort_state) != ABORT_NONE)
        return fail_aborted(h, c->purpose, "all-reduce", e);
    if (h->broken)
        return DDPC_FAIL(e, DDPC_E_ABORTED, "%s all-reduce of bucket %d: communicator "
                         "unusable after an earlier failure", c->purpose, tag);
    if (h->zwaiting & (1ull << tag))
        return DDPC_FAIL(e, DDPC_E_INVALID, "%s all-reduce of bucket %d: started twice "
                         "without a wait in between", c->purpose, tag);
    uint64_t g = ++h->zgen[tag];
    struct shm_rank *me = &r->ranks[rank];
    me->z_off[tag] = off;
    me->z_count[tag] = n;
    me->z_op[tag] = (int32_t)op;
    h->zpending |= 1ull << tag;
    h->zwaiting |= 1ull << tag;
    h->zcopy &= ~(1ull << tag);
    /* release: publishes the gradients backward wrote into our slot (plain
     * stores, BLAS included) and the call record above */
    atomic_store_explicit(&me->arrive[tag], g, memory_order_release);
    region_wake(r, 0);
    /* If we are the last to arrive, our chunk can go now, while the others
     * (and our own backward, after we return) are busy. */
    return zc_progress(c, e);
}

/* A rank still missing from generation g of tag t whose process is gone. */
static int zc_dead_peer(struct comm_shm_region *r, int t, uint64_t g, int *pid_out)
{
    for (int i = 0; i < r->world; i++) {
        if (atomic_load(&r->ranks[i].done[t]) >= g)
            continue;
        pid_t pid = atomic_load(&r->ranks[i].pid);
        if (atomic_load(&r->ranks[i].dead) || (pid > 0 && kill(pid, 0) == -1 && errno == ESRCH)) {
            *pid_out = pid;
            return i;
        }
    }
    return -1;
}

static int zc_wait(struct ddpc_comm *c, int tag, double deadline, struct ddpc_err *e)
{
    struct shm_handle *h = c->impl;
    struct comm_shm_region *r = h->r;
    uint64_t g = h->zgen[tag];
    double spin_until = ddpc_now() + r->spin_s;
    char what[128];
    for (unsigned iter = 0;; iter++) {
        uint32_t ep = atomic_load(&r->epoch);
        if (atomic_load(&r->abort_state) != ABORT_NONE) {
            zc_what(c, tag, g, what, sizeof what);
            return fail_aborted(h, c->purpose, what, e);
        }
        DDPC_TRY(zc_progress(c, e));
        int all = 1;
        for (int i = 0; i < r->world && all; i++)
            /* acquire: pairs with the release in zc_progress, so every
             * peer's chunk of result is visible once we see its done */
            all = atomic_load_explicit(&r->ranks[i].done[tag], memory_order_acquire) >= g;
        if (all) {
            h->zwaiting &= ~(1ull << tag);
            return 0;
        }
        if ((iter & 63) != 0) {
            cpu_relax();
            continue;
        }
        double now = ddpc_now();
        if (deadline > 0 && now >= deadline) {
            char missing[160], msg[SHM_WHY_MAX], why[SHM_WHY_MAX + 16];
            size_t used = 0;
            int n = 0, late = 0;
            missing[0] = '\0';
            /* did not arrive: no piece yet; else arrived but not reduced */
            for (int pass = 0; pass < 2 && n == 0; pass++) {
                for (int i = 0; i < r->world; i++) {
                    uint64_t v = pass == 0 ? atomic_load(&r->ranks[i].arrive[tag])
                                           : atomic_load(&r->ranks[i].done[tag]);
                    if (v >= g)
                        continue;
                    if (n < 16 && used < sizeof missing) {
                        int w = snprintf(missing + used, sizeof missing - used, "%s%d",
                                         n ? ", " : "", i);
                        if (w > 0)
                            used += (size_t)w;
                    }
                    n++;
                }
                late = pass;
            }
            zc_what(c, tag, g, what, sizeof what);
            h->broken = 1;
            (void)snprintf(msg, sizeof msg,
                           "%s %s timed out after %.2f s waiting for rank%s %s (%s); a rank "
                           "is stuck or much slower: raise nccl_timeout if this is expected",
                           c->purpose, what, now - h->op_t0, n == 1 ? "" : "s", missing,
                           late ? "arrived but did not finish reducing" : "did not arrive");
            (void)snprintf(why, sizeof why, "rank %d: %s", c->rank, msg);
            region_abort(r, DDPC_E_ABORTED, why);
            return DDPC_FAIL(e, DDPC_E_TIMEOUT, "%s", msg);
        }
        if (now < spin_until) {
            cpu_relax();
            continue;
        }
        int dead_pid = 0;
        int dead = zc_dead_peer(r, tag, g, &dead_pid);
        if (dead >= 0) {
            char why[SHM_WHY_MAX];
            zc_what(c, tag, g, what, sizeof what);
            (void)snprintf(why, sizeof why, "rank %d (pid %d) died before reaching %s %s",
                           dead, dead_pid, c->purpose, what);
            region_abort(r, DDPC_E_PEER, why);
            return fail_aborted(h, c->purpose, what, e);
        }
        int err = region_nap(r, ep, deadline, now);
        if (err) {
            h->broken = 1;
            return DDPC_FAIL(e, DDPC_E_SYS, "%s all-reduce of bucket %d: futex wait: %s",
                             c->purpose, tag, strerror(err));
        }
    }
}

static int shm_grad_buffer(struct ddpc_comm *c, size_t n, float **send, float **result,
                           struct ddpc_err *e)
{
    struct shm_handle *h = c->impl;
    (void)e;
    *send = *result = NULL;
    if (n == 0 || n > h->r->slot_floats)
        return 0;
    h->zbuf_n = n;
    *send = region_slot(h->r, c->rank);
    *result = region_result(h->r);
    return 0;
}

static int shm_shared_buffer(struct ddpc_comm *c, size_t n, float **buf, struct ddpc_err *e)
{
    struct shm_handle *h = c->impl;
    (void)e;
    *buf = NULL;
    if (n == 0 || n > SHM_STATE_SLOTS * h->r->slot_floats)
        return 0;
    *buf = region_slot(h->r, h->r->world + 1);
    return 0;
}

static int shm_all_reduce_start(struct ddpc_comm *c, int tag, const float *send, float *recv,
                                size_t n, enum ddpc_reduce op, double deadline,
                                struct ddpc_err *e)
{
    struct shm_handle *h = c->impl;
    struct comm_shm_region *r = h->r;
    if (tag < 0 || tag >= SHM_MAX_TAGS)
        return h->last_rc = DDPC_FAIL(e, DDPC_E_INVALID, "%s all-reduce: tag %d outside "
                                      "0..%d", c->purpose, tag, SHM_MAX_TAGS - 1);
    if (h->zbuf_n) {
        const float *mine = region_slot(r, c->rank);
        const float *res = region_result(r);
        if (send >= mine && send < mine + h->zbuf_n) {
            size_t off = (size_t)(send - mine);
            if (recv != res + off || n > h->zbuf_n - off)
                return h->last_rc = DDPC_FAIL(e, DDPC_E_INVALID,
                                              "%s all-reduce: send is in the gradient buffer "
                                              "but recv is not the matching result, or the "
                                              "piece runs past it", c->purpose);
            /* deadlines bound the wait; start never blocks */
            (void)deadline;
            return zc_start(c, tag, off, n, op, e);
        }
    }
    h->zcopy |= 1ull << tag;
    return shm_all_reduce_copy(c, send, recv, n, op, deadline, e);
}

static int shm_all_reduce_wait(struct ddpc_comm *c, int tag, double deadline, struct ddpc_err *e)
{
    struct shm_handle *h = c->impl;
    if (tag >= 0 && tag < SHM_MAX_TAGS && (h->zwaiting & (1ull << tag)) &&
        !(h->zcopy & (1ull << tag)))
        return zc_wait(c, tag, deadline, e);
    if (tag >= 0 && tag < SHM_MAX_TAGS)
        h->zwaiting &= ~(1ull << tag);
    /* start did the work; report its outcome again so a caller that checks
     * only wait still sees a failure (e already holds the message). */
    if (h->last_rc < 0)
        return DDPC_FAIL(e, h->last_rc, "%s all-reduce failed (see the first error)",
                         c->purpose);
    return 0;
}

static int shm_broadcast(struct ddpc_comm *c, float *buf, size_t n, int root, double deadline,
                         struct ddpc_err *e)
{
    struct shm_handle *h = c->impl;
    struct comm_shm_region *r = h->r;
    char what[96];
    h->ops++;
    (void)snprintf(what, sizeof what, "broadcast #%llu (%zu floats from rank %d)",
                   (unsigned long long)h->ops, n, root);
    DDPC_TRY(check_usable(c, what, e));
    if (root < 0 || root >= r->world)
        return DDPC_FAIL(e, DDPC_E_INVALID, "%s %s: root outside 0..%d", c->purpose, what,
                         r->world - 1);
    size_t P = r->slot_floats;
    /* Staged in the root's slot, not in result: a slow rank may still be
     * copying result out of the previous all-reduce. */
    float *stage = region_slot(r, root);
    publish_call(r, c->rank, 2, n, root);
    for (size_t off = 0; off < n || (n == 0 && off == 0); off += P) {
        size_t m = n - off < P ? n - off : P;
        if (c->rank == root && m)
            memcpy(stage, buf + off, m * sizeof(float));
        DDPC_TRY(shm_barrier_wait(h, c->rank, c->purpose, what, deadline, e));
        if (off == 0)
            DDPC_TRY(verify_call(h, c->rank, c->purpose, what, e));
        if (c->rank != root && m)
            memcpy(buf + off, stage, m * sizeof(float));
        /* The root must not refill its slot while others still read it. */
        DDPC_TRY(shm_barrier_wait(h, c->rank, c->purpose, what, deadline, e));
        if (n == 0)
            break;
    }
    return 0;
}

static int shm_barrier(struct ddpc_comm *c, double deadline, struct ddpc_err *e)
{
    struct shm_handle *h = c->impl;
    char what[64];
    h->ops++;
    (void)snprintf(what, sizeof what, "barrier #%llu", (unsigned long long)h->ops);
    DDPC_TRY(check_usable(c, what, e));
    /* Published so that a rank in an all-reduce notices a peer in a plain
     * barrier (best effort: barrier itself checks nothing). */
    publish_call(h->r, c->rank, 3, 0, -1);
    return shm_barrier_wait(h, c->rank, c->purpose, what, deadline, e);
}

static void shm_abort(struct ddpc_comm *c, const char *why)
{
    struct shm_handle *h = c->impl;
    char buf[SHM_WHY_MAX], self[32];
    /* "rank 0: why", unless why names this rank already ("rank 0 (cpu
     * worker 0) failed": not "rank 0: rank 0 ...") */
    int n = snprintf(self, sizeof self, "rank %d ", c->rank);
    if (n > 0 && strncmp(why, self, (size_t)n) == 0)
        (void)snprintf(buf, sizeof buf, "%s", why);
    else
        (void)snprintf(buf, sizeof buf, "rank %d: %s", c->rank, why);
    region_abort(h->r, DDPC_E_ABORTED, buf);
}

static void shm_destroy(struct ddpc_comm *c)
{
    if (!c)
        return;
    free(c->impl);
    c->impl = NULL;
}

int comm_shm_attach(struct ddpc_comm *c, struct comm_shm_region *r, int rank,
                    const char *purpose, struct ddpc_err *e)
{
    memset(c, 0, sizeof *c);
    if (!r)
        return DDPC_FAIL(e, DDPC_E_INVALID, "comm_shm_attach: no region");
    if (rank < 0 || rank >= r->world)
        return DDPC_FAIL(e, DDPC_E_INVALID, "comm_shm_attach: rank %d outside 0..%d", rank,
                         r->world - 1);
    struct shm_handle *h = calloc(1, sizeof *h);
    if (!h)
        return DDPC_FAIL(e, DDPC_E_NOMEM, "comm_shm_attach: out of memory");
    h->r = r;
    /* Resume from the shared count: a rank attaches once per region, but
     * this keeps a re-attach after a clean run consistent. */
    h->seq = atomic_load(&r->ranks[rank].seq);
    atomic_store(&r->ranks[rank].pid, (int32_t)getpid());
    c->name = "shm";
    c->purpose = purpose ? purpose : "comm";
    c->rank = rank;
    c->world = r->world;
    c->impl = h;
    c->all_reduce_start = shm_all_reduce_start;
    c->all_reduce_wait = shm_all_reduce_wait;
    c->grad_buffer = shm_grad_buffer;
    c->shared_buffer = shm_shared_buffer;
    c->broadcast = shm_broadcast;
    c->barrier = shm_barrier;
    c->abort = shm_abort;
    c->destroy = shm_destroy;
    return 0;
}
