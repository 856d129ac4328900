/* comm_gloo.cc - struct ddpc_comm over gloo's TCP transport (see comm_gloo.h).
 *
 * Owns: the communicator's thread and its queue, the gloo context and
 * device, the adapter that lets gloo rendezvous through the job's store,
 * and turning gloo's exceptions into struct ddpc_err messages that name the
 * rank and node at the other end.
 *
 * Rules this file keeps:
 *   - no exception crosses into C: every gloo call is inside try/catch;
 *   - one thread talks to gloo (the comm thread), in the order operations
 *     were started, which is the same on every rank; the caller's thread
 *     only queues and waits on a condition variable with its deadline;
 *   - waits only as long as asked: an operation started with deadline 0
 *     gets default_timeout_s (the job's nccl_timeout; 0 only when the spec
 *     says `none`: then no deadline at all); the caller stops waiting at
 *     the deadline (the ring and barrier objects block until the pairs'
 *     timeout, nccl_timeout, so the caller's deadline is the one that
 *     counts) and the communicator is broken from then on;
 *   - a broken communicator is never used again, and destroy never joins a
 *     thread that is still inside gloo (it is left to the process's exit).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/allreduce_ring.h>
#include <gloo/barrier.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/buffer.h>

#include "comm_gloo.h"
#include "store.h"

namespace {

/* The longest timeout handed to gloo, ~31 years: gloo adds it to
 * steady_clock's nanoseconds, which a deadline of nccl_timeout: 1e308 (as
 * (long long) milliseconds: undefined) overflowed into an immediate timeout. */
constexpr long long kMaxWaitMs = 1000000000000LL;
constexpr double kCallerSlackS = 0.05;  /* after the deadline: gloo's own timeout (broadcast) fires first */

/* From this size an all-reduce runs on the caller's floats through gloo's
 * options API (unbound buffers, its segmented ring) instead of a copy into
 * and out of a ring object's own buffer. Where it pays was measured in
 * jobs, not the microbenchmark (which favoured it from 256 KiB): a 2-node
 * MLP job's all-reduce wait per step, ring object vs options API, idle
 * machine (bench/README.md): 795 KiB bucket 1.3 vs 2.0 ms, 1.6 MB 2.2 vs
 * 2.6 ms (the step equal), 3.3 MB 4.2 vs 4.3 ms (the step 7.5 vs 6.9 ms),
 * 6.5 MB 9.0 vs 7.2 ms, 12.9 MB 19.1 vs 12.7 ms. Below, the options
 * API's segments cost round trips that two memcpys of the ring path do
 * not. */
constexpr size_t kInPlaceBytes = 2u << 20;
/* Its slot: operations run one at a time on the comm thread, so one tag
 * serves them all; the ring objects take theirs from the context. */
constexpr uint32_t kInPlaceTag = 0x64647063;   /* "ddpc" */

/* Below kInPlaceBytes an all-reduce may be one exchange
 * (direct_all_reduce): every rank sends the caller's floats straight into
 * a buffer every other rank registered, and adds the world's
 * contributions in rank order. gloo's ring object sends the same (world -
 * 1) x the buffer per rank, but in world - 1 rounds one after the other,
 * each with its flow-control messages, from a copy in and back out of its
 * own buffer. What crosses between hosts differs: the ring's one edge out
 * of a host carries (world - 1) x the buffer, the exchange's R ranks on a
 * host send (world - R) x the buffer each, R (world - R) in all: the same
 * with one rank a host, more with several (2 hosts of 8: 64 buffers
 * against 15). So the exchange is used
 *   - with one rank per host, while a rank sends at most kDirectBytes
 *     (which caps the receive rows: (world - 1) x 2 halves x min(this /
 *     (world - 1), kInPlaceBytes), 4 to 16 MiB per rank): the same bytes
 *     in one round;
 *   - with several, while a rank sends at most kDirectLatencyBytes, where
 *     a call is message times, not bytes.
 * Measured call for call against the ring object over a veth pair
 * (bench/README.md): at least 0.91x its bandwidth at world 2 from 4 KiB to
 * 1 MiB in every round, 1.1-2.6x at world 4. */
constexpr size_t kDirectBytes = 8u << 20;
constexpr size_t kDirectLatencyBytes = 256u << 10;

/* ===== gloo's Store over the job's store ===== */

/* gloo asks for keys under a PrefixStore; the ones connectFullMesh waits
 * for are rank numbers, so a timeout can say "rank 3 (node 1)". Errors
 * are thrown as gloo::IoException (gloo catches nothing; comm_init does). */
class StoreAdapter : public gloo::rendezvous::Store {
  public:
    StoreAdapter(struct store_client *c, double deadline, int ranks_per_node,
                 const std::string &stop_key, int *code)
        : c_(c), deadline_(deadline), rpn_(ranks_per_node), stop_(stop_key), code_(code) {}

    void set(const std::string &key, const std::vector<char> &data) override
    {
        struct ddpc_err e = {};
        if (store_set(c_, key.c_str(), data.data(), data.size(), &e) < 0)
            fail(e);
    }

    std::vector<char> get(const std::string &key) override
    {
        struct ddpc_err e = {};
        void *v = nullptr;
        size_t n = 0;
        std::string who = describe(key);
        if (store_get_watch(c_, key.c_str(), stop_.c_str(), &v, &n, deadline_, who.c_str(),
                            &e) < 0)
            fail(e);
        std::vector<char> out((char *)v, (char *)v + n);
        free(v);
        return out;
    }

    void wait(const std::vector<std::string> &keys) override
    {
        wait(keys, std::chrono::milliseconds(0));
    }

    void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &) override
    {
        /* the job's deadline, not gloo's default, bounds the rendezvous */
        for (const auto &k : keys) {
            struct ddpc_err e = {};
            void *v = nullptr;
            size_t n = 0;
            std::string who = describe(k);
            if (store_get_watch(c_, k.c_str(), stop_.c_str(), &v, &n, deadline_, who.c_str(),
                                &e) < 0)
                fail(e);
            free(v);
        }
    }

  private:
    /* the code goes past gloo (which passes the exception on) to g_init */
    [[noreturn]] void fail(const struct ddpc_err &e)
    {
        *code_ = e.code;
        throw gloo::IoException(e.msg);
    }

    /* "<prefix>/<digits>" is a rank's address list in connectFullMesh */
    std::string describe(const std::string &key) const
    {
        size_t slash = key.rfind('/');
        std::string tail = slash == std::string::npos ? key : key.substr(slash + 1);
        if (!tail.empty() && tail.size() < 9 &&
            tail.find_first_not_of("0123456789") == std::string::npos) {
            int r = std::stoi(tail);
            return "rank " + tail + " (node " + std::to_string(r / (rpn_ > 0 ? rpn_ : 1)) +
                   ") in gloo's connection exchange";
        }
        return "key '" + key + "'";
    }

    struct store_client *c_;
    double deadline_;
    int rpn_;
    std::string stop_;
    int *code_;
};

/* ===== the communicator ===== */

enum class Kind { AllReduce, Broadcast, Barrier };

struct Op {
    Kind        kind;
    int         tag;            /* all_reduce: the caller's tag; else -1 */
    float      *buf;
    size_t      n;
    bool        avg;
    int         root;
    double      deadline;       /* absolute; never 0 here */
    bool        done = false;
    int         rc = 0;
    struct ddpc_err err = {};
};

const char *kind_name(Kind k)
{
    return k == Kind::AllReduce ? "all_reduce" : k == Kind::Broadcast ? "broadcast" : "barrier";
}

struct Gloo {
    std::string purpose;
    const char *timeout_key;                 /* the spec key that sets this comm's deadlines */
    int rank = 0, world = 1, rpn = 1;
    double default_timeout_s = 1800;
    std::shared_ptr<gloo::transport::Device> dev;
    std::shared_ptr<gloo::rendezvous::Context> ctx;
    std::vector<std::string> peer_host;      /* rank -> its host address */

    /* The all-reduce of a (tag, n) below kInPlaceBytes that the exchange
     * does not take (kDirectBytes, kDirectLatencyBytes) is gloo's own ring
     * algorithm object, made once (its buffers registered with the pairs)
     * and run on a copy of the caller's floats held here: gloo::allreduce's
     * unbound buffers cost 150-200 us per call on small sizes (~4 ms on a
     * loaded machine), the ring object 80-110 us (bench/README.md, idle
     * machine). Made on the comm thread, in the order operations
     * arrive, which is the same on every rank, so the ranks' slots match;
     * the key never depends on a rank's own pointers. */
    struct Ring {
        std::vector<float> buf;
        std::unique_ptr<gloo::AllreduceRing<float>> algo;
    };
    std::map<std::pair<int, size_t>, Ring> rings;
    /* direct_all_reduce's buffers, made on its first call: rank r's
     * contribution arrives in its row, two halves of cap floats used in
     * turn, registered as recv[r] with the pair to rank r (no row and no
     * buffer for this rank: it sends from the caller's floats). */
    struct Direct {
        std::vector<float> rows;             /* [world - 1][2][cap] */
        size_t cap = 0;
        int slot = 0;
        unsigned calls = 0;
        std::vector<std::unique_ptr<gloo::transport::Buffer>> recv;
        /* rank r's row, from `half` on, at rank `me` */
        float *row(int r, int me, size_t half)
        {
            return &rows[(size_t)(r < me ? r : r - 1) * 2 * cap + half];
        }
    } direct;
    std::unique_ptr<gloo::BarrierAllToAll> barrier;

    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::shared_ptr<Op>> queue;   /* started, not yet taken by the thread */
    std::map<int, std::shared_ptr<Op>> by_tag;
    bool stop = false;
    bool in_gloo = false;                    /* the thread is inside a gloo call */
    bool broken = false;
    std::string why;                         /* first cause of broken */
    std::thread th;
    bool have_thread = false;
};

Gloo *impl_of(const struct ddpc_comm *c)
{
    return static_cast<Gloo *>(c->impl);
}

/* "rank 2 (node 1, 10.0.0.2)" style names for a peer address in a gloo
 * message: every rank registered the host it listens on. */
std::string peers_at(const Gloo &g, const std::string &msg)
{
    /* gloo names the peer's address and port, and the port may be the
     * ephemeral one of an accepted connection: the host names the node.
     * Nodes sharing one address (a test on one machine) are all named. */
    std::string out;
    std::vector<int> nodes;
    for (int r = 0; r < (int)g.peer_host.size(); r++) {
        if (r == g.rank || g.peer_host[r].empty())
            continue;
        const std::string &h = g.peer_host[r];
        size_t at = msg.find(h);
        /* the host must stand alone: 10.0.0.2 is not 10.0.0.21 */
        bool hit = false;
        while (at != std::string::npos) {
            size_t end = at + h.size();
            char before = at ? msg[at - 1] : ' ';
            char after = end < msg.size() ? msg[end] : ' ';
            if (!isdigit((unsigned char)before) && before != '.' &&
                !isdigit((unsigned char)after) &&
                !(after == '.' && end + 1 < msg.size() && isdigit((unsigned char)msg[end + 1]))) {
                hit = true;
                break;
            }
            at = msg.find(h, at + 1);
        }
        if (!hit)
            continue;
        int node = r / g.rpn;
        bool seen = false;
        for (int n : nodes)
            seen |= n == node;
        if (seen)
            continue;
        nodes.push_back(node);
        if (!out.empty())
            out += " or ";
        out += "node " + std::to_string(node) + " (" + h + ")";
    }
    return out;
}

/* Fills op->err from a gloo exception. */
void classify(Gloo &g, Op &op, const char *what)
{
    std::string msg = what ? what : "unknown gloo error";
    bool timeout = msg.find("Timed out") != std::string::npos ||
                   msg.find("timed out") != std::string::npos ||
                   msg.find("Timeout") != std::string::npos;
    std::string peers = peers_at(g, msg);
    if (timeout) {
        op.rc = DDPC_FAIL(&op.err, DDPC_E_TIMEOUT,
                          "gloo %s %s (%zu floats, rank %d of %d) passed its deadline: %s. A "
                          "peer is hung, far behind, or its host unreachable (a cut link shows "
                          "only as this timeout).\n---> HINT: if another node's log names a "
                          "rank that died, that is the cause; if steps are legitimately this "
                          "slow, raise %s",
                          g.purpose.c_str(), kind_name(op.kind), op.n, g.rank, g.world,
                          msg.c_str(), g.timeout_key);
    } else {
        op.rc = DDPC_FAIL(&op.err, DDPC_E_PEER,
                          "gloo %s %s on rank %d of %d: the connection to %s broke: %s; that "
                          "node's job ended or its host went away",
                          g.purpose.c_str(), kind_name(op.kind), g.rank, g.world,
                          peers.empty() ? "a peer" : peers.c_str(), msg.c_str());
    }
}

/* An all-reduce in one exchange (kDirectBytes). This rank's floats
 * are sent from the caller's buffer into this call's half of its row at
 * every peer, and once the peers' rows have arrived every rank adds rows
 * 0, 1, ..., world - 1 in that order (its own row being the caller's
 * floats), so all ranks hold the same bits. Why two halves suffice: a peer
 * writes call k + 2 into the half of call k only after it received this
 * rank's call k + 1, which this rank sends only after it has read call k.
 * Throws what gloo throws (a dead peer; the pairs' timeout), as the ring
 * object does. */
void direct_all_reduce(Gloo &g, Op &op)
{
    Gloo::Direct &d = g.direct;
    const int W = g.world;
    const size_t n = op.n, bytes = n * sizeof(float);
    if (d.cap == 0) {   /* the first call, at the same point on every rank */
        size_t cap_bytes = kDirectBytes / (size_t)(W - 1);
        d.cap = (cap_bytes < kInPlaceBytes ? cap_bytes : kInPlaceBytes) / sizeof(float);
        d.rows.assign((size_t)(W - 1) * 2 * d.cap, 0.0f);
        /* rank a's messages to rank b take slot + a: a send buffer
         * unregisters its slot from the pair when it is destroyed, so it
         * must never share one with the pair's receive buffer */
        d.slot = g.ctx->nextSlot(W);
        d.recv.resize((size_t)W);
        for (int r = 0; r < W; r++)
            if (r != g.rank)
                d.recv[(size_t)r] = g.ctx->getPair(r)->createRecvBuffer(
                    d.slot + r, d.row(r, g.rank, 0), 2 * d.cap * sizeof(float));
    }
    const size_t half = (d.calls++ & 1u) * d.cap;
    /* sent from the caller's floats: a send buffer is not registered with
     * its pair, so one per call costs an allocation, not a copy */
    std::vector<std::unique_ptr<gloo::transport::Buffer>> send((size_t)W);
    for (int r = 0; r < W; r++)
        if (r != g.rank) {
            send[(size_t)r] = g.ctx->getPair(r)->createSendBuffer(d.slot + g.rank, op.buf, bytes);
            send[(size_t)r]->send(0, bytes, half * sizeof(float));
        }
    for (int r = 0; r < W; r++)
        if (r != g.rank)
            d.recv[(size_t)r]->waitRecv();
    for (int r = 0; r < W; r++)
        if (r != g.rank)
            send[(size_t)r]->waitSend();
    /* ((row 0 + row 1) + row 2) ..., in blocks that are read whole before
     * they are written (this rank's row is op.buf), each step a vector
     * loop; the average's scale folded into the last (x 1 is exact) */
    const float scale = op.avg ? 1.0f / (float)W : 1.0f;
    const size_t B = 256;
    float acc[B];
    for (size_t i0 = 0; i0 < n; i0 += B) {
        const size_t m = n - i0 < B ? n - i0 : B;
        const float *row[2];
        for (int r = 0; r < 2; r++)
            row[r] = r == g.rank ? op.buf + i0 : d.row(r, g.rank, half) + i0;
        for (size_t i = 0; i < m; i++)
            acc[i] = row[0][i] + row[1][i];
        for (int r = 2; r < W; r++) {
            const float *rr = r == g.rank ? op.buf + i0 : d.row(r, g.rank, half) + i0;
            for (size_t i = 0; i < m; i++)
                acc[i] += rr[i];
        }
        for (size_t i = 0; i < m; i++)
            op.buf[i0 + i] = acc[i] * scale;
    }
}

void run_op(Gloo &g, Op &op)
{
    double left = op.deadline - ddpc_now();
    auto ms = op.deadline == 0 ? gloo::kNoTimeout
            : std::chrono::milliseconds(left > 0.001 ? ddpc_wait_ms(left, kMaxWaitMs) : 1);
    try {
        switch (op.kind) {
        case Kind::AllReduce: {
            if (op.n == 0)
                break;
            if (op.n > (size_t)INT32_MAX) {
                op.rc = DDPC_FAIL(&op.err, DDPC_E_INVALID, "gloo %s all_reduce of %zu floats: "
                                  "at most %d at once", g.purpose.c_str(), op.n, INT32_MAX);
                break;
            }
            if (op.n * sizeof(float) >= kInPlaceBytes) {
                /* gloo's options API on the caller's floats: no copies */
                gloo::AllreduceOptions o(g.ctx);
                o.setOutput(op.buf, op.n);
                o.setReduceFunction(static_cast<void (*)(void *, const void *, const void *,
                                                         size_t)>(&gloo::sum<float>));
                o.setTag(kInPlaceTag);
                o.setTimeout(ms);
                gloo::allreduce(o);
                if (op.avg) {
                    const float inv = 1.0f / (float)g.world;
                    for (size_t i = 0; i < op.n; i++)
                        op.buf[i] *= inv;
                }
                break;
            }
            if ((size_t)(g.world - 1) * op.n * sizeof(float) <=
                (g.rpn == 1 ? kDirectBytes : kDirectLatencyBytes)) {
                direct_all_reduce(g, op);
                break;
            }
            Gloo::Ring &ring = g.rings[std::make_pair(op.tag, op.n)];
            if (!ring.algo) {
                ring.buf.assign(op.n, 0.0f);
                std::vector<float *> ptrs = { ring.buf.data() };
                ring.algo.reset(new gloo::AllreduceRing<float>(g.ctx, ptrs, (int)op.n));
            }
            memcpy(ring.buf.data(), op.buf, op.n * sizeof(float));
            ring.algo->run();
            if (op.avg) {   /* the copy back and the average in one pass */
                const float inv = 1.0f / (float)g.world;
                const float *sum = ring.buf.data();
                for (size_t i = 0; i < op.n; i++)
                    op.buf[i] = sum[i] * inv;
            } else {
                memcpy(op.buf, ring.buf.data(), op.n * sizeof(float));
            }
            break;
        }
        case Kind::Broadcast: {
            gloo::BroadcastOptions o(g.ctx);
            o.setOutput(op.buf, op.n);
            o.setRoot(op.root);
            o.setTimeout(ms);
            gloo::broadcast(o);
            break;
        }
        case Kind::Barrier: {
            if (!g.barrier)
                g.barrier.reset(new gloo::BarrierAllToAll(g.ctx));
            g.barrier->run();
            break;
        }
        }
    } catch (const std::exception &ex) {
        classify(g, op, ex.what());
    } catch (...) {
        classify(g, op, "a non-standard exception");
    }
}

void thread_main(Gloo *g)
{
    std::unique_lock<std::mutex> lk(g->mu);
    for (;;) {
        g->cv.wait(lk, [g] { return g->stop || !g->queue.empty(); });
        if (g->stop)
            return;
        std::shared_ptr<Op> op = g->queue.front();
        g->queue.pop_front();
        if (g->broken) {
            op->rc = DDPC_FAIL(&op->err, DDPC_E_ABORTED, "gloo %s communicator is broken (%s)",
                               g->purpose.c_str(), g->why.c_str());
        } else if (g->world > 1) {   /* one rank: sum and average are the value */
            g->in_gloo = true;
            lk.unlock();
            run_op(*g, *op);
            lk.lock();
            g->in_gloo = false;
            if (op->rc < 0 && !g->broken) {
                g->broken = true;
                g->why = op->err.msg;
            }
        }
        op->done = true;
        g->cv.notify_all();
    }
}

int check_usable(struct ddpc_comm *c, Gloo &g, struct ddpc_err *e)
{
    if (g.broken)
        return DDPC_FAIL(e, DDPC_E_ABORTED, "gloo %s communicator was broken earlier (%s); no "
                         "further collectives can run on it", c->purpose, g.why.c_str());
    return 0;
}

double effective(const Gloo &g, double deadline)
{
    return deadline > 0 ? deadline
         : g.default_timeout_s > 0 ? ddpc_now() + g.default_timeout_s : 0;   /* 0: none */
}

int enqueue(struct ddpc_comm *c, std::shared_ptr<Op> op, struct ddpc_err *e)
{
    Gloo &g = *impl_of(c);
    std::lock_guard<std::mutex> lk(g.mu);
    DDPC_TRY(check_usable(c, g, e));
    g.queue.push_back(op);
    g.cv.notify_all();
    return 0;
}

/* Waits for op until its own deadline plus the slack (gloo times out
 * first; this is the backstop). */
int finish(struct ddpc_comm *c, const std::shared_ptr<Op> &op, double deadline,
           struct ddpc_err *e)
{
    Gloo &g = *impl_of(c);
    std::unique_lock<std::mutex> lk(g.mu);
    double until = deadline > 0 ? deadline : op->deadline;   /* 0: none (nccl_timeout none) */
    if (until > 0)
        until += kCallerSlackS;
    for (;;) {
        if (op->done)
            break;
        if (g.broken && !g.in_gloo && g.queue.empty())
            break;   /* aborted while queued: the thread will never take it */
        if (g.broken && g.why.rfind("aborted:", 0) == 0)
            return DDPC_FAIL(e, DDPC_E_ABORTED, "gloo %s %s: %s", c->purpose,
                             kind_name(op->kind), g.why.c_str() + 9);
        if (until == 0) {
            g.cv.wait(lk);
            continue;
        }
        double left = until - ddpc_now();
        if (left <= 0) {
            if (!g.broken) {
                g.broken = true;
                g.why = "an operation passed its deadline and gloo did not return";
            }
            return DDPC_FAIL(e, DDPC_E_TIMEOUT,
                             "gloo %s %s (%zu floats, rank %d of %d) did not complete by its "
                             "deadline; a peer is hung, far behind, or unreachable.\n---> "
                             "HINT: raise %s if steps are legitimately this slow",
                             c->purpose, kind_name(op->kind), op->n, c->rank, c->world,
                             g.timeout_key);
        }
        /* an hour at a time: wait_for adds its duration to steady_clock's
         * nanoseconds, and a deadline centuries away (nccl_timeout: 1e308)
         * overflowed it into waits that return at once, a spin that kept
         * the comm thread from the mutex */
        g.cv.wait_for(lk, std::chrono::duration<double>(left < 3600 ? left : 3600));
    }
    if (!op->done)
        return DDPC_FAIL(e, DDPC_E_ABORTED, "gloo %s communicator is broken (%s)", c->purpose,
                         g.why.c_str());
    if (op->rc < 0) {
        if (e && e->code == DDPC_OK)
            *e = op->err;
        return op->rc;
    }
    return 0;
}

int g_all_reduce_start(struct ddpc_comm *c, int tag, const float *send, float *recv, size_t n,
                       enum ddpc_reduce op, double deadline, struct ddpc_err *e)
{
    Gloo &g = *impl_of(c);
    if (tag < 0)
        return DDPC_FAIL(e, DDPC_E_INVALID, "gloo %s: negative tag %d", c->purpose, tag);
    {
        std::lock_guard<std::mutex> lk(g.mu);
        DDPC_TRY(check_usable(c, g, e));
        auto it = g.by_tag.find(tag);
        if (it != g.by_tag.end())
            return DDPC_FAIL(e, DDPC_E_INVALID, "gloo %s all_reduce: tag %d still has one "
                             "outstanding; wait for it first", c->purpose, tag);
    }
    if (send != recv && n)
        memcpy(recv, send, n * sizeof *recv);
    auto o = std::make_shared<Op>();
    o->kind = Kind::AllReduce;
    o->tag = tag;
    o->buf = recv;
    o->n = n;
    o->avg = op == DDPC_REDUCE_AVG;
    o->root = 0;
    o->deadline = effective(g, deadline);
    DDPC_TRY(enqueue(c, o, e));
    std::lock_guard<std::mutex> lk(g.mu);
    g.by_tag[tag] = o;
    return 0;
}

int g_all_reduce_wait(struct ddpc_comm *c, int tag, double deadline, struct ddpc_err *e)
{
    Gloo &g = *impl_of(c);
    std::shared_ptr<Op> o;
    {
        std::lock_guard<std::mutex> lk(g.mu);
        auto it = g.by_tag.find(tag);
        if (it == g.by_tag.end())
            return DDPC_FAIL(e, DDPC_E_INVALID, "gloo %s: wait on tag %d, which has nothing "
                             "outstanding", c->purpose, tag);
        o = it->second;
        g.by_tag.erase(it);
    }
    return finish(c, o, deadline, e);
}

int g_broadcast(struct ddpc_comm *c, float *buf, size_t n, int root, double deadline,
                struct ddpc_err *e)
{
    Gloo &g = *impl_of(c);
    if (root < 0 || root >= c->world)
        return DDPC_FAIL(e, DDPC_E_INVALID, "gloo %s broadcast: root %d outside world %d",
                         c->purpose, root, c->world);
    auto o = std::make_shared<Op>();
    o->kind = Kind::Broadcast;
    o->tag = -1;
    o->buf = buf;
    o->n = n;
    o->avg = false;
    o->root = root;
    o->deadline = effective(g, deadline);
    DDPC_TRY(enqueue(c, o, e));
    return finish(c, o, deadline, e);
}

int g_barrier(struct ddpc_comm *c, double deadline, struct ddpc_err *e)
{
    Gloo &g = *impl_of(c);
    auto o = std::make_shared<Op>();
    o->kind = Kind::Barrier;
    o->tag = -1;
    o->buf = nullptr;
    o->n = 0;
    o->avg = false;
    o->root = 0;
    o->deadline = effective(g, deadline);
    DDPC_TRY(enqueue(c, o, e));
    return finish(c, o, deadline, e);
}

void g_abort(struct ddpc_comm *c, const char *why)
{
    Gloo *g = impl_of(c);
    if (!g)
        return;
    std::lock_guard<std::mutex> lk(g->mu);
    if (!g->broken) {
        g->broken = true;
        g->why = std::string("aborted: ") + (why ? why : "by the caller");
    }
    g->cv.notify_all();
}

void g_destroy(struct ddpc_comm *c)
{
    Gloo *g = impl_of(c);
    if (!g)
        return;
    bool stuck;
    {
        std::lock_guard<std::mutex> lk(g->mu);
        g->stop = true;
        stuck = g->in_gloo;
        g->cv.notify_all();
    }
    if (g->have_thread) {
        if (stuck) {
            /* inside gloo, waiting on a peer that will not answer: leave it
             * (and the context it uses) to the process's exit */
            g->th.detach();
            c->impl = nullptr;
            return;
        }
        g->th.join();
    }
    try {
        /* buffers first: they unregister from the context's pairs */
        g->direct.recv.clear();
        g->rings.clear();
        g->barrier.reset();
        g->ctx.reset();
        g->dev.reset();
    } catch (...) {
    }
    delete g;
    c->impl = nullptr;
}

/* The local address this host uses to reach the store: the interface that
 * routes to node 0, which the other nodes can reach too. */
int local_host_of(int fd, std::string &out, int *family, struct ddpc_err *e)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == -1)
        return DDPC_FAIL(e, DDPC_E_SYS, "getsockname on the store connection: %s",
                         strerror(errno));
    char buf[INET6_ADDRSTRLEN];
    const void *a = ss.ss_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
                                             : (const void *)&((struct sockaddr_in *)&ss)->sin_addr;
    if (!inet_ntop(ss.ss_family, a, buf, sizeof buf))
        return DDPC_FAIL(e, DDPC_E_SYS, "inet_ntop: %s", strerror(errno));
    out = buf;
    *family = ss.ss_family;
    return 0;
}

int g_init(struct ddpc_comm *c, const struct ddpc_gloo_init *in, struct ddpc_err *e)
{
    memset(c, 0, sizeof *c);
    c->name = "gloo";
    c->purpose = in->purpose;
    c->rank = in->rank;
    c->world = in->world;
    c->destroy = g_destroy;
    c->abort = g_abort;
    Gloo *g = new (std::nothrow) Gloo();
    if (!g)
        return DDPC_FAIL(e, DDPC_E_NOMEM, "gloo %s: out of memory", in->purpose);
    c->impl = g;
    g->purpose = in->purpose;
    g->timeout_key = strcmp(in->purpose, "rank-sync") == 0 ? "rank_sync_timeout" : "nccl_timeout";
    g->rank = in->rank;
    g->world = in->world;
    g->rpn = in->ranks_per_node > 0 ? in->ranks_per_node : 1;
    g->default_timeout_s = in->default_timeout_s > 0 ? in->default_timeout_s : 0;
    if (in->rank < 0 || in->rank >= in->world)
        return DDPC_FAIL(e, DDPC_E_INVALID, "gloo %s: rank %d outside world %d", in->purpose,
                         in->rank, in->world);
    /* a write to a peer that died must fail with EPIPE, not kill the rank */
    (void)signal(SIGPIPE, SIG_IGN);

    struct store_client sc;
    DDPC_TRY(store_client_connect_ex(&sc, in->store_host, in->store_port, in->deadline,
                                     in->store_met ? STORE_CONNECT_REFUSED_STOPS : 0, e));
    int rc = 0;
    int store_code = 0;   /* the adapter's error code, when it threw */
    /* a node that gives up sets this (ddprt.c): the waits below watch it */
    std::string stop_key = std::string(in->prefix) + "/stop";
    try {
        std::string host;
        int family = AF_UNSPEC;
        if ((rc = local_host_of(sc.fd, host, &family, e)) < 0)
            throw 0;
        gloo::transport::tcp::attr attr;
        attr.hostname = host;
        attr.ai_family = family;
        g->dev = gloo::transport::tcp::CreateDevice(attr);
        /* everyone's host address (for naming a peer's node in gloo's
         * messages) and world size; a rank that never arrives is named
         * here, before gloo's own exchange */
        std::string base = std::string(in->prefix) + "/" + in->purpose;
        /* one process per rank: a second ./job given the same node rank
         * (--node-rank K twice, srun with two tasks on a node) would
         * overwrite the first's address and leave one of the two waiting
         * for connections that went to the other, to fail at its timeout
         * blaming node 0's network */
        int64_t claims = 0;
        std::string claim = base + "/claim/" + std::to_string(in->rank);
        if ((rc = store_add(&sc, claim.c_str(), 1, &claims, e)) < 0)
            throw 0;
        if (claims != 1) {
            int node = in->rank / g->rpn;
            rc = DDPC_FAIL(e, DDPC_E_TAKEN,
                           "rank %d (node %d) is already taken: another ./job runs as node %d "
                           "of this job.\n---> HINT: give each node its own --node-rank "
                           "(0..N-1, node %d is taken); under Slurm run one task per node "
                           "(srun --ntasks-per-node=1, as the generated sbatch script does), "
                           "since the node rank is SLURM_NODEID",
                           in->rank, node, node, node);
            throw 0;
        }
        std::string mine = base + "/rank/" + std::to_string(in->rank);
        std::string val = host + "\n" + std::to_string(in->world);
        if ((rc = store_set(&sc, mine.c_str(), val.data(), val.size(), e)) < 0)
            throw 0;
        g->peer_host.assign((size_t)in->world, std::string());
        for (int r = 0; r < in->world; r++) {
            std::string k = base + "/rank/" + std::to_string(r);
            std::string who = "rank " + std::to_string(r) + " (node " +
                              std::to_string(r / g->rpn) + ")";
            void *v = nullptr;
            size_t n = 0;
            if ((rc = store_get_watch(&sc, k.c_str(), stop_key.c_str(), &v, &n, in->deadline,
                                      who.c_str(), e)) < 0) {
                /* name every rank still missing, not only the first */
                std::string missing;
                int count = 0;
                for (int q = r; q < in->world; q++) {
                    std::string kq = base + "/rank/" + std::to_string(q);
                    struct ddpc_err ce = {};
                    if (store_check(&sc, kq.c_str(), &ce) == 0) {
                        if (count++ < 16)
                            missing += (missing.empty() ? "" : ", ") + std::string("rank ") +
                                       std::to_string(q) + " (node " +
                                       std::to_string(q / g->rpn) + ")";
                    }
                }
                if (e->code == DDPC_E_TIMEOUT && count > 0) {
                    char prev[sizeof e->msg];
                    snprintf(prev, sizeof prev, "%s", e->msg);
                    ddpc_err_clear(e);
                    rc = DDPC_FAIL(e, DDPC_E_TIMEOUT,
                                   "rank %d: %d rank%s never arrived at the rendezvous: %s%s "
                                   "(%s).\n---> HINT: start ./job on every node (--node-rank "
                                   "K) or check that those nodes reach node 0",
                                   in->rank, count, count == 1 ? "" : "s", missing.c_str(),
                                   count > 16 ? ", ..." : "", prev);
                }
                throw 0;
            }
            std::string got((const char *)v, n);
            free(v);
            size_t b = got.find('\n');
            if (b == std::string::npos) {
                rc = DDPC_FAIL(e, DDPC_E_PEER, "gloo %s: rank %d registered a malformed "
                               "address; is another program using this store?", in->purpose, r);
                throw 0;
            }
            g->peer_host[(size_t)r] = got.substr(0, b);
            int their_world = atoi(got.c_str() + b + 1);
            if (their_world != in->world) {
                rc = DDPC_FAIL(e, DDPC_E_INVALID,
                               "rank %d (node %d) counts a world of %d ranks, this rank %d "
                               "counts %d: every node must run the same job with the same "
                               "number of workers (devices: all counts each node's own CPUs "
                               "or GPUs; list devices explicitly)",
                               r, r / g->rpn, their_world, in->rank, in->world);
                throw 0;
            }
        }

        g->ctx = std::make_shared<gloo::rendezvous::Context>(in->rank, in->world);
        /* gloo's exchange is bounded by the adapter's deadline. The pairs
         * keep the context's timeout of this moment for every later wait:
         * the job's nccl_timeout (the ring and barrier objects take no
         * timeout of their own; each operation's deadline is also kept by
         * the caller, finish()) */
        g->ctx->setTimeout(g->default_timeout_s > 0
                           ? std::chrono::milliseconds(ddpc_wait_ms(g->default_timeout_s,
                                                                    kMaxWaitMs))
                           : gloo::kNoTimeout);
        StoreAdapter adapter(&sc, in->deadline, g->rpn, stop_key, &store_code);
        gloo::rendezvous::PrefixStore ps(base + "/mesh", adapter);
        g->ctx->connectFullMesh(ps, g->dev);
    } catch (const std::exception &ex) {
        std::string peers = peers_at(*g, ex.what());
        rc = DDPC_FAIL(e, store_code == DDPC_E_STOPPED ? DDPC_E_STOPPED
                          : strstr(ex.what(), "never arrived") || strstr(ex.what(), "Timed out")
                              ? DDPC_E_TIMEOUT : DDPC_E_PEER,
                       "gloo %s communicator (rank %d of %d) could not connect%s%s: %s",
                       in->purpose, in->rank, in->world, peers.empty() ? "" : " to ",
                       peers.c_str(), ex.what());
    } catch (int) {
        /* e is filled */
        if (rc == 0)
            rc = DDPC_E_INVALID;
    }
    store_client_close(&sc);
    if (rc < 0)
        return rc;

    try {
        g->th = std::thread(thread_main, g);
        g->have_thread = true;
    } catch (const std::exception &ex) {
        return DDPC_FAIL(e, DDPC_E_SYS, "gloo %s: cannot start the comm thread: %s",
                         in->purpose, ex.what());
    }
    c->all_reduce_start = g_all_reduce_start;
    c->all_reduce_wait = g_all_reduce_wait;
    c->broadcast = g_broadcast;
    c->barrier = g_barrier;
    return 0;
}

} // namespace

extern "C" const struct ddpc_gloo_backend ddpc_gloo_backend = { "gloo", g_init };
