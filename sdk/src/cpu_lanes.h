/* The SDK's float loops in plain vector lanes (cpu_ops.c, cpu_ssm.c): one
 * binary for every x86-64, the loader picking the AVX2 clone where the CPU
 * has it, so the same clone runs for every call on one machine and results
 * stay reproducible. */
#ifndef LOOM_SDK_CPU_LANES_H
#define LOOM_SDK_CPU_LANES_H

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__) &&         \
    !defined(_WIN32)
#define LOOM_CPU_MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define LOOM_CPU_MULTIVERSION
#endif

#if defined(__GNUC__) || defined(__clang__)
/* Plain float lanes, moved with memcpy: GCC's -O2 (its very-cheap vector
 * cost model) leaves such loops scalar. Each lane does what the scalar
 * loop does to its elements, in the same order, so the bits are the same. */
typedef float loom_v4 __attribute__((vector_size(16)));
typedef float loom_v8 __attribute__((vector_size(32)));
#define LOOM_CPU_LANES 1
#endif

#endif
