/* lgamma(x) = log|Gamma(x)| by glibc's reentrant lgamma_r (+inf at the poles). glibc's lgammaf
 * is up to 5 ulps off: the float version computes in double. */
TC_FN double tc_lgamma_f64(double x) {
    int sign;
    return lgamma_r(x, &sign);
}
TC_FN float tc_lgamma_f32(float x) {
    int sign;
    return (float)lgamma_r((double)x, &sign);
}
