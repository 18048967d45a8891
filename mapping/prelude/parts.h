#ifndef TC_PART_OF
#define TC_PART_OF(number) 1
#define TC_REGION static
#else
#define TC_REGION __attribute__((visibility("hidden")))
#endif
