/* The kernels' inner loops, included by _kernels.c once per variant (VARIANT(name) names them: the portable build,
 * and on x86-64 the same code compiled for AVX2 and for AVX-512). Only integer arithmetic, and float arithmetic in a
 * fixed order with the fused multiply-adds written out (fmaf): every variant gives the same bytes. */

/* One source row's horizontal sums: out[x * cn + c] = sum over the taps of p[ofs] * w (ofs in bytes). */
static void VARIANT(hpass)(const uint8_t *restrict p, int cn, int width, int taps, const int *restrict ofs,
                           const int32_t *restrict w, int32_t *restrict out) {
    int x, c, t;
    if (taps == 2 && cn == 3) {
        for (x = 0; x < width; x++) {
            const uint8_t *a = p + ofs[2 * x], *b = p + ofs[2 * x + 1];
            int32_t wa = w[2 * x], wb = w[2 * x + 1];
            out[3 * x] = a[0] * wa + b[0] * wb;
            out[3 * x + 1] = a[1] * wa + b[1] * wb;
            out[3 * x + 2] = a[2] * wa + b[2] * wb;
        }
    } else if (taps == 2 && cn == 1) {
        for (x = 0; x < width; x++)
            out[x] = p[ofs[2 * x]] * w[2 * x] + p[ofs[2 * x + 1]] * w[2 * x + 1];
    } else if (cn == 3) {
        for (x = 0; x < width; x++) {
            int32_t s0 = 0, s1 = 0, s2 = 0;
            for (t = 0; t < taps; t++) {
                const uint8_t *a = p + ofs[x * taps + t];
                int32_t wa = w[x * taps + t];
                s0 += a[0] * wa, s1 += a[1] * wa, s2 += a[2] * wa;
            }
            out[3 * x] = s0, out[3 * x + 1] = s1, out[3 * x + 2] = s2;
        }
    } else {
        for (x = 0; x < width; x++)
            for (c = 0; c < cn; c++) {
                int32_t s = 0;
                for (t = 0; t < taps; t++)
                    s += p[ofs[x * taps + t] + c] * w[x * taps + t];
                out[x * cn + c] = s;
            }
    }
}

/* One output row from ``taps`` horizontal rows: (sum of w * row + 2**21) >> 22, the one rounding of a resize. */
static void VARIANT(vpass)(const int32_t *const *rows, const int32_t *w, int taps, uint8_t *restrict out, int n) {
    int x, t;
    if (taps == 2) {
        const int32_t *restrict a = rows[0], *restrict b = rows[1];
        int32_t wa = w[0], wb = w[1];
        for (x = 0; x < n; x++)
            out[x] = (uint8_t)((a[x] * wa + b[x] * wb + ROUND) >> (2 * BITS));
        return;
    }
    for (x = 0; x < n; x++) {
        int32_t s = ROUND;
        for (t = 0; t < taps; t++)
            s += rows[t][x] * w[t];
        out[x] = (uint8_t)(s >> (2 * BITS));
    }
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
static void VARIANT(warp_rows)(const Pixels *s, const float *M, int border, uint8_t fill, uint8_t *dst, size_t stride,
                               int width, int height) {
    int cn = s->channels, x, y;
    for (y = 0; y < height; y++) {
        float row_x = (float)y * M[1] + M[2], row_y = (float)y * M[4] + M[5];
        uint8_t *out = dst + (size_t)y * stride;
        for (x = 0; x < width; x++) {
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
