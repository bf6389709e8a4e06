/* picpac's pixel kernels (see _kernels.h): the arithmetic of every step picpac promises to be exact about, owned here,
 * so that a release of OpenCV can change speed but not a sample's bytes.
 *
 * Resizes are separable: each output pixel is a weighted sum of source pixels along x (int32), then of those rows
 * along y, with 11-bit integer weights that sum to exactly 2048 on each axis and one rounding to nearest at the end
 * ((sum + 2**21) >> 22): LINEAR has two taps at the pixel centres' positions, AREA the source cells an output cell
 * covers. Warps are bilinear in float32, each step a fused multiply-add written out (fmaf), rounded half to even.
 * Integer arithmetic, and float arithmetic in a fixed order with no other contraction (-ffp-contract=off, and the
 * pragmas below), give the same bytes on every CPU and compiler: the loops are compiled once per variant (portable C,
 * and on x86-64 AVX2 and AVX-512), chosen at load time or by kernels_select, and tests/image/kernel_vectors.c checks
 * the variants, and aarch64 under qemu, against the same vectors. */
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

/* Round half to even into 0..255 (NaN: 0). */
static inline uint8_t round_u8(float v) {
    if (!(v > -0.5f))
        return 0;
    return v < 255.f ? (uint8_t)lrintf(v) : 255;
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
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define VARIANT(name) name##_avx2
#include "_kernels_loops.h"
#undef VARIANT
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")
#define VARIANT(name) name##_avx512
#include "_kernels_loops.h"
#undef VARIANT
#pragma GCC pop_options
#endif

typedef struct {
    const char *name;
    void (*hpass)(const uint8_t *, int, int, int, const int *, const int32_t *, int32_t *);
    void (*vpass)(const int32_t *const *, const int32_t *, int, uint8_t *, int);
    void (*warp_rows)(const Pixels *, const float *, int, uint8_t, uint8_t *, size_t, int, int);
    void (*convert)(const uint8_t *, int, size_t, const Output *, const float *, const float *);
} Loops;

static const Loops LOOPS[] = {
    {"portable", hpass_portable, vpass_portable, warp_rows_portable, convert_portable},
#ifdef X86_VARIANTS
    {"avx2", hpass_avx2, vpass_avx2, warp_rows_avx2, convert_avx2},
    {"avx512", hpass_avx512, vpass_avx512, warp_rows_avx512, convert_avx512},
#endif
};
enum { VARIANTS = sizeof LOOPS / sizeof LOOPS[0] };

static const Loops *loops = &LOOPS[0];

static int runs(const char *name) {
#ifdef X86_VARIANTS
    __builtin_cpu_init();
    if (strcmp(name, "avx2") == 0)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (strcmp(name, "avx512") == 0)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
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
 * weighted by how much of it the cell covers; the weights rounded to ONE in all (the largest takes the rest). */
static int area_taps(int ssize, int dsize, Axis *a) {
    double scale = (double)ssize / dsize;
    int taps = (int)ceil(scale) + 1, d, t;
    if (axis_alloc(a, dsize, taps) < 0)
        return -1;
    for (d = 0; d < dsize; d++) {
        double start = d * scale, end = d == dsize - 1 ? ssize : (d + 1) * scale;
        int first = (int)floor(start), n = 0, largest = 0, sum = 0, s;
        int *ofs = a->ofs + (size_t)d * taps;
        int32_t *w = a->w + (size_t)d * taps;
        for (s = first; s < ssize && s < end && n < taps; s++, n++) {
            double cover = (s + 1 < end ? s + 1 : end) - (s > start ? s : start);
            ofs[n] = s;
            w[n] = (int32_t)lrint(cover / (end - start) * ONE);
            sum += w[n];
            largest = w[n] > w[largest] ? n : largest;
        }
        w[largest] += ONE - sum;
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

int resize_u8(const Pixels *s, int interpolation, uint8_t *dst, size_t stride, int width, int height) {
    int cn = s->channels, row = width * cn, y, t, k, status = KERNELS_NO_MEMORY;
    Axis ax = {0}, ay = {0};
    int32_t *buffer = NULL, **slots = NULL;
    int *have = NULL;
    const int32_t **rows = NULL;
    if (make_axis(s->width, width, interpolation, &ax) < 0 || make_axis(s->height, height, interpolation, &ay) < 0)
        goto done;
    for (k = 0; k < width * ax.taps; k++)
        ax.ofs[k] *= cn;
    /* a ring of ay.taps horizontal rows: the rows of output y are consecutive (its last tap repeated) */
    buffer = malloc(sizeof(int32_t) * (size_t)row * ay.taps);
    slots = malloc(sizeof(int32_t *) * ay.taps), have = malloc(sizeof(int) * ay.taps);
    rows = malloc(sizeof(int32_t *) * ay.taps);
    if (!buffer || !slots || !have || !rows)
        goto done;
    for (k = 0; k < ay.taps; k++)
        slots[k] = buffer + (size_t)k * row, have[k] = -1;
    for (y = 0; y < height; y++) {
        for (t = 0; t < ay.taps; t++) {
            int sy = ay.ofs[y * ay.taps + t], slot = sy % ay.taps;
            if (have[slot] != sy) {
                loops->hpass(s->data + (size_t)sy * s->stride, cn, width, ax.taps, ax.ofs, ax.w, slots[slot]);
                have[slot] = sy;
            }
            rows[t] = slots[slot];
        }
        loops->vpass(rows, ay.w + (size_t)y * ay.taps, ay.taps, dst + (size_t)y * stride, row);
    }
    status = KERNELS_OK;
done:
    axis_free(&ax), axis_free(&ay);
    free(buffer), free(slots), free(have), free(rows);
    return status;
}

/* -- warping, flipping, nearest neighbour -------------------------------------------------------------------------- */

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
        else if (pixel == 3)
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
