/* Paged attention on CPU. paged_decode: store each sequence's new K/V in its slot, then attend its one
 * query token over its block table. paged_prefill: every query token of a (chunked) prefill attends
 * causally over its sequence's context. The readable truth is paged_lab.kernels.reference (store_kv,
 * paged_attention_decode, paged_attention_prefill); paged_lab.kernels.cpu.attention builds and calls this.
 *
 * Why C: the torch path gathers every sequence's blocks into a padded copy, zeroes the padding and
 * calls SDPA with a mask, about ten ops per layer and a copy of all K/V. Here each sequence reads its
 * K and V rows straight from the cache through the table, once, block by block in memory order:
 *   scores[g, t] = scale * q[g] . K[t]       (g: a query head; K: its KV head's keys, GQA)
 *   p[g, t]      = exp(scores[g, t] - max_t) (softmax, two passes over the scores in a small buffer)
 *   out[g]       = sum_t p[g, t] V[t] / sum_t p[g, t]
 * vectorized with AVX-512 over head_dim (a multiple of 16); sequences (split by KV heads when there are
 * fewer sequences than threads) go to OpenMP threads (torch's own libgomp, so one thread pool).
 * Layouts (all contiguous, except the rows of paged_decode's q, k_new and v_new: row s starts at
 * s * q_stride / k_stride / v_stride elements, as when they are column slices of the fused q/k/v output):
 *   q, out [S, H, D] fp32; k_new, v_new [S, KVH, D] and caches [num_blocks, block_size, KVH, D] in the
 *   cache's dtype: fp32, or bf16 (kv_bf16 = 1: widened to fp32 as it is read, all math in fp32);
 *   slots int64 [S] (negative: not stored; NULL: store nothing); tables int64 [S, max_blocks];
 *   lens int64 [S] (context length, the new token included).
 * A prefill's query tokens are the last (qsl[s + 1] - qsl[s]) positions of sequence s's context, as in
 * the reference: token i of them sees positions [0, lens[s] - q_len + i]. Its tasks are query tokens.
 */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "avx512_math.h" /* exp_neg */

/* One sequence, KV heads [h0, h1): q and out are the sequence's [H, D] rows (D = 16 * ND). The K and
 * V passes walk the context token by token, so each block's rows (block_size x KVH x D contiguous
 * floats) stream in order; the output accumulates in `acc` ([H, D], in L1). Written once as a macro
 * and instantiated for D = 64 and 128 so the head_dim loops unroll; other D take the runtime version. */
#define ATTEND_BODY(ND, KT, LOAD)                                                                    \
    long D = 16 * (ND), row = kvh * D, G = H / kvh, nblk = (ctx + bs - 1) / bs;                      \
    for (long b = 0, t = 0; b < nblk; b++) {                                                         \
        const KT *kp = (const KT *)k_cache + table[b] * bs * row;                                    \
        const char *pf = (const char *)(b + 1 < nblk ? (const KT *)k_cache + table[b + 1] * bs * row : kp); \
        for (long off = 0; off < bs && t < ctx; off++, t++, kp += row) {                             \
            for (long c = (off * row + h0 * D) * sizeof(KT); c < (off * row + h1 * D) * sizeof(KT); c += 64) \
                _mm_prefetch(pf + c, _MM_HINT_T0); /* the next block's row, one block ahead */        \
            for (long h = h0; h < h1; h++)                                                           \
                for (long hq = h * G; hq < (h + 1) * G; hq++) {                                      \
                    const KT *kh = kp + h * D;                                                       \
                    const float *qh = q + hq * D;                                                    \
                    __m512 a = _mm512_setzero_ps();                                                  \
                    for (long j = 0; j < (ND); j++)                                                  \
                        a = _mm512_fmadd_ps(_mm512_loadu_ps(qh + 16 * j), LOAD(kh + 16 * j), a);          \
                    scores[hq * ctx + t] = _mm512_reduce_add_ps(a) * scale;                          \
                }                                                                                    \
        }                                                                                            \
    }                                                                                                \
    for (long hq = h0 * G; hq < h1 * G; hq++) {                                                      \
        float *s = scores + hq * ctx, mx = s[0];                                                     \
        for (long t = 1; t < ctx; t++) mx = s[t] > mx ? s[t] : mx;                                   \
        __m512 mv = _mm512_set1_ps(mx), total = _mm512_setzero_ps();                                 \
        for (long t = 0; t < ctx; t += 16) {                                                         \
            __mmask16 mk = ctx - t >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (ctx - t)) - 1);   \
            __m512 e = _mm512_maskz_mov_ps(mk, exp_neg(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, s + t), mv))); \
            _mm512_mask_storeu_ps(s + t, mk, e);                                                     \
            total = _mm512_add_ps(total, e);                                                         \
        }                                                                                            \
        sums[hq] = _mm512_reduce_add_ps(total);                                                      \
        for (long j = 0; j < (ND); j++) _mm512_storeu_ps(acc + hq * D + 16 * j, _mm512_setzero_ps()); \
    }                                                                                                \
    for (long b = 0, t = 0; b < nblk; b++) {                                                         \
        const KT *vp = (const KT *)v_cache + table[b] * bs * row;                                    \
        const char *pf = (const char *)(b + 1 < nblk ? (const KT *)v_cache + table[b + 1] * bs * row : vp); \
        for (long off = 0; off < bs && t < ctx; off++, t++, vp += row) {                             \
            for (long c = (off * row + h0 * D) * sizeof(KT); c < (off * row + h1 * D) * sizeof(KT); c += 64) \
                _mm_prefetch(pf + c, _MM_HINT_T0);                                                   \
            for (long h = h0; h < h1; h++)                                                           \
                for (long hq = h * G; hq < (h + 1) * G; hq++) {                                      \
                    const KT *vh = vp + h * D;                                                       \
                    __m512 p = _mm512_set1_ps(scores[hq * ctx + t]);                                 \
                    float *o = acc + hq * D;                                                         \
                    for (long j = 0; j < (ND); j++)                                                  \
                        _mm512_storeu_ps(o + 16 * j, _mm512_fmadd_ps(p, LOAD(vh + 16 * j),          \
                                                                     _mm512_loadu_ps(o + 16 * j)));  \
                }                                                                                    \
        }                                                                                            \
    }                                                                                                \
    for (long hq = h0 * G; hq < h1 * G; hq++) {                                                      \
        __m512 inv = _mm512_set1_ps(1.0f / sums[hq]);                                                \
        for (long j = 0; j < (ND); j++)                                                              \
            _mm512_storeu_ps(out + hq * D + 16 * j, _mm512_mul_ps(_mm512_loadu_ps(acc + hq * D + 16 * j), inv)); \
    }

/* K/V elements: fp32, or bf16 widened to fp32 exactly (its bits are the top half of the fp32 ones). */
static inline __m512 load_f32(const float *p) { return _mm512_loadu_ps(p); }
static inline __m512 load_bf16(const uint16_t *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

#define ATTEND_ARGS const float *q, long H, long kvh, long h0, long h1, const void *k_cache,           \
                    const void *v_cache, const long *table, long ctx, long bs, float scale, float *out,  \
                    float *scores, float *sums, float *acc
#define ATTEND_CALL q, H, kvh, h0, h1, k_cache, v_cache, table, ctx, bs, scale, out, scores, sums, acc
static void attend_d64(ATTEND_ARGS) { ATTEND_BODY(4, float, load_f32) }
static void attend_d128(ATTEND_ARGS) { ATTEND_BODY(8, float, load_f32) }
static void attend_any(long nd, ATTEND_ARGS) { ATTEND_BODY(nd, float, load_f32) }
static void attend_d64_bf16(ATTEND_ARGS) { ATTEND_BODY(4, uint16_t, load_bf16) }
static void attend_d128_bf16(ATTEND_ARGS) { ATTEND_BODY(8, uint16_t, load_bf16) }
static void attend_any_bf16(long nd, ATTEND_ARGS) { ATTEND_BODY(nd, uint16_t, load_bf16) }

static void attend(long D, int bf16, ATTEND_ARGS) {
    if (bf16)
        D == 64 ? attend_d64_bf16(ATTEND_CALL) : D == 128 ? attend_d128_bf16(ATTEND_CALL) : attend_any_bf16(D / 16, ATTEND_CALL);
    else
        D == 64 ? attend_d64(ATTEND_CALL) : D == 128 ? attend_d128(ATTEND_CALL) : attend_any(D / 16, ATTEND_CALL);
}

static int bad_shape(long H, long kvh, long D, long bs) {
    return D % 16 || D < 16 || D > 256 || kvh < 1 || H % kvh || H / kvh > 64 || bs < 1;
}

/* Both return 0, or -1 for shapes they do not take (D not a multiple of 16 or over 256, H not a
 * multiple of KVH, more than 64 query heads per KV head) or a failed allocation; the caller checks the
 * rest (tables, lengths and slots in range). */
int paged_decode(const float *q, long q_stride, const void *k_new, long k_stride, const void *v_new,
                 long v_stride, void *k_cache, void *v_cache, const long *slots, const long *tables,
                 long max_blocks, const long *lens, long S, long H, long kvh, long D, long bs, float scale,
                 float *out, int threads, int kv_bf16) {
    if (bad_shape(H, kvh, D, bs)) return -1;
    if (S < 1) return 0;
    long elem = kv_bf16 ? 2 : 4, row_bytes = kvh * D * elem;
    if (slots)
        for (long s = 0; s < S; s++)
            if (slots[s] >= 0) {
                memcpy((char *)k_cache + slots[s] * row_bytes, (const char *)k_new + s * k_stride * elem, row_bytes);
                memcpy((char *)v_cache + slots[s] * row_bytes, (const char *)v_new + s * v_stride * elem, row_bytes);
            }
    long max_ctx = 1;
    for (long s = 0; s < S; s++) max_ctx = lens[s] > max_ctx ? lens[s] : max_ctx;
    if (threads < 1) threads = 1;
    /* tasks: (sequence, a range of its KV heads); a batch smaller than the thread count splits heads */
    long parts = S >= threads ? 1 : (threads + S - 1) / S;
    if (parts > kvh) parts = kvh;
    long per = H * max_ctx + H + H * D; /* each thread's scores [H, max_ctx], sums [H], acc [H, D] */
    float *buf = malloc(sizeof(float) * threads * per);
    if (!buf) return -1;
    #pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1 && S * parts > 1)
    for (long task = 0; task < S * parts; task++) {
        long s = task / parts, part = task % parts;
        float *scores = buf + omp_get_thread_num() * per;
        attend(D, kv_bf16, q + s * q_stride, H, kvh, part * kvh / parts, (part + 1) * kvh / parts, k_cache, v_cache,
               tables + s * max_blocks, lens[s], bs, scale, out + s * H * D, scores, scores + H * max_ctx,
               scores + H * max_ctx + H);
    }
    free(buf);
    return 0;
}

int paged_prefill(const float *q, const void *k_cache, const void *v_cache, const long *qsl,
                  const long *tables, long max_blocks, const long *lens, long S, long H, long kvh, long D,
                  long bs, float scale, float *out, int threads, int kv_bf16) {
    if (bad_shape(H, kvh, D, bs)) return -1;
    long T = qsl[S], max_ctx = 1;
    if (T < 1) return 0;
    for (long s = 0; s < S; s++) max_ctx = lens[s] > max_ctx ? lens[s] : max_ctx;
    if (threads < 1) threads = 1;
    long per = H * max_ctx + H + H * D;
    float *buf = malloc(sizeof(float) * threads * per);
    long *seq_of = malloc(sizeof(long) * T);
    if (!buf || !seq_of) {
        free(buf);
        free(seq_of);
        return -1;
    }
    for (long s = 0; s < S; s++)
        for (long i = qsl[s]; i < qsl[s + 1]; i++) seq_of[i] = s;
    #pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1 && T > 1)
    for (long i = 0; i < T; i++) {
        long s = seq_of[i], ctx = lens[s] - (qsl[s + 1] - i) + 1; /* causal: up to this token's position */
        float *scores = buf + omp_get_thread_num() * per;
        attend(D, kv_bf16, q + i * H * D, H, kvh, 0, kvh, k_cache, v_cache, tables + s * max_blocks, ctx, bs, scale,
               out + i * H * D, scores, scores + H * max_ctx, scores + H * max_ctx + H);
    }
    free(buf);
    free(seq_of);
    return 0;
}
