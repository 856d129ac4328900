/* gloo_allreduce.cc - all-reduce bandwidth: ddpc's gloo path against gloo's own ring.
 *
 *   gloo_allreduce MODE RANK WORLD STORE_HOST STORE_PORT [MAX_MIB [RANKS_PER_HOST]]
 *
 * MODE ddpc: the communicator jobs use (libddprt_gloo.so's code, linked in):
 *   start/wait through its comm thread; underneath, by size and world, one
 *   exchange into registered buffers, gloo's ring object on a copy, or
 *   gloo::allreduce on the caller's floats (comm_gloo.cc).
 * MODE ring: gloo::AllreduceRing<float> on a context connected the same
 *   way, with no ddpc code in the timed loop: gloo's own ring.
 * MODE gloo: gloo::allreduce (the API ddpc's path calls) on that context,
 *   in the calling thread: what ddpc's comm thread adds is ddpc - gloo.
 * MODE both: ring and ddpc in one process per rank, call for call (each
 *   first on every other call), so both see the same moment of a shared machine;
 *   prints both medians and ddpc's share of the ring's bandwidth. The
 *   separate runs of the other modes differ by the load between them.
 * Rank 0 hosts the store (store.h) when STORE_PORT's store is not up; run
 * one process per rank (bench/multinode.sh puts them in two network
 * namespaces). Rank 0 prints, per size: bytes, median time of 200 calls
 * up to 1 MiB and of 20 above (after 5 warm-up calls), algbw = bytes / time and busbw = algbw x
 * 2(W-1)/W, in GB/s (1e9 bytes). Values are checked after the last call.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <stdexcept>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/allreduce_ring.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

extern "C" {
#include "comm.h"
#include "comm_gloo.h"
#include "store.h"
#include "units.h"
}

namespace {

/* gloo's Store over ddpc's store, for the ring mode's rendezvous */
class Adapter : public gloo::rendezvous::Store {
  public:
    explicit Adapter(store_client *c) : c_(c) {}
    void set(const std::string &k, const std::vector<char> &d) override
    {
        ddpc_err e = {};
        if (store_set(c_, k.c_str(), d.data(), d.size(), &e) < 0)
            throw std::runtime_error(e.msg);
    }
    std::vector<char> get(const std::string &k) override
    {
        ddpc_err e = {};
        void *v;
        size_t n;
        if (store_get(c_, k.c_str(), &v, &n, ddpc_deadline_after(60), nullptr, &e) < 0)
            throw std::runtime_error(e.msg);
        std::vector<char> out((char *)v, (char *)v + n);
        free(v);
        return out;
    }
    void wait(const std::vector<std::string> &keys) override
    {
        for (auto &k : keys)
            (void)get(k);
    }
    void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &) override
    {
        wait(keys);
    }

  private:
    store_client *c_;
};

double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: %s ddpc|ring|gloo|both RANK WORLD STORE_HOST STORE_PORT [MAX_MIB "
                "[RANKS_PER_HOST]]\n",
                argv[0]);
        return 2;
    }
    std::string mode = argv[1];
    /* decimal arguments, read as ./job reads its flags (units.h) */
    int64_t a[4] = { 0, 0, 0, 1 };   /* rank, world, port, ranks per host */
    double max_mib = 64;
    if (units_flag_int(argv[2], 0, 4095, &a[0]) < 0 ||
        units_flag_int(argv[3], a[0] + 1, 4096, &a[1]) < 0 ||
        units_flag_int(argv[5], 1, 65535, &a[2]) < 0 ||
        (argc > 6 && units_flag_double(argv[6], 1.0 / 1048576, 65536, &max_mib) < 0) ||
        (argc > 7 && units_flag_int(argv[7], 1, a[1], &a[3]) < 0)) {
        fprintf(stderr, "%s: RANK < WORLD <= 4096, STORE_PORT 1..65535, MAX_MIB a number, "
                "RANKS_PER_HOST 1..WORLD, each in decimal\n", argv[0]);
        return 2;
    }
    int rank = (int)a[0], world = (int)a[1], port = (int)a[2];
    int per_host = (int)a[3];   /* ddpc's path chooses by it */
    const char *host = argv[4];
    size_t max_bytes = (size_t)(max_mib * 1048576);
    store_host sh = { 0, -1, 0 };
    ddpc_err e = {};
    if (rank == 0 && store_host_start(&sh, host, port, ddpc_deadline_after(60), &e) < 0) {
        fprintf(stderr, "store: %s\n", e.msg);
        return 1;
    }
    std::vector<float> buf(max_bytes / sizeof(float));
    const int warm = 5;
    bool both = mode == "both";

    ddpc_comm c = {};
    std::shared_ptr<gloo::rendezvous::Context> ctx;
    store_client sc = { -1, "" };
    if (mode == "ddpc" || both) {
        ddpc_gloo_init in = {};
        in.purpose = "gradient";
        in.rank = rank;
        in.world = world;
        in.ranks_per_node = per_host;
        in.store_host = host;
        in.store_port = port;
        in.prefix = "bench";
        in.deadline = ddpc_deadline_after(60);
        in.default_timeout_s = 600;
        if (ddpc_gloo_backend.comm_init(&c, &in, &e) < 0) {
            fprintf(stderr, "comm_init: %s\n", e.msg);
            return 1;
        }
    }
    if (mode != "ddpc") {
        if (store_client_connect(&sc, host, port, ddpc_deadline_after(60), &e) < 0) {
            fprintf(stderr, "store: %s\n", e.msg);
            return 1;
        }
        /* the same interface ddpc's path uses: the one that reaches the store */
        sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        getsockname(sc.fd, (sockaddr *)&ss, &sl);
        char ip[64];
        inet_ntop(ss.ss_family,
                  ss.ss_family == AF_INET6 ? (void *)&((sockaddr_in6 *)&ss)->sin6_addr
                                           : (void *)&((sockaddr_in *)&ss)->sin_addr,
                  ip, sizeof ip);
        gloo::transport::tcp::attr attr;
        attr.hostname = ip;
        auto dev = gloo::transport::tcp::CreateDevice(attr);
        ctx = std::make_shared<gloo::rendezvous::Context>(rank, world);
        Adapter a(&sc);
        gloo::rendezvous::PrefixStore ps("ring", a);
        ctx->connectFullMesh(ps, dev);
    }

    if (rank == 0 && both)
        printf("# ring and ddpc call for call, world %d: bytes  ring_median_us  "
               "ddpc_median_us  ring_algbw_GBps  ddpc_algbw_GBps  ddpc/ring\n", world);
    else if (rank == 0)
        printf("# %s, world %d: bytes  median_us  algbw_GBps  busbw_GBps\n", mode.c_str(), world);
    for (size_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
        size_t n = bytes / sizeof(float);
        std::vector<double> t, t_ring;
        std::unique_ptr<gloo::AllreduceRing<float>> ring;
        const int iters = bytes <= (1u << 20) ? 200 : 20;
        if (mode == "ring" || both) {
            std::vector<float *> ptrs = { buf.data() };
            ring.reset(new gloo::AllreduceRing<float>(ctx, ptrs, (int)n));
        }
        /* both: the ring's call before ddpc's on even iterations, after it
         * on odd ones, so neither always follows the other (the last
         * iteration is even: the values checked below are ddpc's) */
        auto ring_call = [&](int it) {
            for (size_t i = 0; i < n; i++)
                buf[i] = (float)(rank + 1);
            double t0 = ddpc_now();
            ring->run();
            if (it >= warm)
                t_ring.push_back(ddpc_now() - t0);
        };
        for (int it = 0; it < warm + iters; it++) {
            if (both && it % 2 == 0)
                ring_call(it);
            for (size_t i = 0; i < n; i++)
                buf[i] = (float)(rank + 1);
            double t0 = ddpc_now();
            if (mode == "ddpc" || both) {
                if (comm_all_reduce(&c, buf.data(), buf.data(), n, DDPC_REDUCE_SUM,
                                    ddpc_deadline_after(600), &e) < 0) {
                    fprintf(stderr, "all_reduce: %s\n", e.msg);
                    return 1;
                }
            } else if (mode == "gloo") {
                gloo::AllreduceOptions o(ctx);
                o.setOutput(buf.data(), n);
                o.setReduceFunction(static_cast<void (*)(void *, const void *, const void *,
                                                         size_t)>(&gloo::sum<float>));
                o.setTimeout(std::chrono::milliseconds(600000));
                gloo::allreduce(o);
            } else {
                ring->run();
            }
            if (it >= warm)
                t.push_back(ddpc_now() - t0);
            if (both && it % 2 == 1)
                ring_call(it);
        }
        float want = (float)(world * (world + 1) / 2);
        long wrong = 0;
        for (size_t i = 0; i < n; i++)
            wrong += buf[i] != want;
        if (wrong) {
            fprintf(stderr, "%zu bytes: %ld wrong elements\n", bytes, wrong);
            return 1;
        }
        double m = median(t);
        double alg = (double)bytes / m / 1e9;
        if (rank == 0 && both) {
            double mr = median(t_ring);
            printf("%10zu  %10.1f  %10.1f  %8.3f  %8.3f  %6.2f\n", bytes, mr * 1e6, m * 1e6,
                   (double)bytes / mr / 1e9, alg, mr / m);
        } else if (rank == 0)
            printf("%10zu  %10.1f  %8.3f  %8.3f\n", bytes, m * 1e6, alg,
                   alg * 2.0 * (world - 1) / world);
    }
    fflush(stdout);
    if (mode == "ddpc" || both)
        c.destroy(&c);
    store_client_close(&sc);
    store_host_stop(&sh);
    return 0;
}
