/* Round-trip latency driver: spawns a program with pipes on stdin/stdout, then for each line of a
 * request file writes the line, waits for one response line, and records the time. Prints the
 * latencies in nanoseconds, one per line, to stdout. Usage: rtt REQUESTS_FILE WARMUP -- PROGRAM ARGS... */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 5 || strcmp(argv[3], "--") != 0) {
        fprintf(stderr, "usage: rtt REQUESTS_FILE WARMUP -- PROGRAM ARGS...\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    FILE *requests = fopen(argv[1], "r");
    if (!requests) { perror("requests"); return 2; }
    long warmup = atol(argv[2]);
    int to_child[2], from_child[2];
    if (pipe(to_child) || pipe(from_child)) { perror("pipe"); return 2; }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(to_child[0], 0);
        dup2(from_child[1], 1);
        close(to_child[1]);
        close(from_child[0]);
        execvp(argv[4], argv + 4);
        perror("exec");
        _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    static char buf[1 << 20];
    long index = 0;
    while ((len = getline(&line, &cap, requests)) > 0) {
        long long start = now_ns();
        ssize_t off = 0;
        while (off < len) {
            ssize_t n = write(to_child[1], line + off, len - off);
            if (n < 0) { if (errno == EINTR) continue; perror("write"); return 1; }
            off += n;
        }
        for (;;) {
            ssize_t n = read(from_child[0], buf, sizeof buf);
            if (n <= 0) { fprintf(stderr, "child closed its output\n"); return 1; }
            if (buf[n - 1] == '\n') break;
        }
        long long elapsed = now_ns() - start;
        if (index++ >= warmup) printf("%lld\n", elapsed);
    }
    close(to_child[1]);
    int status;
    waitpid(pid, &status, 0);
    return 0;
}
