/* The safetensors dtype table: element sizes and header names. */
#include <string.h>

#include <loom/safetensors.h>

typedef struct dtype_info {
    const char *name; /* as spelled in a safetensors header */
    size_t size;      /* bytes per element */
} dtype_info;

/* Indexed by loom_dtype; the enum values are ABI and never reorder. */
static const dtype_info dtypes[LOOM_DTYPE_COUNT] = {
    [LOOM_DTYPE_F32] = {"F32", 4},   [LOOM_DTYPE_F16] = {"F16", 2},
    [LOOM_DTYPE_BF16] = {"BF16", 2}, [LOOM_DTYPE_I32] = {"I32", 4},
    [LOOM_DTYPE_U32] = {"U32", 4},   [LOOM_DTYPE_I8] = {"I8", 1},
    [LOOM_DTYPE_U8] = {"U8", 1},     [LOOM_DTYPE_F8_E4M3] = {"F8_E4M3", 1},
    [LOOM_DTYPE_I64] = {"I64", 8},   [LOOM_DTYPE_F64] = {"F64", 8},
    [LOOM_DTYPE_I16] = {"I16", 2},   [LOOM_DTYPE_U16] = {"U16", 2},
    [LOOM_DTYPE_BOOL] = {"BOOL", 1},
};

size_t loom_dtype_size(loom_dtype t)
{
    if ((unsigned)t >= LOOM_DTYPE_COUNT)
        return 0;
    return dtypes[t].size;
}

const char *loom_dtype_name(loom_dtype t)
{
    if ((unsigned)t >= LOOM_DTYPE_COUNT)
        return "?";
    return dtypes[t].name;
}

loom_dtype loom_dtype_from_name(const char *name)
{
    if (!name)
        return LOOM_DTYPE_COUNT;
    for (int i = 0; i < LOOM_DTYPE_COUNT; i++) {
        if (strcmp(dtypes[i].name, name) == 0)
            return (loom_dtype)i;
    }
    return LOOM_DTYPE_COUNT;
}
