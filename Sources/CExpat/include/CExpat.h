#ifndef HK_EXPAT_H
#define HK_EXPAT_H
// The few functions of expat (Debian's libexpat1, on essentially every system) the Apple Health export
// importer uses, declared here with expat's own prototypes so no -dev package is needed to build, and
// opened with dlopen on first use (CLoader), as libpq and libcurl are: a kernel that never imports an
// export never loads it.
#include <stddef.h>

typedef struct XML_ParserStruct *hk_xml_parser;
typedef void (*hk_xml_start_handler)(void *user, const char *name, const char **attributes);
typedef void (*hk_xml_end_handler)(void *user, const char *name);

// 1 once expat is loaded; else 0 and what failed in `*error`.
int hk_expat_load(const char **error);

hk_xml_parser hk_xml_create(void);
void hk_xml_set_handlers(hk_xml_parser parser, void *user, hk_xml_start_handler start, hk_xml_end_handler end);
// 1 when the bytes parsed, 0 on an error (hk_xml_error says which, at which line).
int hk_xml_parse(hk_xml_parser parser, const char *bytes, int length, int final);
const char *hk_xml_error(hk_xml_parser parser, unsigned long *line);
void hk_xml_free(hk_xml_parser parser);
#endif
