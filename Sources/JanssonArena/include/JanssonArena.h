#ifndef HK_JANSSON_ARENA_H
#define HK_JANSSON_ARENA_H
// A bump arena for jansson's allocations while one thread parses one text (arena.c says why).

// From here until hk_arena_end, jansson's allocations on this thread come from the thread's arena
// and its frees are no-ops. Installs the allocator on first use.
void hk_arena_begin(void);
// Releases what the arena took (keeping its first 64 KiB for the next text). Every jansson value made
// since hk_arena_begin must be freed (decref'd) before this.
void hk_arena_end(void);
#endif
