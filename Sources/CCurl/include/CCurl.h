#ifndef HK_CURL_SHIM_H
#define HK_CURL_SHIM_H
// libcurl's own header: the kernel calls its functions by their names, and loader.c defines each of
// them as a call into libcurl.so.4, opened on first use (see there why).
#include <curl/curl.h>

// Opens libcurl.so.4 and looks up every function the kernel calls; 1 on success, else 0 with `error`
// saying what is missing. Safe to call from any thread, any number of times.
int hk_curl_load(const char **error);

// curl_easy_setopt and curl_easy_getinfo are variadic, which Swift cannot call: one typed wrapper per
// kind of value, each through the pointer loader.c looked up.
CURLcode hk_curl_set_long(CURL *c, CURLoption o, long v);
CURLcode hk_curl_set_string(CURL *c, CURLoption o, const char *v);
CURLcode hk_curl_set_pointer(CURL *c, CURLoption o, void *v);
CURLcode hk_curl_set_write(CURL *c, size_t (*f)(char *, size_t, size_t, void *));
CURLcode hk_curl_set_header_function(CURL *c, size_t (*f)(char *, size_t, size_t, void *));
CURLcode hk_curl_info_long(CURL *c, CURLINFO i, long *v);
#endif
