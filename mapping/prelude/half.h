
/* ======================================================================================
 * float16 and bfloat16 storage (uint16_t). Round to nearest even, overflow to inf, NaN stays
 * NaN, subnormals exact. _Float16 (gcc >= 12 on x86-64: F16C instructions with -march=native)
 * is used for float16 when available; TC_NO_FLOAT16 forces the portable bit-level code.
 * ====================================================================================== */
#if defined(__FLT16_MAX__) && !defined(TC_NO_FLOAT16)
#define TC_HAVE_FLOAT16 1
__extension__ typedef _Float16 tc__float16; /* __extension__: no -Wpedantic warning */
#endif

/* |x| (finite, >= 0) rounded to nearest even in a binary format with p significand bits and
 * minimum normal exponent emin, computed in double with ONE rounding: with e = max(exponent(a),
 * emin), adding c = 2**(e - p + 53) leaves the sum with an ulp of exactly 2**(e - p + 1), the
 * target's ulp at a (or its subnormal spacing), so the hardware rounds at the right bit; the
 * subtraction is exact. Needs round-to-nearest and no -ffast-math reassociation. */
TC_FN double tc__round_narrow(double a, int p, int emin) {
    uint64_t bits;
    memcpy(&bits, &a, sizeof bits);
    int e = (int)((bits >> 52) & 0x7FF) - 1023;
    if (e < emin) e = emin;
    uint64_t cbits = (uint64_t)(e - p + 53 + 1023) << 52;
    double c;
    memcpy(&c, &cbits, sizeof c);
    double s = a + c; /* the one rounding */
    return s - c;
}

/* double -> float16 bits, rounded once. */
TC_FN uint16_t tc_d2h(double x) {
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    uint16_t sign = (uint16_t)((bits >> 48) & 0x8000u);
    double a = fabs(x);
    if (isnan(x)) return (uint16_t)(sign | 0x7E00u | ((bits >> 42) & 0x3FFu)); /* quiet NaN */
    if (!(a < 65536.0)) return (uint16_t)(sign | 0x7C00u);                    /* inf, overflow */
    double r = tc__round_narrow(a, 11, -14);
    if (r >= 65536.0) return (uint16_t)(sign | 0x7C00u); /* rounded up past 65504 */
    if (r < 0x1p-14) return (uint16_t)(sign | (uint16_t)(r * 0x1p24)); /* subnormal: exact int */
    uint64_t rb;
    memcpy(&rb, &r, sizeof rb);
    uint16_t e = (uint16_t)(((rb >> 52) & 0x7FF) - 1023 + 15);
    return (uint16_t)(sign | (e << 10) | ((rb >> 42) & 0x3FFu));
}

/* float -> float16 bits. */
TC_FN uint16_t tc_f2h(float x) {
#ifdef TC_HAVE_FLOAT16
    tc__float16 v = (tc__float16)x;
    uint16_t h;
    memcpy(&h, &v, sizeof h);
    return h;
#else
    return tc_d2h((double)x); /* exact widening, then one rounding */
#endif
}

/* float16 bits -> float (exact). */
TC_FN float tc_h2f(uint16_t h) {
#ifdef TC_HAVE_FLOAT16
    tc__float16 v;
    memcpy(&v, &h, sizeof v);
    return (float)v;
#else
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    uint32_t bits;
    if (e == 0) {
        float f = (float)m * 0x1p-24f; /* zero or subnormal: exact */
        return sign ? -f : f;
    }
    if (e == 0x1F)
        bits = sign | 0x7F800000u | (m << 13); /* inf, NaN (payload kept) */
    else
        bits = sign | ((e + 112u) << 23) | (m << 13);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
#endif
}

/* bfloat16 bits -> float (exact: bfloat16 is the top half of a float). */
TC_FN float tc_bf2f(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* float -> bfloat16 bits: round the low 16 bits to nearest even (carries into the exponent
 * give the next binade or inf, as they should). */
TC_FN uint16_t tc_f2bf(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* double -> bfloat16 bits, rounded once. */
TC_FN uint16_t tc_d2bf(double x) {
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    uint16_t sign = (uint16_t)((bits >> 48) & 0x8000u);
    double a = fabs(x);
    if (isnan(x)) return (uint16_t)(sign | 0x7FC0u | ((bits >> 45) & 0x7Fu));
    if (!(a < 0x1p128)) return (uint16_t)(sign | 0x7F80u);
    double r = tc__round_narrow(a, 8, -126);
    if (r >= 0x1p128) return (uint16_t)(sign | 0x7F80u);
    if (r < 0x1p-126) return (uint16_t)(sign | (uint16_t)(r * 0x1p133));
    uint64_t rb;
    memcpy(&rb, &r, sizeof rb);
    uint16_t e = (uint16_t)(((rb >> 52) & 0x7FF) - 1023 + 127);
    return (uint16_t)(sign | (e << 7) | ((rb >> 45) & 0x7Fu));
}
