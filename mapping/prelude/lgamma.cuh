/* lgamma(x) = log|Gamma(x)| (+inf at the poles): CUDA's lgamma, which writes no signgam
 * and is thread-safe on the device. The float version computes in double, as on the CPU. */
TC_FN double tc_lgamma_f64(double x) { return lgamma(x); }
TC_FN float tc_lgamma_f32(float x) { return (float)lgamma((double)x); }
