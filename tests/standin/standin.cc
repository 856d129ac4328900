/* standin.cc - the CUDA runtime, cuBLAS and NCCL host APIs ddpc calls, on
 * the CPU, for the suites comm_nccl and cuda_standin: runtime/comm_nccl.cu's
 * and runtime/ops_cuda.cu's real code, compiled by the host C++ compiler
 * against the headers beside this file, runs on this.
 *
 * What is modelled, and why each rule is what it is:
 *
 * CUDA (the runtime API's documented semantics):
 *   - A stream is an ordered queue run by a thread of its own, so work runs
 *     asynchronously to the host and to other streams: a missing event wait
 *     between two streams is a real race here, and the tests make it lose.
 *   - An event is a marker in a stream; cudaEventRecord captures "the work
 *     issued so far", cudaStreamWaitEvent waits for the record that was the
 *     latest at the time of the call, an event never recorded counts as
 *     done (cudaEventQuery: cudaSuccess).
 *   - Device memory is host memory this file allocated (256-byte aligned,
 *     filled with 0xff, so an unwritten float reads NaN); pinned memory is
 *     host memory it allocated with cudaMallocHost. A copy whose pointers do
 *     not match its kind is cudaErrorInvalidValue. cudaMemcpyAsync from
 *     pageable memory takes a copy of the source before it returns (the
 *     driver's staging), into pageable memory it waits for the stream first
 *     and copies before it returns (CUDA's "API synchronization behavior");
 *     with pinned memory on the host side it is fully asynchronous: the
 *     stream reads or writes the host buffer when it gets there.
 *   - cudaFree and cudaFreeHost wait for every stream first (they
 *     synchronise the device), without a bound, as on a GPU.
 *   - CUDA in a process forked after it was used answers
 *     cudaErrorInitializationError (a context does not survive fork).
   - A kernel (standin_kernels.h: ops_cuda.cu's launches, rewritten) runs
 *     on its stream on tests/cuda_emu.h; a bad shape fails the launch
 *     (cudaGetLastError), a kernel that fails while it runs makes every
 *     later call answer cudaErrorLaunchFailure (a faulted context). Streams
 *     flush denormals, as ops_cuda.cu's kernels are built (-ftz=true).
 *   - cuBLAS (cublas_v2.h): the gemms and the gemv ops_cuda.cu calls, run on
 *     the handle's stream, column-major, fp32 sums in k order, 16-bit
 *     inputs widened first; operands must be device memory.
 * Not modelled: the legacy default stream's implicit synchronisation (ddpc
 * never uses stream 0; NULL is an ordinary stream here), timing events,
 * graphs, TF32 rounding, cuBLAS's own summation order.
 *
 * NCCL (NCCL 2.28.9's source; file:line at tag v2.28.9-1):
 *   - A communicator's ranks are processes (or threads) that map one POSIX
 *     shared-memory object, named by the unique id; it is unlinked once all
 *     ranks have mapped it (and on abort), so nothing outlives the ranks.
 *   - config.blocking = 0: init answers at once with the communicator set
 *     and its state ncclInProgress (init.cc:2001, 2163-2172), then meets
 *     its peers on another thread; ncclCommGetAsyncError reads the state
 *     and, once it is ncclSuccess, joins that thread (init.cc:2705-2739).
 *   - ncclCommSplit on a non-blocking parent sets *newcomm = NULL
 *     (init.cc:2571-2572), queues the child's init as a job of the PARENT,
 *     whose state becomes ncclInProgress (group.cc:707-738), and returns
 *     ncclSuccess: the group's ncclInProgress is swallowed (init.cc:
 *     2666-2680, NCCLCHECK passes ncclInProgress). The job stores the
 *     child pointer with a release store when it ends, on success and on
 *     failure alike (init.cc:1610-1615). While it runs, an abort of the
 *     parent reaches the child (childAbortFlag, init.cc:2580-2595, 2450);
 *     after it the link is cut (init.cc:1590).
 *   - Every call on a communicator first checks it is ready
 *     (ncclCommEnsureReady, init.cc:373-389): ncclInProgress is refused
 *     with ncclInvalidArgument ("Attempt to use communicator before the
 *     previous operation returned ncclSuccess"), any other error is
 *     returned as it is. A collective refused so also sets the state to
 *     that error (enqueue.cc:2657-2661). A NULL communicator is
 *     ncclInvalidArgument (argcheck.cc CommCheck).
 *   - A collective outside a group is an implicit group: on a non-blocking
 *     communicator its launch runs on another thread and the call answers
 *     ncclInProgress until the work is on the stream (enqueue.cc:
 *     2650-2655, group.cc:707-738); an event recorded before that does not
 *     cover it. standin_config's coll_defer_every says how many launches
 *     are deferred so.
 *   - Collectives execute on their stream in the order they were issued on
 *     the communicator, all ranks in the same order (NCCL's contract); a
 *     rank whose collective does not match its peers' (kind, count, root,
 *     type, op) sets the state to ncclInvalidUsage instead of hanging. A
 *     peer process that is gone sets ncclRemoteError (NCCL's proxy reports
 *     a closed connection so); otherwise a missing peer waits forever, as
 *     a kernel does, until this rank aborts.
 *   - Sums add the ranks' values in rank order; ncclAvg multiplies each
 *     value by 1/nranks first (float PreMulSum, enqueue.cc), then sums.
 *   - ncclCommFinalize is non-blocking (flushes, then ncclSuccess);
 *     ncclCommDestroy and ncclCommAbort block (a destroy-flagged job is a
 *     blocking group, group.cc:52-53). Destroy refuses a communicator that
 *     is not ready, as EnsureReady does (init.cc:2381); abort sets the abort
 *     flags, which end this rank's collectives and its init or split job,
 *     joins that job, and frees the communicator (init.cc:2502-2535).
 * Data types: float and double; operations: sum and avg.
 */
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sched.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cuda_runtime.h"
#include "cuda_bf16.h"
#include "cuda_emu.h"
#include "cublas_v2.h"
#include "nccl.h"
#include "standin.h"
#include "standin_kernels.h"

namespace {

/* ===== settings, counters, time ===== */

standin_config g_cfg = {1, 0.05, 0.1, 0.002, 1};

std::atomic<long> st_host_funcs{0}, st_collectives{0}, st_deferred{0}, st_used_unsettled{0},
    st_live_comms{0};

double now_s()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Polling back-off for the waits between ranks: spin a little, then sleep
 * 50 us, so waiting ranks leave the CPUs to the ones they wait for. */
void pause_poll(unsigned spins)
{
    if (spins < 64) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 50000};
    nanosleep(&ts, nullptr);
}

/* Sleeps s seconds, or less if stop() becomes true. Returns stop()'s last value. */
bool sleep_unless(double s, const std::function<bool()> &stop)
{
    double end = now_s() + s;
    while (now_s() < end) {
        if (stop())
            return true;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, nullptr);
    }
    return stop();
}

/* ===== streams and events ===== */

/* One mutex and condition variable for every queue and every marker: the
 * stand-in is for tests, where simple beats fast. Every global a stream's
 * or a job's thread may touch is made once and never destroyed: those
 * threads are detached (or belong to communicators never freed) and may
 * still wait when the process exits, and destroying a condition variable
 * with waiters can hang exit(). */
std::mutex &g_mu = *new std::mutex;
std::condition_variable &g_cv = *new std::condition_variable;

struct Marker {
    bool done = false;
};
using MarkerP = std::shared_ptr<Marker>;

struct Stream {
    std::deque<std::function<void()>> q;   // under g_mu
    bool running = false;                  // an item is executing
    bool destroyed = false;
};
using StreamP = std::shared_ptr<Stream>;

}  // namespace

struct standin_stream {
    StreamP s;
};
struct standin_event {
    MarkerP cur;       // the latest record; empty: never recorded
    unsigned flags;
};

namespace {

std::set<standin_stream *> &g_streams = *new std::set<standin_stream *>;  // live, under g_mu
std::set<standin_event *> &g_events = *new std::set<standin_event *>;     // under g_mu
standin_stream *g_null_stream;           // stream 0, made on first use
pid_t g_owner;                           // the process that first used CUDA
thread_local int t_device;
thread_local cudaError_t t_last_error = cudaSuccess;
/* A kernel that failed while it ran (cuda_emu's verdict): every later call
 * of the process answers this, as a faulted CUDA context does. */
std::atomic<int> g_sticky{cudaSuccess};

cudaError_t ret(cudaError_t e)
{
    if (e != cudaSuccess)
        t_last_error = e;
    return e;
}

cudaError_t sticky()
{
    return (cudaError_t)g_sticky.load();
}

/* CUDA does not survive fork: the first process to use it owns it. */
bool forked_after_use()
{
    pid_t me = getpid();
    std::lock_guard<std::mutex> lk(g_mu);
    if (!g_owner)
        g_owner = me;
    return g_owner != me;
}

void stream_main(StreamP s)
{
#if defined(__SSE__)
    /* denormals flushed, as ops_cuda.cu's kernels are built (-ftz=true) */
    _mm_setcsr(_mm_getcsr() | 0x8040);
#endif
    std::unique_lock<std::mutex> lk(g_mu);
    for (;;) {
        g_cv.wait(lk, [&] { return !s->q.empty() || s->destroyed; });
        if (s->q.empty())
            return;                            // destroyed and drained
        std::function<void()> item = std::move(s->q.front());
        s->q.pop_front();
        s->running = true;
        lk.unlock();
        item();
        lk.lock();
        s->running = false;
        g_cv.notify_all();
    }
}

standin_stream *make_stream()
{
    auto *h = new standin_stream{std::make_shared<Stream>()};
    std::thread(stream_main, h->s).detach();   // it ends when the stream is destroyed and drained
    std::lock_guard<std::mutex> lk(g_mu);
    g_streams.insert(h);
    return h;
}

/* The stream behind a handle (NULL: stream 0), or null for a handle that
 * is not a live stream. */
StreamP stream_of(cudaStream_t h)
{
    if (!h) {
        std::unique_lock<std::mutex> lk(g_mu);
        if (!g_null_stream) {
            lk.unlock();
            standin_stream *n = make_stream();
            lk.lock();
            if (!g_null_stream)
                g_null_stream = n;
        }
        return g_null_stream->s;
    }
    std::lock_guard<std::mutex> lk(g_mu);
    return g_streams.count(h) ? h->s : nullptr;
}

void enqueue(const StreamP &s, std::function<void()> item)
{
    std::lock_guard<std::mutex> lk(g_mu);
    s->q.push_back(std::move(item));
    g_cv.notify_all();
}

MarkerP mark(const StreamP &s)
{
    auto m = std::make_shared<Marker>();
    enqueue(s, [m] {
        std::lock_guard<std::mutex> lk(g_mu);
        m->done = true;
        g_cv.notify_all();
    });
    return m;
}

void wait_marker(const MarkerP &m)
{
    std::unique_lock<std::mutex> lk(g_mu);
    g_cv.wait(lk, [&] { return m->done; });
}

void sync_stream(const StreamP &s)
{
    wait_marker(mark(s));
}

void sync_all_streams()
{
    std::vector<StreamP> all;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        for (standin_stream *h : g_streams)
            all.push_back(h->s);
    }
    for (const StreamP &s : all)
        sync_stream(s);
}

/* ===== memory ===== */

enum { MEM_DEVICE = 1, MEM_PINNED = 2 };
struct Alloc {
    size_t bytes;
    int kind;
};
std::mutex &g_mem_mu = *new std::mutex;
std::map<uintptr_t, Alloc> &g_allocs = *new std::map<uintptr_t, Alloc>;

/* The kind of the allocation [p, p + n) lies inside, 0 if none; -1 if it
 * starts inside one and runs past its end. */
int mem_kind(const void *p, size_t n)
{
    uintptr_t a = (uintptr_t)p;
    std::lock_guard<std::mutex> lk(g_mem_mu);
    auto it = g_allocs.upper_bound(a);
    if (it == g_allocs.begin())
        return 0;
    --it;
    if (a >= it->first + it->second.bytes)
        return 0;
    return a + n <= it->first + it->second.bytes ? it->second.kind : -1;
}

cudaError_t mem_alloc(void **p, size_t bytes, int kind)
{
    if (!p)
        return cudaErrorInvalidValue;
    *p = nullptr;
    if (bytes == 0)
        return cudaSuccess;
    size_t rounded = (bytes + 255) / 256 * 256;
    void *m = aligned_alloc(256, rounded);
    if (!m)
        return cudaErrorMemoryAllocation;
    memset(m, 0xff, rounded);     /* never zero by accident: unwritten floats read NaN */
    std::lock_guard<std::mutex> lk(g_mem_mu);
    g_allocs[(uintptr_t)m] = Alloc{bytes, kind};
    *p = m;
    return cudaSuccess;
}

cudaError_t mem_free(void *p, int kind)
{
    if (!p)
        return cudaSuccess;
    {
        std::lock_guard<std::mutex> lk(g_mem_mu);
        auto it = g_allocs.find((uintptr_t)p);
        if (it == g_allocs.end() || it->second.kind != kind)
            return cudaErrorInvalidValue;
    }
    sync_all_streams();           /* cudaFree synchronises the device */
    std::lock_guard<std::mutex> lk(g_mem_mu);
    g_allocs.erase((uintptr_t)p);
    free(p);
    return cudaSuccess;
}

}  // namespace

/* ===== the CUDA runtime API ===== */

extern "C" {

const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaErrorUnknown";
    }
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    default: return "unknown error (CPU stand-in)";
    }
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = t_last_error;
    t_last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    return t_last_error;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count)
        return ret(cudaErrorInvalidValue);
    if (forked_after_use())
        return ret(cudaErrorInitializationError);
    *count = g_cfg.devices;
    return g_cfg.devices > 0 ? cudaSuccess : ret(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device)
{
    if (forked_after_use())
        return ret(cudaErrorInitializationError);
    if (device < 0 || device >= g_cfg.devices)
        return ret(cudaErrorInvalidDevice);
    t_device = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    if (!device)
        return ret(cudaErrorInvalidValue);
    *device = t_device;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    if (forked_after_use())
        return ret(cudaErrorInitializationError);
    sync_all_streams();
    return ret(sticky());
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
    if (!v)
        return ret(cudaErrorInvalidValue);
    *v = 13000;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v)
{
    if (!v)
        return ret(cudaErrorInvalidValue);
    *v = 13000;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest)
{
    if (least)
        *least = 0;
    if (greatest)
        *greatest = -5;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int priority)
{
    if (!s || flags > cudaStreamNonBlocking)
        return ret(cudaErrorInvalidValue);
    if (forked_after_use())
        return ret(cudaErrorInitializationError);
    *s = make_stream();
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    return cudaStreamCreateWithPriority(s, flags, 0);
}

cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    return cudaStreamCreateWithPriority(s, cudaStreamDefault, 0);
}

/* Returns at once; the stream's thread runs what is queued, then ends
 * (CUDA: resources are released once the device has completed the work). */
cudaError_t cudaStreamDestroy(cudaStream_t h)
{
    std::lock_guard<std::mutex> lk(g_mu);
    if (!h || !g_streams.count(h))
        return ret(cudaErrorInvalidResourceHandle);
    g_streams.erase(h);
    h->s->destroyed = true;
    g_cv.notify_all();
    delete h;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t h)
{
    StreamP s = stream_of(h);
    if (!s)
        return ret(cudaErrorInvalidResourceHandle);
    sync_stream(s);
    return ret(sticky());
}

cudaError_t cudaStreamQuery(cudaStream_t h)
{
    StreamP s = stream_of(h);
    if (!s)
        return ret(cudaErrorInvalidResourceHandle);
    std::lock_guard<std::mutex> lk(g_mu);
    return s->q.empty() && !s->running ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t h, cudaHostFn_t fn, void *data)
{
    StreamP s = stream_of(h);
    if (!s)
        return ret(cudaErrorInvalidResourceHandle);
    if (!fn)
        return ret(cudaErrorInvalidValue);
    enqueue(s, [fn, data] {
        fn(data);
        st_host_funcs++;
    });
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags)
{
    if (!ev)
        return ret(cudaErrorInvalidValue);
    if (forked_after_use())
        return ret(cudaErrorInitializationError);
    auto *e = new standin_event{nullptr, flags};
    std::lock_guard<std::mutex> lk(g_mu);
    g_events.insert(e);
    *ev = e;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *ev)
{
    return cudaEventCreateWithFlags(ev, cudaEventDefault);
}

/* Returns at once; a record still pending completes without the event. */
cudaError_t cudaEventDestroy(cudaEvent_t ev)
{
    std::lock_guard<std::mutex> lk(g_mu);
    if (!ev || !g_events.count(ev))
        return ret(cudaErrorInvalidResourceHandle);
    g_events.erase(ev);
    delete ev;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t h)
{
    StreamP s = stream_of(h);
    {
        std::lock_guard<std::mutex> lk(g_mu);
        if (!s || !ev || !g_events.count(ev))
            return ret(cudaErrorInvalidResourceHandle);
    }
    MarkerP m = mark(s);
    std::lock_guard<std::mutex> lk(g_mu);
    if (!g_events.count(ev))
        return ret(cudaErrorInvalidResourceHandle);   /* destroyed meanwhile */
    ev->cur = m;
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t ev)
{
    if (sticky())
        return ret(sticky());
    std::lock_guard<std::mutex> lk(g_mu);
    if (!ev || !g_events.count(ev))
        return ret(cudaErrorInvalidResourceHandle);
    return !ev->cur || ev->cur->done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t ev)
{
    MarkerP m;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        if (!ev || !g_events.count(ev))
            return ret(cudaErrorInvalidResourceHandle);
        m = ev->cur;
    }
    if (m)
        wait_marker(m);
    return ret(sticky());
}

/* The stream waits for the event's latest record at the time of this call
 * (a later record does not move it); never recorded: no wait. */
cudaError_t cudaStreamWaitEvent(cudaStream_t h, cudaEvent_t ev, unsigned flags)
{
    StreamP s = stream_of(h);
    if (!s)
        return ret(cudaErrorInvalidResourceHandle);
    MarkerP m;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        if (!ev || !g_events.count(ev))
            return ret(cudaErrorInvalidResourceHandle);
        m = ev->cur;
    }
    if (m)
        enqueue(s, [m] { wait_marker(m); });
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    if (forked_after_use())
        return ret(cudaErrorInitializationError);
    if (sticky())
        return ret(sticky());
    return ret(mem_alloc(p, bytes, MEM_DEVICE));
}

cudaError_t cudaFree(void *p)
{
    return ret(mem_free(p, MEM_DEVICE));
}

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    if (forked_after_use())
        return ret(cudaErrorInitializationError);
    return ret(mem_alloc(p, bytes, MEM_PINNED));
}

cudaError_t cudaFreeHost(void *p)
{
    return ret(mem_free(p, MEM_PINNED));
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                            cudaStream_t h)
{
    if (sticky())
        return ret(sticky());
    StreamP s = stream_of(h);
    if (!s)
        return ret(cudaErrorInvalidResourceHandle);
    if (n == 0)
        return cudaSuccess;
    if (!dst || !src)
        return ret(cudaErrorInvalidValue);
    int dk = mem_kind(dst, n), sk = mem_kind(src, n);
    if (dk < 0 || sk < 0)
        return ret(cudaErrorInvalidValue);    /* runs past the end of its allocation */
    bool dd = dk == MEM_DEVICE, sd = sk == MEM_DEVICE;
    if (kind == cudaMemcpyDefault)
        kind = sd ? (dd ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                  : (dd ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
    bool ok = (kind == cudaMemcpyHostToDevice && dd && !sd) ||
              (kind == cudaMemcpyDeviceToHost && sd && !dd) ||
              (kind == cudaMemcpyDeviceToDevice && sd && dd) ||
              (kind == cudaMemcpyHostToHost && !sd && !dd);
    if (!ok)
        return ret(cudaErrorInvalidValue);
    if (kind == cudaMemcpyHostToDevice && sk != MEM_PINNED) {
        /* pageable source: staged now, so the caller may reuse it at once */
        auto staged = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + n);
        enqueue(s, [dst, staged] { memcpy(dst, staged->data(), staged->size()); });
    } else if (kind == cudaMemcpyDeviceToHost && dk != MEM_PINNED) {
        /* pageable destination: synchronous with the host */
        sync_stream(s);
        memcpy(dst, src, n);
    } else {
        enqueue(s, [dst, src, n] { memcpy(dst, src, n); });
    }
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    sync_all_streams();
    StreamP s = stream_of(nullptr);
    cudaError_t e = cudaMemcpyAsync(dst, src, n, kind, nullptr);
    if (e == cudaSuccess)
        sync_stream(s);
    return e;
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t h)
{
    StreamP s = stream_of(h);
    if (!s)
        return ret(cudaErrorInvalidResourceHandle);
    if (n == 0)
        return cudaSuccess;
    if (mem_kind(p, n) != MEM_DEVICE)
        return ret(cudaErrorInvalidValue);
    enqueue(s, [p, value, n] { memset(p, value, n); });
    return cudaSuccess;
}

}  // extern "C"

/* ===== kernels (standin_kernels.h) ===== */

namespace {
std::mutex &g_emu_mu = *new std::mutex;   /* cuda_emu runs one launch at a time */
std::atomic<long> st_kernels{0};
}  // namespace

void standin_launch_kernel(dim3 grid, dim3 block, size_t shmem, cudaStream_t h,
                           void (*body)(void *), std::shared_ptr<void> arg)
{
    StreamP s = stream_of(h);
    if (!s) {
        ret(cudaErrorInvalidResourceHandle);
        return;
    }
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (!threads || threads > 1024 || !grid.x || !grid.y || !grid.z || grid.y > 65535 ||
        grid.z > 65535 || shmem > 48 * 1024) {
        ret(cudaErrorInvalidConfiguration);
        return;
    }
    emu_dim3 g = {grid.x, grid.y, grid.z}, b = {block.x, block.y, block.z};
    enqueue(s, [g, b, body, arg] {
        if (sticky())
            return;                       /* the context is gone: nothing runs */
        char why[512];
        std::lock_guard<std::mutex> lk(g_emu_mu);
        if (emu_launch(g, b, body, arg.get(), why, sizeof why) != 0) {
            fprintf(stderr, "standin: a kernel failed: %s\n", why);
            g_sticky = cudaErrorLaunchFailure;
        }
        st_kernels++;
    });
}

/* ===== cuBLAS (cublas_v2.h) ===== */

struct standin_cublas {
    cudaStream_t stream;
    cublasMath_t math;
};

namespace {

std::set<standin_cublas *> &g_blas = *new std::set<standin_cublas *>;   /* under g_mu */

size_t dtype_size(cudaDataType_t t)
{
    return t == CUDA_R_32F ? 4 : t == CUDA_R_16F || t == CUDA_R_16BF ? 2 : 0;
}

float load(const void *p, cudaDataType_t t, size_t i)
{
    if (t == CUDA_R_32F)
        return ((const float *)p)[i];
    uint16_t bits = ((const uint16_t *)p)[i];
    if (t == CUDA_R_16BF) {
        __nv_bfloat16 b;
        b.x = bits;
        return __bfloat162float(b);
    }
    _Float16 hv;
    memcpy(&hv, &bits, sizeof hv);
    return (float)hv;
}

struct Gemm {
    cublasOperation_t ta, tb;
    int m, n, k;
    float alpha, beta;
    const void *A;
    cudaDataType_t at;
    int lda;
    long long sa;
    const void *B;
    cudaDataType_t bt;
    int ldb;
    long long sb;
    float *C;
    int ldc;
    long long sc;
    int batch;
};

/* C = alpha op(A) op(B) + beta C, column-major; beta 0: C is not read */
void run_gemm(const Gemm &g)
{
    for (int b = 0; b < g.batch; b++)
        for (int j = 0; j < g.n; j++)
            for (int i = 0; i < g.m; i++) {
                float acc = 0;
                for (int l = 0; l < g.k; l++) {
                    size_t ai = g.ta == CUBLAS_OP_N ? (size_t)i + (size_t)l * g.lda
                                                    : (size_t)l + (size_t)i * g.lda;
                    size_t bi = g.tb == CUBLAS_OP_N ? (size_t)l + (size_t)j * g.ldb
                                                    : (size_t)j + (size_t)l * g.ldb;
                    acc += load(g.A, g.at, (size_t)b * g.sa + ai) *
                           load(g.B, g.bt, (size_t)b * g.sb + bi);
                }
                float *c = g.C + (size_t)b * g.sc + (size_t)i + (size_t)j * g.ldc;
                *c = g.beta == 0 ? g.alpha * acc : g.alpha * acc + g.beta * *c;
            }
}

/* bytes a column-major rows x cols matrix with leading dimension ld spans,
 * for `batch` of them `stride` elements apart */
size_t span(int rows, int cols, int ld, long long stride, int batch, size_t es)
{
    if (rows <= 0 || cols <= 0 || batch <= 0)
        return 0;
    return ((size_t)(batch - 1) * (size_t)stride + (size_t)(cols - 1) * ld + rows) * es;
}

cublasStatus_t gemm_enqueue(cublasHandle_t h, const Gemm &g)
{
    {
        std::lock_guard<std::mutex> lk(g_mu);
        if (!h || !g_blas.count(h))
            return CUBLAS_STATUS_NOT_INITIALIZED;
    }
    int ar = g.ta == CUBLAS_OP_N ? g.m : g.k, ac = g.ta == CUBLAS_OP_N ? g.k : g.m;
    int br = g.tb == CUBLAS_OP_N ? g.k : g.n, bc = g.tb == CUBLAS_OP_N ? g.n : g.k;
    if (g.m < 0 || g.n < 0 || g.k < 0 || g.batch < 0 || g.lda < (ar > 1 ? ar : 1) ||
        g.ldb < (br > 1 ? br : 1) || g.ldc < (g.m > 1 ? g.m : 1) || !dtype_size(g.at) ||
        !dtype_size(g.bt))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!g.m || !g.n || !g.batch)
        return CUBLAS_STATUS_SUCCESS;
    size_t sa = span(ar, ac, g.lda, g.sa, g.batch, dtype_size(g.at));
    size_t sb = span(br, bc, g.ldb, g.sb, g.batch, dtype_size(g.bt));
    size_t sc = span(g.m, g.n, g.ldc, g.sc, g.batch, 4);
    if ((sa && mem_kind(g.A, sa) != MEM_DEVICE) || (sb && mem_kind(g.B, sb) != MEM_DEVICE) ||
        mem_kind(g.C, sc) != MEM_DEVICE) {
        fprintf(stderr, "standin: a gemm's operand is not device memory (or runs past its end)\n");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    StreamP s = stream_of(h->stream);
    if (!s)
        return CUBLAS_STATUS_EXECUTION_FAILED;
    enqueue(s, [g] { run_gemm(g); });
    return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

const char *cublasGetStatusName(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    default: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
}

const char *cublasGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    default: return "an error (CPU stand-in)";
    }
}

cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    if (!h)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (forked_after_use() || sticky())
        return CUBLAS_STATUS_NOT_INITIALIZED;
    auto *b = new standin_cublas{nullptr, CUBLAS_DEFAULT_MATH};
    std::lock_guard<std::mutex> lk(g_mu);
    g_blas.insert(b);
    *h = b;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h)
{
    std::lock_guard<std::mutex> lk(g_mu);
    if (!h || !g_blas.erase(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
    std::lock_guard<std::mutex> lk(g_mu);
    if (!h || !g_blas.count(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode)
{
    std::lock_guard<std::mutex> lk(g_mu);
    if (!h || !g_blas.count(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float *alpha, const float *A, int lda,
                           const float *B, int ldb, const float *beta, float *C, int ldc)
{
    if (!alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    return gemm_enqueue(h, Gemm{ta, tb, m, n, k, *alpha, *beta, A, CUDA_R_32F, lda, 0, B,
                                CUDA_R_32F, ldb, 0, C, ldc, 0, 1});
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n, int k,
                                         const float *alpha, const float *A, int lda,
                                         long long sa, const float *B, int ldb, long long sb,
                                         const float *beta, float *C, int ldc, long long sc,
                                         int batch)
{
    if (!alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    return gemm_enqueue(h, Gemm{ta, tb, m, n, k, *alpha, *beta, A, CUDA_R_32F, lda, sa, B,
                                CUDA_R_32F, ldb, sb, C, ldc, sc, batch});
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType_t at,
                            int lda, const void *B, cudaDataType_t bt, int ldb, const void *beta,
                            void *C, cudaDataType_t ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo)
{
    if (!alpha || !beta || ct != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return gemm_enqueue(h, Gemm{ta, tb, m, n, k, *(const float *)alpha, *(const float *)beta, A,
                                at, lda, 0, B, bt, ldb, 0, (float *)C, ldc, 0, 1});
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType_t at,
                                          int lda, long long sa, const void *B,
                                          cudaDataType_t bt, int ldb, long long sb,
                                          const void *beta, void *C, cudaDataType_t ct, int ldc,
                                          long long sc, int batch, cublasComputeType_t compute,
                                          cublasGemmAlgo_t algo)
{
    if (!alpha || !beta || ct != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return gemm_enqueue(h, Gemm{ta, tb, m, n, k, *(const float *)alpha, *(const float *)beta, A,
                                at, lda, sa, B, bt, ldb, sb, (float *)C, ldc, sc, batch});
}

/* y = alpha op(A) x + beta y: a gemm of op(A) and the column x (incx, incy 1) */
cublasStatus_t cublasSgemv(cublasHandle_t h, cublasOperation_t t, int m, int n,
                           const float *alpha, const float *A, int lda, const float *x,
                           int incx, const float *beta, float *y, int incy)
{
    if (!alpha || !beta || incx != 1 || incy != 1)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    int rows = t == CUBLAS_OP_N ? m : n, inner = t == CUBLAS_OP_N ? n : m;
    return gemm_enqueue(h, Gemm{t, CUBLAS_OP_N, rows, 1, inner, *alpha, *beta, A, CUDA_R_32F,
                                lda, 0, x, CUDA_R_32F, inner > 1 ? inner : 1, 0, y,
                                rows > 1 ? rows : 1, 0, 1});
}

void standin_config_get(struct standin_config *c)
{
    *c = g_cfg;
}

void standin_config_set(const struct standin_config *c)
{
    g_cfg = *c;
}

void standin_stats(struct standin_stats *s)
{
    s->host_funcs = st_host_funcs;
    s->collectives = st_collectives;
    s->deferred = st_deferred;
    s->used_unsettled = st_used_unsettled;
    s->live_comms = st_live_comms;
    s->kernels = st_kernels;
}

}  // extern "C"

/* ===== NCCL ===== */

namespace {

constexpr int MAX_RANKS = 64;
constexpr size_t CHUNK = 1u << 20;        /* bytes of each rank's slot: one phase */
constexpr char ID_MAGIC[] = "ddpc-standin-id";

/* The shared object of one communicator: zero when made (ftruncate), so
 * every counter starts at 0 with nobody initialising it. Accessed with
 * __atomic builtins only (the ranks are processes). */
struct Shm {
    int32_t  attached;                    /* ranks that mapped it */
    int32_t  pid[MAX_RANKS];
    uint64_t posted[MAX_RANKS];           /* phase whose data the rank's slot holds */
    uint64_t consumed[MAX_RANKS];         /* phase the rank has read every slot of */
    uint64_t sig[MAX_RANKS];              /* the collective of the rank's current phase */
    int32_t  split_color[MAX_RANKS], split_key[MAX_RANKS];
    uint64_t split_posted[MAX_RANKS];     /* split number whose color/key are posted */
};
constexpr size_t SHM_HEAD = (sizeof(Shm) + 4095) / 4096 * 4096;

struct CommState {
    std::string shm_name;                 /* also the base of its children's names */
    int rank = 0, nranks = 0, device = 0;
    bool blocking = true;
    Shm *shm = nullptr;
    size_t shm_bytes = 0;
    int abort = 0;                        /* __atomic: set by ncclCommAbort (or the parent's) */
    int *child_abort = nullptr;           /* __atomic: the child of a split in progress */
    int async = ncclSuccess;              /* __atomic ncclResult_t */
    bool init_failed = false;
    bool finalize_called = false;
    uint64_t splits = 0;                  /* ncclCommSplit calls (the host thread's) */
    std::mutex mu;                        /* guards issued/next/executed */
    std::condition_variable cv;
    uint64_t issued = 0;                  /* collectives issued (host) */
    uint64_t next = 0;                    /* the one that may execute now */
    uint64_t executed = 0;                /* collectives done on their stream (or skipped) */
    uint64_t phase = 0;                   /* the streams' only: phases done */
    ~CommState()
    {
        if (shm)
            munmap(shm, shm_bytes);
    }
};
using CommP = std::shared_ptr<CommState>;

}  // namespace

struct standin_comm {
    CommP st;
    std::mutex job_mu;
    std::thread job;                      /* the init, split, launch or finalize in progress */
};

namespace {

std::mutex &g_nccl_mu = *new std::mutex;
std::set<standin_comm *> &g_comms = *new std::set<standin_comm *>;   /* live handles */
std::string &g_last_error = *new std::string;   /* ncclGetLastError: the last WARN, process-wide */
thread_local int t_group_depth;
struct Task;
thread_local std::vector<Task> *t_group_tasks;

void warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void warn(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    std::lock_guard<std::mutex> lk(g_nccl_mu);
    g_last_error = buf;
}

bool live(ncclComm_t c)
{
    std::lock_guard<std::mutex> lk(g_nccl_mu);
    return c && g_comms.count(c);
}

/* argcheck.cc CommCheck: a NULL (or freed) communicator */
ncclResult_t comm_check(ncclComm_t c, const char *op)
{
    if (live(c))
        return ncclSuccess;
    warn("%s: comm is %s", op, c ? "not a live communicator" : "NULL");
    return ncclInvalidArgument;
}

ncclResult_t get_async(const CommP &st)
{
    return (ncclResult_t)__atomic_load_n(&st->async, __ATOMIC_ACQUIRE);
}

void set_async(const CommP &st, ncclResult_t r)
{
    __atomic_store_n(&st->async, (int)r, __ATOMIC_RELEASE);
}

bool aborted(const CommState *st)
{
    return __atomic_load_n(&st->abort, __ATOMIC_ACQUIRE) != 0;
}

void join_job(standin_comm *h)
{
    std::lock_guard<std::mutex> lk(h->job_mu);
    if (h->job.joinable())
        h->job.join();
}

void start_job(standin_comm *h, std::function<void()> fn)
{
    join_job(h);                          /* the last one ended: the state said ncclSuccess */
    std::lock_guard<std::mutex> lk(h->job_mu);
    h->job = std::thread(std::move(fn));
}

/* init.cc ncclCommEnsureReady */
ncclResult_t ensure_ready(standin_comm *h)
{
    if (aborted(h->st.get())) {
        join_job(h);
        return ncclSuccess;
    }
    ncclResult_t r = get_async(h->st);
    if (r == ncclInProgress) {
        warn("Attempt to use communicator before the previous operation returned ncclSuccess");
        st_used_unsettled++;
        return ncclInvalidArgument;
    }
    return r;
}

bool peer_gone(const CommState *st)
{
    for (int q = 0; q < st->nranks; q++) {
        pid_t p = __atomic_load_n(&st->shm->pid[q], __ATOMIC_ACQUIRE);
        if (p <= 0 || p == getpid())
            continue;
        if (kill(p, 0) != 0 && errno == ESRCH)
            return true;
        char path[64], buf[256];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)p);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t got = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[got] = 0;
        const char *rp = strrchr(buf, ')');
        if (rp && rp[1] == ' ' && rp[2] == 'Z')
            return true;                  /* exited, not yet reaped */
    }
    return false;
}

enum { WAIT_OK, WAIT_ABORTED, WAIT_PEER_GONE };

/* Until every rank's arr[q] >= v, this rank is aborted, or a peer is gone. */
int wait_all(const CommState *st, uint64_t *arr, uint64_t v, const int *also_abort = nullptr)
{
    for (unsigned spins = 0;; spins++) {
        int q = 0;
        while (q < st->nranks && __atomic_load_n(&arr[q], __ATOMIC_ACQUIRE) >= v)
            q++;
        if (q == st->nranks)
            return WAIT_OK;
        if (aborted(st) || (also_abort && __atomic_load_n(also_abort, __ATOMIC_ACQUIRE)))
            return WAIT_ABORTED;
        if (spins % 512 == 511 && peer_gone(st))
            return WAIT_PEER_GONE;
        pause_poll(spins);
    }
}

/* Maps the communicator's shared object and waits for every rank to have
 * mapped it; then unlinks it (everyone holds a mapping). */
ncclResult_t attach(CommState *st, const int *also_abort)
{
    int fd = shm_open(st->shm_name.c_str(), O_CREAT | O_RDWR, 0600);
    if (fd < 0) {
        warn("stand-in: shm_open %s: %s", st->shm_name.c_str(), strerror(errno));
        return ncclSystemError;
    }
    size_t bytes = SHM_HEAD + (size_t)st->nranks * CHUNK;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || ((size_t)sb.st_size < bytes && ftruncate(fd, (off_t)bytes) != 0)) {
        warn("stand-in: sizing %s: %s", st->shm_name.c_str(), strerror(errno));
        close(fd);
        return ncclSystemError;
    }
    void *m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        warn("stand-in: mmap %s: %s", st->shm_name.c_str(), strerror(errno));
        return ncclSystemError;
    }
    st->shm = (Shm *)m;
    st->shm_bytes = bytes;
    __atomic_store_n(&st->shm->pid[st->rank], (int32_t)getpid(), __ATOMIC_RELEASE);
    __atomic_add_fetch(&st->shm->attached, 1, __ATOMIC_ACQ_REL);
    for (unsigned spins = 0; __atomic_load_n(&st->shm->attached, __ATOMIC_ACQUIRE) < st->nranks;
         spins++) {
        if (aborted(st) || (also_abort && __atomic_load_n(also_abort, __ATOMIC_ACQUIRE)))
            return ncclInternalError;     /* the caller aborted it: the result is not read */
        pause_poll(spins);
    }
    (void)shm_unlink(st->shm_name.c_str());
    return ncclSuccess;
}

standin_comm *new_handle(CommP st)
{
    auto *h = new standin_comm;
    h->st = std::move(st);
    std::lock_guard<std::mutex> lk(g_nccl_mu);
    g_comms.insert(h);
    st_live_comms++;
    return h;
}

void drop_handle(standin_comm *h)
{
    {
        std::lock_guard<std::mutex> lk(g_nccl_mu);
        if (!g_comms.erase(h))
            return;
        st_live_comms--;
    }
    join_job(h);
    delete h;
}

/* ----- collectives ----- */

enum { COLL_ALL_REDUCE = 1, COLL_BROADCAST = 2 };

struct Task {
    standin_comm *h;
    CommP st;
    StreamP stream;
    int kind;
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t type;
    ncclRedOp_t op;
    int root;
    uint64_t seq;
};

size_t type_size(ncclDataType_t t)
{
    return t == ncclFloat ? 4 : t == ncclDouble ? 8 : 0;
}

template <class T> void reduce_into(T *out, const Shm *shm, const CommState *st, size_t off_elems,
                                    size_t m, ncclRedOp_t op)
{
    const char *base = (const char *)shm + SHM_HEAD;
    const T scale = (T)1 / (T)st->nranks;
    for (size_t i = 0; i < m; i++) {
        T acc = 0;
        for (int q = 0; q < st->nranks; q++) {
            T v = ((const T *)(base + (size_t)q * CHUNK))[i];
            if (op == ncclAvg)
                v = v * scale;
            acc = q == 0 ? v : acc + v;
        }
        out[off_elems + i] = acc;
    }
}

/* One collective, on its stream: in issue order on the communicator, in
 * phases of one CHUNK per rank; skipped once this rank aborted or the
 * communicator failed. */
void run_task(const Task &t)
{
    CommState *st = t.st.get();
    {
        std::unique_lock<std::mutex> lk(st->mu);
        st->cv.wait(lk, [&] { return st->next == t.seq || aborted(st); });
    }
    ncclResult_t a = get_async(t.st);
    if (!aborted(st) && (a == ncclSuccess || a == ncclInProgress)) {
        size_t es = type_size(t.type), per = CHUNK / es;
        size_t phases = t.count ? (t.count + per - 1) / per : 1;
        uint64_t sig = ((uint64_t)t.kind << 60) ^ ((uint64_t)t.type << 52) ^ ((uint64_t)t.op << 48) ^
                       ((uint64_t)(t.root + 1) << 40) ^ (uint64_t)t.count;
        char *base = (char *)st->shm + SHM_HEAD;
        int fail = WAIT_OK;
        for (size_t k = 0; k < phases && fail == WAIT_OK; k++) {
            size_t off = k * per, m = t.count - off < per ? t.count - off : per;
            uint64_t p = ++st->phase;
            if ((fail = wait_all(st, st->shm->consumed, p - 1)) != WAIT_OK)
                break;
            char *mine = base + (size_t)st->rank * CHUNK;
            if (t.kind == COLL_ALL_REDUCE || st->rank == t.root)
                memcpy(mine, (const char *)t.send + off * es, m * es);
            __atomic_store_n(&st->shm->sig[st->rank], sig, __ATOMIC_RELAXED);
            __atomic_store_n(&st->shm->posted[st->rank], p, __ATOMIC_RELEASE);
            if ((fail = wait_all(st, st->shm->posted, p)) != WAIT_OK)
                break;
            for (int q = 0; q < st->nranks; q++)
                if (__atomic_load_n(&st->shm->sig[q], __ATOMIC_RELAXED) != sig) {
                    warn("stand-in: rank %d's collective does not match rank %d's (kind, count, "
                         "root, type or op differ)", st->rank, q);
                    set_async(t.st, ncclInvalidUsage);
                    fail = -1;
                }
            if (fail != WAIT_OK)
                break;
            if (t.kind == COLL_BROADCAST)
                memcpy((char *)t.recv + off * es, base + (size_t)t.root * CHUNK, m * es);
            else if (t.type == ncclFloat)
                reduce_into((float *)t.recv, st->shm, st, off, m, t.op);
            else
                reduce_into((double *)t.recv, st->shm, st, off, m, t.op);
            __atomic_store_n(&st->shm->consumed[st->rank], p, __ATOMIC_RELEASE);
        }
        if (fail == WAIT_PEER_GONE) {
            warn("stand-in: a peer of rank %d exited during a collective", st->rank);
            set_async(t.st, ncclRemoteError);
        }
        if (fail == WAIT_OK)
            st_collectives++;
        /* "Operations experiencing an asynchronous error will usually not
         * progress and never complete" (NCCL's user guide): it ends when
         * this rank aborts the communicator */
        while (fail != WAIT_OK && fail != WAIT_ABORTED && !aborted(st)) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, nullptr);
        }
    }
    std::lock_guard<std::mutex> lk(st->mu);
    st->next = t.seq + 1;
    st->executed++;
    st->cv.notify_all();
}

bool defer_this(uint64_t seq)
{
    return g_cfg.coll_defer_every > 0 && seq % (uint64_t)g_cfg.coll_defer_every == 0;
}

/* group.cc groupLaunch / ncclGroupEndInternal for the tasks of one group:
 * each communicator's tasks go on their streams now (blocking, or not
 * deferred) or from a job (non-blocking: the communicator is
 * ncclInProgress until they are on their streams). */
ncclResult_t launch(std::vector<Task> &tasks)
{
    ncclResult_t res = ncclSuccess;
    std::map<standin_comm *, std::vector<Task>> by_comm;
    for (Task &t : tasks) {
        {
            std::lock_guard<std::mutex> lk(t.st->mu);
            t.seq = t.st->issued++;
        }
        by_comm[t.h].push_back(t);
    }
    for (auto &kv : by_comm) {
        standin_comm *h = kv.first;
        std::vector<Task> list = kv.second;
        if (h->st->blocking || !defer_this(list.front().seq)) {
            for (const Task &t : list)
                enqueue(t.stream, [t] { run_task(t); });
            continue;
        }
        st_deferred++;
        set_async(h->st, ncclInProgress);
        CommP st = h->st;
        start_job(h, [st, list] {
            double delay = g_cfg.coll_s;
            if (!sleep_unless(delay, [&] { return aborted(st.get()); }))
                for (const Task &t : list)
                    enqueue(t.stream, [t] { run_task(t); });
            if (get_async(st) == ncclInProgress)
                set_async(st, ncclSuccess);
        });
        if (get_async(h->st) == ncclInProgress)
            res = ncclInProgress;
    }
    return res;
}

ncclResult_t collective(int kind, const void *send, void *recv, size_t count,
                        ncclDataType_t type, ncclRedOp_t op, int root, ncclComm_t comm,
                        cudaStream_t stream, const char *name)
{
    ncclResult_t r = comm_check(comm, name);
    if (r != ncclSuccess)
        return r;
    if ((r = ensure_ready(comm)) != ncclSuccess) {
        /* enqueue.cc:2657-2661: the refusal becomes the communicator's state */
        if (!comm->st->blocking)
            set_async(comm->st, r);
        return r;
    }
    if (comm->st->init_failed || !comm->st->shm) {
        warn("%s: the communicator's init (or split) failed", name);
        return ncclInvalidUsage;
    }
    StreamP s = stream_of(stream);
    const char *bad = nullptr;
    if (!s)
        bad = "stream is not a live stream";
    else if (!type_size(type))
        bad = "data type is not float or double (the stand-in has no other)";
    else if (op != ncclSum && op != ncclAvg)
        bad = "reduction is not sum or avg (the stand-in has no other)";
    else if (root < 0 || root >= comm->st->nranks)
        bad = "root is outside the communicator";
    else if (count && ((kind == COLL_ALL_REDUCE || comm->st->rank == root) &&
                       mem_kind(send, count * type_size(type)) != MEM_DEVICE))
        bad = "send buffer is not device memory";
    else if (count && mem_kind(recv, count * type_size(type)) != MEM_DEVICE)
        bad = "recv buffer is not device memory";
    if (bad) {
        warn("%s: %s", name, bad);
        return ncclInvalidArgument;
    }
    Task t{comm, comm->st, s, kind, send, recv, count, type, op, root, 0};
    if (t_group_depth > 0) {
        t_group_tasks->push_back(t);
        return ncclSuccess;
    }
    std::vector<Task> one{t};
    r = launch(one);
    return r == ncclInProgress ? get_async(comm->st) : r;
}

/* Until every collective issued on st has executed (or was skipped). */
bool flush(const CommP &st)
{
    std::unique_lock<std::mutex> lk(st->mu);
    while (st->executed < st->issued) {
        if (aborted(st.get()))
            return false;
        st->cv.wait_for(lk, std::chrono::milliseconds(1));
    }
    return true;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int *version)
{
    if (!version)
        return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t)
{
    static thread_local std::string copy;
    std::lock_guard<std::mutex> lk(g_nccl_mu);
    copy = g_last_error;
    return copy.c_str();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    static std::atomic<unsigned> n{0};
    if (!id)
        return ncclInvalidArgument;
    memset(id, 0, sizeof *id);
    memcpy(id->internal, ID_MAGIC, sizeof ID_MAGIC);
    snprintf(id->internal + sizeof ID_MAGIC, sizeof id->internal - sizeof ID_MAGIC,
             "/" STANDIN_SHM_PREFIX "%d-%u-%llx", (int)getpid(), n++,
             (unsigned long long)(now_s() * 1e9));
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config)
{
    if (!comm)
        return ncclInvalidArgument;
    *comm = nullptr;
    if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks) {
        warn("ncclCommInitRankConfig: rank %d of %d (the stand-in allows up to %d ranks)", rank,
             nranks, MAX_RANKS);
        return ncclInvalidArgument;
    }
    if (memcmp(id.internal, ID_MAGIC, sizeof ID_MAGIC) != 0 ||
        (config && config->magic != 0xcafebeef)) {
        warn("ncclCommInitRankConfig: the unique id or the config was not made for NCCL");
        return ncclInvalidArgument;
    }
    auto st = std::make_shared<CommState>();
    st->shm_name = id.internal + sizeof ID_MAGIC;
    st->rank = rank;
    st->nranks = nranks;
    st->device = t_device;
    st->blocking = !config || config->blocking == NCCL_CONFIG_UNDEF_INT || config->blocking != 0;
    standin_comm *h = new_handle(st);
    if (st->blocking) {
        ncclResult_t r = attach(st.get(), nullptr);
        if (r != ncclSuccess) {
            drop_handle(h);
            return r;
        }
        *comm = h;
        return ncclSuccess;
    }
    /* init.cc:2001: the communicator is the caller's at once, ncclInProgress */
    *comm = h;
    set_async(st, ncclInProgress);
    start_job(h, [st] {
        double delay = g_cfg.init_s;
        ncclResult_t r = sleep_unless(delay, [&] { return aborted(st.get()); })
                             ? ncclInternalError
                             : attach(st.get(), nullptr);
        st->init_failed = r != ncclSuccess;
        set_async(st, r);
    });
    return get_async(st);
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config)
{
    ncclResult_t r = comm_check(comm, "ncclCommSplit");
    if (r != ncclSuccess)
        return r;
    if (!newcomm)
        return ncclInvalidArgument;
    if ((r = ensure_ready(comm)) != ncclSuccess)
        return r;
    *newcomm = NCCL_COMM_NULL;
    CommP parent = comm->st;
    uint64_t number = ++parent->splits;
    CommP child;
    standin_comm *ch = nullptr;
    if (color != NCCL_SPLIT_NOCOLOR) {
        child = std::make_shared<CommState>();
        child->device = parent->device;
        child->blocking = config && config->blocking != NCCL_CONFIG_UNDEF_INT
                              ? config->blocking != 0
                              : parent->blocking;
        ch = new_handle(child);
        /* the parent's abort reaches the child while the split runs */
        __atomic_store_n(&parent->child_abort, &child->abort, __ATOMIC_RELEASE);
    }
    auto work = [parent, child, ch, newcomm, color, key, number](bool deferred) {
        ncclResult_t res = ncclSuccess;
        if (deferred && sleep_unless(g_cfg.split_s, [&] {
                return aborted(parent.get()) || (child && aborted(child.get()));
            }))
            res = ncclInternalError;
        Shm *ps = parent->shm;
        if (res == ncclSuccess) {
            __atomic_store_n(&ps->split_color[parent->rank], color, __ATOMIC_RELAXED);
            __atomic_store_n(&ps->split_key[parent->rank], key, __ATOMIC_RELAXED);
            __atomic_store_n(&ps->split_posted[parent->rank], number, __ATOMIC_RELEASE);
            int w = wait_all(parent.get(), ps->split_posted, number,
                             child ? &child->abort : nullptr);
            res = w == WAIT_OK ? ncclSuccess : w == WAIT_PEER_GONE ? ncclRemoteError
                                                                   : ncclInternalError;
        }
        if (res == ncclSuccess && child) {
            /* the child's ranks: those of my color, ordered by key, then old rank */
            int n = 0, me = 0;
            for (int q = 0; q < parent->nranks; q++) {
                int cq = __atomic_load_n(&ps->split_color[q], __ATOMIC_RELAXED);
                int kq = __atomic_load_n(&ps->split_key[q], __ATOMIC_RELAXED);
                if (cq != color)
                    continue;
                n++;
                if (q != parent->rank && (kq < key || (kq == key && q < parent->rank)))
                    me++;
            }
            child->rank = me;
            child->nranks = n;
            child->shm_name = parent->shm_name + ".s" + std::to_string(number) + ".c" +
                              std::to_string(color);
            res = attach(child.get(), nullptr);
        }
        if (child) {
            child->init_failed = res != ncclSuccess;
            __atomic_store_n(&parent->child_abort, (int *)nullptr, __ATOMIC_RELEASE);
            /* init.cc:1610-1615: stored when the job ends, success or not */
            __atomic_store_n(newcomm, ch, __ATOMIC_RELEASE);
        }
        return res;
    };
    if (parent->blocking) {
        r = work(false);
        return r;
    }
    set_async(parent, ncclInProgress);
    start_job(comm, [parent, work] { set_async(parent, work(true)); });
    /* the group's ncclInProgress is swallowed: ncclCommSplit says ncclSuccess */
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error)
{
    ncclResult_t r = comm_check(comm, "ncclGetAsyncError");
    if (r != ncclSuccess)
        return r;
    if (!async_error)
        return ncclInvalidArgument;
    *async_error = get_async(comm->st);
    if (*async_error == ncclSuccess)
        join_job(comm);                   /* init.cc:2733-2737: the group job is complete */
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    ncclResult_t r = comm_check(comm, "ncclCommCount");
    if (r != ncclSuccess || (r = ensure_ready(comm)) != ncclSuccess)
        return r;
    if (!count)
        return ncclInvalidArgument;
    *count = comm->st->nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    ncclResult_t r = comm_check(comm, "ncclCommUserRank");
    if (r != ncclSuccess || (r = ensure_ready(comm)) != ncclSuccess)
        return r;
    if (!rank)
        return ncclInvalidArgument;
    *rank = comm->st->rank;
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    return collective(COLL_ALL_REDUCE, send, recv, count, type, op, 0, comm, stream,
                      "AllReduce");
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream)
{
    return collective(COLL_BROADCAST, send, recv, count, type, ncclSum, root, comm, stream,
                      "Broadcast");
}

ncclResult_t ncclGroupStart(void)
{
    if (t_group_depth++ == 0) {
        delete t_group_tasks;
        t_group_tasks = new std::vector<Task>;
    }
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    if (t_group_depth == 0) {
        warn("ncclGroupEnd: not in a group call.");
        return ncclInvalidUsage;
    }
    if (--t_group_depth > 0)
        return ncclSuccess;
    std::vector<Task> tasks;
    tasks.swap(*t_group_tasks);
    bool blocking = false, nonblocking = false;
    for (const Task &t : tasks)
        (t.st->blocking ? blocking : nonblocking) = true;
    if (blocking && nonblocking) {
        warn("Blocking and nonblocking communicators are not allowed in the same group.");
        return ncclInvalidArgument;
    }
    return launch(tasks);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    ncclResult_t r = comm_check(comm, "ncclCommFinalize");
    if (r != ncclSuccess)
        return r;
    if ((r = ensure_ready(comm)) != ncclSuccess) {
        if (!comm->st->blocking)
            set_async(comm->st, r);
        return r;
    }
    if (comm->st->finalize_called) {
        warn("ncclCommFinalize: called twice");
        return ncclInvalidArgument;
    }
    comm->st->finalize_called = true;
    CommP st = comm->st;
    if (st->blocking)
        return flush(st) ? ncclSuccess : ncclInternalError;
    set_async(st, ncclInProgress);
    start_job(comm, [st] { set_async(st, flush(st) ? ncclSuccess : ncclInternalError); });
    return get_async(st);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (!comm)
        return ncclSuccess;
    ncclResult_t r = comm_check(comm, "ncclCommDestroy");
    if (r != ncclSuccess)
        return r;
    /* init.cc:2381: not ready (in progress, or failed) is returned, and the
     * communicator is not destroyed */
    if ((r = ensure_ready(comm)) != ncclSuccess)
        return r;
    if (!comm->st->finalize_called)
        (void)flush(comm->st);            /* commReclaim finalizes it first, unbounded */
    drop_handle(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    if (!comm)
        return ncclSuccess;
    ncclResult_t r = comm_check(comm, "ncclCommAbort");
    if (r != ncclSuccess)
        return r;
    CommP st = comm->st;
    int *child = __atomic_load_n(&st->child_abort, __ATOMIC_ACQUIRE);
    if (child)
        __atomic_store_n(child, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&st->abort, 1, __ATOMIC_RELEASE);
    {
        std::lock_guard<std::mutex> lk(st->mu);
        st->cv.notify_all();
    }
    join_job(comm);
    if (!st->shm_name.empty())
        (void)shm_unlink(st->shm_name.c_str());   /* if its peers never all came */
    drop_handle(comm);
    return ncclSuccess;
}

}  // extern "C"
