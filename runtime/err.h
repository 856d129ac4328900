/* err.h - struct ddpc_err: how the runtime reports failure.
 *
 * Fallible runtime functions return int (0 ok, negative on error) and fill a
 * caller-owned struct ddpc_err with the call site and a message that says what
 * to do. Nothing below a worker's or launcher's top level calls exit(): a
 * collective must be able to abort, and tests run two ranks in one process.
 *
 * The *_CHECK macros return -1 from the enclosing function after recording
 * file:line. CUDA_CHECK/CUBLAS_CHECK/NCCL_CHECK live in cuda_check.h (only .cu
 * files include it).
 */
#ifndef DDPC_ERR_H
#define DDPC_ERR_H

#include <errno.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum ddpc_err_code {
    DDPC_OK = 0,
    DDPC_E_SYS = -1,       /* a libc call failed; errno in msg */
    DDPC_E_DATA = -2,      /* bad or missing data file */
    DDPC_E_TIMEOUT = -3,   /* a collective or barrier passed its deadline */
    DDPC_E_ABORTED = -4,   /* another rank or the launcher aborted the job */
    DDPC_E_PEER = -5,      /* a peer process died */
    DDPC_E_DEVICE = -6,    /* CUDA / cuBLAS / NCCL failure */
    DDPC_E_INVALID = -7,   /* an invariant the compiler should have guaranteed */
    DDPC_E_NOMEM = -8,
    DDPC_E_DIVERGED = -9,  /* the loss or the gradients became nan/inf */
    DDPC_E_STOPPED = -10,  /* another node gave up, or node 0 (the store) has stopped:
                            * it will not be back, so this node does not restart */
    DDPC_E_TAKEN = -11,    /* another ./job already runs as this node (its ranks are
                            * claimed): this copy neither restarts nor speaks for the job */
};

struct ddpc_err {
    int code;              /* enum ddpc_err_code, 0 while no error */
    const char *file;      /* call site of the first error recorded */
    int line;
    char msg[512];          /* a longer message ends in " [...]" */
};

/* Records the first error only: later calls keep the original cause. Returns
 * code, so `return ddpc_err_set(...)` reads naturally. */
int ddpc_err_set(struct ddpc_err *e, int code, const char *file, int line,
                 const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
void ddpc_err_clear(struct ddpc_err *e);

#define DDPC_FAIL(e, code, ...) ddpc_err_set((e), (code), __FILE__, __LINE__, __VA_ARGS__)

/* For libc calls that return -1 and set errno. */
#define SYS_CHECK(e, call) do {                                              \
        if ((call) == -1)                                                    \
            return ddpc_err_set((e), DDPC_E_SYS, __FILE__, __LINE__,         \
                                "%s: %s", #call, strerror(errno));           \
    } while (0)

/* For calls returning int 0/negative that already filled e. */
#define DDPC_TRY(call) do { int rc_ = (call); if (rc_ < 0) return rc_; } while (0)

#ifdef __cplusplus
}
#endif
#endif /* DDPC_ERR_H */
