/* The encoder's segment store: buffers made during one encode call
 * (normalized text, prefixed pieces) that the BPE cache's keys point into,
 * kept until the call ends. Both the driver (tokenizer.c) and the
 * pre-tokenizer (tok_pretok.c) hand buffers to it. */
#include <stdlib.h>

#include "tokenizer_impl.h"

loom_status loom__tok_enc_keep(tok_enc *e, char *buf)
{
    if (e->n_bufs == e->cap_bufs) {
        size_t cap = e->cap_bufs ? e->cap_bufs * 2 : 8;
        char **b = realloc(e->bufs, cap * sizeof *b);
        if (!b) {
            free(buf);
            return loom_err_set(e->err, LOOM_ERR_NOMEM,
                                "tokenizer: out of memory");
        }
        e->bufs = b;
        e->cap_bufs = cap;
    }
    e->bufs[e->n_bufs++] = buf;
    return LOOM_OK;
}

void loom__tok_enc_release(tok_enc *e)
{
    for (size_t i = 0; i < e->n_bufs; i++)
        free(e->bufs[i]);
    free(e->bufs);
    e->bufs = NULL;
    e->n_bufs = e->cap_bufs = 0;
}
