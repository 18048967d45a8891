#endif /* TC_PRELUDE_INCLUDED */
/* ---- end of the tcjit prelude ---- */
