/* env.c - the DDPC_* environment variables (env.h), parsed and checked.
 *
 * Owns: every getenv of a DDPC_* name in the runtime. Never exits; a bad
 * value is an error for env_load's caller (ddprt_main) and a one-time
 * warning for env_get()'s.
 */
#include "env.h"
#include "units.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct ddpc_env the_env;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* name's value, a decimal integer (iv set) or a finite number (dv set), in
 * [lo, hi]: 0 unset (nothing set), 1 set, -1 bad (e says why). */
static int env_number(const char *name, double lo, double hi, const char *what, double *dv,
                      int64_t *iv, struct ddpc_err *e)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 0;
    /* decimal only (units.h): DDPC_SHM_SPIN_US=0x10 is a typo, not 16 */
    int64_t i = 0;
    double x = 0;
    int bad = iv ? units_flag_int(s, (int64_t)lo, (int64_t)hi, &i)
                 : units_flag_double(s, lo, hi, &x);
    if (bad < 0)
        return DDPC_FAIL(e, DDPC_E_INVALID, "%s='%s': expected %s (unset it to use the default)",
                         name, s, what);
    if (iv)
        *iv = i;
    else
        *dv = x;
    return 1;
}

/* name's value, 0 or 1, into *out: 0 unset (*out untouched), 1 set, -1 bad. */
static int env_bool(const char *name, int *out, struct ddpc_err *e)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 0;
    if (strcmp(s, "0") != 0 && strcmp(s, "1") != 0)
        return DDPC_FAIL(e, DDPC_E_INVALID, "%s='%s': expected 0 or 1 (unset it to use the "
                         "default)", name, s);
    *out = s[0] == '1';
    return 1;
}

static int env_read(struct ddpc_env *v, struct ddpc_err *e)
{
    int rc = 0;
    v->debug = 0;
    v->fused_attn = 1;
    v->profile = DDPC_PROFILE_OFF;
    v->shm_spin_us = -1;
    v->bench_t0 = 0;
    v->test_ckpt_stop_after = -1;
    v->test_ckpt_slow_s = 0;
    v->test_cuda_probe_error = -1;
    v->test_stream_delay_us = -1;

    if (env_bool("DDPC_DEBUG", &v->debug, e) < 0)
        rc = -1;
    if (env_bool("DDPC_FUSED_ATTN", &v->fused_attn, e) < 0)
        rc = -1;
    const char *p = getenv("DDPC_PROFILE");
    if (p && *p) {
        if (strcmp(p, "0") == 0)
            v->profile = DDPC_PROFILE_OFF;
        else if (strcmp(p, "1") == 0)
            v->profile = DDPC_PROFILE_RANK0;
        else if (strcmp(p, "all") == 0)
            v->profile = DDPC_PROFILE_ALL;
        else
            rc = DDPC_FAIL(e, DDPC_E_INVALID, "DDPC_PROFILE='%s': expected 0, 1 or all "
                           "(unset it to use the default)", p);
    }
    if (env_number("DDPC_SHM_SPIN_US", 0, 1e7, "microseconds from 0 to 1e7",
                   &v->shm_spin_us, NULL, e) < 0)
        rc = -1;
    if (env_number("DDPC_BENCH_T0", 1, 1e12, "a wall-clock time in seconds since the epoch",
                   &v->bench_t0, NULL, e) < 0)
        rc = -1;
    if (env_number("DDPC_TEST_CKPT_STOP_AFTER_BYTES", 0, 1e18, "a byte count >= 0",
                   NULL, &v->test_ckpt_stop_after, e) < 0)
        rc = -1;
    if (env_number("DDPC_TEST_CKPT_SLOW_S", 0, 3600, "seconds from 0 to 3600",
                   &v->test_ckpt_slow_s, NULL, e) < 0)
        rc = -1;
    int64_t pe = -1;
    if (env_number("DDPC_TEST_CUDA_PROBE_ERROR", 1, 99999, "a cudaError_t number from 1 to 99999",
                   NULL, &pe, e) < 0)
        rc = -1;
    v->test_cuda_probe_error = (int)pe;
    if (env_number("DDPC_TEST_STREAM_DELAY_US", 0, 1e6, "microseconds from 0 to 1e6",
                   &v->test_stream_delay_us, NULL, e) < 0)
        rc = -1;
    return rc;
}

static int loaded;   /* env_load ran (in the launcher, before any thread) */

static void env_once(void)
{
    struct ddpc_err e = { 0 };
    if (!loaded && env_read(&the_env, &e) < 0)
        fprintf(stderr, "ddpc: warning: %s; using the default\n", e.msg);
    loaded = 1;
}

int env_load(struct ddpc_err *e)
{
    int rc = env_read(&the_env, e);
    loaded = 1;
    pthread_once(&once, env_once);   /* nothing left to do; env_get() sees this copy */
    return rc;
}

const struct ddpc_env *env_get(void)
{
    pthread_once(&once, env_once);
    return &the_env;
}
