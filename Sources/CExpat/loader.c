// expat, opened with dlopen/dlsym when an Apple Health export is first imported (the scheme of CCurl's
// and CLibPQ's loaders). Only the functions below are used; their prototypes are expat's (expat.h).
#include <pthread.h>
#include "CExpat.h"
#include "CLoader.h"

typedef int (*parse_fn)(hk_xml_parser, const char *, int, int);

static struct {
    hk_xml_parser (*create)(const char *encoding);
    void (*set_user_data)(hk_xml_parser, void *);
    void (*set_element_handler)(hk_xml_parser, hk_xml_start_handler, hk_xml_end_handler);
    parse_fn parse;
    int (*error_code)(hk_xml_parser);
    const char *(*error_string)(int code);
    unsigned long (*line_number)(hk_xml_parser);
    void (*parser_free)(hk_xml_parser);
} expat;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const char *failure;
static char message[512];

static void load(void) {
    static const char *const names[] = {"XML_ParserCreate", "XML_SetUserData", "XML_SetElementHandler", "XML_Parse",
                                        "XML_GetErrorCode", "XML_ErrorString", "XML_GetCurrentLineNumber", "XML_ParserFree"};
    static void **const slots[] = {(void **)&expat.create, (void **)&expat.set_user_data, (void **)&expat.set_element_handler,
                                   (void **)&expat.parse, (void **)&expat.error_code, (void **)&expat.error_string,
                                   (void **)&expat.line_number, (void **)&expat.parser_free};
    static const char *const files[] = {"libexpat.so.1", NULL};
    failure = hk_open_library(files, "importing an Apple Health export (Debian package libexpat1)", names, slots,
                              sizeof names / sizeof *names, message, sizeof message);
}

int hk_expat_load(const char **error) {
    pthread_once(&once, load);
    if (error) *error = failure;
    return failure == NULL;
}

static void require(void) {
    const char *error;
    if (!hk_expat_load(&error)) hk_library_missing(error);
}

hk_xml_parser hk_xml_create(void) { require(); return expat.create("UTF-8"); }

void hk_xml_set_handlers(hk_xml_parser parser, void *user, hk_xml_start_handler start, hk_xml_end_handler end) {
    require();
    expat.set_user_data(parser, user);
    expat.set_element_handler(parser, start, end);
}

int hk_xml_parse(hk_xml_parser parser, const char *bytes, int length, int final) {
    require();
    return expat.parse(parser, bytes, length, final) == 1;
}

const char *hk_xml_error(hk_xml_parser parser, unsigned long *line) {
    require();
    if (line) *line = expat.line_number(parser);
    return expat.error_string(expat.error_code(parser));
}

void hk_xml_free(hk_xml_parser parser) { require(); expat.parser_free(parser); }
