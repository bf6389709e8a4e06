/* libjpeg-turbo's M/8 scaling, timed: the JPEGs given (at most 1,000) decoded to BGR at scale M/8, five times over, on
 * one core; prints "M microseconds-per-image". Built and run by benchmarks/kernels.py: cc -O2 jpeg_scales.c -ljpeg. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <jpeglib.h>

enum { MOST = 1000, REPEATS = 5 };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    static unsigned char *data[MOST];
    static long sizes[MOST];
    int m = argc > 1 ? atoi(argv[1]) : 8, files = argc - 2 < MOST ? argc - 2 : MOST, f, r;
    double start;
    for (f = 0; f < files; f++) {
        FILE *fp = fopen(argv[f + 2], "rb");
        if (fp == NULL || fseek(fp, 0, SEEK_END) != 0 || (sizes[f] = ftell(fp)) <= 0)
            return 1;
        rewind(fp);
        data[f] = malloc((size_t)sizes[f]);
        if (fread(data[f], 1, (size_t)sizes[f], fp) != (size_t)sizes[f])
            return 1;
        fclose(fp);
    }
    start = now();
    for (r = 0; r < REPEATS; r++)
        for (f = 0; f < files; f++) {
            struct jpeg_decompress_struct info;
            struct jpeg_error_mgr error;
            unsigned char *pixels;
            info.err = jpeg_std_error(&error);
            jpeg_create_decompress(&info);
            jpeg_mem_src(&info, data[f], (unsigned long)sizes[f]);
            jpeg_read_header(&info, TRUE);
            info.scale_num = (unsigned int)m, info.scale_denom = 8, info.out_color_space = JCS_EXT_BGR;
            jpeg_start_decompress(&info);
            pixels = malloc((size_t)info.output_width * 3 * info.output_height);
            while (info.output_scanline < info.output_height) {
                JSAMPROW row = pixels + (size_t)info.output_scanline * info.output_width * 3;
                jpeg_read_scanlines(&info, &row, 1);
            }
            jpeg_finish_decompress(&info);
            jpeg_destroy_decompress(&info);
            free(pixels);
        }
    printf("%d %.1f\n", m, (now() - start) / REPEATS / (files ? files : 1) * 1e6);
    return 0;
}
