
/* Float versions that are glibc's double function rounded once: glibc's own float versions
 * are 2 to 3 ulps off (acoshf atanhf coshf sinhf tanhf log10f erfcf) or more (tgammaf: 6,
 * j0f j1f y0f y1f: 9 near their zeros). */
TC_FN float tc_acosh_f32(float x) { return (float)acosh((double)x); }
TC_FN float tc_atanh_f32(float x) { return (float)atanh((double)x); }
TC_FN float tc_cosh_f32(float x) { return (float)cosh((double)x); }
TC_FN float tc_sinh_f32(float x) { return (float)sinh((double)x); }
TC_FN float tc_tanh_f32(float x) { return (float)tanh((double)x); }
TC_FN float tc_log10_f32(float x) { return (float)log10((double)x); }
TC_FN float tc_erfc_f32(float x) { return (float)erfc((double)x); }
TC_FN float tc_tgamma_f32(float x) { return (float)tgamma((double)x); }
TC_FN float tc_j0_f32(float x) { return (float)j0((double)x); }
TC_FN float tc_j1_f32(float x) { return (float)j1((double)x); }
TC_FN float tc_y0_f32(float x) { return (float)y0((double)x); }
TC_FN float tc_y1_f32(float x) { return (float)y1((double)x); }

