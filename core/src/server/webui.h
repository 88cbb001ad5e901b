/* The chat page of `loom serve` (webui.c): files embedded at build time by
 * webui/embed.cmake, answered at /, /index.html and /<file>. */
#ifndef LOOM_SERVER_WEBUI_H
#define LOOM_SERVER_WEBUI_H

#include <stddef.h>

#include <microhttpd.h>

/* The embedded files, sorted by name (the generated webui_files.c). */
extern const int loom__webui_count;
extern const char *const loom__webui_names[];
extern const unsigned char *const loom__webui_data[];
extern const size_t loom__webui_sizes[];

/* 1 when PATH names one of the page's files ("/" is index.html). */
int srv_webui_has(const char *path);

/* Queues the file at PATH (one srv_webui_has accepts) for GET or HEAD, and
 * a 405 for any other method; *status is set to the status queued. */
enum MHD_Result srv_webui_reply(struct MHD_Connection *c, const char *path,
                                const char *method, int *status);

#endif
