/* jansson's own speed on the benchmark's request lines: json_loadb (with the flags the kernel uses)
 * and json_decref for every line of a file, on one core. Prints lines per second. This is the ceiling
 * for one parsing core, whatever the kernel does around it. Usage: jparse FILE */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: jparse FILE\n"); return 2; }
    FILE *f = fopen(argv[1], "rb");
    if (!f) { perror("open"); return 2; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *bytes = malloc(n);
    if (!bytes || fread(bytes, 1, n, f) != (size_t)n) { perror("read"); return 2; }
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    long lines = 0;
    for (char *p = bytes, *end = bytes + n; p < end;) {
        char *nl = memchr(p, '\n', end - p);
        if (!nl) nl = end;
        json_error_t error;
        json_t *value = json_loadb(p, nl - p, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &error);
        if (!value) { fprintf(stderr, "line %ld: %s\n", lines + 1, error.text); return 1; }
        json_decref(value);
        lines++;
        p = nl + 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double seconds = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
    printf("%.3f\n", lines / seconds);
    return 0;
}
