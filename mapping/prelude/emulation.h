static int64_t tc_stride(int64_t n) {
  int64_t s = n / 2 + 1;
  for (;; s++) {
    int64_t a = s, b = n;
    while (b) { int64_t r = a % b; a = b; b = r; }
    if (a == 1) return s;
  }
}
/* Race check: the last write to each element of a written tensor, by (global block + 1, thread,
 * barrier phase). Another block of the same launch, or another thread of the same block in the
 * same phase, touching an element written since the launch began is a race: the first found
 * sets error slot 0 to `code` (-2 - the tensor's number) and slot 1 to the element's offset.
 * Every access is checked against the tensor's `span` elements first (tc_inside): one outside
 * (a mapping bug: on a GPU it reads or corrupts memory) sets slot 2 to 1 + the tensor's number
 * (written tensors, then inputs), overriding a race, and is not made: the check returns 0. */
static inline int tc_inside(int64_t offset, int64_t span, int64_t tensor, int64_t *errors) {
  if (offset >= 0 && offset < span) return 1;
  if (!errors[2]) { errors[0] = -2 - tensor; errors[1] = offset; errors[2] = 1 + tensor; }
  return 0;
}
typedef struct { int64_t block, thread, phase; } tc_shadow;
static inline int tc_race(tc_shadow *shadow, int64_t span, int write, int64_t block, int64_t thread,
                         int64_t first, int64_t phase, int64_t code, int64_t offset, int64_t *errors) {
  if (!tc_inside(offset, span, -2 - code, errors)) return 0;
  tc_shadow *s = shadow + offset;
  if (s->block > first && (s->block != block + 1 || (s->phase == phase && s->thread != thread))) {
    if (errors[0] == 0) { errors[0] = code; errors[1] = offset; }
  }
  if (write) { s->block = block + 1; s->thread = thread; s->phase = phase; }
  return 1;
}
/* The same for a block's promoted buffer, reset when a block starts, with reads tracked too:
 * another thread of the block reading or writing an element written in the same barrier
 * interval, or writing one read in it (reader -1: several threads), is a race. */
typedef struct { int64_t writer, wphase, reader, rphase; } tc_bshadow;
static inline void tc_brace(tc_bshadow *s, int write, int64_t thread, int64_t phase, int64_t code,
                            int64_t offset, int64_t *errors) {
  int64_t me = thread + 1;
  int conflict = (s->writer && s->wphase == phase && s->writer != me)
                 || (write && s->reader && s->rphase == phase && s->reader != me);
  if (conflict && errors[0] == 0) { errors[0] = code; errors[1] = offset; }
  if (write) { s->writer = me; s->wphase = phase; }
  else if (!s->reader || s->rphase != phase) { s->reader = me; s->rphase = phase; }
  else if (s->reader != me) s->reader = -1;
}
static inline int64_t tc_perm(int64_t i, int64_t n, int64_t s, int64_t order) {
  if (order == 1) return n - 1 - i;
  if (order == 2)
    return (int64_t)(((unsigned __int128)i * (uint64_t)s + (uint64_t)(n / 3)) % (uint64_t)n);
  return i;
}

