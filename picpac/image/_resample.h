/* Resampling of 8-bit images, with OpenCV's arithmetic (see _resample.c). */
#ifndef PICPAC_RESAMPLE_H
#define PICPAC_RESAMPLE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const uint8_t *data;
    size_t stride; /* bytes from one row to the next */
    int width, height, channels;
} Pixels;

enum { RESIZE_LINEAR = 0, RESIZE_AREA = 1 };

/* src resized to width x height into dst (rows of stride bytes), as cv2.resize with INTER_LINEAR or
 * INTER_AREA. 0, or -1 when out of memory. */
int resize_u8(const Pixels *src, int interpolation, uint8_t *dst, size_t stride, int width, int height);

/* src mapped by the affine m (dst -> src inverted inside, as cv2.warpAffine without WARP_INVERSE_MAP)
 * onto width x height, bilinear, constant border fill[channel]. */
void warp_u8(const Pixels *src, const double m[6], const uint8_t fill[4], uint8_t *dst, size_t stride, int width,
             int height);

/* Whether this CPU runs the OpenCV kernels these match (x86-64 with AVX2 and FMA, OpenCV's usual dispatch); on
 * others OpenCV's SIMD code rounds otherwise, and picpac keeps its Python path. */
int resample_exact(void);

/* src mirrored as cv2.flip: code 1 around the vertical axis, 0 the horizontal, -1 both. */
void flip_u8(const Pixels *src, int code, uint8_t *dst, size_t stride);

/* A sample's geometry, planned in Python (picpac.image.sample.resample_plan, as fused_geometry writes it). */
enum { GEOMETRY_NONE = 0, GEOMETRY_SLICE = 1, GEOMETRY_WARP = 2 };
enum { NO_RESIZE = -1, NO_FLIP = 2 };

typedef struct {
    int kind;
    int x0, y0, x1, y1;       /* SLICE: the window, then resize (interpolation) and flip (a cv2.flip code) */
    int interpolation, flip;
    int pre_width, pre_height; /* WARP: shrink by INTER_AREA first (0: not), then warp by m */
    double m[6];
    uint8_t fill[4];
    int width, height;        /* the output's size (NONE: the source's) */
} Geometry;

enum { OUT_U8 = 0, OUT_F32 = 1 };

typedef struct {
    void *data; /* height x width x channels (or channels x height x width), contiguous */
    int dtype, channel_first;
    int means, stds; /* how many values (0: none, 1: every channel, or one per channel) */
    float mean[4], std[4];
} Output;

/* src through the geometry, then written to out as (x - mean) / std in its dtype and layout, as
 * picpac.image.transforms.convert. 0, or -1 when out of memory. */
int finish_u8(const Pixels *src, const Geometry *g, const Output *out);

#endif
