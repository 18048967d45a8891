/* ---- sin(pi x), cos(pi x) -------------------------------------------------------------
 * The argument is reduced modulo 2 exactly (fmod is exact), folded into [0, 1/2] by exact
 * subtractions, and pi * t is carried as a double-double hi + lo (the error of the product from
 * an fma), so that sin(pi t) = sin(hi) + lo cos(hi) is within about an ulp. sinpi(n) = +-0 with
 * the sign of x, cospi(n + 1/2) = +0, +-inf and NaN give NaN. */
TC_FN double tc__sinpi_small(double t) { /* 0 <= t <= 1/4 */
    double hi = t * TC_PI_HI;
    double lo = fma(t, TC_PI_HI, -hi) + t * TC_PI_LO;
    return sin(hi) + lo * cos(hi);
}
TC_FN double tc__cospi_small(double t) { /* 0 <= t <= 1/4 */
    double hi = t * TC_PI_HI;
    double lo = fma(t, TC_PI_HI, -hi) + t * TC_PI_LO;
    return cos(hi) - lo * sin(hi);
}
TC_FN double tc_sinpi_f64(double x) {
    double a = fabs(fmod(x, 2.0)); /* NaN for +-inf */
    int flip = a >= 1.0;
    double b = flip ? a - 1.0 : a; /* sin(pi (b + 1)) = -sin(pi b), b in [0, 1) */
    if (b > 0.5) b = 1.0 - b;      /* sin(pi (1 - b)) = sin(pi b), b in [0, 1/2] */
    double v = b <= 0.25 ? tc__sinpi_small(b) : tc__cospi_small(0.5 - b);
    if (flip != (signbit(x) != 0)) v = -v;
    return v == 0 ? copysign(0.0, x) : v;
}
TC_FN double tc_cospi_f64(double x) {
    double a = fabs(fmod(x, 2.0));
    if (a > 1.0) a = 2.0 - a; /* cos(pi (2 - a)) = cos(pi a), a in [0, 1] */
    int flip = a > 0.5;
    double b = flip ? 1.0 - a : a; /* cos(pi (1 - a)) = -cos(pi a), b in [0, 1/2] */
    double v = b <= 0.25 ? tc__cospi_small(b) : tc__sinpi_small(0.5 - b);
    if (flip) v = -v;
    return v == 0 ? 0.0 : v;
}
TC_FN float tc_sinpi_f32(float x) { return (float)tc_sinpi_f64((double)x); }
TC_FN float tc_cospi_f32(float x) { return (float)tc_cospi_f64((double)x); }

/* ---- Euclidean norms -----------------------------------------------------------------
 * norm = sqrt(sum x_i**2) without spurious overflow or underflow: when the largest |x_i| lies
 * outside [2**-500, 2**500] all are scaled by 2**-+600 (exact) first. Any infinite argument
 * gives inf (even with a NaN), else NaN propagates; rnorm = 1 / norm (inf for all zeros, 0 if
 * any is infinite). Float versions: the squares of floats are exact in double and cannot
 * overflow, so no scaling is needed. */
TC_FN double tc__norm_scale(double a, double b, double c, double d) {
    double m = fmax(fmax(fabs(a), fabs(b)), fmax(fabs(c), fabs(d)));
    return m > 0x1p500 ? 0x1p-600 : (m < 0x1p-500 ? 0x1p600 : 1.0);
}
TC_FN double tc__sumsq(double a, double b, double c, double d) { return a * a + b * b + c * c + d * d; }
TC_FN double tc_norm3d_f64(double a, double b, double c) {
    if (isinf(a) || isinf(b) || isinf(c)) return INFINITY;
    double s = tc__norm_scale(a, b, c, 0.0);
    return sqrt(tc__sumsq(a * s, b * s, c * s, 0.0)) / s;
}
TC_FN double tc_norm4d_f64(double a, double b, double c, double d) {
    if (isinf(a) || isinf(b) || isinf(c) || isinf(d)) return INFINITY;
    double s = tc__norm_scale(a, b, c, d);
    return sqrt(tc__sumsq(a * s, b * s, c * s, d * s)) / s;
}
TC_FN double tc_rhypot_f64(double a, double b) {
    if (isinf(a) || isinf(b)) return 0.0;
    double s = tc__norm_scale(a, b, 0.0, 0.0);
    return s / sqrt(tc__sumsq(a * s, b * s, 0.0, 0.0));
}
TC_FN double tc_rnorm3d_f64(double a, double b, double c) {
    if (isinf(a) || isinf(b) || isinf(c)) return 0.0;
    double s = tc__norm_scale(a, b, c, 0.0);
    return s / sqrt(tc__sumsq(a * s, b * s, c * s, 0.0));
}
TC_FN double tc_rnorm4d_f64(double a, double b, double c, double d) {
    if (isinf(a) || isinf(b) || isinf(c) || isinf(d)) return 0.0;
    double s = tc__norm_scale(a, b, c, d);
    return s / sqrt(tc__sumsq(a * s, b * s, c * s, d * s));
}
TC_FN double tc__sq(float x) { return (double)x * (double)x; }
TC_FN float tc_norm3d_f32(float a, float b, float c) {
    if (isinf(a) || isinf(b) || isinf(c)) return INFINITY;
    return (float)sqrt(tc__sq(a) + tc__sq(b) + tc__sq(c));
}
TC_FN float tc_norm4d_f32(float a, float b, float c, float d) {
    if (isinf(a) || isinf(b) || isinf(c) || isinf(d)) return INFINITY;
    return (float)sqrt(tc__sq(a) + tc__sq(b) + tc__sq(c) + tc__sq(d));
}
TC_FN float tc_rhypot_f32(float a, float b) {
    if (isinf(a) || isinf(b)) return 0.0f;
    return (float)(1.0 / sqrt(tc__sq(a) + tc__sq(b)));
}
TC_FN float tc_rnorm3d_f32(float a, float b, float c) {
    if (isinf(a) || isinf(b) || isinf(c)) return 0.0f;
    return (float)(1.0 / sqrt(tc__sq(a) + tc__sq(b) + tc__sq(c)));
}
TC_FN float tc_rnorm4d_f32(float a, float b, float c, float d) {
    if (isinf(a) || isinf(b) || isinf(c) || isinf(d)) return 0.0f;
    return (float)(1.0 / sqrt(tc__sq(a) + tc__sq(b) + tc__sq(c) + tc__sq(d)));
}

/* ---- The normal distribution and the error function family -------------------------- */

/* normcdf(x) = erfc(-x / sqrt(2)) / 2, accurate in the lower tail (no 1 + erf cancellation).
 * -x / sqrt(2) is carried as a double-double zh + zl (the product's error from an fma, plus the
 * constant's low part); zl enters through erfc' = -2 / sqrt(pi) exp(-z**2). */
TC_FN double tc_normcdf_f64(double x) {
    double zh = -x * TC_SQRT1_2_HI;
    double zl = fma(-x, TC_SQRT1_2_HI, -zh) - x * TC_SQRT1_2_LO;
    double corr = zl * TC_TWO_OVER_SQRT_PI * exp(-zh * zh);
    if (!isfinite(corr)) corr = 0.0; /* x = +-inf */
    return 0.5 * (erfc(zh) - corr);
}
TC_FN float tc_normcdf_f32(float x) { return (float)tc_normcdf_f64((double)x); }

/* erfcx(x) = exp(x**2) erfc(x).
 * x < 12: exp(x**2) with x**2 = p + e exact (fma), exp(p + e) = exp(p) (1 + e), times glibc's
 *   erfc (no cancellation on either side; below -26.6 the result overflows to inf, as it should).
 * x >= 12: the asymptotic series erfcx(x) = 1 / (x sqrt(pi)) sum_n (-1)**n (2n - 1)!! / (2x**2)**n
 *   (Abramowitz & Stegun 7.1.23); at x = 12 its terms fall below 2**-56 after 11 terms, far
 *   before the smallest one (about exp(-144)). */
TC_FN double tc_erfcx_f64(double x) {
    if (x < 12.0) {
        double p = x * x;
        double e = fma(x, x, -p);
        double ex = exp(p);
        if (isfinite(ex)) ex += ex * e;
        return ex * erfc(x);
    }
    if (isnan(x)) return x;
    double t = 0.5 / (x * x); /* 0 when x * x overflows */
    double term = 1.0, sum = 1.0;
    for (int n = 1; n <= 16; ++n) {
        term *= -(2 * n - 1) * t;
        sum += term;
        if (fabs(term) < 0x1p-56) break;
    }
    return sum * (TC_INV_SQRT_PI / x);
}
TC_FN float tc_erfcx_f32(float x) { return (float)tc_erfcx_f64((double)x); }

/* The inverse of the normal CDF by Wichura's algorithm AS 241 (PPND16, Applied Statistics 37
 * (1988) 477-484; about 1e-16 relative): a rational function of r = 0.180625 - q**2 in the
 * centre |q| = |p - 1/2| <= 0.425, of r = sqrt(-log(min(p, 1 - p))) - 1.6 or - 5 in the tails.
 * The callers hand in q (or its multiple) and log(min(p, 1 - p)) computed without rounding p,
 * which is what makes erfinv and erfcinv accurate near 0, 1 and 2. */
TC_FN double tc__ppnd16_centre(double r) { /* ndtri(p) = q * this */
    double num = ((((((((2.5090809287301226727e+3 * r + 3.3430575583588128105e+4) * r
                     + 6.7265770927008700853e+4) * r + 4.5921953931549871457e+4) * r
                     + 1.3731693765509461125e+4) * r + 1.9715909503065514427e+3) * r
                     + 1.3314166789178437745e+2) * r + 3.3871328727963666080e+0));
    double den = ((((((((5.2264952788528545610e+3 * r + 2.8729085735721942674e+4) * r
                     + 3.9307895800092710610e+4) * r + 2.1213794301586595867e+4) * r
                     + 5.3941960214247511077e+3) * r + 6.8718700749205790830e+2) * r
                     + 4.2313330701600911252e+1) * r + 1.0));
    return num / den;
}
TC_FN double tc__ppnd16_tail(double log_pmin) { /* |ndtri(p)| from log(min(p, 1 - p)) */
    double r = sqrt(-log_pmin);
    if (r <= 5.0) {
        r -= 1.6;
        double num = (((((((7.74545014278341407640e-4 * r + 2.27238449892691845833e-2) * r
                        + 2.41780725177450611770e-1) * r + 1.27045825245236838258e+0) * r
                        + 3.64784832476320460504e+0) * r + 5.76949722146069140550e+0) * r
                        + 4.63033784615654529590e+0) * r + 1.42343711074968357734e+0);
        double den = (((((((1.05075007164441684324e-9 * r + 5.47593808499534494600e-4) * r
                        + 1.51986665636164571966e-2) * r + 1.48103976427480074590e-1) * r
                        + 6.89767334985100004550e-1) * r + 1.67638483018380384940e+0) * r
                        + 2.05319162663775882187e+0) * r + 1.0);
        return num / den;
    }
    r -= 5.0;
    double num = (((((((2.01033439929228813265e-7 * r + 2.71155556874348757815e-5) * r
                    + 1.24266094738807843860e-3) * r + 2.65321895265761230930e-2) * r
                    + 2.96560571828504891230e-1) * r + 1.78482653991729133580e+0) * r
                    + 5.46378491116411436990e+0) * r + 6.65790464350110377720e+0);
    double den = (((((((2.04426310338993978564e-15 * r + 1.42151175831644588870e-7) * r
                    + 1.84631831751005468180e-5) * r + 7.86869131145613259100e-4) * r
                    + 1.48753612908506148525e-2) * r + 1.36929880922735805310e-1) * r
                    + 5.99832206555887937690e-1) * r + 1.0);
    return num / den;
}

/* normcdfinv(p): -inf at 0, inf at 1, NaN outside [0, 1]. */
TC_FN double tc_normcdfinv_f64(double p) {
    if (!(p > 0.0 && p < 1.0)) return p == 0.0 ? -INFINITY : (p == 1.0 ? INFINITY : NAN);
    double q = p - 0.5;
    if (fabs(q) <= 0.425) return q * tc__ppnd16_centre(0.180625 - q * q);
    double v = tc__ppnd16_tail(log(q < 0.0 ? p : 1.0 - p)); /* 1 - p is exact here */
    return q < 0.0 ? -v : v;
}
TC_FN float tc_normcdfinv_f32(float p) { return (float)tc_normcdfinv_f64((double)p); }

/* erfinv(y) = ndtri((1 + y) / 2) / sqrt(2): q = y / 2 and, in the tails, min(p, 1 - p) =
 * (1 - |y|) / 2 with 1 - |y| exact. erfinv(+-1) = +-inf, NaN outside [-1, 1], erfinv(-0) = -0. */
TC_FN double tc_erfinv_f64(double y) {
    double a = fabs(y);
    if (!(a < 1.0)) return a == 1.0 ? copysign(INFINITY, y) : (isnan(y) ? y : NAN);
    if (a <= 0.85) {
        double q = 0.5 * y;
        return y * (tc__ppnd16_centre(0.180625 - q * q) * (0.5 * TC_SQRT1_2_HI));
    }
    double v = tc__ppnd16_tail(log(1.0 - a) - TC_LN2) * TC_SQRT1_2_HI;
    return copysign(v, y);
}
TC_FN float tc_erfinv_f32(float y) { return (float)tc_erfinv_f64((double)y); }

/* erfcinv(x) = erfinv(1 - x) = -ndtri(x / 2) / sqrt(2); above 1, erfcinv(x) = -erfcinv(2 - x)
 * (2 - x exact). In the tail log(x / 2) is taken as log(x) - log(2), exact for subnormal x too.
 * erfcinv(0) = inf, erfcinv(2) = -inf, erfcinv(1) = +0, NaN outside [0, 2]. */
TC_FN double tc_erfcinv_f64(double x) {
    if (!(x > 0.0 && x < 2.0)) return x == 0.0 ? INFINITY : (x == 2.0 ? -INFINITY : (isnan(x) ? x : NAN));
    int upper = x > 1.0;
    double y = upper ? 2.0 - x : x; /* in (0, 1] */
    double v;
    if (y >= 0.15) {
        double t = 1.0 - y; /* erfinv's argument, in [0, 0.85] */
        double q = 0.5 * t;
        v = t * (tc__ppnd16_centre(0.180625 - q * q) * (0.5 * TC_SQRT1_2_HI));
    } else {
        v = tc__ppnd16_tail(log(y) - TC_LN2) * TC_SQRT1_2_HI;
    }
    return upper ? -v : v;
}
TC_FN float tc_erfcinv_f32(float x) { return (float)tc_erfcinv_f64((double)x); }

/* ---- Modified Bessel functions of the first kind, orders 0 and 1 ---------------------
 * |x| <= 25: the power series I_n(x) = (x/2)**n sum_k (x**2/4)**k / (k! (k + n)!) (A&S 9.6.10),
 *   all terms positive, summed until they fall below 2**-56 of the sum (at most ~50 terms), with
 *   x**2 / 4 carried to double-double accuracy.
 * |x| > 25: the Hankel expansion I_n(x) = exp(x) / sqrt(2 pi x) sum_k (-1)**k a_k(n) / x**k with
 *   a_k = prod_{j<=k} (4n**2 - (2j - 1)**2) / (k! 8**k) (A&S 9.7.1); its smallest term is about
 *   exp(-2x) < 2**-72, reached well after the 2**-56 cut-off (at most ~20 terms). Above 700,
 *   exp(x) is applied in two halves so the result does not overflow before it must (x > 713.98).
 * I0 is even, I1 odd; I0(+-inf) = inf, I1(+-inf) = +-inf. */
TC_FN double tc__bessel_i(double a, int n) { /* I_n(a), a >= 0 finite */
    if (a <= 25.0) {
        double p = a * a;
        double z = 0.25 * p, zl = 0.25 * fma(a, a, -p); /* x**2 / 4 = z + zl */
        double term = n ? 0.5 * a : 1.0, sum = term, ksum = 0.0;
        for (int k = 1; k < 100; ++k) {
            term *= z / ((double)k * (double)(k + n));
            sum += term;
            ksum += k * term;
            if (term <= sum * 0x1p-56) break;
        }
        /* The terms used z, not z + zl: add zl * d(sum)/dz = zl * sum_k k term_k / z, which
         * removes the error that rounding z would otherwise put into every term, k times. */
        return z > 0.0 ? sum + ksum * (zl / z) : sum;
    }
    double mu = 4.0 * n * n, t = 0.125 / a;
    double term = 1.0, sum = 1.0;
    for (int k = 1; k < 40; ++k) {
        double odd = 2.0 * k - 1.0;
        term *= -(mu - odd * odd) * t / k;
        sum += term;
        if (fabs(term) <= sum * 0x1p-56) break;
    }
    double s = sum * TC_INV_SQRT_2PI / sqrt(a);
    if (a <= 700.0) return exp(a) * s;
    double h = exp(0.5 * a);
    return h * (h * s);
}
TC_FN double tc_cyl_bessel_i0_f64(double x) {
    double a = fabs(x);
    if (isnan(x) || isinf(x)) return a;
    return tc__bessel_i(a, 0);
}
TC_FN double tc_cyl_bessel_i1_f64(double x) {
    if (isnan(x) || isinf(x)) return x;
    return copysign(tc__bessel_i(fabs(x), 1), x);
}
TC_FN float tc_cyl_bessel_i0_f32(float x) { return (float)tc_cyl_bessel_i0_f64((double)x); }
TC_FN float tc_cyl_bessel_i1_f32(float x) { return (float)tc_cyl_bessel_i1_f64((double)x); }

