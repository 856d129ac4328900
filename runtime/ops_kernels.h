/* ops_kernels.h - element-wise arithmetic shared by the CPU and CUDA backends.
 *
 * Every function here is DDPC_HD: compiled for the host by the C compiler
 * (ops_cpu.c) and for host and device by nvcc (ops_cuda.cu). The CPU unit
 * tests therefore cover the exact arithmetic the GPU kernels run. Keep these
 * pure: no memory allocation, no I/O, no globals.
 */
#ifndef DDPC_OPS_KERNELS_H
#define DDPC_OPS_KERNELS_H

#include <math.h>

#ifdef __CUDACC__
#define DDPC_HD __host__ __device__ static inline
#else
#define DDPC_HD static inline
#endif

/* Activation ids match enum ddpc_activation in spec/job.h. */
#define DDPC_K_RELU     0
#define DDPC_K_GELU     1
#define DDPC_K_TANH     2
#define DDPC_K_SIGMOID  3
#define DDPC_K_IDENTITY 4

/* Optimizer ids match enum ddpc_optimizer_type. */
#define DDPC_K_ADAM  0
#define DDPC_K_ADAMW 1
#define DDPC_K_SGD   2

/* GELU, exact (erf) form: PyTorch's nn.GELU() default. */
DDPC_HD float ddpc_k_act(int act, float z)
{
    switch (act) {
    case DDPC_K_RELU:    return z > 0.0f ? z : 0.0f;
    case DDPC_K_GELU:    return 0.5f * z * (1.0f + erff(z * 0.70710678118654752f));
    case DDPC_K_TANH:    return tanhf(z);
    case DDPC_K_SIGMOID: return 1.0f / (1.0f + expf(-z));
    default:             return z;
    }
}

/* d act(z) / dz */
DDPC_HD float ddpc_k_act_grad(int act, float z)
{
    switch (act) {
    case DDPC_K_RELU:    return z > 0.0f ? 1.0f : 0.0f;
    case DDPC_K_GELU: {
        float cdf = 0.5f * (1.0f + erff(z * 0.70710678118654752f));
        float pdf = 0.39894228040143268f * expf(-0.5f * z * z);
        return cdf + z * pdf;
    }
    case DDPC_K_TANH:    { float t = tanhf(z); return 1.0f - t * t; }
    case DDPC_K_SIGMOID: { float s = 1.0f / (1.0f + expf(-z)); return s * (1.0f - s); }
    default:             return 1.0f;
    }
}

/* One parameter's update. g is the averaged gradient times grad_scale.
 * Matches torch.optim.{SGD,Adam,AdamW} for a single step:
 *   sgd:   g += wd*p; b = mu*b + g (b = g on the first step, which m == 0 and
 *          first_step signal); p -= lr * (nesterov ? g + mu*b : b)
 *   adam:  g += wd*p (L2); m,v moments; p -= lr * mhat / (sqrt(vhat) + eps)
 *   adamw: p *= 1 - lr*wd; then adam without the L2 term. */
DDPC_HD void ddpc_k_sgd(float *p, float g, float *buf, float lr, float mu, int nesterov,
                        float wd, int first_step)
{
    g += wd * *p;
    if (mu != 0.0f) {
        float b = first_step ? g : mu * *buf + g;
        *buf = b;
        g = nesterov ? g + mu * b : b;
    }
    *p -= lr * g;
}

/* Adam / AdamW exactly as torch.optim's single-tensor path computes it,
 * operation for operation, with its Python-float constants precomputed in
 * double and rounded once (struct ddpc_optim_step's one_minus_beta*,
 * step_size, bc2_sqrt, decay):
 *   adamw: p *= decay (= 1 - lr*wd);   adam: g += wd*p
 *   m = m*b1 + omb1*g;  v = v*b2 + omb2*g*g
 *   p += (-step_size) * m / (sqrt(v)/bc2_sqrt + eps) */
DDPC_HD void ddpc_k_adam_exact(float *p, float g, float *m, float *v, float b1, float b2,
                               float omb1, float omb2, float eps, float wd, int decoupled,
                               float decay, float step_size, float bc2_sqrt)
{
    if (decoupled)
        *p *= decay;
    else
        g += wd * *p;
    *m = *m * b1 + omb1 * g;
    *v = *v * b2 + omb2 * g * g;
    float denom = sqrtf(*v) / bc2_sqrt + eps;
    *p += (-step_size) * *m / denom;
}

/* The same step with every constant derived in float from lr, b1, b2, bc1,
 * bc2 (less exact: 1 - 0.999f loses 1e-5 relative). Prefer
 * ddpc_k_adam_exact with the host-precomputed constants. */
DDPC_HD void ddpc_k_adam(float *p, float g, float *m, float *v, float lr, float b1, float b2,
                         float eps, float wd, int decoupled, float bc1, float bc2)
{
    ddpc_k_adam_exact(p, g, m, v, b1, b2, 1.0f - b1, 1.0f - b2, eps, wd, decoupled,
                      1.0f - lr * wd, lr / bc1, sqrtf(bc2));
}

/* Loss ids match enum ddpc_loss. */
#define DDPC_K_LOSS_XENT 0
#define DDPC_K_LOSS_MSE  1

/* One row of softmax cross-entropy; the loss op calls it once per sample.
 *   x[cols]: logits; y: the label, 0 <= y < cols (callers check first);
 *   d[cols] = grad_scale * (softmax(x) - onehot(y)); d may alias x;
 *   returns logsumexp(x) - x[y], max-shifted so large logits do not overflow;
 *   *correct = argmax(x) == y, the first maximum winning ties (torch.argmax).
 * Accumulate the returned per-row losses in double. */
DDPC_HD double ddpc_k_xent_row(const float *x, int y, float *d, int cols, float grad_scale,
                               int *correct)
{
    float xy = x[y];              /* read before d, which may alias x, is written */
    float mx = x[0];
    int arg = 0;
    for (int j = 1; j < cols; j++)
        if (x[j] > mx) {
            mx = x[j];
            arg = j;
        }
    float s = 0.0f;
    for (int j = 0; j < cols; j++) {
        float ex = expf(x[j] - mx);
        d[j] = ex;
        s += ex;
    }
    float inv = grad_scale / s;
    for (int j = 0; j < cols; j++)
        d[j] *= inv;
    d[y] -= grad_scale;
    *correct = arg == y;
    return (double)logf(s) + (double)(mx - xy);
}

/* One row of mean squared error: returns the mean over cols of (x - t)^2,
 * so (sum over rows) / rows is PyTorch's MSELoss(reduction='mean');
 * d[cols] = grad_scale * 2 (x - t) / cols; d may alias x. */
DDPC_HD double ddpc_k_mse_row(const float *x, const float *t, float *d, int cols,
                              float grad_scale)
{
    float gs = 2.0f * grad_scale / (float)cols;
    double row = 0.0;
    for (int j = 0; j < cols; j++) {
        float diff = x[j] - t[j];
        row += (double)diff * diff;
        d[j] = gs * diff;
    }
    return row / cols;
}

#endif /* DDPC_OPS_KERNELS_H */
