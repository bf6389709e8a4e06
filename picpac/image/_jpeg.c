/* picpac.image._jpeg: decode only a region of a JPEG, with libjpeg-turbo.
 *
 * No maintained Python binding exposes libjpeg-turbo's jpeg_skip_scanlines() (rows above the region
 * are entropy-decoded only: no IDCT, upsampling or colour conversion) and jpeg_crop_scanline()
 * (columns outside the region's iMCU-aligned span are not reconstructed); rows below the region are
 * never decoded at all. picpac.image.decode_channels uses this module when it was built and falls
 * back to OpenCV otherwise. The GIL is released while libjpeg runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <jpeglib.h>

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
} ErrorManager;

typedef struct {
    struct jpeg_decompress_struct info;
    ErrorManager error;
    int created;
} Decoder;

static void on_error(j_common_ptr info) { longjmp(((ErrorManager *)info->err)->jump, 1); }

/* A warning (a truncated or damaged stream) fails too: the caller then leaves the JPEG to OpenCV,
 * whose verdict on damaged files stays the one picpac gives. Trace messages are ignored. */
static void on_message(j_common_ptr info, int level) {
    if (level < 0)
        on_error(info);
}

enum { GRAY = 0, BGR = 1, RGB = 2 };
enum { OK = 0, FAILED = -1, UNSUPPORTED = -2 };
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

/* Read the header, set the scale and colour space, start, check that rows [y, y + height) exist,
 * and narrow the output to the columns of [*x, *x + *width); libjpeg widens them to iMCU
 * boundaries and reports what it chose. */
static int start(Decoder *d, const unsigned char *data, size_t size, int reduction, int mode,
                 JDIMENSION y, JDIMENSION height, JDIMENSION *x, JDIMENSION *width) {
    JDIMENSION full_width;
    if (!has_end(data, size))
        return UNSUPPORTED;
    if (setjmp(d->error.jump))
        return FAILED;
    jpeg_create_decompress(&d->info);
    d->created = 1;
    jpeg_mem_src(&d->info, data, (unsigned long)size);
    jpeg_read_header(&d->info, TRUE);
    if (d->info.jpeg_color_space == JCS_CMYK || d->info.jpeg_color_space == JCS_YCCK ||
        d->info.jpeg_color_space == JCS_UNKNOWN)
        return UNSUPPORTED;
    d->info.scale_num = 1;
    d->info.scale_denom = (unsigned int)reduction;
    d->info.out_color_space = mode == GRAY ? JCS_GRAYSCALE : mode == RGB ? JCS_EXT_RGB : JCS_EXT_BGR;
    jpeg_start_decompress(&d->info);
    full_width = d->info.output_width;
    if (*x >= full_width || y + height > d->info.output_height)
        return UNSUPPORTED;
    if (*x + *width > full_width) /* a region may reach past the right edge: keep what is inside */
        *width = full_width - *x;
    if (*width < MIN_WIDTH) {
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

/* Skip ``y`` rows, then read ``height`` rows of ``stride`` bytes into ``out``. */
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
    jpeg_abort_decompress(&d->info); /* the rows below the region are never decoded */
    return OK;
}

PyDoc_STRVAR(decode_doc,
"decode(data, reduction, x, y, width, height, mode) -> (pixels, x0, row_width) | None\n\n"
"Decode rows [y, y + height) of a JPEG at scale 1/reduction (1, 2, 4 or 8), reconstructing only the\n"
"iMCU-aligned columns around [x, x + width) (coordinates in scaled pixels; columns past the right\n"
"edge are dropped, a region narrower than 32 pixels is widened). The first and last columns of a\n"
"crop inside the image may differ from a whole decode (chroma upsampling lacks their neighbour):\n"
"ask for one more column each side. mode: 0 gray, 1 BGR,\n"
"2 RGB. ``pixels`` is a bytearray of height rows of row_width * (1 or 3) bytes whose first column\n"
"is scaled column x0 (x0 <= x). None when the JPEG is CMYK/YCCK, is damaged (even a libjpeg warning,\n"
"or no end-of-image marker), or the region's rows or first column lie outside the scaled image: the\n"
"caller then decodes it another way.");

static PyObject *decode(PyObject *module, PyObject *args) {
    Py_buffer data;
    int reduction, mode, x, y, width, height, status;
    JDIMENSION cx, cw;
    Decoder d;
    PyObject *pixels = NULL;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*iiiiii:decode", &data, &reduction, &x, &y, &width, &height, &mode))
        return NULL;
    if ((reduction != 1 && reduction != 2 && reduction != 4 && reduction != 8) || mode < GRAY || mode > RGB ||
        x < 0 || y < 0 || width <= 0 || height <= 0) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "decode: bad reduction, mode or region");
        return NULL;
    }
    memset(&d, 0, sizeof d);
    d.info.err = jpeg_std_error(&d.error.pub);
    d.error.pub.error_exit = on_error;
    d.error.pub.emit_message = on_message;
    cx = (JDIMENSION)x;
    cw = (JDIMENSION)width;
    Py_BEGIN_ALLOW_THREADS
    status = start(&d, data.buf, (size_t)data.len, reduction, mode, (JDIMENSION)y, (JDIMENSION)height, &cx, &cw);
    Py_END_ALLOW_THREADS
    if (status == OK) {
        size_t stride = (size_t)cw * (size_t)d.info.output_components;
        pixels = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(stride * (size_t)height));
        if (pixels == NULL) {
            jpeg_destroy_decompress(&d.info);
            PyBuffer_Release(&data);
            return NULL;
        }
        {
            unsigned char *out = (unsigned char *)PyByteArray_AS_STRING(pixels);
            Py_BEGIN_ALLOW_THREADS
            status = read_rows(&d, (JDIMENSION)y, (JDIMENSION)height, out, stride);
            Py_END_ALLOW_THREADS
        }
    }
    if (d.created)
        jpeg_destroy_decompress(&d.info);
    PyBuffer_Release(&data);
    if (status != OK) {
        Py_XDECREF(pixels);
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(Nii)", pixels, (int)cx, (int)cw);
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, decode_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "picpac.image._jpeg",
    "Region-of-interest JPEG decoding with libjpeg-turbo (jpeg_skip_scanlines, jpeg_crop_scanline).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__jpeg(void) { return PyModule_Create(&module_def); }
