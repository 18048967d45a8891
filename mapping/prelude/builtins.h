
/* ======================================================================================
 * Builtins that glibc lacks or that differ from CUDA's. Float versions compute in double and
 * round once (as the oracle does); the double versions are accurate to a few ulps unless noted.
 * ====================================================================================== */

/* fdivide(x, y) = x / y, correctly rounded (not CUDA's approximate __fdividef). */
TC_FN float tc_fdivide_f32(float x, float y) { return x / y; }
TC_FN double tc_fdivide_f64(double x, double y) { return x / y; }

/* rsqrt(x) = 1 / sqrt(x): rsqrt(+-0) = +-inf, rsqrt(inf) = 0, NaN below 0. Two roundings in
 * double (< 1.5 ulp); the float version is then rounded once more from double. */
TC_FN double tc_rsqrt_f64(double x) { return 1.0 / sqrt(x); }
TC_FN float tc_rsqrt_f32(float x) { return (float)(1.0 / sqrt((double)x)); }

/* rcbrt(x) = 1 / cbrt(x): rcbrt(+-0) = +-inf, rcbrt(+-inf) = +-0. */
TC_FN double tc_rcbrt_f64(double x) { return 1.0 / cbrt(x); }
TC_FN float tc_rcbrt_f32(float x) { return (float)(1.0 / cbrt((double)x)); }

/* exp(x) in float, vectorisable (glibc's expf is a call gcc cannot vectorise without -ffast-math),
 * within an ulp: SLEEF's expf_u10 scheme. x = q ln2 + s with q = round(x / ln2) by the 1.5 * 2**23
 * shift (q sits in the low bits of the sum), s by a two-part ln2 (Cody and Waite), |s| <= ln2 / 2;
 * exp(s) = 1 + (s + s**2 P(s)) with SLEEF's minimax P; the result is scaled by 2**q in two factors,
 * each a normal float, so results in the subnormal range and at the overflow edge are right. x is
 * first clamped to [-104, 89], where the result still rounds to 0 or overflows to inf; a NaN passes
 * through the clamp (comparisons are false) and stays a NaN. Branch-free and inlined, so it
 * vectorises in an 'omp simd' loop. */
TC_FN float tc_exp_f32(float x) {
    x = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x);
    float qs = x * 0x1.715476p+0f + 0x1.8p23f;
    int32_t qi;
    memcpy(&qi, &qs, sizeof qi);
    qi -= 0x4b400000;                           /* the bits of 1.5 * 2**23: q, an int */
    float q = qs - 0x1.8p23f;
    float s = x - q * 0x1.62e4p-1f;             /* ln2 = 0x1.62e4p-1 + 0x1.7f7d1cp-20 */
    s = s - q * 0x1.7f7d1cp-20f;
    float u = 0x1.a057b4p-13f;
    u = u * s + 0x1.6d2d92p-10f;
    u = u * s + 0x1.11114cp-7f;
    u = u * s + 0x1.5554f4p-5f;
    u = u * s + 0x1.555556p-3f;
    u = u * s + 0x1p-1f;
    u = ((s * s) * u + s) + 1.0f;
    int32_t h = qi >> 1;
    /* Shifted unsigned: for a NaN x, qi holds NaN's bits and a signed shift would overflow (UB). */
    uint32_t b1 = (uint32_t)(h + 127) << 23, b2 = (uint32_t)(qi - h + 127) << 23;
    float f1, f2;
    memcpy(&f1, &b1, sizeof f1);
    memcpy(&f2, &b2, sizeof f2);
    return u * f1 * f2;
}

/* exp10(x) = 10**x through pow (10 is exact, glibc's pow is correctly rounded in practice);
 * portable (exp10 is a GNU extension). */
TC_FN double tc_exp10_f64(double x) { return pow(10.0, x); }
TC_FN float tc_exp10_f32(float x) { return powf(10.0f, x); }

/* sigmoid(x) = 1 / (1 + exp(-x)), with exp(-|x|) so that neither tail overflows (sigmoid(-inf)
 * = 0, sigmoid(inf) = 1). */
TC_FN double tc_sigmoid_f64(double x) {
    double e = exp(-fabs(x));
    return x >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}
TC_FN float tc_sigmoid_f32(float x) { return (float)tc_sigmoid_f64((double)x); }

