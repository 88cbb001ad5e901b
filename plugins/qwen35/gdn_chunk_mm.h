/* The small matrix product of gdn_chunk.c for one vector width: that file
 * includes this once per width, with Q35_MM (the function's name),
 * Q35_MM_VEC (a vector of Q35_MM_LANES floats, or float itself),
 * Q35_MM_ROWS (rows of a tile) and Q35_MM_TARGET (a target attribute, or
 * nothing) defined. No include guard, on purpose. */

/* out[r][j] = keep out[r][j] + sum_e a[r][e] b[e][j] for r < rows, j < cols
 * (keep 0: out is only written). Tiles of Q35_MM_ROWS rows by two vectors of
 * columns, their accumulators in registers (loops of constant bounds,
 * unrolled), so that each row of b loaded serves all the tile's rows; the
 * column tiles outermost, so that a stripe of b stays in L1 for every row
 * tile. A tile short of rows or of its second vector repeats its first row
 * or vector in their place (computed, never stored). */
Q35_MM_TARGET static void Q35_MM(float *out, int64_t ldo, float keep,
                                 const float *a, int64_t lda, const float *b,
                                 int64_t ldb, int64_t rows, int64_t inner,
                                 int64_t cols)
{
    enum { R = Q35_MM_ROWS, L = Q35_MM_LANES };
    int64_t nvec = cols / L;
    for (int64_t jv = 0; jv < nvec; jv += 2) {
        int two = jv + 1 < nvec;
        int64_t col[2] = {jv * L, (two ? jv + 1 : jv) * L};
        for (int64_t r0 = 0; r0 < rows; r0 += R) {
            int64_t nr = rows - r0 < R ? rows - r0 : R;
            const float *ar[R];
            for (int i = 0; i < R; i++)
                ar[i] = a + (r0 + (i < nr ? i : 0)) * lda;
            Q35_MM_VEC acc[R][2];
            memset(acc, 0, sizeof acc);
            for (int64_t e = 0; e < inner; e++) {
                Q35_MM_VEC bv[2];
                memcpy(&bv[0], b + e * ldb + col[0], sizeof bv[0]);
                memcpy(&bv[1], b + e * ldb + col[1], sizeof bv[1]);
#pragma GCC unroll 8
                for (int i = 0; i < R; i++) {
                    acc[i][0] += ar[i][e] * bv[0];
                    acc[i][1] += ar[i][e] * bv[1];
                }
            }
#pragma GCC unroll 8
            for (int i = 0; i < R; i++)
#pragma GCC unroll 2
                for (int u = 0; u < 2; u++) {
                    if (i >= nr || (u == 1 && !two))
                        continue;
                    float *y = out + (r0 + i) * ldo + col[u];
                    if (keep != 0.0f) {
                        Q35_MM_VEC o;
                        memcpy(&o, y, sizeof o);
                        acc[i][u] += keep * o;
                    }
                    memcpy(y, &acc[i][u], sizeof acc[i][u]);
                }
        }
    }
    for (int64_t j = nvec * L; j < cols; j++)
        for (int64_t r = 0; r < rows; r++) {
            float s = 0.0f;
            for (int64_t e = 0; e < inner; e++)
                s += a[r * lda + e] * b[e * ldb + j];
            float *y = out + r * ldo + j;
            *y = keep != 0.0f ? keep * *y + s : s;
        }
}
