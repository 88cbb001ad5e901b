/* The fatbin loom_add_plugin embeds in a plugin from its CUDA_SOURCES (SASS
 * for each of LOOM_CUDA_ARCHS, PTX for the newest), for the plugin to load
 * with the host's cuda table: cu->moduleLoadData(&module, LOOM_FATBIN).
 * LOOM_HAVE_CUDA is 1 when it was built (nvcc found), else 0 and the plugin
 * has its CPU path alone; code that names LOOM_FATBIN goes under
 * `#if LOOM_HAVE_CUDA`. The bytes are read-only and live as long as the
 * shared object. */
#ifndef LOOM_FATBIN_H
#define LOOM_FATBIN_H

#ifndef LOOM_HAVE_CUDA
#define LOOM_HAVE_CUDA 0
#endif

#if LOOM_HAVE_CUDA
#include <stddef.h>
/* loom_add_fatbin defines LOOM_FATBIN_SYMBOL (loom_fatbin_NAME), so the
 * fatbins of the core and of a test binary never share a name. */
#define LOOM__FATBIN_CAT(a, b)  a##b
#define LOOM__FATBIN_XCAT(a, b) LOOM__FATBIN_CAT(a, b)
#define LOOM__FATBIN_SIZE_SYM   LOOM__FATBIN_XCAT(LOOM_FATBIN_SYMBOL, _size)
#ifdef __cplusplus
extern "C" {
#endif
/* Defined in the generated embedding unit; hidden in a shared object. */
extern const unsigned char LOOM_FATBIN_SYMBOL[];
extern const unsigned long long LOOM__FATBIN_SIZE_SYM;
#ifdef __cplusplus
}
#endif
#define LOOM_FATBIN      ((const void *)LOOM_FATBIN_SYMBOL)
#define LOOM_FATBIN_SIZE ((size_t)LOOM__FATBIN_SIZE_SYM)
#endif

#endif /* LOOM_FATBIN_H */
