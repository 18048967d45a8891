
/* Index arithmetic (subscripts): floor division and modulo on int64, like Python's // and %;
 * by zero gives 0; MIN // -1 wraps to MIN. */
TC_FN int64_t tc_floordiv_i64(int64_t a, int64_t b) {
    int64_t d = (b == 0 || b == -1) ? 1 : b;
    int64_t q = a / d, r = a % d;
    q -= (int64_t)((r != 0) & ((r ^ d) < 0)); /* truncated quotient -> floor */
    int64_t neg = (int64_t)(0u - (uint64_t)a);
    return b == 0 ? 0 : (b == -1 ? neg : q);
}
TC_FN int64_t tc_floormod_i64(int64_t a, int64_t b) {
    int64_t d = (b == 0 || b == -1) ? 1 : b;
    int64_t r = a % d;
    r += ((r != 0) & ((r ^ d) < 0)) ? d : 0; /* the sign of the divisor */
    return (b == 0 || b == -1) ? 0 : r;
}

/* ======================================================================================
 * Conversions (tcjit.reference.convert). Float -> integer: truncate toward zero; NaN and
 * +-inf give 0; clamp to [-2**63, 2**63 - 1024] (2**63 - 1024 is the largest double below
 * 2**63); the caller narrows the int64 with a C cast (low bits kept). To uint64, values in
 * [2**63, 2**64) first subtract 2**64 (exactly), so they map to their bit patterns.
 * ====================================================================================== */
TC_FN int64_t tc_f64_to_i64(double x) {
    if (!isfinite(x)) return 0;
    if (x <= -0x1p63) return INT64_MIN;
    if (x >= 0x1p63) return INT64_C(0x7FFFFFFFFFFFFC00);
    return (int64_t)x; /* C truncates toward zero */
}
TC_FN uint64_t tc_f64_to_u64(double x) {
    if (x >= 0x1p63) x -= 0x1p64; /* exact below 2**64; inf stays inf (-> 0) */
    return (uint64_t)tc_f64_to_i64(x);
}
