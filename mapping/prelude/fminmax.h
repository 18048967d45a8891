/* fmax and fmin (NaN operands ignored, ties give the first operand: glibc's), vectorisable. */
TC_FN float tc_fmax_f32(float a, float b) { return (a >= b || b != b) ? a : b; }
TC_FN float tc_fmin_f32(float a, float b) { return (a <= b || b != b) ? a : b; }
TC_FN double tc_fmax_f64(double a, double b) { return (a >= b || b != b) ? a : b; }
TC_FN double tc_fmin_f64(double a, double b) { return (a <= b || b != b) ? a : b; }
#ifdef _OPENMP
/* They are associative and commutative (but for the sign of a zero result), so a max= or min=
 * reduction loop may run in vector lanes: 'omp simd reduction(tc_fmax_f32:acc)'. The identity is
 * the one the language's initialisation writes. */
#pragma omp declare reduction(tc_fmax_f32 : float : omp_out = tc_fmax_f32(omp_out, omp_in)) \
    initializer(omp_priv = -HUGE_VALF)
#pragma omp declare reduction(tc_fmin_f32 : float : omp_out = tc_fmin_f32(omp_out, omp_in)) \
    initializer(omp_priv = HUGE_VALF)
#pragma omp declare reduction(tc_fmax_f64 : double : omp_out = tc_fmax_f64(omp_out, omp_in)) \
    initializer(omp_priv = -HUGE_VAL)
#pragma omp declare reduction(tc_fmin_f64 : double : omp_out = tc_fmin_f64(omp_out, omp_in)) \
    initializer(omp_priv = HUGE_VAL)
#endif

