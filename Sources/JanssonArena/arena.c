// jansson's allocations as a bump arena per parsing thread.
//
// A request line becomes a tree of jansson values that lives only until the kernel has converted it to
// its own values: made, read once, freed. With glibc's malloc a month of samples (12.8 MiB of text,
// about 134,000 objects) spent a quarter of its parsing thread in malloc and free (perf: consolidation,
// unlinking, heap growth by mprotect). Here allocation is a pointer bump into chunks of this thread's
// own, frees inside a parse cost a range check, and hk_arena_end gives the chunks back at once (big
// ones go straight to the system: glibc maps allocations this size). Allocations made outside a
// parse, and frees of them, go to malloc and free as before. A line's tree takes up to about twice
// what it would in malloc (jansson grows a string by allocating twice the size and freeing the old
// buffer, which here is not reused), for as long as the line is parsed.
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include "JanssonArena.h"

typedef struct chunk {
    struct chunk *next;
    size_t size;
    size_t used;
    int mapped;
    _Alignas(16) unsigned char data[];
} chunk;

// Chunks from 1 MiB up are mapped and unmapped directly: from malloc, freeing one would raise glibc's
// dynamic mmap threshold, and the next big line's chunks would stay resident in the heap after it.
enum { first_chunk = 64 << 10, largest_chunk = 8 << 20, mapped_chunk = 1 << 20 };

static chunk *new_chunk(size_t size) {
    size_t bytes = sizeof(chunk) + size;
    chunk *c;
    if (size >= mapped_chunk) {
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return NULL;
        c = p;
        c->mapped = 1;
    } else {
        if (!(c = malloc(bytes))) return NULL;
        c->mapped = 0;
    }
    c->size = size;
    c->used = 0;
    return c;
}

static void release(chunk *c) {
    if (c->mapped) {
        munmap(c, sizeof(chunk) + c->size);
    } else {
        free(c);
    }
}

static _Thread_local chunk *chunks;  // newest first
static _Thread_local int active;

static int owns(const void *p) {
    for (const chunk *c = chunks; c; c = c->next) {
        if ((const unsigned char *)p >= c->data && (const unsigned char *)p < c->data + c->size) return 1;
    }
    return 0;
}

static void *arena_malloc(size_t size) {
    if (!active) return malloc(size);
    size = (size + 15) & ~(size_t)15;
    chunk *c = chunks;
    if (!c || c->size - c->used < size) {
        // Each new chunk twice the last, up to 8 MiB: a short line stays in the first 64 KiB, a month's
        // tree takes a dozen chunks.
        size_t want = c ? c->size * 2 : first_chunk;
        if (want > largest_chunk) want = largest_chunk;
        if (want < size) want = size;
        chunk *fresh = new_chunk(want);
        if (!fresh) return NULL;
        fresh->next = c;
        chunks = c = fresh;
    }
    void *p = c->data + c->used;
    c->used += size;
    return p;
}

static void arena_free(void *p) {
    if (!p) return;
    if (active && owns(p)) return;
    free(p);
}

static pthread_once_t installed = PTHREAD_ONCE_INIT;

static void install(void) { json_set_alloc_funcs(arena_malloc, arena_free); }

void hk_arena_begin(void) {
    pthread_once(&installed, install);
    active = 1;
}

void hk_arena_end(void) {
    active = 0;
    // Keep the oldest chunk (the first 64 KiB) for the next text; give the rest back.
    chunk *c = chunks, *oldest = NULL;
    while (c) {
        chunk *next = c->next;
        if (next == NULL && c->size == first_chunk) {
            oldest = c;
        } else {
            release(c);
        }
        c = next;
    }
    if (oldest) oldest->used = 0;
    chunks = oldest;
}
