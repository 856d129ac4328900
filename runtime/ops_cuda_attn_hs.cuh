/* ops_cuda_attn_hs.cuh - the fused attention's three kernels for one head
 * size, FA_HS, with (FA_DROP 1) or without (0) dropout on the
 * probabilities: ops_cuda_attn.cuh includes this once per pair it
 * supports, which names them k_fa_fwd_<FA_HS><FA_VARIANT> and so on (C
 * has no templates; the helpers take the sizes as constants). Without
 * dropout no register holds its state, and GPT-2's pretraining runs with
 * none (ptxas, sm_90, head size 64: 134/238/167 registers without,
 * 160/254/222 with). No include guard on purpose.
 *
 * Shared tiles: a "rows" tile holds 64 rows of FA_HS columns (FA_LDS_R
 * words each), a "cols" tile FA_HS rows of 64 keys (FA_LDS_C); products
 * are scores (n 64, k FA_HS: S = Q K^T and its kin) or values (n FA_HS,
 * k 64: O = P V and its kin). */
#if !defined(FA_HS) || !defined(FA_DROP)
#error "ops_cuda_attn_hs.cuh: define FA_HS, FA_DROP, FA_VARIANT (include ops_cuda_attn.cuh)"
#endif
#define FA_NAME(name) FA_CAT(FA_CAT(name, FA_HS), FA_VARIANT)
#if FA_HS % 16 != 0 || FA_HS < 16
#error "FA_HS: a multiple of 16 (an mma's k)"
#endif
#define FA_LDS_R FA_LDS(FA_HS)
#define FA_LDS_C FA_LDS(FA_TILE)
#define FA_SCORE FA_LDS_R, FA_TILE / 8, FA_HS / 16
#define FA_VALUE FA_LDS_C, FA_HS / 8, FA_TILE / 16

/* qkv [B, T, 3C] -> y [B, T, C]; lse [B, H, T]; samples b0 + blockIdx.z. */
__global__ static void FA_NAME(k_fa_fwd_)(const float *qkv, float *y, float *lse, int b0, int T,
                                          int C, int H, float scale, struct fa_drop drop)
{
    __shared__ unsigned ks[FA_TILE * FA_LDS_R];     /* keys' rows: S = Q K^T */
    __shared__ unsigned vt[FA_HS * FA_LDS_C];       /* V^T: O += P V */
    int b = b0 + (int)blockIdx.z, h = (int)blockIdx.y, bh = b * H + h;
    int qt = (int)gridDim.x - 1 - (int)blockIdx.x;   /* the longest rows first */
    int warp = (int)threadIdx.x / 32, g = (int)threadIdx.x % 32 / 4, t = (int)threadIdx.x % 4;
    int r = qt * FA_TILE + warp * 16 + g;            /* this lane's rows: r, r + 8 */
    size_t C3 = 3 * (size_t)C;
    const float *q = qkv + (size_t)b * T * C3 + (size_t)h * FA_HS;
    const float *k = q + C, *v = q + 2 * (size_t)C;

    unsigned qa[FA_HS / 16][4];
    fa_load_a(qa, FA_HS, q, C3, r, T);
    float o[FA_HS / 8][4], s[FA_TILE / 8][4];
    fa_zero(o, FA_HS / 8);
    float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;
    for (int kt = 0; kt <= qt; kt++) {
        __syncthreads();                             /* the last tile's readers are done */
        fa_load_rows(ks, FA_LDS_R, FA_HS, k, C3, kt * FA_TILE, T);
        fa_load_cols(vt, FA_LDS_C, FA_HS, v, C3, kt * FA_TILE, T);
        __syncthreads();
        fa_zero(s, FA_TILE / 8);
        fa_mma_tile(s, (const unsigned (*)[4])qa, ks, FA_SCORE);
        float mx_lo = -INFINITY, mx_hi = -INFINITY;
        for (int j = 0; j < FA_TILE / 8; j++)
            for (int i = 0; i < 4; i++) {
                int key = kt * FA_TILE + 8 * j + 2 * t + (i & 1), row = r + 8 * (i >> 1);
                float x = key <= row && key < T ? s[j][i] * scale : -INFINITY;
                s[j][i] = x;
                if (i < 2)
                    mx_lo = fmaxf(mx_lo, x);
                else
                    mx_hi = fmaxf(mx_hi, x);
            }
        /* every row sees key kt * FA_TILE <= its own: the maxima are finite */
        float mn_lo = fmaxf(m_lo, fa_quad_max(mx_lo)), mn_hi = fmaxf(m_hi, fa_quad_max(mx_hi));
        float al_lo = expf(m_lo - mn_lo), al_hi = expf(m_hi - mn_hi);   /* exp(-inf) = 0 */
        float sum_lo = 0.0f, sum_hi = 0.0f;
        for (int j = 0; j < FA_TILE / 8; j++) {
            s[j][0] = expf(s[j][0] - mn_lo);
            s[j][1] = expf(s[j][1] - mn_lo);
            s[j][2] = expf(s[j][2] - mn_hi);
            s[j][3] = expf(s[j][3] - mn_hi);
            sum_lo += s[j][0] + s[j][1];
            sum_hi += s[j][2] + s[j][3];
        }
        l_lo = l_lo * al_lo + fa_quad_sum(sum_lo);
        l_hi = l_hi * al_hi + fa_quad_sum(sum_hi);
        m_lo = mn_lo;
        m_hi = mn_hi;
        if (FA_DROP && drop.p > 0.0f)   /* l sums P before dropout; O sums it after */
            for (int j = 0; j < FA_TILE / 8; j++)
                for (int i = 0; i < 4; i++)
                    if (s[j][i] != 0.0f)
                        s[j][i] *= fa_dropped(&drop, b, H, h, T, r + 8 * (i >> 1),
                                              kt * FA_TILE + 8 * j + 2 * t + (i & 1));
        for (int j = 0; j < FA_HS / 8; j++) {
            o[j][0] *= al_lo;
            o[j][1] *= al_lo;
            o[j][2] *= al_hi;
            o[j][3] *= al_hi;
        }
        unsigned pa[FA_TILE / 16][4];
        fa_c_to_a(pa, (const float (*)[4])s);
        fa_mma_tile(o, (const unsigned (*)[4])pa, vt, FA_VALUE);
    }
    float *yb = y + (size_t)b * T * C + (size_t)h * FA_HS;
    fa_store(yb, (size_t)C, r, T, (const float (*)[4])o, FA_HS / 8, 1.0f / l_lo, 1.0f / l_hi,
             0);
    if (t == 0) {
        float *lb = lse + (size_t)bh * T;
        if (r < T)
            lb[r] = m_lo + logf(l_lo);
        if (r + 8 < T)
            lb[r + 8] = m_hi + logf(l_hi);
    }
}

/* dK, dV of 64 keys (dqkv's K and V columns; acc: += instead of =). */
__global__ static void FA_NAME(k_fa_bwd_kv_)(const float *qkv, const float *dy, const float *lse,
                                             const float *delta, float *dqkv, int b0, int T,
                                             int C, int H, float scale, int acc,
                                             struct fa_drop drop)
{
    __shared__ unsigned qs[FA_TILE * FA_LDS_R];     /* Q's rows: S^T = K Q^T */
    __shared__ unsigned qt_[FA_HS * FA_LDS_C];      /* Q^T: dK += dS^T Q */
    __shared__ unsigned ds_[FA_TILE * FA_LDS_R];    /* dY's rows: dP^T = V dY^T */
    __shared__ unsigned dt[FA_HS * FA_LDS_C];       /* dY^T: dV += P^T dY */
    __shared__ float lse_s[FA_TILE], delta_s[FA_TILE];
    int b = b0 + (int)blockIdx.z, h = (int)blockIdx.y, bh = b * H + h, kt = (int)blockIdx.x;
    int warp = (int)threadIdx.x / 32, g = (int)threadIdx.x % 32 / 4, t = (int)threadIdx.x % 4;
    int r = kt * FA_TILE + warp * 16 + g;            /* this lane's keys: r, r + 8 */
    size_t C3 = 3 * (size_t)C;
    const float *q = qkv + (size_t)b * T * C3 + (size_t)h * FA_HS;
    const float *dyb = dy + (size_t)b * T * C + (size_t)h * FA_HS;
    const float *lb = lse + (size_t)bh * T, *db = delta + (size_t)bh * T;

    unsigned ka[FA_HS / 16][4], va[FA_HS / 16][4];
    fa_load_a(ka, FA_HS, q + C, C3, r, T);
    fa_load_a(va, FA_HS, q + 2 * (size_t)C, C3, r, T);
    float dk[FA_HS / 8][4], dv[FA_HS / 8][4], p[FA_TILE / 8][4], dp[FA_TILE / 8][4];
    fa_zero(dk, FA_HS / 8);
    fa_zero(dv, FA_HS / 8);
    int tiles = (int)fa_tiles(T);
    for (int qtile = kt; qtile < tiles; qtile++) {
        int q0 = qtile * FA_TILE;
        __syncthreads();
        fa_load_rows(qs, FA_LDS_R, FA_HS, q, C3, q0, T);
        fa_load_cols(qt_, FA_LDS_C, FA_HS, q, C3, q0, T);
        fa_load_rows(ds_, FA_LDS_R, FA_HS, dyb, (size_t)C, q0, T);
        fa_load_cols(dt, FA_LDS_C, FA_HS, dyb, (size_t)C, q0, T);
        for (int i = (int)threadIdx.x; i < FA_TILE; i += FA_THREADS) {
            lse_s[i] = q0 + i < T ? lb[q0 + i] : 0.0f;
            delta_s[i] = q0 + i < T ? db[q0 + i] : 0.0f;
        }
        __syncthreads();
        fa_zero(p, FA_TILE / 8);
        fa_mma_tile(p, (const unsigned (*)[4])ka, qs, FA_SCORE);
        fa_zero(dp, FA_TILE / 8);
        fa_mma_tile(dp, (const unsigned (*)[4])va, ds_, FA_SCORE);
        for (int j = 0; j < FA_TILE / 8; j++)
            for (int i = 0; i < 4; i++) {
                int c = 8 * j + 2 * t + (i & 1), query = q0 + c, key = r + 8 * (i >> 1);
                float pr = query >= key && query < T ? expf(p[j][i] * scale - lse_s[c]) : 0.0f;
                float z = FA_DROP && drop.p > 0.0f && pr != 0.0f
                              ? fa_dropped(&drop, b, H, h, T, query, key) : 1.0f;
                p[j][i] = pr * z;                                  /* dV += (Z P)^T dY */
                dp[j][i] = pr * (z * dp[j][i] - delta_s[c]) * scale;   /* dS^T */
            }
        unsigned pa[FA_TILE / 16][4];
        fa_c_to_a(pa, (const float (*)[4])p);
        fa_mma_tile(dv, (const unsigned (*)[4])pa, dt, FA_VALUE);
        fa_c_to_a(pa, (const float (*)[4])dp);
        fa_mma_tile(dk, (const unsigned (*)[4])pa, qt_, FA_VALUE);
    }
    float *dkb = dqkv + (size_t)b * T * C3 + C + (size_t)h * FA_HS;
    fa_store(dkb, C3, r, T, (const float (*)[4])dk, FA_HS / 8, 1.0f, 1.0f, acc);
    fa_store(dkb + C, C3, r, T, (const float (*)[4])dv, FA_HS / 8, 1.0f, 1.0f, acc);
}

/* dQ of 64 queries (dqkv's Q columns; acc: += instead of =). */
__global__ static void FA_NAME(k_fa_bwd_q_)(const float *qkv, const float *dy, const float *lse,
                                            const float *delta, float *dqkv, int b0, int T, int C,
                                            int H, float scale, int acc, struct fa_drop drop)
{
    __shared__ unsigned ks[FA_TILE * FA_LDS_R];     /* keys' rows: S = Q K^T */
    __shared__ unsigned vs[FA_TILE * FA_LDS_R];     /* V's rows: dP = dY V^T */
    __shared__ unsigned kt_[FA_HS * FA_LDS_C];      /* K^T: dQ += dS K */
    int b = b0 + (int)blockIdx.z, h = (int)blockIdx.y, bh = b * H + h;
    int qt = (int)gridDim.x - 1 - (int)blockIdx.x;
    int warp = (int)threadIdx.x / 32, g = (int)threadIdx.x % 32 / 4, t = (int)threadIdx.x % 4;
    int r = qt * FA_TILE + warp * 16 + g;
    size_t C3 = 3 * (size_t)C;
    const float *q = qkv + (size_t)b * T * C3 + (size_t)h * FA_HS;
    const float *k = q + C, *v = q + 2 * (size_t)C;
    const float *dyb = dy + (size_t)b * T * C + (size_t)h * FA_HS;
    const float *lb = lse + (size_t)bh * T, *db = delta + (size_t)bh * T;
    float lse_lo = r < T ? lb[r] : 0.0f, lse_hi = r + 8 < T ? lb[r + 8] : 0.0f;
    float d_lo = r < T ? db[r] : 0.0f, d_hi = r + 8 < T ? db[r + 8] : 0.0f;

    unsigned qa[FA_HS / 16][4], da[FA_HS / 16][4];
    fa_load_a(qa, FA_HS, q, C3, r, T);
    fa_load_a(da, FA_HS, dyb, (size_t)C, r, T);
    float dq[FA_HS / 8][4], p[FA_TILE / 8][4], dp[FA_TILE / 8][4];
    fa_zero(dq, FA_HS / 8);
    for (int ktile = 0; ktile <= qt; ktile++) {
        int k0 = ktile * FA_TILE;
        __syncthreads();
        fa_load_rows(ks, FA_LDS_R, FA_HS, k, C3, k0, T);
        fa_load_rows(vs, FA_LDS_R, FA_HS, v, C3, k0, T);
        fa_load_cols(kt_, FA_LDS_C, FA_HS, k, C3, k0, T);
        __syncthreads();
        fa_zero(p, FA_TILE / 8);
        fa_mma_tile(p, (const unsigned (*)[4])qa, ks, FA_SCORE);
        fa_zero(dp, FA_TILE / 8);
        fa_mma_tile(dp, (const unsigned (*)[4])da, vs, FA_SCORE);
        for (int j = 0; j < FA_TILE / 8; j++)
            for (int i = 0; i < 4; i++) {
                int key = k0 + 8 * j + 2 * t + (i & 1), row = r + 8 * (i >> 1);
                float l = i < 2 ? lse_lo : lse_hi, d = i < 2 ? d_lo : d_hi;
                float pr = key <= row && key < T && row < T ? expf(p[j][i] * scale - l) : 0.0f;
                float z = FA_DROP && drop.p > 0.0f && pr != 0.0f
                              ? fa_dropped(&drop, b, H, h, T, row, key) : 1.0f;
                dp[j][i] = pr * (z * dp[j][i] - d) * scale;   /* dS */
            }
        unsigned sa[FA_TILE / 16][4];
        fa_c_to_a(sa, (const float (*)[4])dp);
        fa_mma_tile(dq, (const unsigned (*)[4])sa, kt_, FA_VALUE);
    }
    fa_store(dqkv + (size_t)b * T * C3 + (size_t)h * FA_HS, C3, r, T, (const float (*)[4])dq,
             FA_HS / 8, 1.0f, 1.0f, acc);
}

#undef FA_NAME
#undef FA_LDS_R
#undef FA_LDS_C
#undef FA_SCORE
#undef FA_VALUE
