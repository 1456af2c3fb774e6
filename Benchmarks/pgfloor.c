/* The PostgreSQL floor for the scale-out benchmark: what a plain libpq client pays for the writes one
 * screentime.upload makes (the user's lock, its feed counter, one row upsert), in pipeline mode.
 *   pgfloor CONNINFO REQUESTS USERS PER_TRANSACTION
 * PER_TRANSACTION 1 is F1 (a transaction per request, as the kernel commits); 100 is F2 (a transaction
 * per 100 requests: what the server can do at best). Windows of 100 requests go out before their results
 * are read, as a kernel reads its input in batches. Prints the seconds taken. */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static PGconn *conn;

static void die(const char *what) {
    fprintf(stderr, "pgfloor: %s: %s\n", what, PQerrorMessage(conn));
    exit(1);
}

static void quiet(void *arg, const char *message) { (void)arg; (void)message; }

static void exec_plain(const char *sql) {
    PGresult *r = PQexec(conn, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) die(sql);
    PQclear(r);
}

static void send(const char *sql, int n, const char *const *params) {
    if (!PQsendQueryParams(conn, sql, n, NULL, params, NULL, NULL, 0)) die("send");
}

/* Reads results up to and including `syncs` sync points; stops on an error. */
static void drain(int syncs) {
    while (syncs > 0) {
        PGresult *r = PQgetResult(conn);
        if (!r) continue;
        ExecStatusType s = PQresultStatus(r);
        if (s == PGRES_PIPELINE_SYNC) syncs--;
        else if (s == PGRES_FATAL_ERROR) die(PQresultErrorMessage(r));
        PQclear(r);
    }
}

int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: pgfloor CONNINFO REQUESTS USERS PER_TRANSACTION\n"); return 2; }
    int n = atoi(argv[2]), users = atoi(argv[3]), per = atoi(argv[4]);
    conn = PQconnectdb(argv[1]);
    if (PQstatus(conn) != CONNECTION_OK) die("connect");
    PQsetNoticeProcessor(conn, quiet, NULL);
    exec_plain("DROP SCHEMA IF EXISTS floor CASCADE");
    exec_plain("CREATE SCHEMA floor");
    exec_plain("SET search_path TO floor");
    exec_plain("CREATE TABLE rows (tbl text COLLATE \"C\" NOT NULL, usr text COLLATE \"C\" NOT NULL, key text COLLATE \"C\" NOT NULL, "
               "ord text COLLATE \"C\", body text NOT NULL, seq bigint, at bigint, PRIMARY KEY (tbl, usr, key))");
    exec_plain("CREATE INDEX rows_feed ON rows (usr, seq) WHERE seq IS NOT NULL");
    exec_plain("CREATE TABLE users (usr text COLLATE \"C\" PRIMARY KEY, feed_seq bigint NOT NULL DEFAULT 0, version bigint NOT NULL DEFAULT 0)");
    if (!PQenterPipelineMode(conn)) die("pipeline mode");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const int window = 100;
    char user[64], key[32], body[256], at[32];
    int syncs = 0;
    for (int i = 0; i < n; i++) {
        int u = i % users, day = i / users;
        snprintf(user, sizeof user, "00000000-0000-4000-8000-%012d", u);
        snprintf(key, sizeof key, "2025-%02d-%02d", 1 + (day / 28) % 12, 1 + day % 28);
        snprintf(body, sizeof body,
                 "{\"verifiedMinutes\":%d,\"raw\":{\"device\":\"iPhone15,2\",\"pickups\":%d,\"apps\":[{\"b\":\"com.example.social\",\"m\":%d}]},"
                 "\"uploadedAt\":%d}", (i * 7) % 1441, i % 97, (i * 7) % 600, 1760000000 + i);
        snprintf(at, sizeof at, "%d", 1760000000 + i);
        if (i % per == 0) send("BEGIN", 0, NULL);
        const char *lock[] = {user};
        send("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", 1, lock);
        send("INSERT INTO users (usr, feed_seq, version) VALUES ($1, 1, 1) ON CONFLICT (usr) DO UPDATE "
             "SET feed_seq = users.feed_seq + 1, version = users.version + 1 RETURNING feed_seq", 1, lock);
        const char *row[] = {user, key, body, at};
        send("INSERT INTO rows (tbl, usr, key, body, seq, at) VALUES ('screentime.days', $1, $2, $3, "
             "(SELECT feed_seq FROM users WHERE usr = $1), $4) ON CONFLICT (tbl, usr, key) DO UPDATE "
             "SET body = excluded.body, seq = excluded.seq, at = excluded.at", 4, row);
        if ((i + 1) % per == 0 || i + 1 == n) {
            send("COMMIT", 0, NULL);
            if (!PQpipelineSync(conn)) die("sync");
            syncs++;
        }
        if ((i + 1) % window == 0 || i + 1 == n) {
            drain(syncs);
            syncs = 0;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%.6f\n", (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
    PQexitPipelineMode(conn);
    exec_plain("DROP SCHEMA floor CASCADE");
    PQfinish(conn);
    return 0;
}
