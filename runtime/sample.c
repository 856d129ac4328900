/* sample.c - autoregressive sampling from a GPT held in memory (sample.h).
 *
 * Owns: the token context and the sampling RNG of one `--sample` run.
 * Never trains, never communicates (rank 0 alone calls it, after the
 * ranks' last collective).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "sample.h"

#define SAMPLE_STREAM 0x73616d706c65ull   /* "sample": the RNG stream of the job's seed */
#define GPT2_EOT      50256               /* GPT-2's <|endoftext|> */

/* The next token from logits[V] (double arithmetic, fixed order). */
static int sample_pick(const float *logits, int V, double temperature, struct ddpc_rng *rng,
                       struct ddpc_err *e)
{
    int arg = 0;
    for (int j = 0; j < V; j++) {
        if (!isfinite(logits[j]))
            return DDPC_FAIL(e, DDPC_E_INVALID, "--sample: the model's logit of token %d is %g: "
                             "the trained parameters are not finite", j, (double)logits[j]);
        if (logits[j] > logits[arg])
            arg = j;
    }
    if (temperature == 0.0)
        return arg;
    double mx = logits[arg], sum = 0.0;
    for (int j = 0; j < V; j++)
        sum += exp(((double)logits[j] - mx) / temperature);
    double u = rng_uniform(rng) * sum, acc = 0.0;
    for (int j = 0; j < V; j++) {
        acc += exp(((double)logits[j] - mx) / temperature);
        if (u < acc)
            return j;
    }
    return arg;   /* u within rounding of sum: the most likely token */
}

int sample_prompt_check(const char *prompt, int vocab, struct ddpc_err *e)
{
    size_t plen = prompt ? strlen(prompt) : 0;
    if (plen && vocab > 256)
        return DDPC_FAIL(e, DDPC_E_INVALID, "--prompt: this model's tokens are not bytes "
                         "(vocab_size %d > 256), so ddpc cannot tokenize the text; leave "
                         "--prompt out to start from <|endoftext|>", vocab);
    for (size_t i = 0; i < plen; i++)
        if ((unsigned char)prompt[i] >= vocab)
            return DDPC_FAIL(e, DDPC_E_INVALID, "--prompt: byte %zu (0x%02x) is not a token of "
                             "this model (vocab_size %d): the prompt must be text of the bytes "
                             "the model was trained on", i, (unsigned char)prompt[i], vocab);
    return 0;
}

int sample_run(struct ddpc_model *m, const struct ddpc_sample_opts *o, FILE *out,
               struct ddpc_err *e)
{
    struct ddpc_ops *ops = m->ops;
    const int T = (int)m->net.in_numel;
    if (T < 1 || m->net.out_numel % T != 0)
        return DDPC_FAIL(e, DDPC_E_INVALID, "--sample needs a GPT (input [block_size] tokens, "
                         "logits [block_size, vocab_size])");
    const int V = (int)(m->net.out_numel / T);
    const int bytes = V <= 256;
    size_t plen = o->prompt ? strlen(o->prompt) : 0;
    DDPC_TRY(sample_prompt_check(o->prompt, V, e));

    /* the context: at most the last T tokens matter, so 2T slots, shifted
     * back to T when full (N may be far larger than memory would hold) */
    size_t cap = 2 * (size_t)T;
    int32_t *ctx = malloc(cap * sizeof *ctx);
    float *x = malloc((size_t)T * sizeof *x), *row = malloc((size_t)V * sizeof *row);
    float *dx = NULL;
    int rc = 0;
    if (!ctx || !x || !row) {
        rc = DDPC_FAIL(e, DDPC_E_NOMEM, "--sample: out of memory");
        goto done;
    }
    if (!ops->host_memory && (rc = ops->alloc(ops, (void **)&dx, (size_t)T * sizeof *dx, e)) < 0)
        goto done;
    size_t len = 0;
    for (size_t i = plen > (size_t)T ? plen - (size_t)T : 0; i < plen; i++)
        ctx[len++] = (unsigned char)o->prompt[i];
    if (!plen)
        ctx[len++] = bytes ? (V > '\n' ? '\n' : 0) : (V > GPT2_EOT ? GPT2_EOT : 0);
    if (plen && fwrite(o->prompt, 1, plen, out) != plen) {
        rc = DDPC_FAIL(e, DDPC_E_SYS, "--sample: writing the output failed");
        goto done;
    }

    struct ddpc_rng rng;
    rng_seed2(&rng, o->seed, SAMPLE_STREAM);
    model_set_mode(m, 0, 0);
    for (int64_t t = 0; t < o->n; t++) {
        size_t n = len < (size_t)T ? len : (size_t)T;   /* the context, cropped */
        for (size_t i = 0; i < (size_t)T; i++)
            x[i] = i < n ? (float)ctx[len - n + i] : 0.0f;
        const float *in = x;
        if (dx) {
            if ((rc = ops->to_device(ops, dx, x, (size_t)T * sizeof *x, e)) < 0)
                goto done;
            in = dx;
        }
        if ((rc = model_forward(m, in, 1, e)) < 0 ||
            (rc = ops->to_host(ops, row, m->logits + (n - 1) * (size_t)V,
                               (size_t)V * sizeof *row, e)) < 0)
            goto done;
        int tok = sample_pick(row, V, o->temperature, &rng, e);
        if (tok < 0) {
            rc = tok;
            goto done;
        }
        if (len == cap) {
            memmove(ctx, ctx + len - (size_t)T, (size_t)T * sizeof *ctx);
            len = (size_t)T;
        }
        ctx[len++] = tok;
        int w = bytes ? fputc(tok, out) : fprintf(out, "%s%d", t ? " " : "", tok);
        if (w < 0) {
            rc = DDPC_FAIL(e, DDPC_E_SYS, "--sample: writing the output failed");
            goto done;
        }
        if (bytes && tok == '\n')
            fflush(out);   /* a line at a time, as it comes */
    }
    if (fputc('\n', out) < 0 || fflush(out) != 0)
        rc = DDPC_FAIL(e, DDPC_E_SYS, "--sample: writing the output failed");
done:
    if (dx)
        ops->release(ops, dx);
    free(ctx);
    free(x);
    free(row);
    return rc;
}
