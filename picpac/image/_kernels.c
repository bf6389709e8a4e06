/* picpac's pixel kernels (see _kernels.h): the arithmetic of every step picpac promises to be exact about, owned here,
 * so that a release of OpenCV can change speed but not a sample's bytes.
 *
 * Resizes are separable: each output pixel is a weighted sum of source pixels along x (int32), then of those rows
 * along y, with 11-bit integer weights that sum to exactly 2048 on each axis and one rounding to nearest at the end
 * ((sum + 2**21) >> 22): LINEAR has two taps at the pixel centres' positions, AREA the source cells an output cell
 * covers. Warps are bilinear in float32, each step a fused multiply-add written out (fmaf), rounded half to even.
 * Integer arithmetic, and float arithmetic in a fixed order with no other contraction (-ffp-contract=off, and the
 * pragmas below), give the same bytes on every CPU and compiler: the loops are compiled once per variant (portable C,
 * and on x86-64 AVX2 with FMA, whose warps and axis-aligned warps gather explicitly), chosen at load time or by
 * kernels_select, and tests/image/kernel_vectors.c checks the variants, and aarch64 under qemu, against the same
 * vectors. (An AVX-512 build of the loops was no faster on AMD Zen 4: measured, and left out.) */
#include "_kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

enum { BITS = 11, ONE = 1 << BITS, ROUND = 1 << (2 * BITS - 1) };
#define FAR 1e6f /* a warp's source point past this is outside any image (and no int conversion overflows) */

/* Clamp into 0..255 (NaN: 0), then round half to even: adding 1.5 * 2**23 leaves a float no fraction, rounded as the
 * default rounding mode rounds (what lrintf does), in plain float arithmetic that vectorises. */
static inline uint8_t round_u8(float v) {
    v = v > 0.f ? v : 0.f;
    v = v < 255.f ? v : 255.f;
    return (uint8_t)(int)((v + 12582912.f) - 12582912.f);
}

/* Index p of an axis of n pixels through the border: -1 for BORDER_CONSTANT outside. */
static inline int border_index(int p, int n, int border) {
    if ((unsigned)p < (unsigned)n)
        return p;
    if (border == BORDER_REPLICATE)
        return p < 0 ? 0 : n - 1;
    if (border == BORDER_REFLECT) {
        int period = 2 * n - 2;
        if (n == 1)
            return 0;
        p %= period;
        p = p < 0 ? p + period : p;
        return p < n ? p : period - p;
    }
    if (border == BORDER_WRAP) {
        p %= n;
        return p < 0 ? p + n : p;
    }
    return -1;
}

/* -- the loops, once per variant -------------------------------------------------------------------------------- */

#define VARIANT(name) name##_portable
#include "_kernels_loops.h"
#undef VARIANT

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define X86_VARIANTS 1
#include <immintrin.h>
#define VARIANT_GATHERS /* the loops' explicit AVX2 gathers, in these two variants */
#pragma GCC push_options
#pragma GCC target("avx2,fma")
/* eight int32 (0..255) stored as bytes */
static inline void store8(uint8_t *out, __m256i v) {
    __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    _mm_storel_epi64((__m128i *)out, _mm_packus_epi16(w, w));
}
#define VARIANT(name) name##_avx2
#include "_kernels_loops.h"
#undef VARIANT
#pragma GCC pop_options
#undef VARIANT_GATHERS
#endif

typedef struct {
    const char *name;
    void (*vsum)(const uint8_t *const *, const int32_t *, int, int32_t *, int);
    void (*hsum)(const int32_t *, const int *, const int32_t *, int, int32_t *, uint8_t *, int);
    void (*warp_rows)(const Pixels *, const float *, int, uint8_t, uint8_t *, size_t, int, int);
    void (*vlerp)(const uint8_t *, const uint8_t *, float, float *, int);
    void (*hlerp)(const float *, const int *, const float *, int, uint8_t *, int);
    void (*convert)(const uint8_t *, int, size_t, const Output *, const float *, const float *);
} Loops;

static const Loops LOOPS[] = {
    {"portable", vsum_portable, hsum_portable, warp_rows_portable, vlerp_portable, hlerp_portable, convert_portable},
#ifdef X86_VARIANTS
    {"avx2", vsum_avx2, hsum_avx2, warp_rows_avx2, vlerp_avx2, hlerp_avx2, convert_avx2},
#endif
};
enum { VARIANTS = sizeof LOOPS / sizeof LOOPS[0] };

static const Loops *loops = &LOOPS[0];

static int runs(const char *name) {
#ifdef X86_VARIANTS
    __builtin_cpu_init();
    if (strcmp(name, "avx2") == 0)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    return strcmp(name, "portable") == 0;
}

int kernels_select(const char *name) {
    int k;
    if (strcmp(name, "auto") == 0) {
        for (k = VARIANTS - 1; k > 0 && !runs(LOOPS[k].name); k--)
            ;
        loops = &LOOPS[k];
        return 0;
    }
    for (k = 0; k < VARIANTS; k++)
        if (strcmp(name, LOOPS[k].name) == 0 && runs(name)) {
            loops = &LOOPS[k];
            return 0;
        }
    return -1;
}

const char *kernels_variant(void) { return loops->name; }

/* -- resizing ----------------------------------------------------------------------------------------------------- */

/* An axis of a resize: output d sums the source pixels ofs[d * taps + t] (times the channels: byte offsets within a
 * row, or row numbers) with weights w[d * taps + t], which sum to ONE. */
typedef struct {
    int taps;
    int *ofs;
    int32_t *w;
} Axis;

static int axis_alloc(Axis *a, int dsize, int taps) {
    a->taps = taps;
    a->ofs = malloc(sizeof(int) * (size_t)dsize * taps);
    a->w = malloc(sizeof(int32_t) * (size_t)dsize * taps);
    return a->ofs && a->w ? 0 : -1;
}

static void axis_free(Axis *a) {
    free(a->ofs), free(a->w);
    a->ofs = NULL, a->w = NULL;
}

/* Two taps per output: LINEAR at (d + 0.5) * scale - 0.5; for AREA where the axis grows, OpenCV's area-mode taps. */
static int two_taps(int ssize, int dsize, int area_mode, Axis *a) {
    double scale = (double)ssize / dsize, inv = (double)dsize / ssize;
    int d;
    if (axis_alloc(a, dsize, 2) < 0)
        return -1;
    for (d = 0; d < dsize; d++) {
        float f;
        int s, w1;
        if (!area_mode) {
            f = (float)((d + 0.5) * scale - 0.5);
            s = (int)floorf(f);
            f -= (float)s;
        } else {
            s = (int)floor(d * scale);
            f = (float)((d + 1) - (s + 1) * inv);
            f = f <= 0 ? 0.f : f - floorf(f);
        }
        if (s < 0)
            f = 0.f, s = 0;
        if (s >= ssize - 1)
            f = 0.f, s = ssize - 1;
        w1 = (int)lrintf(f * ONE);
        a->ofs[2 * d] = s, a->ofs[2 * d + 1] = s + 1 < ssize ? s + 1 : s;
        a->w[2 * d] = ONE - w1, a->w[2 * d + 1] = w1;
    }
    return 0;
}

/* AREA where the axis shrinks: output d averages [d * scale, (d + 1) * scale) of the source, each source pixel
 * weighted by how much of it the cell covers. The weights are rounded cumulatively (each the difference of the rounded
 * running coverage), so that they sum to ONE and no one takes the others' rounding: a cell of hundreds of pixels (a
 * 500-pixel row averaged to one) stays within half a level of the exact mean. */
static int area_taps(int ssize, int dsize, Axis *a) {
    double scale = (double)ssize / dsize;
    int taps = (int)ceil(scale) + 1, d, t;
    if (axis_alloc(a, dsize, taps) < 0)
        return -1;
    for (d = 0; d < dsize; d++) {
        double start = d * scale, end = d == dsize - 1 ? ssize : (d + 1) * scale, covered = 0;
        int first = (int)floor(start), n = 0, s;
        int32_t before = 0;
        int *ofs = a->ofs + (size_t)d * taps;
        int32_t *w = a->w + (size_t)d * taps;
        for (s = first; s < ssize && s < end && n < taps; s++, n++) {
            int32_t upto;
            covered += (s + 1 < end ? s + 1 : end) - (s > start ? s : start);
            upto = s + 1 < ssize && s + 1 < end ? (int32_t)lrint(covered / (end - start) * ONE) : ONE;
            ofs[n] = s;
            w[n] = upto - before;
            before = upto;
        }
        for (t = n; t < taps; t++)
            ofs[t] = ofs[n - 1], w[t] = 0;
    }
    return 0;
}

static int make_axis(int ssize, int dsize, int interpolation, Axis *a) {
    if (interpolation == RESIZE_AREA && dsize < ssize)
        return area_taps(ssize, dsize, a);
    return two_taps(ssize, dsize, interpolation == RESIZE_AREA, a);
}

/* Rows first, then columns: each output row sums its source rows over the columns it reads (contiguous bytes, which
 * vectorise), then each output element sums its taps of that one row. Exact integers, so the order changes nothing:
 * sum over y of wy * (sum over x of wx * p) = sum over x of wx * (sum over y of wy * p), each at most 255 * 2**22. */
int resize_u8(const Pixels *s, int interpolation, uint8_t *dst, size_t stride, int width, int height) {
    int cn = s->channels, n = width * cn, first, last, y, t, k, c, status = KERNELS_NO_MEMORY;
    Axis ax = {0}, ay = {0};
    int32_t *acc = NULL, *w = NULL, *sum = NULL;
    int *at = NULL;
    const uint8_t **rows = NULL;
    if (make_axis(s->width, width, interpolation, &ax) < 0 || make_axis(s->height, height, interpolation, &ay) < 0)
        goto done;
    first = ax.ofs[0], last = ax.ofs[0];
    for (k = 0; k < width * ax.taps; k++) /* the columns the output reads */
        first = ax.ofs[k] < first ? ax.ofs[k] : first, last = ax.ofs[k] > last ? ax.ofs[k] : last;
    /* the horizontal taps per output element, as offsets into acc (the window's sums) */
    at = malloc(sizeof(int) * (size_t)n * ax.taps), w = malloc(sizeof(int32_t) * (size_t)n * ax.taps);
    acc = malloc(sizeof(int32_t) * (size_t)(last - first + 1) * cn), sum = malloc(sizeof(int32_t) * (size_t)n);
    rows = malloc(sizeof(uint8_t *) * ay.taps);
    if (!at || !w || !acc || !sum || !rows)
        goto done;
    for (k = 0; k < width; k++)
        for (t = 0; t < ax.taps; t++)
            for (c = 0; c < cn; c++) {
                at[(size_t)t * n + k * cn + c] = (ax.ofs[k * ax.taps + t] - first) * cn + c;
                w[(size_t)t * n + k * cn + c] = ax.w[k * ax.taps + t];
            }
    for (y = 0; y < height; y++) {
        for (t = 0; t < ay.taps; t++)
            rows[t] = s->data + (size_t)ay.ofs[y * ay.taps + t] * s->stride + (size_t)first * cn;
        loops->vsum(rows, ay.w + (size_t)y * ay.taps, ay.taps, acc, (last - first + 1) * cn);
        loops->hsum(acc, at, w, ax.taps, sum, dst + (size_t)y * stride, n);
    }
    status = KERNELS_OK;
done:
    axis_free(&ax), axis_free(&ay);
    free(acc), free(w), free(sum), free(at), free(rows);
    return status;
}

/* -- warping, flipping, nearest neighbour -------------------------------------------------------------------------- */

/* A warp whose map keeps the axes (M1 = M3 = 0): each column's source point (fma(M0, x, M2)) and each row's (y M4 + M5),
 * as the general warp computes them, found once; then rows first: each output row interpolates its two source rows
 * over the columns it reads (contiguous, in float), then each output element between its two columns. Source rows
 * and columns outside the image come from the border (a row of the fill, for a constant one). -1 where the columns
 * read span too far (a map no stream makes: the general warp takes it). */
static int warp_axes(const Pixels *s, const float *M, int border, uint8_t fill, uint8_t *dst, size_t stride,
                     int width, int height) {
    int cn = s->channels, n = width * cn, x, y, c, k, first = 0, last = 0, span, status = KERNELS_NO_MEMORY;
    int *column = malloc(sizeof(int) * (size_t)width), *at = malloc(sizeof(int) * (size_t)n), *source = NULL;
    float *frac = malloc(sizeof(float) * (size_t)width), *ax = malloc(sizeof(float) * (size_t)n), *v = NULL;
    uint8_t *rows = NULL;
    if (!column || !at || !frac || !ax)
        goto done;
    for (x = 0; x < width; x++) {
        float fx = fmaf(M[0], (float)x, M[2]), ix;
        if (!(fx > -FAR && fx < FAR))
            fx = -FAR;
        ix = floorf(fx);
        column[x] = (int)ix, frac[x] = fx - ix;
        first = x == 0 || column[x] < first ? column[x] : first;
        last = x == 0 || column[x] + 1 > last ? column[x] + 1 : last;
    }
    span = last - first + 1;
    if (span > 4 * (width + s->width) + 64) {
        status = -2;
        goto done;
    }
    for (x = 0; x < width; x++)
        for (c = 0; c < cn; c++)
            at[x * cn + c] = (column[x] - first) * cn + c, ax[x * cn + c] = frac[x];
    /* the columns [first, last] of a source row, through the border, into one buffer row; the rows' two copies */
    source = malloc(sizeof(int) * (size_t)span);
    rows = malloc((size_t)span * cn * 2);
    v = malloc(sizeof(float) * (size_t)span * cn);
    if (!source || !rows || !v)
        goto done;
    for (k = 0; k < span; k++)
        source[k] = border_index(first + k, s->width, border);
    for (y = 0; y < height; y++) {
        float fy = (float)y * M[4] + M[5], iy;
        uint8_t *q[2] = {rows, rows + (size_t)span * cn};
        int i;
        if (!(fy > -FAR && fy < FAR))
            fy = -FAR;
        iy = floorf(fy);
        for (i = 0; i < 2; i++) {
            int row = border_index((int)iy + i, s->height, border);
            const uint8_t *in = row < 0 ? NULL : s->data + (size_t)row * s->stride;
            int inside = first >= 0 && last < s->width;
            if (in != NULL && inside) { /* (no copy: read the source row itself) */
                q[i] = (uint8_t *)in + (size_t)first * cn;
                continue;
            }
            for (k = 0; k < span; k++)
                for (c = 0; c < cn; c++)
                    q[i][k * cn + c] = in == NULL || source[k] < 0 ? fill : in[(size_t)source[k] * cn + c];
        }
        loops->vlerp(q[0], q[1], fy - iy, v, span * cn);
        loops->hlerp(v, at, ax, cn, dst + (size_t)y * stride, n);
    }
    status = KERNELS_OK;
done:
    free(column), free(at), free(frac), free(ax), free(source), free(rows), free(v);
    return status;
}

int warp_u8(const Pixels *s, const double m[6], int border, uint8_t fill, uint8_t *dst, size_t stride, int width,
            int height) {
    double a = m[0], b = m[1], c = m[3], e = m[4], det = a * e - b * c, inv[6];
    float M[6];
    int i;
    det = det != 0 ? 1. / det : 0.;
    inv[0] = e * det;
    inv[1] = b * -det;
    inv[3] = c * -det;
    inv[4] = a * det;
    inv[2] = -inv[0] * m[2] - inv[1] * m[5];
    inv[5] = -inv[3] * m[2] - inv[4] * m[5];
    for (i = 0; i < 6; i++) /* (a double past FLT_MAX as float is undefined: such maps read nothing of the image) */
        M[i] = fabs(inv[i]) < 1e30 ? (float)inv[i] : 0.f;
    if (M[1] == 0.f && M[3] == 0.f) {
        int status = warp_axes(s, M, border, fill, dst, stride, width, height);
        if (status != -2)
            return status;
    }
    loops->warp_rows(s, M, border, fill, dst, stride, width, height);
    return KERNELS_OK;
}

#define FLIP_ROW(PIXEL)                                                                                              \
    for (x = 0; x < width; x++)                                                                                     \
        memcpy(out + (size_t)x * (PIXEL), in + (size_t)(width - 1 - x) * (PIXEL), (PIXEL))

void flip_pixels(const uint8_t *src, size_t src_stride, int width, int height, size_t pixel, int code, uint8_t *dst,
                 size_t stride) {
    int x, y;
    for (y = 0; y < height; y++) {
        const uint8_t *in = src + (size_t)(code == 1 ? y : height - 1 - y) * src_stride;
        uint8_t *out = dst + (size_t)y * stride;
        if (code == 0)
            memcpy(out, in, (size_t)width * pixel);
        else if (pixel == 1)
            FLIP_ROW(1);
        else if (pixel == 3 && width > 2) { /* 4-byte copies, each overwritten by the next pixel, inside the row */
            memcpy(out, in + (size_t)(width - 1) * 3, 3);
            for (x = 1; x < width - 1; x++)
                memcpy(out + (size_t)x * 3, in + (size_t)(width - 1 - x) * 3, 4);
            memcpy(out + (size_t)(width - 1) * 3, in, 3);
        } else if (pixel == 3)
            FLIP_ROW(3);
        else if (pixel == 4)
            FLIP_ROW(4);
        else
            FLIP_ROW(pixel);
    }
}

/* The source index of each destination index along an axis-aligned map: floor(scale (d + 0.5) + shift); -1 outside. */
static void nearest_table(double scale, double shift, int dsize, int ssize, int *out) {
    int d;
    for (d = 0; d < dsize; d++) {
        double u = scale * (d + 0.5) + shift;
        out[d] = u >= 0 && u < ssize ? (int)floor(u) : -1;
    }
}

int nearest_pixels(const uint8_t *src, size_t src_stride, int src_width, int src_height, size_t pixel,
                   const double m[6], uint8_t *dst, size_t stride, int width, int height) {
    double det = m[0] * m[4] - m[1] * m[3], ia, ib, ic, id, ie, iff;
    int x, y;
    if (!(det != 0 && isfinite(det))) {
        for (y = 0; y < height; y++)
            memset(dst + (size_t)y * stride, 0, (size_t)width * pixel);
        return KERNELS_OK;
    }
    ia = m[4] / det, ib = -m[1] / det, id = -m[3] / det, ie = m[0] / det;
    ic = -ia * m[2] - ib * m[5], iff = -id * m[2] - ie * m[5];
    if (m[1] == 0 && m[3] == 0) { /* a scale, crop or flip: one table per axis */
        int *xs = malloc(sizeof(int) * ((size_t)width + height)), *ys;
        if (xs == NULL)
            return KERNELS_NO_MEMORY;
        ys = xs + width;
        nearest_table(ia, ic, width, src_width, xs);
        nearest_table(ie, iff, height, src_height, ys);
        for (y = 0; y < height; y++) {
            uint8_t *out = dst + (size_t)y * stride;
            const uint8_t *in = ys[y] < 0 ? NULL : src + (size_t)ys[y] * src_stride;
            for (x = 0; x < width; x++) {
                if (in == NULL || xs[x] < 0)
                    memset(out + (size_t)x * pixel, 0, pixel);
                else
                    memcpy(out + (size_t)x * pixel, in + (size_t)xs[x] * pixel, pixel);
            }
        }
        free(xs);
        return KERNELS_OK;
    }
    for (y = 0; y < height; y++) {
        uint8_t *out = dst + (size_t)y * stride;
        for (x = 0; x < width; x++) {
            double u = ia * (x + 0.5) + ib * (y + 0.5) + ic, v = id * (x + 0.5) + ie * (y + 0.5) + iff;
            if (u >= 0 && u < src_width && v >= 0 && v < src_height)
                memcpy(out + (size_t)x * pixel, src + (size_t)floor(v) * src_stride + (size_t)floor(u) * pixel, pixel);
            else
                memset(out + (size_t)x * pixel, 0, pixel);
        }
    }
    return KERNELS_OK;
}

/* -- a sample's whole way from decoded pixels to its output ------------------------------------------------------ */

static int geometry(const Pixels *s, const Geometry *g, uint8_t *out) {
    int cn = s->channels, y;
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
                return KERNELS_NO_MEMORY;
            }
            view.data = resized, view.stride = stride, view.width = g->width, view.height = g->height;
        }
        if (g->flip != NO_FLIP)
            flip_pixels(view.data, view.stride, view.width, view.height, (size_t)cn, g->flip, out, stride);
        else if (resized == NULL)
            for (y = 0; y < view.height; y++)
                memcpy(out + (size_t)y * stride, view.data + (size_t)y * view.stride, stride);
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
                return KERNELS_NO_MEMORY;
            }
            small.data = shrunk, small.stride = row, small.width = g->pre_width, small.height = g->pre_height;
        }
        warp_u8(&small, g->m, BORDER_CONSTANT, g->fill, out, stride, g->width, g->height);
        free(shrunk);
    } else {
        for (y = 0; y < s->height; y++)
            memcpy(out + (size_t)y * stride, s->data + (size_t)y * s->stride, stride);
    }
    return KERNELS_OK;
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
        return KERNELS_NO_MEMORY;
    }
    for (c = 0; c < cn; c++) { /* x - 0 and x / 1 are exact: absent values change nothing */
        mean[c] = o->means ? o->mean[o->means == 1 ? 0 : c] : 0.f;
        std[c] = o->stds ? o->std[o->stds == 1 ? 0 : c] : 1.f;
    }
    loops->convert(pixels, cn, plane, o, mean, std);
    free(pixels);
    return KERNELS_OK;
}
