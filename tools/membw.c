/* Measures memcpy bandwidth (bytes read + written per second) over a buffer
 * far larger than the caches, single thread and N threads: the yardstick for
 * CPU decode speed (decode reads every weight once per token).
 * Prints the copy rate (bytes copied / s), the traffic it implies, and a
 * read-only streaming rate.
 * Build: cc -O2 -pthread tools/membw.c -o membw; run: ./membw [MiB] [threads]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct job {
    char *src, *dst;
    size_t n;
    int reps;
} job;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static volatile unsigned long long sink;

/* reads only: what a weight-streaming decode does */
static void *run_read(void *p)
{
    job *j = p;
    const unsigned long long *a = (const unsigned long long *)j->src;
    size_t n = j->n / 8;
    unsigned long long s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int r = 0; r < j->reps; r++)
        for (size_t i = 0; i + 4 <= n; i += 4) {
            s0 += a[i];
            s1 += a[i + 1];
            s2 += a[i + 2];
            s3 += a[i + 3];
        }
    sink += s0 + s1 + s2 + s3;
    return NULL;
}

static void *run(void *p)
{
    job *j = p;
    for (int r = 0; r < j->reps; r++)
        memcpy(j->dst, j->src, j->n);
    return NULL;
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 512;
    int nt = argc > 2 ? atoi(argv[2]) : 2;
    size_t n = mib << 20;
    char *src = malloc(n), *dst = malloc(n);
    if (!src || !dst)
        return 1;
    memset(src, 1, n);
    memset(dst, 2, n);
    for (int t = 1; t <= nt; t++) {
        pthread_t th[64];
        job jobs[64];
        size_t part = n / (size_t)t;
        double best = 0;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = now();
            for (int i = 0; i < t; i++) {
                jobs[i] = (job){src + i * part, dst + i * part, part, 2};
                pthread_create(&th[i], NULL, run, &jobs[i]);
            }
            for (int i = 0; i < t; i++)
                pthread_join(th[i], NULL);
            double dt = now() - t0;
            double gbs = 2.0 * 2.0 * (double)(part * (size_t)t) / dt / 1e9;
            if (gbs > best)
                best = gbs;
        }
        /* memcpy moves each byte twice (read + write); a weight is only read,
         * so the read rate alone is half of this */
        double best_r = 0;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = now();
            for (int i = 0; i < t; i++) {
                jobs[i] = (job){src + i * part, dst + i * part, part, 2};
                pthread_create(&th[i], NULL, run_read, &jobs[i]);
            }
            for (int i = 0; i < t; i++)
                pthread_join(th[i], NULL);
            double gbs = 2.0 * (double)(part * (size_t)t) / (now() - t0) / 1e9;
            if (gbs > best_r)
                best_r = gbs;
        }
        printf("threads %d: memcpy %.2f GB/s copied (%.2f GB/s read+write); "
               "streaming read %.2f GB/s\n",
               t, best / 2, best, best_r);
    }
    free(src);
    free(dst);
    return 0;
}
