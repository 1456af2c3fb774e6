#ifndef HK_LOADER_H
#define HK_LOADER_H
#include <stddef.h>

// Opens the first of `files` (NULL-terminated) that loads and fills each `*slots[i]` with symbol
// `names[i]` (`count` of them). Returns NULL, or what failed in `message` (`need` says what the
// library is for, when none of the files opens).
const char *hk_open_library(const char *const *files, const char *need, const char *const *names, void **const *slots,
                            size_t count, char *message, size_t size);

// For a loader's functions called before their library loaded: a bug of the caller. Prints `error`
// and aborts.
void hk_library_missing(const char *error) __attribute__((noreturn));
#endif
