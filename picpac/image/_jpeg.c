/* picpac.image._jpeg: decode only a region of a JPEG, with libjpeg-turbo.
 *
 * No maintained Python binding exposes libjpeg-turbo's jpeg_skip_scanlines() (rows above the region
 * are entropy-decoded only: no IDCT, upsampling or colour conversion) and jpeg_crop_scanline()
 * (columns outside the region's iMCU-aligned span are not reconstructed); rows below the region are
 * never decoded at all. picpac.image.decode_channels uses this module when it was built and falls
 * back to OpenCV otherwise. The GIL is released while libjpeg runs. encode() writes JPEGs of any legal
 * sampling, for the tests that check every one of them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>
#include <jerror.h>

#include "_kernels_api.h"

static KernelsAPI *kernels; /* picpac.image._kernels's, imported with this module */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    int collect;                   /* 1: a warning is counted (the first one kept) instead of failing the decode */
    int warnings;
    char message[JMSG_LENGTH_MAX]; /* (collect) the first warning, or the error that stopped libjpeg */
} ErrorManager;

typedef struct {
    struct jpeg_decompress_struct info;
    ErrorManager error;
    struct jpeg_progress_mgr progress;
    int created, max_scans;
} Decoder;

static void on_error(j_common_ptr info) {
    ErrorManager *e = (ErrorManager *)info->err;
    if (e->collect)
        info->err->format_message(info, e->message);
    longjmp(e->jump, 1);
}

/* picpac.image.decoding.MAX_SCANS and SCAN_PASSES: a progressive JPEG may have at most 64 scans, and its scans times
 * its pixels at most 8 images of max_pixels (2**28 at least here): more is a crafted, slow JPEG. */
enum { MAX_SCANS = 64, SCAN_PASSES = 8 };

/* libjpeg calls this as it reads: a progressive JPEG past its scans stops there (libjpeg-turbo's advice against
 * scan-heavy files), before the scans' passes over every block cost seconds each. */
static void on_progress(j_common_ptr info) {
    ErrorManager *e = (ErrorManager *)info->err;
    int most = *(int *)info->client_data;
    if (info->is_decompressor && ((j_decompress_ptr)info)->input_scan_number > most) {
        snprintf(e->message, sizeof e->message, "more than %d scans (a crafted, slow progressive JPEG)", most);
        longjmp(e->jump, 1);
    }
}

/* A warning (damaged scan data, a bad marker) fails the decode, so that the caller decodes the JPEG the way that
 * reports damage, or (collect) it is counted and the first one kept: the decode goes on as libjpeg's does, with the
 * damaged part filled in. Never printed: the caller names the image. Trace messages are ignored. */
static void on_message(j_common_ptr info, int level) {
    ErrorManager *e = (ErrorManager *)info->err;
    if (level >= 0)
        return;
    if (!e->collect)
        on_error(info);
    if (e->warnings++ == 0)
        info->err->format_message(info, e->message);
}

enum { GRAY = 0, BGR = 1, RGB = 2, STORED = 3 }; /* STORED: grey for a greyscale JPEG, else BGR */
enum { OK = 0, FAILED = -1, UNSUPPORTED = -2, TOO_LARGE = -3, NO_MEMORY = -4 };
enum { MAX_REGION = 65535 }; /* a JPEG's sides are 16-bit: no region of one is larger */
#define DEFAULT_MAX_PIXELS (1ULL << 28) /* picpac.image.decoding.MAX_PIXELS */
enum { MIN_WIDTH = 32 }; /* pixels: at least 2 iMCUs of 4:2:0 at full scale */

/* Whether an end-of-image marker closes the data (in its last 64 bytes, trailing bytes allowed):
 * without one the JPEG is truncated, perhaps below the region, where no warning would show it. */
static int has_end(const unsigned char *data, size_t size) {
    size_t i = size > 64 ? size - 64 : 0;
    for (; i + 1 < size; i++)
        if (data[i] == 0xFF && data[i + 1] == 0xD9)
            return 1;
    return 0;
}

#if JPEG_LIB_VERSION >= 70
#define DCT_SIZE(c) ((c)->DCT_h_scaled_size)
#define MIN_DCT_SIZE(info) ((info)->min_DCT_h_scaled_size)
#else
#define DCT_SIZE(c) ((c)->DCT_scaled_size)
#define MIN_DCT_SIZE(info) ((info)->min_DCT_scaled_size)
#endif

/* Whether every coefficient of a progressive JPEG was sent in full (a baseline JPEG is complete).
 * libjpeg block-smooths the coefficients an incomplete one lacks, and the smoothing of a skipped or
 * cropped decode, or of another libjpeg-turbo version (OpenCV bundles its own), differs by a few
 * levels: such a JPEG is left to OpenCV's whole decode. Call after jpeg_start_decompress, which has
 * read every scan of a progressive JPEG by then. */
static int complete(j_decompress_ptr info) {
    int ci, k;
    if (!info->progressive_mode || info->coef_bits == NULL)
        return 1;
    for (ci = 0; ci < info->num_components; ci++)
        for (k = 0; k < DCTSIZE2; k++)
            if (info->coef_bits[ci][k] != 0)
                return 0;
    return 1;
}

/* Whether cropping columns gives a whole decode's pixels. At 1/2 and 1/4 scale, libjpeg scales up the
 * IDCT of a component sampled below the maximum (4:2:0's chroma comes out of an 8x8 IDCT at 1/2), and
 * jpeg_crop_scanline in libjpeg-turbo 2.1 then sets that component's row width from its sampling
 * factors alone, without the IDCT's scale: when the component still needs upsampling after its IDCT
 * (e.g. luma 4x2 with chroma 1x1, whose chroma comes out 2x1 short), only the first part of each of
 * its rows is upsampled. Such JPEGs are decoded at full width (rows are still skipped). At 1/8 the
 * crop would be exact (libjpeg upsamples without neighbours there) but the rule is kept as it is:
 * tests/image/test_decoding_region_sampling.py checks every legal sampling at every scale. */
static int crop_exact(j_decompress_ptr info) {
    int ci;
    for (ci = 0; ci < info->num_components; ci++) {
        jpeg_component_info *c = &info->comp_info[ci];
        if (c->component_needed && DCT_SIZE(c) > MIN_DCT_SIZE(info) &&
            (c->h_samp_factor * DCT_SIZE(c) != info->max_h_samp_factor * MIN_DCT_SIZE(info) ||
             c->v_samp_factor * DCT_SIZE(c) != info->max_v_samp_factor * MIN_DCT_SIZE(info)))
            return 0;
    }
    return 1;
}

/* Read the header, check its size against max_pixels (0: no limit) and bound its scans, set the scale and colour
 * space, and start decompressing (a progressive JPEG's scans are all read here). */
static int begin(Decoder *d, const unsigned char *data, size_t size, int reduction, int mode,
                 unsigned long long max_pixels) {
    if (!has_end(data, size))
        return UNSUPPORTED;
    if (setjmp(d->error.jump))
        return FAILED;
    jpeg_create_decompress(&d->info);
    d->created = 1;
    d->max_scans = MAX_SCANS;
    d->progress.progress_monitor = on_progress;
    d->info.progress = &d->progress;
    d->info.client_data = &d->max_scans;
    jpeg_mem_src(&d->info, data, (unsigned long)size);
    jpeg_read_header(&d->info, TRUE);
    {
        unsigned long long pixels = (unsigned long long)d->info.image_width * d->info.image_height, budget;
        if (max_pixels && pixels > max_pixels)
            return TOO_LARGE;
        budget = SCAN_PASSES * (max_pixels > DEFAULT_MAX_PIXELS ? max_pixels : DEFAULT_MAX_PIXELS) / (pixels ? pixels : 1);
        d->max_scans = budget < 1 ? 1 : budget < MAX_SCANS ? (int)budget : MAX_SCANS;
    }
    if (d->info.jpeg_color_space == JCS_CMYK || d->info.jpeg_color_space == JCS_YCCK ||
        d->info.jpeg_color_space == JCS_UNKNOWN)
        return UNSUPPORTED;
    d->info.scale_num = 1;
    d->info.scale_denom = (unsigned int)reduction;
    if (mode == STORED)
        mode = d->info.jpeg_color_space == JCS_GRAYSCALE ? GRAY : BGR;
    d->info.out_color_space = mode == GRAY ? JCS_GRAYSCALE : mode == RGB ? JCS_EXT_RGB : JCS_EXT_BGR;
    jpeg_start_decompress(&d->info);
    return OK;
}

/* begin(), then check that rows [y, y + height) exist and narrow the output to the columns of [*x, *x + *width);
 * libjpeg widens them to iMCU boundaries and reports what it chose. */
static int start(Decoder *d, const unsigned char *data, size_t size, int reduction, int mode,
                 JDIMENSION y, JDIMENSION height, JDIMENSION *x, JDIMENSION *width, unsigned long long max_pixels) {
    JDIMENSION full_width;
    int status = begin(d, data, size, reduction, mode, max_pixels);
    if (status != OK)
        return status;
    if (setjmp(d->error.jump))
        return FAILED;
    full_width = d->info.output_width;
    if (*x >= full_width || y >= d->info.output_height || height > d->info.output_height - y || !complete(&d->info))
        return UNSUPPORTED;
    if (*width > full_width - *x) /* a region may reach past the right edge: keep what is inside */
        *width = full_width - *x;
    if (!crop_exact(&d->info)) {
        *x = 0;
        *width = full_width;
    } else if (*width < MIN_WIDTH) {
        /* libjpeg upsamples the chroma of a row only 1 or 2 samples wide by plain replication,
         * unlike the rest of the image: widen narrow crops, leftwards at the right edge */
        JDIMENSION wanted = full_width < MIN_WIDTH ? full_width : MIN_WIDTH;
        if (*x + wanted > full_width)
            *x = full_width - wanted;
        *width = wanted;
    }
    if (*width < full_width)
        jpeg_crop_scanline(&d->info, x, width);
    return OK;
}

/* Skip ``y`` rows, then read ``height`` rows of ``stride`` bytes into ``out``. Rows that reach the last one read on to
 * the end-of-image marker, where damage after the last row shows (libjpeg warns there); the rows below a region that
 * stops short are never decoded, and damage there, which cannot touch its pixels, goes unseen. */
static int read_rows(Decoder *d, JDIMENSION y, JDIMENSION height, unsigned char *out, size_t stride) {
    JSAMPROW rows[32];
    volatile JDIMENSION done = 0; /* volatile: read after setjmp */
    if (setjmp(d->error.jump))
        return FAILED;
    if (y > 0 && jpeg_skip_scanlines(&d->info, y) != y)
        return FAILED;
    while (done < height) {
        JDIMENSION want = height - done < 32 ? height - done : 32, got, k;
        for (k = 0; k < want; k++)
            rows[k] = out + (size_t)(done + k) * stride;
        got = jpeg_read_scanlines(&d->info, rows, want);
        if (got == 0)
            return FAILED;
        done += got;
    }
    if (d->info.output_scanline == d->info.output_height)
        jpeg_finish_decompress(&d->info);
    else
        jpeg_abort_decompress(&d->info);
    return OK;
}

/* An empty bytearray grown to ``size``, or NULL with a MemoryError: PyByteArray_FromStringAndSize(NULL, n) frees the
 * new object with its export count unset when the pixels cannot be allocated (CPython 3.11), which can turn the
 * MemoryError into "SystemError: deallocated bytearray object has exported buffers". */
static PyObject *new_pixels(size_t size) {
    PyObject *pixels = PyByteArray_FromStringAndSize(NULL, 0);
    if (pixels != NULL && PyByteArray_Resize(pixels, (Py_ssize_t)size) < 0)
        Py_CLEAR(pixels);
    return pixels;
}

/* A decoder whose errors and warnings go to on_error and on_message; ``collect``: warnings are counted, not failures. */
static void init_decoder(Decoder *d, int collect) {
    memset(d, 0, sizeof *d);
    d->info.err = jpeg_std_error(&d->error.pub);
    d->error.pub.error_exit = on_error;
    d->error.pub.emit_message = on_message;
    d->error.collect = collect;
}

/* Rows [y, y + height) of ``stride`` bytes read into a new bytearray ``*pixels``, made with the GIL held and filled
 * without it; NO_MEMORY, with a MemoryError set, when it cannot be made. */
static int read_pixels(Decoder *d, JDIMENSION y, JDIMENSION height, size_t stride, PyObject **pixels) {
    unsigned char *out;
    int status;
    *pixels = new_pixels(stride * (size_t)height);
    if (*pixels == NULL)
        return NO_MEMORY;
    out = (unsigned char *)PyByteArray_AS_STRING(*pixels);
    Py_BEGIN_ALLOW_THREADS
    status = read_rows(d, y, height, out, stride);
    Py_END_ALLOW_THREADS
    return status;
}

PyDoc_STRVAR(decode_doc,
"decode(data, reduction, x, y, width, height, mode, max_pixels=2**28) -> (pixels, x0, row_width) | None\n\n"
"Decode rows [y, y + height) of a JPEG at scale 1/reduction (1, 2, 4 or 8), reconstructing only the\n"
"iMCU-aligned columns around [x, x + width) (coordinates in scaled pixels; columns past the right\n"
"edge are dropped, a region narrower than 32 pixels is widened). The first and last columns of a\n"
"crop inside the image may differ from a whole decode (chroma upsampling lacks their neighbour):\n"
"ask for one more column each side. Where libjpeg cannot crop exactly (unusual sampling factors at\n"
"1/2, 1/4 and 1/8 scale), whole rows are decoded (x0 0, row_width the scaled width). mode: 0 gray,\n"
"1 BGR, 2 RGB. ``pixels`` is a bytearray of height rows of row_width * (1 or 3) bytes whose first\n"
"column is scaled column x0 (x0 <= x); MemoryError when it cannot be allocated. None when the JPEG is\n"
"CMYK/YCCK, is a progressive JPEG missing part of its coefficients, is damaged (even a libjpeg\n"
"warning, or no end-of-image marker), is a progressive JPEG of more than 64 scans, or the region's rows\n"
"or first column lie outside the scaled image: the caller then decodes it another way. ValueError for a\n"
"bad argument, or a JPEG whose header declares more than max_pixels pixels (0: no limit).");

static PyObject *decode(PyObject *module, PyObject *args) {
    Py_buffer data;
    int reduction, mode, x, y, width, height, status;
    unsigned long long max_pixels = DEFAULT_MAX_PIXELS;
    JDIMENSION cx, cw;
    Decoder d;
    PyObject *pixels = NULL;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*iiiiii|K:decode", &data, &reduction, &x, &y, &width, &height, &mode, &max_pixels))
        return NULL;
    if ((reduction != 1 && reduction != 2 && reduction != 4 && reduction != 8) || mode < GRAY || mode > RGB ||
        x < 0 || y < 0 || width <= 0 || height <= 0 || x > MAX_REGION || y > MAX_REGION || width > MAX_REGION ||
        height > MAX_REGION) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "decode: bad reduction, mode or region");
        return NULL;
    }
    init_decoder(&d, 0);
    cx = (JDIMENSION)x;
    cw = (JDIMENSION)width;
    Py_BEGIN_ALLOW_THREADS
    status = start(&d, data.buf, (size_t)data.len, reduction, mode, (JDIMENSION)y, (JDIMENSION)height, &cx, &cw,
                   max_pixels);
    Py_END_ALLOW_THREADS
    if (status == OK)
        status = read_pixels(&d, (JDIMENSION)y, (JDIMENSION)height, (size_t)cw * (size_t)d.info.output_components,
                             &pixels);
    if (d.created)
        jpeg_destroy_decompress(&d.info);
    PyBuffer_Release(&data);
    if (status == NO_MEMORY)
        return NULL;
    if (status != OK) {
        Py_XDECREF(pixels);
        if (status == TOO_LARGE)
            return PyErr_Format(PyExc_ValueError, "decode: the JPEG declares more than max_pixels=%llu pixels",
                                max_pixels);
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(Nii)", pixels, (int)cx, (int)cw);
}

PyDoc_STRVAR(image_doc,
"image(data, reduction, mode, max_pixels=2**28) -> (pixels, width, height, channels, warnings, message) | None\n\n"
"Decode a whole JPEG at scale 1/reduction (1, 2, 4 or 8), reading it to its end: mode 0 gray, 1 BGR, 2 RGB,\n"
"3 as stored (gray for a greyscale JPEG, else BGR). libjpeg's warnings (damaged scan data, a bad marker)\n"
"do not stop it: ``warnings`` counts them and ``message`` is the first one's text (None: none); the\n"
"damaged part is filled in as libjpeg fills it. ``pixels`` is a bytearray of height rows of width *\n"
"channels bytes, or None when libjpeg stopped (``message`` says why). None when the JPEG is not this\n"
"decoder's: CMYK/YCCK, or no end-of-image marker. ValueError for a bad argument or a JPEG whose header\n"
"declares more than max_pixels pixels (0: no limit); MemoryError when the pixels cannot be allocated.");

static PyObject *image(PyObject *module, PyObject *args) {
    Py_buffer data;
    int reduction, mode, status;
    unsigned long long max_pixels = DEFAULT_MAX_PIXELS;
    Decoder d;
    PyObject *pixels = NULL, *message;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*ii|K:image", &data, &reduction, &mode, &max_pixels))
        return NULL;
    if ((reduction != 1 && reduction != 2 && reduction != 4 && reduction != 8) || mode < GRAY || mode > STORED) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "image: bad reduction or mode");
        return NULL;
    }
    init_decoder(&d, 1);
    Py_BEGIN_ALLOW_THREADS
    status = begin(&d, data.buf, (size_t)data.len, reduction, mode, max_pixels);
    Py_END_ALLOW_THREADS
    if (status == OK)
        status = read_pixels(&d, 0, d.info.output_height,
                             (size_t)d.info.output_width * (size_t)d.info.output_components, &pixels);
    if (d.created)
        jpeg_destroy_decompress(&d.info);
    PyBuffer_Release(&data);
    if (status == NO_MEMORY)
        return NULL;
    if (status == UNSUPPORTED)
        Py_RETURN_NONE;
    if (status == TOO_LARGE)
        return PyErr_Format(PyExc_ValueError, "image: the JPEG declares more than max_pixels=%llu pixels", max_pixels);
    if (status != OK)
        Py_CLEAR(pixels);
    if (status != OK || d.error.warnings) {
        message = PyUnicode_DecodeUTF8(d.error.message, (Py_ssize_t)strlen(d.error.message), "replace");
        if (message == NULL) {
            Py_XDECREF(pixels);
            return NULL;
        }
    } else {
        message = Py_NewRef(Py_None);
    }
    if (pixels == NULL)
        pixels = Py_NewRef(Py_None);
    return Py_BuildValue("(NiiiiN)", pixels, (int)d.info.output_width, (int)d.info.output_height,
                         d.info.output_components, d.error.warnings, message);
}

/* -- encoding: any legal sampling factors, for tests of the decoder ---------------------------------- */

typedef struct {
    struct jpeg_destination_mgr pub;
    unsigned char *buf;
    size_t size;
} Sink;

static void sink_init(j_compress_ptr info) {
    Sink *sink = (Sink *)info->dest;
    sink->pub.next_output_byte = sink->buf;
    sink->pub.free_in_buffer = sink->size;
}

static boolean sink_grow(j_compress_ptr info) {
    Sink *sink = (Sink *)info->dest;
    unsigned char *grown = realloc(sink->buf, sink->size * 2);
    if (grown == NULL) {
        info->err->msg_code = JERR_OUT_OF_MEMORY;
        info->err->error_exit((j_common_ptr)info);
    }
    sink->buf = grown;
    sink->pub.next_output_byte = grown + sink->size;
    sink->pub.free_in_buffer = sink->size;
    sink->size *= 2;
    return TRUE;
}

static void sink_term(j_compress_ptr info) { (void)info; }

typedef struct {
    struct jpeg_compress_struct info;
    ErrorManager error;
    Sink sink;
    int created;
} Encoder;

/* Compress the planes (``factors``: h, v per component) of a width x height image; on failure
 * ``message`` holds libjpeg's reason. */
static int compress(Encoder *e, const unsigned char *planes, int width, int height, int components,
                    const int *factors, int progressive, int quality, char *message) {
    JSAMPROW rows[3][4 * DCTSIZE];
    JSAMPARRAY image[3];
    const unsigned char *plane[3];
    size_t stride[3], row;
    int ci, k, mcu_cols, mcu_rows, most_h = 1, most_v = 1;
    for (ci = 0; ci < components; ci++) {
        most_h = factors[2 * ci] > most_h ? factors[2 * ci] : most_h;
        most_v = factors[2 * ci + 1] > most_v ? factors[2 * ci + 1] : most_v;
    }
    mcu_cols = (width + most_h * DCTSIZE - 1) / (most_h * DCTSIZE);
    mcu_rows = (height + most_v * DCTSIZE - 1) / (most_v * DCTSIZE);
    for (ci = 0; ci < components; ci++) {
        stride[ci] = (size_t)mcu_cols * factors[2 * ci] * DCTSIZE;
        plane[ci] = ci == 0 ? planes : plane[ci - 1] + stride[ci - 1] * mcu_rows * factors[2 * ci - 1] * DCTSIZE;
        image[ci] = rows[ci];
    }
    if (setjmp(e->error.jump)) {
        e->info.err->format_message((j_common_ptr)&e->info, message);
        return FAILED;
    }
    jpeg_create_compress(&e->info);
    e->created = 1;
    e->info.dest = &e->sink.pub;
    e->info.image_width = (JDIMENSION)width;
    e->info.image_height = (JDIMENSION)height;
    e->info.input_components = components;
    e->info.in_color_space = components == 1 ? JCS_GRAYSCALE : JCS_YCbCr;
    jpeg_set_defaults(&e->info);
    jpeg_set_quality(&e->info, quality, TRUE);
    e->info.raw_data_in = TRUE; /* libjpeg's own downsampling takes integral ratios only */
    for (ci = 0; ci < components; ci++) {
        e->info.comp_info[ci].h_samp_factor = factors[2 * ci];
        e->info.comp_info[ci].v_samp_factor = factors[2 * ci + 1];
    }
    if (progressive)
        jpeg_simple_progression(&e->info);
    jpeg_start_compress(&e->info, TRUE);
    for (row = 0; e->info.next_scanline < e->info.image_height; row++) { /* one iMCU row per call */
        for (ci = 0; ci < components; ci++)
            for (k = 0; k < factors[2 * ci + 1] * DCTSIZE; k++)
                rows[ci][k] = (JSAMPROW)(plane[ci] + (row * factors[2 * ci + 1] * DCTSIZE + k) * stride[ci]);
        jpeg_write_raw_data(&e->info, image, (JDIMENSION)(most_v * DCTSIZE));
    }
    jpeg_finish_compress(&e->info);
    return OK;
}

PyDoc_STRVAR(encode_doc,
"encode(planes, width, height, sampling, progressive=False, quality=90) -> bytes\n\n"
"Encode a width x height JPEG from its component planes, already downsampled: grey, or Y, Cb and Cr.\n"
"``sampling`` gives one (h, v) pair of factors (1 to 4) per component, 1 or 3 pairs: any legal\n"
"sampling, also those whose ratios libjpeg cannot downsample or upsample. ``planes`` is a bytes-like\n"
"object holding the planes one after the other, each padded to whole MCUs: component c's plane has\n"
"rows * v_c * 8 rows of cols * h_c * 8 samples, where cols = ceil(width / (8 * max h)) and\n"
"rows = ceil(height / (8 * max v)). ``progressive`` uses libjpeg's standard progressive script.\n"
"ValueError when the arguments do not fit or libjpeg refuses them (more than 10 blocks in an MCU).\n"
"For tests of the decoder.");

static PyObject *encode(PyObject *module, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"planes", "width", "height", "sampling", "progressive", "quality", NULL};
    Py_buffer planes;
    PyObject *sampling, *pairs, *out = NULL;
    int width, height, progressive = 0, quality = 90, components, status, factors[6], k, most_h = 1, most_v = 1;
    Py_ssize_t expected = 0;
    char message[JMSG_LENGTH_MAX] = "";
    Encoder e;
    (void)module;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*iiO|pi:encode", keywords, &planes, &width, &height,
                                     &sampling, &progressive, &quality))
        return NULL;
    pairs = PySequence_Fast(sampling, "encode: sampling must be a sequence of (h, v) pairs");
    if (pairs == NULL) {
        PyBuffer_Release(&planes);
        return NULL;
    }
    components = (int)PySequence_Fast_GET_SIZE(pairs);
    status = components == 1 || components == 3 ? OK : FAILED;
    for (k = 0; status == OK && k < components; k++) {
        int *h = &factors[2 * k], *v = &factors[2 * k + 1];
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(pairs, k), "ii", h, v) || *h < 1 || *h > 4 || *v < 1 || *v > 4)
            status = FAILED;
        else {
            most_h = *h > most_h ? *h : most_h;
            most_v = *v > most_v ? *v : most_v;
        }
    }
    Py_DECREF(pairs);
    if (status == OK && width >= 1 && height >= 1 && width <= JPEG_MAX_DIMENSION && height <= JPEG_MAX_DIMENSION)
        for (k = 0; k < components; k++)
            expected += (Py_ssize_t)((width + most_h * DCTSIZE - 1) / (most_h * DCTSIZE)) * factors[2 * k] * DCTSIZE *
                        ((height + most_v * DCTSIZE - 1) / (most_v * DCTSIZE)) * factors[2 * k + 1] * DCTSIZE;
    if (expected == 0 || quality < 1 || quality > 100 || planes.len != expected) {
        PyBuffer_Release(&planes);
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError, "encode: bad size, sampling (1 or 3 (h, v) pairs of 1 to 4), quality "
                                          "or planes' length");
        return NULL;
    }
    memset(&e, 0, sizeof e);
    e.info.err = jpeg_std_error(&e.error.pub);
    e.error.pub.error_exit = on_error;
    e.error.pub.emit_message = on_message;
    e.sink.pub.init_destination = sink_init;
    e.sink.pub.empty_output_buffer = sink_grow;
    e.sink.pub.term_destination = sink_term;
    e.sink.size = 65536;
    e.sink.buf = malloc(e.sink.size);
    if (e.sink.buf == NULL) {
        PyBuffer_Release(&planes);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    status = compress(&e, planes.buf, width, height, components, factors, progressive, quality, message);
    Py_END_ALLOW_THREADS
    if (status == OK)
        out = PyBytes_FromStringAndSize((const char *)e.sink.buf,
                                        (Py_ssize_t)(e.sink.size - e.sink.pub.free_in_buffer));
    else
        PyErr_Format(PyExc_ValueError, "encode: libjpeg: %s", message);
    if (e.created)
        jpeg_destroy_compress(&e.info);
    free(e.sink.buf);
    PyBuffer_Release(&planes);
    return out;
}


/* -- one sample from bytes to its slot of a batch, without the GIL ---------------------------------------------- */

PyDoc_STRVAR(sample_doc,
"sample(data, reduction, x, y, width, height, mode, geometry, out, dtype, channel_first, mean, std,\n"
"       max_pixels=2**28) -> bool\n\n"
"One sample in one call without the GIL: the region (x, y, width, height) of a JPEG decoded at\n"
"1/reduction, as picpac.image.decode_channels decodes it (mode 0 gray, 1 BGR, 2 RGB), then finish()'s\n"
"geometry and output into ``out``. False, with ``out`` untouched, when the JPEG cannot be decoded this\n"
"way (decode() would return None, or declares more than max_pixels pixels, 0: no limit): the caller then\n"
"takes its Python path. ValueError for a bad argument.");

static PyObject *sample(PyObject *module, PyObject *args) {
    Py_buffer data;
    PyObject *geometry, *out, *mean, *std;
    int reduction, x, y, width, height, mode, dtype, channel_first, status, channels, left;
    unsigned long long max_pixels = DEFAULT_MAX_PIXELS;
    JDIMENSION cx, cw;
    Decoder d;
    Plan plan;
    unsigned char *rows = NULL;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*iiiiiiO!OipOO|K:sample", &data, &reduction, &x, &y, &width, &height, &mode,
                          &PyTuple_Type, &geometry, &out, &dtype, &channel_first, &mean, &std, &max_pixels))
        return NULL;
    if ((reduction != 1 && reduction != 2 && reduction != 4) || mode < GRAY || mode > RGB || x < 0 || y < 0 ||
        width <= 0 || height <= 0 || x > MAX_REGION || y > MAX_REGION || width > MAX_REGION || height > MAX_REGION) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "sample: bad reduction, mode or region");
        return NULL;
    }
    channels = mode == GRAY ? 1 : 3;
    if (kernels->parse_plan(geometry, out, dtype, channel_first, mean, std, width, height, channels, &plan) < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    init_decoder(&d, 0);
    left = x > 0 ? x - 1 : 0; /* one more column each side, as picpac.image.decoding asks for */
    cx = (JDIMENSION)left;
    cw = (JDIMENSION)(width + x - left + 1);
    Py_BEGIN_ALLOW_THREADS
    status = start(&d, data.buf, (size_t)data.len, reduction, mode, (JDIMENSION)y, (JDIMENSION)height, &cx, &cw,
                   max_pixels);
    if (status == OK && (size_t)x + width > (size_t)cx + cw)
        status = UNSUPPORTED; /* the region reaches past the right edge */
    if (status == OK) {
        size_t stride = (size_t)cw * channels;
        rows = malloc(stride * (size_t)height);
        status = rows == NULL ? FAILED : read_rows(&d, (JDIMENSION)y, (JDIMENSION)height, rows, stride);
        if (status == OK) {
            Pixels src = {rows + (size_t)(x - (int)cx) * channels, stride, width, height, channels};
            status = kernels->finish_u8(&src, &plan.geometry, &plan.output) < 0 ? FAILED : OK;
        }
    }
    Py_END_ALLOW_THREADS
    if (d.created)
        jpeg_destroy_decompress(&d.info);
    free(rows);
    PyBuffer_Release(&plan.out);
    PyBuffer_Release(&data);
    if (status == OK)
        Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, decode_doc},
    {"image", image, METH_VARARGS, image_doc},
    {"sample", sample, METH_VARARGS, sample_doc},
    {"encode", (PyCFunction)(void (*)(void))encode, METH_VARARGS | METH_KEYWORDS, encode_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "picpac.image._jpeg",
    "Region-of-interest JPEG decoding with libjpeg-turbo (jpeg_skip_scanlines, jpeg_crop_scanline).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__jpeg(void) {
    /* (not PyCapsule_Import: it reaches the module through the attributes of picpac and picpac.image, which a package
     * being imported has not set yet) */
    PyObject *owner = PyImport_ImportModule("picpac.image._kernels"), *capsule;
    if (owner == NULL)
        return NULL;
    capsule = PyObject_GetAttrString(owner, "API");
    Py_DECREF(owner);
    if (capsule == NULL)
        return NULL;
    kernels = PyCapsule_GetPointer(capsule, KERNELS_CAPSULE);
    Py_DECREF(capsule); /* (the module keeps it, and what it points to is static) */
    if (kernels == NULL)
        return NULL;
    return PyModule_Create(&module_def);
}
