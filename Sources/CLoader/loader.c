// What CLibPQ's and CCurl's loaders share: opening a library on first use and looking up the functions
// the kernel calls (those loaders say why the kernel does not link them).
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include "CLoader.h"

const char *hk_open_library(const char *const *files, const char *need, const char *const *names, void **const *slots,
                            size_t count, char *message, size_t size) {
    void *lib = NULL;
    for (const char *const *f = files; *f && !lib; f++) lib = dlopen(*f, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(message, size, "%s needs %s: %s", need, files[0], dlerror());
        return message;
    }
    for (size_t i = 0; i < count; i++) {
        if (!(*slots[i] = dlsym(lib, names[i]))) {
            snprintf(message, size, "%s lacks %s", files[0], names[i]);
            return message;
        }
    }
    return NULL;
}

void hk_library_missing(const char *error) {
    fprintf(stderr, "healthkernel: %s\n", error);
    abort();
}
