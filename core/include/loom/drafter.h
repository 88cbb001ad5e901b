/* The drafter dispatcher: the only caller of a drafter plugin's vtable, with
 * the same duties as the family dispatcher (sizes, defaults, the device
 * context, errors named by plugin). */
#ifndef LOOM_DRAFTER_H
#define LOOM_DRAFTER_H

#include <loom/plugin.h>

struct loom_cuda;

typedef struct loom_drafter_ref {
    const char *name;
    const loom_drafter_i *vt;
    uint32_t size;
    const struct loom_cuda *cu;
} loom_drafter_ref;

loom_status loom_drafter_bind(const loom_plugin *p, loom_drafter_ref *out,
                              loom_err *err);
loom_status loom_drafter_geometry(const loom_drafter_ref *d,
                                  const loom_host *host,
                                  const loom_checkpoint *ckpt,
                                  const loom_fields *out, loom_err *err);
loom_status loom_drafter_open(const loom_drafter_ref *d, const loom_host *host,
                              const loom_checkpoint *ckpt,
                              const loom_target *target, loom_drafter **drafter,
                              loom_err *err);
void loom_drafter_close(const loom_drafter_ref *d, loom_drafter *drafter);
/* Zero-fills *req, then lets the plugin fill it. */
void loom_drafter_get_needs(const loom_drafter_ref *d,
                            const loom_drafter *drafter,
                            loom_drafter_needs *req);
loom_status loom_drafter_stream_new(const loom_drafter_ref *d,
                                    loom_drafter *drafter,
                                    loom_draft_stream **s, loom_err *err);
void loom_drafter_stream_free(const loom_drafter_ref *d, loom_drafter *drafter,
                              loom_draft_stream *s);
/* A no-op for drafters without absorb (they asked for no taps). */
loom_status loom_drafter_absorb(const loom_drafter_ref *d,
                                loom_drafter *drafter, loom_draft_stream *s,
                                const loom_view *features,
                                const int32_t *positions, int32_t n,
                                loom_err *err);
/* The kept rows' tokens (loom_drafter_i.absorb_tokens, 2.1): a no-op for
 * drafters without the member (2.0 vtables, or NULL). */
loom_status
loom_drafter_absorb_tokens(const loom_drafter_ref *d, loom_drafter *drafter,
                           loom_draft_stream *s, const int32_t *tokens,
                           const int32_t *positions, int32_t n, loom_err *err);
loom_status loom_drafter_draft(const loom_drafter_ref *d, loom_drafter *drafter,
                               loom_draft_stream *const *streams,
                               const int32_t *last, int32_t n_streams,
                               const loom_proposals *out, loom_err *err);

#endif
