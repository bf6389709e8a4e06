/* The kernels' inner loops, included by _kernels.c once per variant (VARIANT(name) names them: the portable build,
 * and on x86-64 the same code compiled for AVX2 with FMA, which also gathers explicitly, VARIANT_GATHERS). Only integer arithmetic, and float arithmetic in a
 * fixed order with the fused multiply-adds written out (fmaf): every variant gives the same bytes. */

/* Vertical sums of ``taps`` source rows into acc: acc[i] = sum over t of w[t] * rows[t][i], for i < n. */
static void VARIANT(vsum)(const uint8_t *const *rows, const int32_t *w, int taps, int32_t *restrict acc, int n) {
    int i, t;
    if (taps == 2) {
        const uint8_t *restrict a = rows[0], *restrict b = rows[1];
        int32_t wa = w[0], wb = w[1];
        for (i = 0; i < n; i++)
            acc[i] = a[i] * wa + b[i] * wb;
        return;
    }
    for (i = 0; i < n; i++)
        acc[i] = rows[0][i] * w[0];
    for (t = 1; t < taps; t++) {
        const uint8_t *restrict a = rows[t];
        int32_t wa = w[t];
        for (i = 0; i < n; i++)
            acc[i] += a[i] * wa;
    }
}

/* Horizontal sums of acc into an output row, one rounding: out[i] = (sum over t of w[t][i] * acc[at[t][i]] + 2**21)
 * >> 22, the tables laid out per output element (pixel and channel), ``taps`` tables of n each. */
static void VARIANT(hsum)(const int32_t *restrict acc, const int *restrict at, const int32_t *restrict w, int taps,
                          int32_t *restrict sum, uint8_t *restrict out, int n) {
    int i = 0, t;
    if (taps == 2) {
        const int *restrict a0 = at, *restrict a1 = at + n;
        const int32_t *restrict w0 = w, *restrict w1 = w + n;
        for (; i < n; i++)
            out[i] = (uint8_t)((acc[a0[i]] * w0[i] + acc[a1[i]] * w1[i] + ROUND) >> (2 * BITS));
        return;
    }
    for (i = 0; i < n; i++)
        sum[i] = ROUND + acc[at[i]] * w[i];
    for (t = 1; t < taps; t++) {
        const int *restrict a = at + (size_t)t * n;
        const int32_t *restrict wt = w + (size_t)t * n;
        for (i = 0; i < n; i++)
            sum[i] += acc[a[i]] * wt[i];
    }
    for (i = 0; i < n; i++)
        out[i] = (uint8_t)(sum[i] >> (2 * BITS));
}

/* One output pixel of the warp from source pixel (ix, iy) and the fractions (fx, fy). */
static inline __attribute__((always_inline)) void VARIANT(warp_pixel)(const Pixels *s, int ix, int iy, float fx,
                                                                      float fy, int border, uint8_t fill,
                                                                      uint8_t *restrict out, int cn) {
    int w = s->width, h = s->height, k, i;
    const uint8_t *q[4];
    if ((unsigned)ix < (unsigned)(w - 1) && (unsigned)iy < (unsigned)(h - 1)) {
        q[0] = s->data + (size_t)iy * s->stride + (size_t)ix * cn;
        q[1] = q[0] + cn, q[2] = q[0] + s->stride, q[3] = q[2] + cn;
    } else {
        if (border == BORDER_CONSTANT && ((unsigned)(ix + 1) > (unsigned)w || (unsigned)(iy + 1) > (unsigned)h)) {
            for (k = 0; k < cn; k++) /* all four outside */
                out[k] = fill;
            return;
        }
        for (i = 0; i < 4; i++) {
            int px = border_index(ix + (i & 1), w, border), py = border_index(iy + (i >> 1), h, border);
            q[i] = px < 0 || py < 0 ? NULL : s->data + (size_t)py * s->stride + (size_t)px * cn;
        }
    }
    for (k = 0; k < cn; k++) {
        float p0 = q[0] ? q[0][k] : fill, p1 = q[1] ? q[1][k] : fill, p2 = q[2] ? q[2][k] : fill;
        float p3 = q[3] ? q[3][k] : fill;
        float v0 = fmaf(fx, p1 - p0, p0), v1 = fmaf(fx, p3 - p2, p2);
        out[k] = round_u8(fmaf(fy, v1 - v0, v0));
    }
}

/* The warp's rows: the source point of pixel x of row y is (fma(M0, x, y M1 + M2), fma(M3, x, y M4 + M5)). */
#ifdef VARIANT_GATHERS
/* Eight output pixels of the warp at once, where all their taps lie inside the image and above its last row (so that
 * the 4-byte gathers stay inside the image): 1 if done, 0 if the caller must take them one by one. The arithmetic is
 * warp_pixel's, lane by lane. */
static inline __attribute__((always_inline)) int VARIANT(warp8)(const Pixels *s, const float *M, float row_x,
                                                                float row_y, int x, uint8_t *out, int cn) {
    __m256 xs = _mm256_add_ps(_mm256_set1_ps((float)x), _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 fx = _mm256_fmadd_ps(_mm256_set1_ps(M[0]), xs, _mm256_set1_ps(row_x));
    __m256 fy = _mm256_fmadd_ps(_mm256_set1_ps(M[3]), xs, _mm256_set1_ps(row_y));
    __m256 ix = _mm256_floor_ps(fx), iy = _mm256_floor_ps(fy), ax = _mm256_sub_ps(fx, ix), ay = _mm256_sub_ps(fy, iy);
    __m256 inside = _mm256_and_ps(_mm256_and_ps(_mm256_cmp_ps(ix, _mm256_setzero_ps(), _CMP_GE_OQ),
                                                _mm256_cmp_ps(ix, _mm256_set1_ps((float)(s->width - 1)), _CMP_LT_OQ)),
                                  _mm256_and_ps(_mm256_cmp_ps(iy, _mm256_setzero_ps(), _CMP_GE_OQ),
                                                _mm256_cmp_ps(iy, _mm256_set1_ps((float)(s->height - 2)), _CMP_LT_OQ)));
    __m256i at, below, mask = _mm256_set1_epi32(0xFF);
    int c, k;
    if (_mm256_movemask_ps(inside) != 0xFF)
        return 0;
    at = _mm256_add_epi32(_mm256_mullo_epi32(_mm256_cvttps_epi32(iy), _mm256_set1_epi32((int)s->stride)),
                          _mm256_mullo_epi32(_mm256_cvttps_epi32(ix), _mm256_set1_epi32(cn)));
    below = _mm256_add_epi32(at, _mm256_set1_epi32((int)s->stride));
    /* each tap's pixel as one 4-byte word (its channels, then a byte not used): four gathers for every channel */
    const int *base = (const int *)s->data;
    __m256i w0 = _mm256_i32gather_epi32(base, at, 1), w1 = _mm256_i32gather_epi32(base, _mm256_add_epi32(at, _mm256_set1_epi32(cn)), 1);
    __m256i w2 = _mm256_i32gather_epi32(base, below, 1);
    __m256i w3 = _mm256_i32gather_epi32(base, _mm256_add_epi32(below, _mm256_set1_epi32(cn)), 1);
    for (c = 0; c < cn; c++) {
        __m128i shift = _mm_cvtsi32_si128(8 * c);
        __m256 p0 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srl_epi32(w0, shift), mask));
        __m256 p1 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srl_epi32(w1, shift), mask));
        __m256 p2 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srl_epi32(w2, shift), mask));
        __m256 p3 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srl_epi32(w3, shift), mask));
        __m256 v0 = _mm256_fmadd_ps(ax, _mm256_sub_ps(p1, p0), p0), v1 = _mm256_fmadd_ps(ax, _mm256_sub_ps(p3, p2), p2);
        __m256 r = _mm256_fmadd_ps(ay, _mm256_sub_ps(v1, v0), v0);
        int32_t lanes[8];
        r = _mm256_min_ps(_mm256_max_ps(r, _mm256_setzero_ps()), _mm256_set1_ps(255.f));
        r = _mm256_sub_ps(_mm256_add_ps(r, _mm256_set1_ps(12582912.f)), _mm256_set1_ps(12582912.f));
        _mm256_storeu_si256((__m256i *)lanes, _mm256_cvttps_epi32(r));
        for (k = 0; k < 8; k++)
            out[(size_t)(x + k) * cn + c] = (uint8_t)lanes[k];
    }
    return 1;
}
#endif

static void VARIANT(warp_rows)(const Pixels *s, const float *M, int border, uint8_t fill, uint8_t *dst, size_t stride,
                               int width, int height) {
    int cn = s->channels, x, y;
#ifdef VARIANT_GATHERS
    /* (gathers take int32 byte offsets: the image's bytes must fit) */
    int gathers = (cn == 1 || cn == 3) && (double)s->stride * s->height < 2147483647.0;
#endif
    for (y = 0; y < height; y++) {
        float row_x = (float)y * M[1] + M[2], row_y = (float)y * M[4] + M[5];
        uint8_t *out = dst + (size_t)y * stride;
        for (x = 0; x < width; x++) {
#ifdef VARIANT_GATHERS
            if (gathers && x + 8 <= width && VARIANT(warp8)(s, M, row_x, row_y, x, out, cn)) {
                x += 7;
                continue;
            }
#endif
            float fx = fmaf(M[0], (float)x, row_x), fy = fmaf(M[3], (float)x, row_y), ix, iy;
            if (!(fx > -FAR && fx < FAR && fy > -FAR && fy < FAR)) /* (far outside, or not a number) */
                fx = fy = -FAR;
            ix = floorf(fx), iy = floorf(fy);
            if (cn == 3)
                VARIANT(warp_pixel)(s, (int)ix, (int)iy, fx - ix, fy - iy, border, fill, out + 3 * x, 3);
            else if (cn == 1)
                VARIANT(warp_pixel)(s, (int)ix, (int)iy, fx - ix, fy - iy, border, fill, out + x, 1);
            else
                VARIANT(warp_pixel)(s, (int)ix, (int)iy, fx - ix, fy - iy, border, fill, out + (size_t)x * cn, cn);
        }
    }
}

/* An axis-aligned warp's two passes: one row's vertical interpolation, v[i] = fma(a, q1[i] - q0[i], q0[i]) (over
 * contiguous source bytes), then the output row's horizontal one, round(fma(ax[i], v[at[i] + cn] - v[at[i]],
 * v[at[i]])) (tables per output element). */
static void VARIANT(vlerp)(const uint8_t *restrict q0, const uint8_t *restrict q1, float a, float *restrict v, int n) {
    int i;
    for (i = 0; i < n; i++)
        v[i] = fmaf(a, (float)q1[i] - (float)q0[i], (float)q0[i]);
}

static void VARIANT(hlerp)(const float *restrict v, const int *restrict at, const float *restrict ax, int cn,
                           uint8_t *restrict out, int n) {
    int i = 0;
#ifdef VARIANT_GATHERS
    for (; i + 8 <= n; i += 8) { /* round_u8's arithmetic, eight at a time */
        __m256i index = _mm256_loadu_si256((const __m256i *)(at + i));
        __m256 p0 = _mm256_i32gather_ps(v, index, 4);
        __m256 p1 = _mm256_i32gather_ps(v, _mm256_add_epi32(index, _mm256_set1_epi32(cn)), 4);
        __m256 r = _mm256_fmadd_ps(_mm256_loadu_ps(ax + i), _mm256_sub_ps(p1, p0), p0);
        r = _mm256_min_ps(_mm256_max_ps(r, _mm256_setzero_ps()), _mm256_set1_ps(255.f)); /* (maxps: NaN -> 0) */
        r = _mm256_sub_ps(_mm256_add_ps(r, _mm256_set1_ps(12582912.f)), _mm256_set1_ps(12582912.f));
        store8(out + i, _mm256_cvttps_epi32(r));
    }
#endif
    for (; i < n; i++) {
        float p0 = v[at[i]], p1 = v[at[i] + cn];
        out[i] = round_u8(fmaf(ax[i], p1 - p0, p0));
    }
}

/* Pixels (height x width x cn bytes) to the output: (x - mean) / std in float32, per channel, in either layout. */
static void VARIANT(convert)(const uint8_t *restrict pixels, int cn, size_t plane, const Output *o, const float *mean,
                             const float *std) {
    int c;
    size_t at;
    for (c = 0; c < cn; c++) {
        size_t step = o->channel_first ? 1 : (size_t)cn, first = o->channel_first ? c * plane : (size_t)c;
        if (o->dtype == OUT_U8) {
            uint8_t *restrict to = (uint8_t *)o->data + first;
            for (at = 0; at < plane; at++)
                to[at * step] = pixels[at * cn + c];
        } else {
            float *restrict to = (float *)o->data + first, m = mean[c], sd = std[c];
            for (at = 0; at < plane; at++)
                to[at * step] = ((float)pixels[at * cn + c] - m) / sd;
        }
    }
}
