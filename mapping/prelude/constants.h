#define TC_PI_HI 0x1.921fb54442d18p+1           /* pi = TC_PI_HI + TC_PI_LO to ~2**-107 */
#define TC_PI_LO 0x1.1a62633145c07p-53
#define TC_SQRT1_2_HI 0x1.6a09e667f3bcdp-1      /* sqrt(1/2) = HI + LO */
#define TC_SQRT1_2_LO (-0x1.bdd3413b26456p-55)
#define TC_INV_SQRT_PI 0x1.20dd750429b6dp-1     /* 1 / sqrt(pi) */
#define TC_TWO_OVER_SQRT_PI 0x1.20dd750429b6dp+0 /* 2 / sqrt(pi) */
#define TC_INV_SQRT_2PI 0x1.9884533d43651p-2    /* 1 / sqrt(2 pi) */
#define TC_LN2 0x1.62e42fefa39efp-1             /* log(2) */
