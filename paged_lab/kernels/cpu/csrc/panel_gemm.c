/* y = x @ W.T (+ bias) for the few rows of a decode step: the engine's matmul on a CPU with AVX-512.
 * paged_lab.kernels.cpu.gemm packs W and calls this; paged_lab.kernels.cpu.linear decides when.
 *
 * Why: a decode step multiplies a handful of rows (one per running sequence) by every weight of the
 * model, so its matmuls are bound by how fast the weights stream from memory (SmolLM2-135M in fp32:
 * 0.54 GB per step). oneDNN's prepacked matmul reached about 19 GB/s here for 4 rows; this loop,
 * which reads every weight exactly once in memory order, gets close to what the memory gives.
 *
 * Layout: W [N, K] is packed once into panels of 16 output features, each panel [K][16] contiguous
 * (16 consecutive outputs' weights for input k side by side), panels one after the other. For each
 * panel the loop walks k = 0..K-1: one 64-byte load of the 16 weights (fp32; bf16: 32 bytes, widened
 * to fp32 exactly) and, for each row m, acc[m] += x[m, k] * w (an FMA into 16 outputs at once), in
 * blocks of 64 k (see PANELS). A row's result does not depend on which other rows share the batch. Two panels go side by side (twice the independent FMAs, two streams), 8 rows
 * at a time in registers (16 accumulators); more rows run in chunks of 8 over the same two panels,
 * which stay in L1/L2, so W still comes from memory once. The next weights are prefetched PREFETCH
 * bytes ahead. OpenMP threads (torch's libgomp, one pool) take contiguous ranges of panels.
 * x and y are contiguous fp32 [M, K] / [M, N]; for bf16 weights the caller passes fp32 x and gets fp32
 * y (it converts once per call), N is a multiple of 16, bias is fp32 [N] or NULL.
 */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>

#define PREFETCH 8192 /* bytes ahead; 4-16 KB measured alike here, 512 B was too short */

static inline __m512 load_f32(const float *w) { return _mm512_loadu_ps(w); }

static inline __m512 load_bf16(const uint16_t *w) { /* bf16 -> fp32 is exact: the bits, shifted up */
    __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)w));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

/* Rows [0, MM) of xc times NP panels starting at panel p (NP = 1 or 2) into yc. WT: float or uint16_t.
 * k runs in blocks of KBLOCK: each block is summed in registers from zero and then added to y (bias
 * first), so every output is a sum of K / KBLOCK partial sums of KBLOCK terms each. One running sum
 * over all K terms erred about 5x more against a float64 forward (30 layers: 1.2e-4 on logits of ~40,
 * where MKL's blocked sums err 2-3e-5); these blocks cost a load and a store per block. */
#define KBLOCK 64
#define PANELS(WT, LOAD, MM, NP)                                                                   \
    {                                                                                              \
        const WT *w = wp + p * K * 16;                                                             \
        for (long k0 = 0; k0 < K; k0 += KBLOCK) {                                                  \
            const long k1 = k0 + KBLOCK < K ? k0 + KBLOCK : K;                                     \
            __m512 acc[NP][MM];                                                                    \
            for (int j = 0; j < NP; j++)                                                           \
                for (int m = 0; m < MM; m++) acc[j][m] = _mm512_setzero_ps();                      \
            for (long k = k0; k < k1; k++) {                                                       \
                __m512 wv[NP];                                                                     \
                for (int j = 0; j < NP; j++) {                                                     \
                    const WT *wk = w + j * K * 16 + k * 16;                                        \
                    if (sizeof(WT) == 4 || !(k & 1)) /* one prefetch per 64-byte line */           \
                        _mm_prefetch((const char *)wk + PREFETCH, _MM_HINT_T0);                    \
                    wv[j] = LOAD(wk);                                                              \
                }                                                                                  \
                for (int m = 0; m < MM; m++) {                                                     \
                    __m512 xm = _mm512_set1_ps(xc[m * K + k]);                                     \
                    for (int j = 0; j < NP; j++) acc[j][m] = _mm512_fmadd_ps(xm, wv[j], acc[j][m]); \
                }                                                                                  \
            }                                                                                      \
            for (int j = 0; j < NP; j++)                                                           \
                for (int m = 0; m < MM; m++) {                                                     \
                    float *out = yc + m * N + (p + j) * 16;                                        \
                    __m512 before = k0 ? _mm512_loadu_ps(out)                                      \
                                       : bias ? _mm512_loadu_ps(bias + (p + j) * 16) : _mm512_setzero_ps(); \
                    _mm512_storeu_ps(out, _mm512_add_ps(before, acc[j][m]));                       \
                }                                                                                  \
        }                                                                                          \
    }

/* Panels [p0, p1) for rows [0, MM): pairs, then the odd one out. */
#define RANGE(WT, LOAD, MM)                                                                        \
    {                                                                                              \
        long p = p0;                                                                               \
        for (; p + 1 < p1; p += 2) PANELS(WT, LOAD, MM, 2)                                         \
        for (; p < p1; p++) PANELS(WT, LOAD, MM, 1)                                                \
    }

/* One function per weight type: rows in chunks of up to 8 (a switch, so each count has fixed-size
 * register arrays), every chunk over the same pair of panels before moving on. */
#define DEFINE_RUN(NAME, WT, LOAD)                                                                 \
    static void NAME(const float *x, const WT *wp, const float *bias, float *y, long M, long N,    \
                     long K, long q0, long q1) {                                                   \
        for (long q = q0; q < q1; q += 2) {                                                        \
            long p0 = q, p1 = q + 2 < q1 ? q + 2 : q1;                                             \
            for (long m0 = 0; m0 < M; m0 += 8) {                                                   \
                const float *xc = x + m0 * K;                                                      \
                float *yc = y + m0 * N;                                                            \
                switch (M - m0 < 8 ? M - m0 : 8) {                                                 \
                    case 1: RANGE(WT, LOAD, 1) break;                                              \
                    case 2: RANGE(WT, LOAD, 2) break;                                              \
                    case 3: RANGE(WT, LOAD, 3) break;                                              \
                    case 4: RANGE(WT, LOAD, 4) break;                                              \
                    case 5: RANGE(WT, LOAD, 5) break;                                              \
                    case 6: RANGE(WT, LOAD, 6) break;                                              \
                    case 7: RANGE(WT, LOAD, 7) break;                                              \
                    default: RANGE(WT, LOAD, 8) break;                                             \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

DEFINE_RUN(run_f32, float, load_f32)
DEFINE_RUN(run_bf16, uint16_t, load_bf16)

/* weight_bf16: 0 -> wp is fp32 panels, 1 -> bf16 panels. Each thread takes an even-aligned range of
 * panels (pairs stay together). */
void panel_gemm(const float *x, const void *wp, int weight_bf16, const float *bias, float *y, long M, long N,
                long K, int threads) {
    long P = N / 16, pairs = (P + 1) / 2;
    #pragma omp parallel num_threads(threads) if (threads > 1)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        long q0 = 2 * (pairs * t / nt), q1 = 2 * (pairs * (t + 1) / nt);
        if (q1 > P) q1 = P;
        if (weight_bf16)
            run_bf16(x, (const uint16_t *)wp, bias, y, M, N, K, q0, q1);
        else
            run_f32(x, (const float *)wp, bias, y, M, N, K, q0, q1);
    }
}
