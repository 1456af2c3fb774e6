#ifndef HK_LIBPQ_H
#define HK_LIBPQ_H
// libpq's own header: the kernel calls libpq's functions by their names, and loader.c defines each of
// them as a call into libpq.so.5, opened on first use (see there why).
#include <postgresql/libpq-fe.h>

// Opens libpq.so.5 and looks up every function the kernel calls; 1 on success, else 0 with `error`
// saying what is missing. Safe to call from any thread, any number of times.
int hk_pq_load(const char **error);
#endif
