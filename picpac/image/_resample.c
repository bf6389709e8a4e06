/* Resize, warp and flip of 8-bit images with the arithmetic of OpenCV 5.0 (cv2.resize INTER_LINEAR and
 * INTER_AREA, cv2.warpAffine INTER_LINEAR with a constant border, cv2.flip), so that picpac's fused C
 * path makes the very bytes its Python path makes with OpenCV (tests/image/test_resample.py compares them
 * on random sizes). The opencv-python wheel ships no headers or exported C++ API to link against, hence
 * these kernels. Built with -ffp-contract=off: where OpenCV multiplies and adds in two roundings, so do
 * we, and where its SIMD code fuses them (warpAffine), fmaf is called explicitly.
 */
#include "_resample.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { COEF_BITS = 11, COEF_SCALE = 1 << COEF_BITS };

/* The loops below vectorise; on x86-64 an AVX2 copy is compiled beside the baseline and picked at load time. The
 * results are the same (the compiler reorders no floating-point arithmetic without -ffast-math). */
#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__) && !defined(__clang__)
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VECTOR_CLONES
#endif

static inline uint8_t clip_u8(int v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v); }

/* saturate_cast<uchar>(float): round half to even (the SSE conversion, inline; lrintf is a libm call) */
#if defined(__x86_64__)
#include <xmmintrin.h>
static inline uint8_t round_u8(float v) { return clip_u8(_mm_cvt_ss2si(_mm_set_ss(v))); }
#else
static inline uint8_t round_u8(float v) { return clip_u8((int)lrintf(v)); }
#endif

/* -- INTER_AREA, both scales >= 1 -------------------------------------------------------------------------- */

typedef struct {
    int di, si;
    float alpha;
} Tap;

/* The taps of each output cell on one axis: source index, destination index, weight (OpenCV's area table). */
static int area_taps(int ssize, int dsize, double scale, Tap *tab) {
    int k = 0, dx, sx;
    for (dx = 0; dx < dsize; dx++) {
        double fsx1 = dx * scale, fsx2 = fsx1 + scale;
        double cell = scale < ssize - fsx1 ? scale : ssize - fsx1;
        int sx1 = (int)ceil(fsx1), sx2 = (int)floor(fsx2);
        sx2 = sx2 < ssize - 1 ? sx2 : ssize - 1;
        sx1 = sx1 < sx2 ? sx1 : sx2;
        if (sx1 - fsx1 > 1e-3) {
            tab[k].di = dx;
            tab[k].si = sx1 - 1;
            tab[k++].alpha = (float)((sx1 - fsx1) / cell);
        }
        for (sx = sx1; sx < sx2; sx++) {
            tab[k].di = dx;
            tab[k].si = sx;
            tab[k++].alpha = (float)(1.0 / cell);
        }
        if (fsx2 - sx2 > 1e-3) {
            double part = fsx2 - sx2 < 1.0 ? fsx2 - sx2 : 1.0;
            tab[k].di = dx;
            tab[k].si = sx2;
            tab[k++].alpha = (float)((part < cell ? part : cell) / cell);
        }
    }
    return k;
}

/* One source row's weighted sums into buf (OpenCV's order: each tap in turn). */
static inline __attribute__((always_inline)) void area_row(const uint8_t *src, const Tap *xtab, int nx, int cn,
                                                           float *buf, int row) {
    int k, c;
    memset(buf, 0, sizeof(float) * (size_t)row);
    for (k = 0; k < nx; k++) {
        const uint8_t *p = src + (size_t)xtab[k].si * cn;
        float *q = buf + (size_t)xtab[k].di * cn, alpha = xtab[k].alpha;
        for (c = 0; c < cn; c++)
            q[c] += p[c] * alpha;
    }
}

static inline __attribute__((always_inline)) void area_rows(const Pixels *s, uint8_t *d, size_t stride, int row,
                                                            const Tap *xtab, int nx, const Tap *ytab, int ny,
                                                            float *buf, float *sum, int cn) {
    int j, x, prev = 0, have = -1;
    for (j = 0; j < ny; j++) {
        float beta = ytab[j].alpha;
        int dy = ytab[j].di;
        if (ytab[j].si != have) { /* a source row serves up to two output rows in a row: sum it once */
            area_row(s->data + (size_t)ytab[j].si * s->stride, xtab, nx, cn, buf, row);
            have = ytab[j].si;
        }
        if (dy != prev) {
            uint8_t *out = d + (size_t)prev * stride;
            for (x = 0; x < row; x++) {
                out[x] = round_u8(sum[x]);
                sum[x] = beta * buf[x];
            }
            prev = dy;
        } else {
            for (x = 0; x < row; x++)
                sum[x] += beta * buf[x];
        }
    }
    for (x = 0; x < row; x++)
        d[(size_t)prev * stride + x] = round_u8(sum[x]);
}

VECTOR_CLONES static int area(const Pixels *s, uint8_t *d, size_t stride, int width, int height, double sx, double sy) {
    int cn = s->channels, row = width * cn, nx, ny;
    Tap *xtab = malloc(sizeof(Tap) * (size_t)(2 * s->width + 2)), *ytab = malloc(sizeof(Tap) * (size_t)(2 * s->height + 2));
    float *buf = malloc(sizeof(float) * (size_t)row), *sum = calloc((size_t)row, sizeof(float));
    if (!xtab || !ytab || !buf || !sum) {
        free(xtab), free(ytab), free(buf), free(sum);
        return -1;
    }
    nx = area_taps(s->width, width, sx, xtab);
    ny = area_taps(s->height, height, sy, ytab);
    if (cn == 3)
        area_rows(s, d, stride, row, xtab, nx, ytab, ny, buf, sum, 3);
    else
        area_rows(s, d, stride, row, xtab, nx, ytab, ny, buf, sum, 1);
    free(xtab), free(ytab), free(buf), free(sum);
    return 0;
}

/* Integer scales: the mean of each kx x ky block. */
static void area_blocks(const Pixels *s, uint8_t *d, size_t stride, int width, int height, int kx, int ky) {
    int cn = s->channels, x, y, c, i, j;
    float scale = 1.f / (float)(kx * ky);
    for (y = 0; y < height; y++)
        for (x = 0; x < width; x++)
            for (c = 0; c < cn; c++) {
                int total = 0;
                for (j = 0; j < ky; j++) {
                    const uint8_t *p = s->data + (size_t)(y * ky + j) * s->stride + (size_t)x * kx * cn + c;
                    for (i = 0; i < kx; i++)
                        total += p[i * cn];
                }
                d[(size_t)y * stride + (size_t)x * cn + c] =
                    kx == 2 && ky == 2 ? (uint8_t)((total + 2) >> 2) : round_u8((float)total * scale);
            }
}

/* -- INTER_LINEAR (and INTER_AREA where an axis grows): two taps per axis in 11-bit fixed point --------------- */

static void taps(int ssize, int dsize, int area_mode, int clamp, int *ofs, short *alpha) {
    double inv = (double)dsize / ssize, scale = 1.0 / inv;
    int d, s;
    for (d = 0; d < dsize; d++) {
        float f;
        if (!area_mode) {
            f = (float)((d + 0.5) * scale - 0.5);
            s = (int)floorf(f);
            f -= (float)s;
        } else {
            s = (int)floor(d * scale);
            f = (float)((d + 1) - (s + 1) * inv);
            f = f <= 0 ? 0.f : f - (float)floorf(f);
        }
        if (clamp && s < 0)
            f = 0.f, s = 0;
        if (clamp && s >= ssize - 1)
            f = 0.f, s = ssize - 1;
        ofs[d] = s;
        alpha[2 * d] = (short)lrintf((1.f - f) * COEF_SCALE);
        alpha[2 * d + 1] = (short)lrintf(f * COEF_SCALE);
    }
}

/* One source row's two-tap sums; the taps' byte offsets are at0 and at1 (the same at the right edge). */
static inline __attribute__((always_inline)) void horizontal(const uint8_t *restrict src, int cn, int width,
                                                             const int *restrict at0, const int *restrict at1,
                                                             const short *restrict xa, int *restrict out) {
    int x, c;
    for (x = 0; x < width; x++) {
        const uint8_t *p0 = src + at0[x], *p1 = src + at1[x];
        int a0 = xa[2 * x], a1 = xa[2 * x + 1];
        for (c = 0; c < cn; c++)
            out[x * cn + c] = p0[c] * a0 + p1[c] * a1;
    }
}

/* OpenCV's vector form: 16-bit high products of (row >> 4) and the weights, then (+2) >> 2. */
static inline __attribute__((always_inline)) void vertical(const int *restrict r0, const int *restrict r1, int b0,
                                                           int b1, uint8_t *restrict out, int row) {
    int x;
    for (x = 0; x < row; x++) {
        int v = (((b0 * (r0[x] >> 4)) >> 16) + ((b1 * (r1[x] >> 4)) >> 16) + 2) >> 2;
        out[x] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
}

static inline __attribute__((always_inline)) void linear_rows(const Pixels *s, uint8_t *d, size_t stride, int width,
                                                              int height, const int *at0, const int *at1,
                                                              const short *xa, const int *yofs, const short *ya,
                                                              int *rows, int cn) {
    int row = width * cn, y, k, have[2] = {-1, -1};
    for (y = 0; y < height; y++) {
        const int *r[2];
        uint8_t *out = d + (size_t)y * stride;
        int b0 = ya[2 * y], b1 = ya[2 * y + 1];
        for (k = 0; k < 2; k++) {
            int sy = yofs[y] + k;
            sy = sy < 0 ? 0 : sy >= s->height ? s->height - 1 : sy;
            r[k] = rows + (size_t)(sy & 1) * row;
            if (have[sy & 1] != sy) {
                horizontal(s->data + (size_t)sy * s->stride, cn, width, at0, at1, xa, rows + (size_t)(sy & 1) * row);
                have[sy & 1] = sy;
            }
        }
        vertical(r[0], r[1], b0, b1, out, row);
    }
}

VECTOR_CLONES static int linear(const Pixels *s, uint8_t *d, size_t stride, int width, int height, int area_mode) {
    int cn = s->channels, row = width * cn, x;
    int *at0 = malloc(sizeof(int) * 2 * (size_t)width), *yofs = malloc(sizeof(int) * (size_t)height);
    short *xa = malloc(sizeof(short) * 2 * (size_t)width), *ya = malloc(sizeof(short) * 2 * (size_t)height);
    int *rows = malloc(sizeof(int) * 2 * (size_t)row), *at1 = at0 + width;
    if (!at0 || !yofs || !xa || !ya || !rows) {
        free(at0), free(yofs), free(xa), free(ya), free(rows);
        return -1;
    }
    taps(s->width, width, area_mode, 1, at0, xa);
    for (x = 0; x < width; x++) { /* source columns to byte offsets; the last column's right tap is itself */
        at1[x] = (at0[x] + 1 < s->width ? at0[x] + 1 : at0[x]) * cn;
        at0[x] *= cn;
    }
    taps(s->height, height, area_mode, 0, yofs, ya); /* rows are clipped instead, keeping their weights */
    if (cn == 3)
        linear_rows(s, d, stride, width, height, at0, at1, xa, yofs, ya, rows, 3);
    else
        linear_rows(s, d, stride, width, height, at0, at1, xa, yofs, ya, rows, 1);
    free(at0), free(yofs), free(xa), free(ya), free(rows);
    return 0;
}

int resize_u8(const Pixels *src, int interpolation, uint8_t *dst, size_t stride, int width, int height) {
    double sx = 1.0 / ((double)width / src->width), sy = 1.0 / ((double)height / src->height);
    int kx = (int)lrint(sx), ky = (int)lrint(sy);
    int blocks = fabs(sx - kx) < DBL_EPSILON && fabs(sy - ky) < DBL_EPSILON;
    if (interpolation == RESIZE_LINEAR && blocks && kx == 2 && ky == 2)
        interpolation = RESIZE_AREA; /* OpenCV's shortcut: a 2x shrink is the 2x2 mean */
    if (interpolation == RESIZE_AREA && sx >= 1 && sy >= 1) {
        if (!blocks)
            return area(src, dst, stride, width, height, sx, sy);
        area_blocks(src, dst, stride, width, height, kx, ky);
        return 0;
    }
    return linear(src, dst, stride, width, height, interpolation == RESIZE_AREA);
}

/* -- warpAffine, bilinear, constant border --------------------------------------------------------------------- */

enum { WARP_LANES = 16 };

/* One output pixel from source pixel (ix, iy) and the fractions (fx, fy), with FMA the fused multiply-add: OpenCV's constant border and bilinear
 * arithmetic (its vector kernel fuses each step). */
#define WARP_PIXEL(FMA)                                                                                               \
    do {                                                                                                             \
        int i;                                                                                                       \
        float p[4][3];                                                                                               \
        if ((unsigned)(ix + 1) >= (unsigned)(w + 1) || (unsigned)(iy + 1) >= (unsigned)(h + 1)) {                    \
            for (k = 0; k < cn; k++)                                                                                 \
                out[x * cn + k] = fill[k];                                                                           \
            break;                                                                                                   \
        }                                                                                                            \
        if ((unsigned)ix < (unsigned)(w - 1) && (unsigned)iy < (unsigned)(h - 1)) {                                  \
            const uint8_t *q = s->data + (size_t)iy * s->stride + (size_t)ix * cn;                                   \
            for (k = 0; k < cn; k++) {                                                                               \
                p[0][k] = q[k], p[1][k] = q[cn + k];                                                                 \
                p[2][k] = q[s->stride + k], p[3][k] = q[s->stride + cn + k];                                         \
            }                                                                                                        \
        } else {                                                                                                     \
            for (i = 0; i < 4; i++) {                                                                                \
                int px = ix + (i & 1), py = iy + (i >> 1);                                                           \
                int inside = (unsigned)px < (unsigned)w && (unsigned)py < (unsigned)h;                               \
                const uint8_t *q = s->data + (size_t)py * s->stride + (size_t)px * cn;                               \
                for (k = 0; k < cn; k++)                                                                             \
                    p[i][k] = inside ? q[k] : fill[k];                                                               \
            }                                                                                                        \
        }                                                                                                            \
        for (k = 0; k < cn; k++) {                                                                                   \
            float v0 = FMA(fx, p[1][k] - p[0][k], p[0][k]), v1 = FMA(fx, p[3][k] - p[2][k], p[2][k]);                \
            out[x * cn + k] = round_u8(FMA(fy, v1 - v0, v0));                                                        \
        }                                                                                                            \
    } while (0)

/* The warp's rows. OpenCV's AVX2 kernel maps 16 pixels at a time (x * M0 fused into the row's start) and its
 * scalar loop does the rest of a row another way. An axis-aligned map (M1 = M3 = 0) gives every row the same
 * columns and every column of a row the same y: those are computed once. */
#define WARP_ROWS(FMA, FLOOR)                                                                                         \
    if (M[1] == 0.f && M[3] == 0.f && columns != NULL) {                                                             \
        int *column = (int *)(columns + width);                                                                      \
        for (x = 0; x < width; x++) {                                                                                \
            float fx = x < width - width % WARP_LANES ? FMA(M[0], (float)x, M[2]) : FMA((float)x, M[0], 0.f) + M[2];  \
            column[x] = (int)FLOOR(fx);                                                                              \
            columns[x] = fx - (float)column[x];                                                                      \
        }                                                                                                            \
        for (y = 0; y < height; y++) {                                                                               \
            float row_y = (float)y * M[4] + M[5];                                                                    \
            int iy = (int)FLOOR(row_y);                                                                              \
            uint8_t *out = dst + (size_t)y * stride;                                                                 \
            for (x = 0; x < width; x++) {                                                                            \
                int ix = column[x];                                                                                  \
                float fx = columns[x], fy = row_y - (float)iy;                                                       \
                WARP_PIXEL(FMA);                                                                                     \
            }                                                                                                        \
        }                                                                                                            \
    } else {                                                                                                         \
        for (y = 0; y < height; y++) {                                                                               \
            float row_x = (float)y * M[1] + M[2], row_y = (float)y * M[4] + M[5];                                    \
            uint8_t *out = dst + (size_t)y * stride;                                                                 \
            for (x = 0; x < width; x++) {                                                                            \
                int vector = x < width - width % WARP_LANES, ix, iy;                                                  \
                float fx = vector ? FMA(M[0], (float)x, row_x) : FMA((float)x, M[0], (float)y * M[1]) + M[2];        \
                float fy = vector ? FMA(M[3], (float)x, row_y) : FMA((float)x, M[3], (float)y * M[4]) + M[5];        \
                ix = (int)FLOOR(fx), iy = (int)FLOOR(fy);                                                            \
                fx -= (float)ix, fy -= (float)iy;                                                                    \
                WARP_PIXEL(FMA);                                                                                     \
            }                                                                                                        \
        }                                                                                                            \
    }

static inline __attribute__((always_inline)) void warp_soft(const Pixels *s, const float *M, const uint8_t *fill,
                                                            uint8_t *dst, size_t stride, int width, int height, int cn,
                                                            float *columns) {
    int w = s->width, h = s->height, x, y, k;
    WARP_ROWS(fmaf, floorf)
}

#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target("fma"))) static void warp_fma(const Pixels *s, const float *M, const uint8_t *fill, uint8_t *dst,
                                                    size_t stride, int width, int height, int cn, float *columns) {
    int w = s->width, h = s->height, x, y, k;
    if (cn == 3) {
        cn = 3;
        WARP_ROWS(__builtin_fmaf, __builtin_floorf)
    } else {
        cn = 1;
        WARP_ROWS(__builtin_fmaf, __builtin_floorf)
    }
}

static int has_fma(void) { return __builtin_cpu_supports("fma"); }
int resample_exact(void) { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
#else
static void warp_fma(const Pixels *s, const float *M, const uint8_t *fill, uint8_t *dst, size_t stride, int width,
                     int height, int cn, float *columns) {
    warp_soft(s, M, fill, dst, stride, width, height, cn, columns);
}
static int has_fma(void) { return 0; }
int resample_exact(void) { return 0; }
#endif

void warp_u8(const Pixels *s, const double m[6], const uint8_t fill[4], uint8_t *dst, size_t stride, int width,
             int height) {
    double a = m[0], b = m[1], c = m[3], e = m[4], det = a * e - b * c, inv[6];
    float M[6], *columns;
    int i;
    det = det != 0 ? 1. / det : 0.;
    inv[0] = e * det;
    inv[1] = b * -det;
    inv[3] = c * -det;
    inv[4] = a * det;
    inv[2] = -inv[0] * m[2] - inv[1] * m[5];
    inv[5] = -inv[3] * m[2] - inv[4] * m[5];
    for (i = 0; i < 6; i++)
        M[i] = (float)inv[i];
    /* each column's fraction and source column (NULL: the general loop, which needs none) */
    columns = malloc((sizeof(float) + sizeof(int)) * (size_t)width);
    if (has_fma())
        warp_fma(s, M, fill, dst, stride, width, height, s->channels, columns);
    else
        warp_soft(s, M, fill, dst, stride, width, height, s->channels, columns);
    free(columns);
}

void flip_u8(const Pixels *s, int code, uint8_t *dst, size_t stride) {
    int cn = s->channels, x, y, c;
    for (y = 0; y < s->height; y++) {
        const uint8_t *src = s->data + (size_t)(code == 1 ? y : s->height - 1 - y) * s->stride;
        uint8_t *out = dst + (size_t)y * stride;
        if (code == 0) {
            memcpy(out, src, (size_t)s->width * cn);
            continue;
        }
        for (x = 0; x < s->width; x++)
            for (c = 0; c < cn; c++)
                out[x * cn + c] = src[(size_t)(s->width - 1 - x) * cn + c];
    }
}

/* -- a sample's whole way from decoded pixels to its output ------------------------------------------------------ */

static int geometry(const Pixels *s, const Geometry *g, uint8_t *out) {
    int cn = s->channels;
    size_t stride = (size_t)g->width * cn;
    if (g->kind == GEOMETRY_SLICE) {
        Pixels view = {s->data + (size_t)g->y0 * s->stride + (size_t)g->x0 * cn, s->stride, g->x1 - g->x0,
                       g->y1 - g->y0, cn};
        uint8_t *resized = NULL;
        if (g->interpolation != NO_RESIZE) {
            resized = g->flip == NO_FLIP ? out : malloc(stride * (size_t)g->height);
            if (resized == NULL || resize_u8(&view, g->interpolation, resized, stride, g->width, g->height) < 0) {
                if (resized != out)
                    free(resized);
                return -1;
            }
            view.data = resized, view.stride = stride, view.width = g->width, view.height = g->height;
        }
        if (g->flip != NO_FLIP)
            flip_u8(&view, g->flip, out, stride);
        else if (resized == NULL) {
            int y;
            for (y = 0; y < view.height; y++)
                memcpy(out + (size_t)y * stride, view.data + (size_t)y * view.stride, stride);
        }
        if (resized != out)
            free(resized);
    } else if (g->kind == GEOMETRY_WARP) {
        Pixels small = *s;
        uint8_t *shrunk = NULL;
        if (g->pre_width) {
            size_t row = (size_t)g->pre_width * cn;
            shrunk = malloc(row * (size_t)g->pre_height);
            if (shrunk == NULL || resize_u8(s, RESIZE_AREA, shrunk, row, g->pre_width, g->pre_height) < 0) {
                free(shrunk);
                return -1;
            }
            small.data = shrunk, small.stride = row, small.width = g->pre_width, small.height = g->pre_height;
        }
        warp_u8(&small, g->m, g->fill, out, stride, g->width, g->height);
        free(shrunk);
    } else {
        int y;
        for (y = 0; y < s->height; y++)
            memcpy(out + (size_t)y * stride, s->data + (size_t)y * s->stride, stride);
    }
    return 0;
}

int finish_u8(const Pixels *src, const Geometry *g, const Output *o) {
    int cn = src->channels, width = g->kind == GEOMETRY_NONE ? src->width : g->width;
    int height = g->kind == GEOMETRY_NONE ? src->height : g->height, c;
    float mean[4], std[4];
    Geometry sized = *g;
    size_t plane = (size_t)width * height;
    uint8_t *pixels;
    sized.width = width, sized.height = height;
    if (o->dtype == OUT_U8 && !o->channel_first && !o->means && !o->stds)
        return geometry(src, &sized, o->data); /* straight into the batch */
    pixels = malloc(plane * cn);
    if (pixels == NULL || geometry(src, &sized, pixels) < 0) {
        free(pixels);
        return -1;
    }
    for (c = 0; c < cn; c++) { /* x - 0 and x / 1 are exact: absent values change nothing */
        mean[c] = o->means ? o->mean[o->means == 1 ? 0 : c] : 0.f;
        std[c] = o->stds ? o->std[o->stds == 1 ? 0 : c] : 1.f;
    }
    for (c = 0; c < cn; c++) {
        size_t step = o->channel_first ? 1 : (size_t)cn, first = o->channel_first ? c * plane : (size_t)c, at;
        if (o->dtype == OUT_U8) {
            uint8_t *to = (uint8_t *)o->data + first;
            for (at = 0; at < plane; at++)
                to[at * step] = pixels[at * cn + c];
        } else {
            float *to = (float *)o->data + first, m = mean[c], sd = std[c];
            for (at = 0; at < plane; at++)
                to[at * step] = ((float)pixels[at * cn + c] - m) / sd;
        }
    }
    free(pixels);
    return 0;
}
