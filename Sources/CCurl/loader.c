// libcurl, opened when the kernel first calls out over HTTP (a provider's JWKS URL, the App Store
// Server API) rather than when the process starts: linked normally it brings OpenSSL, GnuTLS, Kerberos,
// LDAP, nghttp2, SSH and RTMP libraries into every process, though most runs never call out. Each
// function the kernel calls is defined here with libcurl's prototype as a call through a pointer that
// `hk_curl_load` fills with dlopen/dlsym (the same scheme as CLibPQ's loader).
#include <pthread.h>
#include "CCurl.h"
#include "CLoader.h"

// The variadic functions, declared by curl.h as macros with type checks under GCC: looked up by name.
typedef CURLcode (*setopt_fn)(CURL *, CURLoption, ...);
typedef CURLcode (*getinfo_fn)(CURL *, CURLINFO, ...);

static struct {
    __typeof__(&curl_global_init) global_init;
    __typeof__(&curl_easy_init) easy_init;
    __typeof__(&curl_easy_cleanup) easy_cleanup;
    __typeof__(&curl_easy_perform) easy_perform;
    __typeof__(&curl_easy_reset) easy_reset;
    __typeof__(&curl_easy_strerror) easy_strerror;
    __typeof__(&curl_slist_append) slist_append;
    __typeof__(&curl_slist_free_all) slist_free_all;
    setopt_fn setopt;
    getinfo_fn getinfo;
} curl;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const char *failure;
static char message[512];

static void load(void) {
    static const char *const names[] = {"curl_global_init", "curl_easy_init", "curl_easy_cleanup", "curl_easy_perform",
                                        "curl_easy_reset", "curl_easy_strerror", "curl_slist_append", "curl_slist_free_all",
                                        "curl_easy_setopt", "curl_easy_getinfo"};
    static void **const slots[] = {(void **)&curl.global_init, (void **)&curl.easy_init, (void **)&curl.easy_cleanup,
                                   (void **)&curl.easy_perform, (void **)&curl.easy_reset, (void **)&curl.easy_strerror,
                                   (void **)&curl.slist_append, (void **)&curl.slist_free_all, (void **)&curl.setopt,
                                   (void **)&curl.getinfo};
    // Debian's libcurl4 (OpenSSL) first, then the GnuTLS build some systems have instead.
    static const char *const files[] = {"libcurl.so.4", "libcurl-gnutls.so.4", NULL};
    failure = hk_open_library(files, "calling out over HTTPS (Debian package libcurl4)", names, slots,
                              sizeof names / sizeof *names, message, sizeof message);
}

int hk_curl_load(const char **error) {
    pthread_once(&once, load);
    if (error) *error = failure;
    return failure == NULL;
}

// Reached only after a successful hk_curl_load (the HTTP client loads before its first call).
static void require(void) {
    const char *error;
    if (!hk_curl_load(&error)) hk_library_missing(error);
}

CURLcode curl_global_init(long flags) { require(); return curl.global_init(flags); }
CURL *curl_easy_init(void) { require(); return curl.easy_init(); }
void curl_easy_cleanup(CURL *c) { require(); curl.easy_cleanup(c); }
CURLcode curl_easy_perform(CURL *c) { require(); return curl.easy_perform(c); }
void curl_easy_reset(CURL *c) { require(); curl.easy_reset(c); }
const char *curl_easy_strerror(CURLcode code) { require(); return curl.easy_strerror(code); }
struct curl_slist *curl_slist_append(struct curl_slist *l, const char *s) { require(); return curl.slist_append(l, s); }
void curl_slist_free_all(struct curl_slist *l) { require(); curl.slist_free_all(l); }

CURLcode hk_curl_set_long(CURL *c, CURLoption o, long v) { require(); return curl.setopt(c, o, v); }
CURLcode hk_curl_set_string(CURL *c, CURLoption o, const char *v) { require(); return curl.setopt(c, o, v); }
CURLcode hk_curl_set_pointer(CURL *c, CURLoption o, void *v) { require(); return curl.setopt(c, o, v); }
CURLcode hk_curl_set_write(CURL *c, size_t (*f)(char *, size_t, size_t, void *)) {
    require();
    return curl.setopt(c, CURLOPT_WRITEFUNCTION, f);
}
CURLcode hk_curl_set_header_function(CURL *c, size_t (*f)(char *, size_t, size_t, void *)) {
    require();
    return curl.setopt(c, CURLOPT_HEADERFUNCTION, f);
}
CURLcode hk_curl_info_long(CURL *c, CURLINFO i, long *v) { require(); return curl.getinfo(c, i, v); }
