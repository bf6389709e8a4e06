/* picpac's pixel kernels: resizing, warping, flipping and converting images with picpac's own arithmetic, so that a
 * sample's bytes depend on picpac alone, not on the OpenCV installed or the CPU (see _kernels.c). Plain C: the
 * extension picpac.image._kernels wraps them for Python and exports them to picpac.image._jpeg (_kernels_api.h), and
 * tests/image/kernel_vectors.c runs them on their test vectors, natively and under qemu. */
#ifndef PICPAC_KERNELS_H
#define PICPAC_KERNELS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const uint8_t *data;
    size_t stride; /* bytes from one row to the next */
    int width, height, channels;
} Pixels;

enum { RESIZE_LINEAR = 0, RESIZE_AREA = 1 };
enum { BORDER_CONSTANT = 0, BORDER_REPLICATE = 1, BORDER_REFLECT = 2, BORDER_WRAP = 3 }; /* REFLECT: 101, gfedcb|abcdefgh */
enum { KERNELS_OK = 0, KERNELS_NO_MEMORY = -1 };

/* src resized to width x height into dst (rows of stride bytes): LINEAR samples two pixels per axis at the pixel
 * centres' positions, AREA averages the source cells each output cell covers (LINEAR's taps where an axis grows).
 * Weights are 11-bit integers, sums exact, one rounding to nearest at the end. */
int resize_u8(const Pixels *src, int interpolation, uint8_t *dst, size_t stride, int width, int height);

/* src mapped by the affine m (destination pixel indices -> source ones after m is inverted, as warpAffine without
 * WARP_INVERSE_MAP) onto width x height, bilinear in float with fused multiply-adds; pixels from outside the source
 * come from ``border`` (BORDER_CONSTANT: ``fill`` in every channel). */
int warp_u8(const Pixels *src, const double m[6], int border, uint8_t fill, uint8_t *dst, size_t stride, int width,
            int height);

/* src mirrored: code 1 around the vertical axis, 0 the horizontal, -1 both; ``pixel`` bytes a pixel (any dtype). */
void flip_pixels(const uint8_t *src, size_t src_stride, int width, int height, size_t pixel, int code, uint8_t *dst,
                 size_t stride);

/* Nearest neighbour of any dtype (``pixel`` bytes a pixel): destination pixel (x, y) takes the source pixel under
 * the point the continuous map m (source -> destination, pixel centres at +0.5) takes its centre from; zero bytes
 * where that point lies outside the source. */
int nearest_pixels(const uint8_t *src, size_t src_stride, int src_width, int src_height, size_t pixel,
                   const double m[6], uint8_t *dst, size_t stride, int width, int height);

/* A sample's geometry, planned in Python (picpac.image.sample.resample_plan, as fused_geometry writes it). */
enum { GEOMETRY_NONE = 0, GEOMETRY_SLICE = 1, GEOMETRY_WARP = 2 };
enum { NO_RESIZE = -1, NO_FLIP = 2 };

typedef struct {
    int kind;
    int x0, y0, x1, y1;        /* SLICE: the window, then resize (interpolation) and flip (a flip code) */
    int interpolation, flip;
    int pre_width, pre_height; /* WARP: shrink by AREA first (0: not), then warp by m */
    double m[6];
    uint8_t fill;
    int width, height;         /* the output's size (NONE: the source's) */
} Geometry;

enum { OUT_U8 = 0, OUT_F32 = 1 };

typedef struct {
    void *data; /* height x width x channels (or channels x height x width), contiguous */
    int dtype, channel_first;
    int means, stds; /* how many values (0: none, 1: every channel, or one per channel) */
    float mean[4], std[4];
} Output;

/* src through the geometry, then written to out as (x - mean) / std in its dtype and layout, as
 * picpac.image.transforms.convert writes it. KERNELS_OK, or KERNELS_NO_MEMORY. */
int finish_u8(const Pixels *src, const Geometry *g, const Output *out);

/* The loops' variant: "portable" (plain C, every CPU), or on x86-64 "avx2" (AVX2 and FMA); each gives the same bytes. kernels_select("auto") takes the widest this CPU runs; 0, or -1 for a variant it cannot
 * run (or one unknown). */
int kernels_select(const char *name);
const char *kernels_variant(void);

#endif
