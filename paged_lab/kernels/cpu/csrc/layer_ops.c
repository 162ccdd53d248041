/* The small element-wise steps of a decoder layer in C: RMSNorm, RoPE, SiLU(gate) * up.
 * paged_lab.kernels.cpu.layer_ops calls these; kernels.cpu.fast_path runs torch's where they cannot.
 *
 * Why: in a decode step each of these touches a few thousand numbers, and torch spends more time
 * dispatching than computing: F.rms_norm is about ten ops (18 us at 4 rows), RoPE eight (q and k), and
 * in bf16 every op converts to fp32 and back. About 25 of them per layer were 3-10 ms of a 20-30 ms step.
 * Here each is one vectorized pass over the rows, in the torch code's order of operations:
 *   rms_norm: x * (1 / sqrt(mean(x^2) + eps)), then * weight    (the sum of squares in fp32)
 *   rope:     x * cos + roll(x, hd / 2) * sin_signed            (per head; sin_signed: see llama.py)
 *   silu_mul: silu(gate) * up, silu(g) = g / (1 + e^-g)
 * A multiply and an add stay a multiply and an add (no FMA contraction), and bf16 values are rounded
 * (to nearest even) wherever the torch code rounds: after every op. So fp32 results differ from torch's
 * only in the mean's summation order, rsqrt's last bit and e^x (about 1e-7 relative).
 * Layouts: contiguous rows, except q and k for rope and gate and up for silu_mul (a row stride: they
 * may be column slices of the fused q/k/v or gate/up output). dtype flag bf16: 0 = fp32, 1 = bf16. Rows go
 * to OpenMP threads (torch's pool) when there are many (a prefill).
 */
#pragma GCC optimize("fp-contract=off") /* a * b + c stays a multiply and an add, as in torch */
#pragma GCC target("avx512bw,avx512vl") /* 16-bit lanes (bf16); torch's "AVX512" level has them */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>

#include "avx512_math.h" /* exp_neg */

/* 16 values at element i of p (fp32 or bf16, widened exactly); `n` valid lanes (a masked tail). */
static inline __m512 load16(const void *p, long i, long n, int bf16) {
    __mmask16 m = n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
    if (!bf16) return _mm512_maskz_loadu_ps(m, (const float *)p + i);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* fp32 -> bf16 bits, round to nearest even (finite values; as torch's conversion) */
static inline __m512i bf16_bits(__m512 v) {
    __m512i u = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    return _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
}

/* v rounded to bf16 and widened back (bf16 = 1), or v (fp32) */
static inline __m512 rnd(__m512 v, int bf16) {
    return bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(bf16_bits(v), 16)) : v;
}

static inline void store16(void *p, long i, __m512 v, long n, int bf16) {
    __mmask16 m = n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
    if (bf16)
        _mm256_mask_storeu_epi16((uint16_t *)p + i, m, _mm512_cvtepi32_epi16(bf16_bits(v)));
    else
        _mm512_mask_storeu_ps((float *)p + i, m, v);
}

#define MANY_ROWS(rows, width) if ((rows) * (width) >= 65536 && threads > 1) num_threads(threads)

void rms_norm(const void *x, const void *weight, void *out, long rows, long n, float eps, int bf16, int threads) {
    #pragma omp parallel for MANY_ROWS(rows, n)
    for (long r = 0; r < rows; r++) {
        __m512 acc = _mm512_setzero_ps();
        for (long i = 0; i < n; i += 16) {
            __m512 v = load16(x, r * n + i, n - i, bf16);
            acc = _mm512_add_ps(acc, _mm512_mul_ps(v, v));
        }
        __m512 inv = _mm512_set1_ps(1.0f / sqrtf(_mm512_reduce_add_ps(acc) / (float)n + eps));
        for (long i = 0; i < n; i += 16) {
            __m512 h = rnd(_mm512_mul_ps(load16(x, r * n + i, n - i, bf16), inv), bf16);
            store16(out, r * n + i, _mm512_mul_ps(h, load16(weight, i, n - i, bf16)), n - i, bf16);
        }
    }
}

/* rows of t (row stride `stride` elements), `heads` heads of hd each, in place; cos/sin [rows, hd] */
static void rope_rows(void *t, long stride, long heads, const void *cos, const void *sin, long rows, long hd,
                      int bf16, int threads) {
    const long half = hd / 2; /* a multiple of 16 (the caller checks) */
    #pragma omp parallel for MANY_ROWS(rows, heads * hd)
    for (long r = 0; r < rows; r++)
        for (long h = 0; h < heads; h++) {
            const long base = r * stride + h * hd;
            for (long i = 0; i < half; i += 16) {
                __m512 lo = load16(t, base + i, 16, bf16), hi = load16(t, base + half + i, 16, bf16);
                __m512 c_lo = load16(cos, r * hd + i, 16, bf16), c_hi = load16(cos, r * hd + half + i, 16, bf16);
                __m512 s_lo = load16(sin, r * hd + i, 16, bf16), s_hi = load16(sin, r * hd + half + i, 16, bf16);
                /* roll(x, half): the first half sees the second, and the second the first */
                __m512 new_lo = _mm512_add_ps(rnd(_mm512_mul_ps(lo, c_lo), bf16), rnd(_mm512_mul_ps(hi, s_lo), bf16));
                __m512 new_hi = _mm512_add_ps(rnd(_mm512_mul_ps(hi, c_hi), bf16), rnd(_mm512_mul_ps(lo, s_hi), bf16));
                store16(t, base + i, new_lo, 16, bf16);
                store16(t, base + half + i, new_hi, 16, bf16);
            }
        }
}

void rope(void *q, long q_stride, long nq, void *k, long k_stride, long nkv, const void *cos, const void *sin,
          long rows, long hd, int bf16, int threads) {
    rope_rows(q, q_stride, nq, cos, sin, rows, hd, bf16, threads);
    rope_rows(k, k_stride, nkv, cos, sin, rows, hd, bf16, threads);
}

/* silu(g) = g / (1 + e^-g); for g < 0 as g e^g / (1 + e^g), so that e^x only ever sees x <= 0 */
static inline __m512 silu(__m512 g) {
    __m512 e = exp_neg(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(g))); /* e^-|g| */
    __m512 one = _mm512_set1_ps(1.0f), den = _mm512_add_ps(one, e);
    __mmask16 neg = _mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_LT_OQ);
    return _mm512_div_ps(_mm512_mask_mul_ps(g, neg, g, e), den);
}

/* gate and up: [rows, n] each, rows `gate_stride` / `up_stride` elements apart (the two halves of one
 * fused gate/up output, or two separate outputs); out [rows, n] contiguous */
void silu_mul(const void *gate, long gate_stride, const void *up, long up_stride, void *out, long rows, long n,
              int bf16, int threads) {
    #pragma omp parallel for MANY_ROWS(rows, n)
    for (long r = 0; r < rows; r++)
        for (long i = 0; i < n; i += 16) {
            __m512 g = load16(gate, r * gate_stride + i, n - i, bf16), u = load16(up, r * up_stride + i, n - i, bf16);
            store16(out, r * n + i, _mm512_mul_ps(rnd(silu(g), bf16), u), n - i, bf16);
        }
}
