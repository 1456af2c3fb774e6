#ifndef HEALTHKERNEL_CJANSSON_SHIM_H
#define HEALTHKERNEL_CJANSSON_SHIM_H
#include <jansson.h>

/* Function-like macros and flag values do not import into Swift: expose what the JSONParsing module uses. */

static inline json_type hk_json_typeof(const json_t *json) { return json_typeof(json); }
static inline size_t hk_load_flags(void) { return JSON_REJECT_DUPLICATES | JSON_DECODE_ANY; }
static inline size_t hk_load_flags_allowing_nul(void) { return JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_ALLOW_NUL; }
static inline int hk_json_error_code(const json_error_t *error) { return (int)json_error_code(error); }
static inline void hk_json_decref(json_t *json) { json_decref(json); }

#endif
