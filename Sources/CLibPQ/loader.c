// libpq, opened when the kernel first uses PostgreSQL rather than when the process starts.
//
// Linked normally, libpq brings 20-odd libraries (OpenSSL, Kerberos, LDAP, ...) into every process the
// binary starts, `healthkernel call` and data-dir kernels included, and the dynamic loader's work for
// them doubled start-up. Static linking would not remove them (libpq.a still needs them at link time)
// and would freeze a TLS stack into the binary. So each function the kernel calls is defined here with
// libpq's own prototype (the header checks every signature) as a call through a pointer that
// `hk_pq_load` fills with dlopen/dlsym.
#include <pthread.h>
#include "CLibPQ.h"
#include "CLoader.h"

#define HK_PQ_FUNCTIONS(X) \
    X(PQbackendPID) X(PQclear) X(PQconnectdb) X(PQconsumeInput) X(PQdb) X(PQenterPipelineMode) X(PQerrorMessage) \
    X(PQexec) X(PQexitPipelineMode) X(PQfinish) X(PQfreemem) X(PQgetResult) X(PQgetisnull) X(PQgetvalue) X(PQhost) \
    X(PQnfields) X(PQnotifies) X(PQntuples) X(PQpipelineSync) X(PQport) X(PQputCopyData) X(PQputCopyEnd) \
    X(PQresultErrorField) X(PQresultErrorMessage) X(PQresultStatus) X(PQsendFlushRequest) X(PQsendPrepare) \
    X(PQsendQueryParams) X(PQsendQueryPrepared) X(PQsetNoticeProcessor) X(PQsocket) X(PQstatus) \
    X(PQtransactionStatus)

static struct {
#define HK_FIELD(name) __typeof__(&name) name;
    HK_PQ_FUNCTIONS(HK_FIELD)
#undef HK_FIELD
} pq;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const char *failure;
static char message[512];

static void load(void) {
#define HK_NAME(name) #name,
#define HK_SLOT(name) (void **)&pq.name,
    static const char *const names[] = {HK_PQ_FUNCTIONS(HK_NAME)};
    static void **const slots[] = {HK_PQ_FUNCTIONS(HK_SLOT)};
#undef HK_NAME
#undef HK_SLOT
    static const char *const files[] = {"libpq.so.5", NULL};
    failure = hk_open_library(files, "the PostgreSQL store (Debian package libpq5, libpq 14 or later)", names, slots,
                              sizeof names / sizeof *names, message, sizeof message);
}

int hk_pq_load(const char **error) {
    pthread_once(&once, load);
    if (error) *error = failure;
    return failure == NULL;
}

// Reached only after a successful hk_pq_load (the store loads before it connects); otherwise a bug.
static void require(void) {
    const char *error;
    if (!hk_pq_load(&error)) hk_library_missing(error);
}

#define R(type, name, params, args) type name params { require(); return pq.name args; }
#define V(name, params, args) void name params { require(); pq.name args; }
R(int, PQbackendPID, (const PGconn *c), (c))
V(PQclear, (PGresult *r), (r))
R(PGconn *, PQconnectdb, (const char *info), (info))
R(int, PQconsumeInput, (PGconn *c), (c))
R(char *, PQdb, (const PGconn *c), (c))
R(int, PQenterPipelineMode, (PGconn *c), (c))
R(char *, PQerrorMessage, (const PGconn *c), (c))
R(PGresult *, PQexec, (PGconn *c, const char *q), (c, q))
R(int, PQexitPipelineMode, (PGconn *c), (c))
V(PQfinish, (PGconn *c), (c))
V(PQfreemem, (void *p), (p))
R(PGresult *, PQgetResult, (PGconn *c), (c))
R(int, PQgetisnull, (const PGresult *r, int t, int f), (r, t, f))
R(char *, PQgetvalue, (const PGresult *r, int t, int f), (r, t, f))
R(char *, PQhost, (const PGconn *c), (c))
R(int, PQnfields, (const PGresult *r), (r))
R(PGnotify *, PQnotifies, (PGconn *c), (c))
R(int, PQntuples, (const PGresult *r), (r))
R(int, PQpipelineSync, (PGconn *c), (c))
R(char *, PQport, (const PGconn *c), (c))
R(int, PQputCopyData, (PGconn *c, const char *b, int n), (c, b, n))
R(int, PQputCopyEnd, (PGconn *c, const char *e), (c, e))
R(char *, PQresultErrorField, (const PGresult *r, int f), (r, f))
R(char *, PQresultErrorMessage, (const PGresult *r), (r))
R(ExecStatusType, PQresultStatus, (const PGresult *r), (r))
R(int, PQsendFlushRequest, (PGconn *c), (c))
R(int, PQsendPrepare, (PGconn *c, const char *s, const char *q, int n, const Oid *t), (c, s, q, n, t))
R(int, PQsendQueryParams,
  (PGconn *c, const char *q, int n, const Oid *t, const char *const *v, const int *l, const int *f, int rf),
  (c, q, n, t, v, l, f, rf))
R(int, PQsendQueryPrepared, (PGconn *c, const char *s, int n, const char *const *v, const int *l, const int *f, int rf),
  (c, s, n, v, l, f, rf))
R(PQnoticeProcessor, PQsetNoticeProcessor, (PGconn *c, PQnoticeProcessor p, void *a), (c, p, a))
R(int, PQsocket, (const PGconn *c), (c))
R(ConnStatusType, PQstatus, (const PGconn *c), (c))
R(PGTransactionStatusType, PQtransactionStatus, (const PGconn *c), (c))
