/* libFuzzer target for the safetensors header parser: any bytes must give
 * either a validated tensor table whose data lies inside the input (or in
 * an aligned copy of misaligned data) aligned to its element size, or an
 * error; never a read past the input (libFuzzer hands over an exact-size
 * heap copy, so ASan sees any overrun). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <loom/safetensors.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    loom_st *st = NULL;
    loom_err err;
    if (loom_st_open_memory(data, size, "fuzz", &st, &err) != LOOM_OK)
        return 0;
    unsigned sum = 0;
    for (size_t i = 0; i < loom_st_count(st); i++) {
        const loom_tensor *t = loom_st_at(st, i);
        const uint8_t *p = t->data;
        /* every promise the validator makes: the data lies inside the
         * input, or (misaligned there) in an aligned copy of it */
        uint64_t esize = loom_dtype_size(t->dtype);
        int inside =
            p >= data && t->nbytes <= size && p + t->nbytes <= data + size;
        if (t->nbytes && (uintptr_t)p % esize != 0)
            abort();
        if (!inside && t->nbytes > size)
            abort();
        if (loom_st_find(st, t->name) != t)
            abort();
        uint64_t count = 1;
        for (int32_t d = 0; d < t->ndim; d++)
            count *= (uint64_t)t->shape[d];
        if (count * loom_dtype_size(t->dtype) != t->nbytes)
            abort();
        for (uint64_t k = 0; k < t->nbytes; k++)
            sum += p[k];
    }
    /* keep the reads from being optimised away */
    if (sum == 0xFFFFFFFFu && loom_st_count(st) == 0)
        abort();
    loom_st_close(st);
    return 0;
}
