/* The kernels' test vectors: picpac/image/_kernels.c on deterministic cases, one line per case with its parameters and
 * a digest of the output's bytes (h = h * 0x100000001B3 + byte + 1 over them, mod 2**64). tests/image/test_kernels_vectors.py builds it natively (each variant
 * of the loops, forced), cross-compiles it for aarch64 and runs it under qemu-aarch64, and checks every line against
 * kernel_vectors.txt; it also replays the lines through the Python extension.
 *
 * Usage: kernel_vectors [VARIANT]   (portable, avx2 or auto; default auto). Exit status 2: a variant this CPU
 * cannot run. The inputs of case k are the splitmix64 stream from k * 0x9E3779B97F4A7C15 + 1, 8 bytes a draw, little
 * endian; its parameters come from the stream of k * 0x9E3779B97F4A7C15 + 2. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "_kernels.h"

#define GOLDEN 0x9E3779B97F4A7C15ULL

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

typedef struct {
    uint64_t state;
} Stream;

static uint64_t next(Stream *s) { return mix(s->state += GOLDEN); }
static int below(Stream *s, int n) { return (int)(next(s) % (uint64_t)n); }
static double uniform(Stream *s, double low, double high) {
    return low + (high - low) * (double)(next(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* n bytes of case k's input */
static uint8_t *input(int k, size_t n) {
    Stream s = {(uint64_t)k * GOLDEN + 1};
    uint8_t *out = malloc(n + 8);
    size_t i;
    for (i = 0; i < n; i += 8) {
        uint64_t v = next(&s);
        int b;
        for (b = 0; b < 8; b++)
            out[i + b] = (uint8_t)(v >> (8 * b));
    }
    return out;
}

static uint64_t digest(const uint8_t *data, size_t n) {
    uint64_t h = 0;
    size_t i;
    for (i = 0; i < n; i++)
        h = h * 0x100000001B3ULL + data[i] + 1;
    return h;
}

static void print_matrix(const double m[6]) {
    int i;
    for (i = 0; i < 6; i++)
        printf(" %.17g", m[i]);
}

static void random_matrix(Stream *s, double m[6], int axis_aligned, int sw, int sh, int dw, int dh) {
    double angle = axis_aligned ? 0.0 : uniform(s, -0.8, 0.8), sx = uniform(s, 0.15, 3.0), sy = uniform(s, 0.15, 3.0);
    double c = 1.0 - angle * angle / 2 + angle * angle * angle * angle / 24, sn = angle - angle * angle * angle / 6;
    if (below(s, 4) == 0)
        sx = -sx;
    m[0] = sx * c, m[1] = axis_aligned ? 0.0 : sn, m[3] = axis_aligned ? 0.0 : -sn, m[4] = sy * c;
    m[2] = uniform(s, -0.3, 0.3) * sw * sx + (sx < 0 ? dw : 0), m[5] = uniform(s, -0.3, 0.3) * sh * sy;
    (void)dh;
}

int main(int argc, char **argv) {
    int k, cases = 240;
    if (kernels_select(argc > 1 ? argv[1] : "auto") < 0) {
        fprintf(stderr, "kernel_vectors: %s is no variant this build and CPU run\n", argc > 1 ? argv[1] : "auto");
        return 2;
    }
    for (k = 0; k < cases; k++) { /* resize */
        Stream s = {(uint64_t)k * GOLDEN + 2};
        int cn = 1 + below(&s, 4), sw = 1 + below(&s, 300), sh = 1 + below(&s, 300), dw = 1 + below(&s, 300);
        int dh = 1 + below(&s, 300), interpolation = below(&s, 2);
        uint8_t *src = input(k, (size_t)sw * sh * cn), *dst = malloc((size_t)dw * dh * cn);
        Pixels p = {src, (size_t)sw * cn, sw, sh, cn};
        if (resize_u8(&p, interpolation, dst, (size_t)dw * cn, dw, dh) != KERNELS_OK)
            return 1;
        printf("resize %d %d %d %d %d %d %d %016llx\n", k, cn, sw, sh, dw, dh, interpolation,
               (unsigned long long)digest(dst, (size_t)dw * dh * cn));
        free(src), free(dst);
    }
    for (k = 0; k < cases; k++) { /* warp */
        Stream s = {(uint64_t)k * GOLDEN + 2};
        int cn = (int[]){1, 3, 4}[below(&s, 3)], sw = 2 + below(&s, 200), sh = 2 + below(&s, 200);
        int dw = 1 + below(&s, 200), dh = 1 + below(&s, 200), border = below(&s, 4), fill = below(&s, 256);
        double m[6];
        uint8_t *src = input(k, (size_t)sw * sh * cn), *dst = malloc((size_t)dw * dh * cn);
        Pixels p = {src, (size_t)sw * cn, sw, sh, cn};
        random_matrix(&s, m, below(&s, 3) == 0, sw, sh, dw, dh);
        warp_u8(&p, m, border, (uint8_t)fill, dst, (size_t)dw * cn, dw, dh);
        printf("warp %d %d %d %d %d %d %d %d", k, cn, sw, sh, dw, dh, border, fill);
        print_matrix(m);
        printf(" %016llx\n", (unsigned long long)digest(dst, (size_t)dw * dh * cn));
        free(src), free(dst);
    }
    for (k = 0; k < cases; k++) { /* flip */
        Stream s = {(uint64_t)k * GOLDEN + 2};
        int pixel = (int[]){1, 2, 3, 4, 8, 12}[below(&s, 6)], w = 1 + below(&s, 100), h = 1 + below(&s, 100);
        int code = below(&s, 3) - 1;
        uint8_t *src = input(k, (size_t)w * h * pixel), *dst = malloc((size_t)w * h * pixel);
        flip_pixels(src, (size_t)w * pixel, w, h, (size_t)pixel, code, dst, (size_t)w * pixel);
        printf("flip %d %d %d %d %d %016llx\n", k, pixel, w, h, code,
               (unsigned long long)digest(dst, (size_t)w * h * pixel));
        free(src), free(dst);
    }
    for (k = 0; k < cases; k++) { /* nearest */
        Stream s = {(uint64_t)k * GOLDEN + 2};
        int pixel = (int[]){1, 2, 4, 8}[below(&s, 4)], sw = 1 + below(&s, 150), sh = 1 + below(&s, 150);
        int dw = 1 + below(&s, 150), dh = 1 + below(&s, 150);
        double m[6];
        uint8_t *src = input(k, (size_t)sw * sh * pixel), *dst = malloc((size_t)dw * dh * pixel);
        random_matrix(&s, m, below(&s, 2) == 0, sw, sh, dw, dh);
        if (nearest_pixels(src, (size_t)sw * pixel, sw, sh, (size_t)pixel, m, dst, (size_t)dw * pixel, dw, dh) !=
            KERNELS_OK)
            return 1;
        printf("nearest %d %d %d %d %d %d", k, pixel, sw, sh, dw, dh);
        print_matrix(m);
        printf(" %016llx\n", (unsigned long long)digest(dst, (size_t)dw * dh * pixel));
        free(src), free(dst);
    }
    for (k = 0; k < cases; k++) { /* finish: a geometry, then the output's dtype, layout, mean and std */
        Stream s = {(uint64_t)k * GOLDEN + 2};
        int cn = below(&s, 2) ? 3 : 1, sw = 2 + below(&s, 120), sh = 2 + below(&s, 120), c, dtype = below(&s, 2);
        int first = below(&s, 2), means = dtype ? below(&s, 3) : 0, stds = dtype ? below(&s, 3) : 0;
        Geometry g;
        Output o;
        size_t bytes;
        uint8_t *src = input(k, (size_t)sw * sh * cn), *dst;
        Pixels p = {src, (size_t)sw * cn, sw, sh, cn};
        memset(&g, 0, sizeof g), memset(&o, 0, sizeof o);
        g.kind = below(&s, 2) ? GEOMETRY_SLICE : GEOMETRY_WARP;
        g.width = 1 + below(&s, 100), g.height = 1 + below(&s, 100);
        if (g.kind == GEOMETRY_SLICE) {
            g.x0 = below(&s, sw - 1), g.y0 = below(&s, sh - 1);
            g.x1 = g.x0 + 1 + below(&s, sw - g.x0), g.y1 = g.y0 + 1 + below(&s, sh - g.y0);
            g.interpolation = below(&s, 2), g.flip = below(&s, 4) - 1;
            g.flip = g.flip == 2 ? NO_FLIP : g.flip;
        } else {
            random_matrix(&s, g.m, 0, sw, sh, g.width, g.height);
            g.fill = (uint8_t)below(&s, 256);
        }
        o.dtype = dtype, o.channel_first = first, o.means = means == 2 ? cn : means, o.stds = stds == 2 ? cn : stds;
        for (c = 0; c < 4; c++)
            o.mean[c] = (float)uniform(&s, -50, 200), o.std[c] = (float)uniform(&s, 0.5, 80);
        bytes = (size_t)g.width * g.height * cn * (dtype ? 4 : 1);
        dst = malloc(bytes);
        o.data = dst;
        if (finish_u8(&p, &g, &o) != KERNELS_OK)
            return 1;
        printf("finish %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d", k, cn, sw, sh, g.kind, g.x0, g.y0, g.x1,
               g.y1, g.interpolation, g.flip, g.width, g.height, g.fill, dtype, first, o.means, o.stds);
        print_matrix(g.m);
        for (c = 0; c < 4; c++)
            printf(" %.9g %.9g", (double)o.mean[c], (double)o.std[c]);
        printf(" %016llx\n", (unsigned long long)digest(dst, bytes));
        free(src), free(dst);
    }
    return 0;
}
