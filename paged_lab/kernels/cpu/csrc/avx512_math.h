/* AVX-512 math shared by the C kernels (paged_attention.c, layer_ops.c): one definition of e^x.
 * Included, not compiled alone; build.load_library hashes every header of csrc/ into its build key. */
#ifndef PAGED_LAB_AVX512_MATH_H
#define PAGED_LAB_AVX512_MATH_H

#include <immintrin.h>

/* e^x for x <= 0 (scores minus their max): x = n ln2 + r, |r| <= ln2 / 2, Taylor to r^7 (relative
 * error about 1e-8, under fp32 rounding), then scale by 2^n. */
static inline __m512 exp_neg(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-103.0f)); /* e^-103 is 0 in fp32 */
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

#endif
