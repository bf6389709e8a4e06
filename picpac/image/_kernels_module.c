/* picpac.image._kernels: picpac's pixel kernels (_kernels.c) for Python, the GIL released while they run. Images are
 * buffers of shape (height, width) or (height, width, channels) whose rows may be apart (a slice of a larger image);
 * outputs are C-contiguous. picpac.image.kernels wraps these calls; _jpeg imports the capsule API. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "_kernels_api.h"

enum { MAX_SIDE = 32766, MAX_SOURCE_SIDE = 1 << 30, MAX_CHANNELS = 512 };
#define MAX_NUMBER 1e9 /* the largest magnitude of a geometry's numbers */

typedef struct {
    Py_buffer view;
    uint8_t *data;
    size_t stride, pixel; /* bytes from row to row, bytes of a pixel */
    int width, height, channels;
} Image;

/* ``obj`` as an image of ``itemsize``-byte elements (0: any); ``output``: writable and C-contiguous. 0, or -1 with a
 * ValueError naming ``name``. */
static int get_image(PyObject *obj, const char *name, int output, Py_ssize_t itemsize, Image *im) {
    Py_buffer *v = &im->view;
    int flags = PyBUF_STRIDES | PyBUF_FORMAT | (output ? PyBUF_WRITABLE : 0);
    memset(im, 0, sizeof *im);
    if (PyObject_GetBuffer(obj, v, flags) < 0)
        return -1;
    if ((v->ndim == 2 || v->ndim == 3) && v->shape[0] >= 1 && v->shape[1] >= 1 &&
        (v->ndim == 2 || (v->shape[2] >= 1 && v->shape[2] <= MAX_CHANNELS)) && v->shape[0] < MAX_SOURCE_SIDE &&
        v->shape[1] < MAX_SOURCE_SIDE && (itemsize == 0 || v->itemsize == itemsize)) {
        Py_ssize_t channels = v->ndim == 3 ? v->shape[2] : 1, pixel = channels * v->itemsize;
        int packed = v->strides[v->ndim - 1] == v->itemsize && (v->ndim == 2 || v->strides[1] == pixel);
        if (packed && v->strides[0] >= v->shape[1] * pixel && (!output || PyBuffer_IsContiguous(v, 'C'))) {
            im->data = v->buf, im->stride = (size_t)v->strides[0], im->pixel = (size_t)pixel;
            im->width = (int)v->shape[1], im->height = (int)v->shape[0], im->channels = (int)channels;
            return 0;
        }
    }
    PyBuffer_Release(v);
    PyErr_Format(PyExc_ValueError, "%s: an image of (height, width[, channels]) %s with each row's pixels next to "
                 "each other%s is needed", name, itemsize == 1 ? "uint8" : "elements",
                 output ? ", C-contiguous and writable" : "");
    return -1;
}

static int get_matrix(PyObject *obj, double m[6]) {
    int k;
    if (!PyArg_ParseTuple(obj, "dddddd;m: 6 numbers", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]))
        return -1;
    for (k = 0; k < 6; k++)
        if (!(m[k] >= -MAX_NUMBER && m[k] <= MAX_NUMBER)) {
            PyErr_SetString(PyExc_ValueError, "m: a number that is not finite or past 1e9");
            return -1;
        }
    return 0;
}

static PyObject *done(int status, Image *a, Image *b) {
    PyBuffer_Release(&a->view);
    PyBuffer_Release(&b->view);
    if (status == KERNELS_NO_MEMORY)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *refuse(Image *a, Image *b) { /* the exception is set */
    PyBuffer_Release(&a->view);
    PyBuffer_Release(&b->view);
    return NULL;
}

/* The source and the output of a resampling call: the output of the source's channels and dtype (``itemsize`` bytes
 * an element: 1 for uint8, 0 for any), at most MAX_SIDE a side. 0, or -1 with a ValueError (nothing held). */
static int get_images(PyObject *src_obj, PyObject *out_obj, const char *name, Py_ssize_t itemsize, Image *src,
                      Image *out) {
    char what[48];
    snprintf(what, sizeof what, "%s: src", name);
    if (get_image(src_obj, what, 0, itemsize, src) < 0)
        return -1;
    snprintf(what, sizeof what, "%s: out", name);
    if (get_image(out_obj, what, 1, src->view.itemsize, out) < 0) {
        PyBuffer_Release(&src->view);
        return -1;
    }
    if (out->channels == src->channels && out->width <= MAX_SIDE && out->height <= MAX_SIDE)
        return 0;
    PyErr_Format(PyExc_ValueError, "%s: out must have the source's channels and dtype, and sides of at most %d",
                 name, MAX_SIDE);
    refuse(src, out);
    return -1;
}

PyDoc_STRVAR(resize_doc, "resize(src, out, interpolation)\n\n"
"src (uint8) resized into out (uint8, C-contiguous, its size the output's): interpolation 0 LINEAR, 1 AREA.");

static PyObject *resize(PyObject *module, PyObject *args) {
    PyObject *src_obj, *out_obj;
    int interpolation, status;
    Image src, out;
    Pixels pixels;
    (void)module;
    if (!PyArg_ParseTuple(args, "OOi:resize", &src_obj, &out_obj, &interpolation))
        return NULL;
    if (interpolation != RESIZE_LINEAR && interpolation != RESIZE_AREA) {
        PyErr_SetString(PyExc_ValueError, "resize: interpolation must be 0 (LINEAR) or 1 (AREA)");
        return NULL;
    }
    if (get_images(src_obj, out_obj, "resize", 1, &src, &out) < 0)
        return NULL;
    pixels = (Pixels){src.data, src.stride, src.width, src.height, src.channels};
    Py_BEGIN_ALLOW_THREADS
    status = resize_u8(&pixels, interpolation, out.data, out.stride, out.width, out.height);
    Py_END_ALLOW_THREADS
    return done(status, &src, &out);
}

PyDoc_STRVAR(warp_doc, "warp(src, m, border, fill, out)\n\n"
"src (uint8) mapped by the affine m (6 numbers: destination pixel indices -> source ones after inverting, as\n"
"cv2.warpAffine) into out (uint8, C-contiguous), bilinear; border 0 constant (fill, 0..255, in every channel),\n"
"1 replicate, 2 reflect (101), 3 wrap.");

static PyObject *warp(PyObject *module, PyObject *args) {
    PyObject *src_obj, *m_obj, *out_obj;
    int border, fill, status;
    double m[6];
    Image src, out;
    Pixels pixels;
    (void)module;
    if (!PyArg_ParseTuple(args, "OO!iiO:warp", &src_obj, &PyTuple_Type, &m_obj, &border, &fill, &out_obj))
        return NULL;
    if (get_matrix(m_obj, m) < 0)
        return NULL;
    if (border < BORDER_CONSTANT || border > BORDER_WRAP || fill < 0 || fill > 255) {
        PyErr_SetString(PyExc_ValueError, "warp: border must be 0 to 3 and fill 0 to 255");
        return NULL;
    }
    if (get_images(src_obj, out_obj, "warp", 1, &src, &out) < 0)
        return NULL;
    pixels = (Pixels){src.data, src.stride, src.width, src.height, src.channels};
    Py_BEGIN_ALLOW_THREADS
    status = warp_u8(&pixels, m, border, (uint8_t)fill, out.data, out.stride, out.width, out.height);
    Py_END_ALLOW_THREADS
    return done(status, &src, &out);
}

PyDoc_STRVAR(nearest_doc, "nearest(src, m, out)\n\n"
"src (any dtype) mapped by the continuous affine m (6 numbers, source -> destination, pixel centres at +0.5) into\n"
"out (the same dtype and channels, C-contiguous) by nearest neighbour: each destination pixel takes the source pixel\n"
"under the point its centre comes from; zeros from outside the source.");

static PyObject *nearest(PyObject *module, PyObject *args) {
    PyObject *src_obj, *m_obj, *out_obj;
    int status;
    double m[6];
    Image src, out;
    (void)module;
    if (!PyArg_ParseTuple(args, "OO!O:nearest", &src_obj, &PyTuple_Type, &m_obj, &out_obj))
        return NULL;
    if (get_matrix(m_obj, m) < 0)
        return NULL;
    if (get_images(src_obj, out_obj, "nearest", 0, &src, &out) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    status = nearest_pixels(src.data, src.stride, src.width, src.height, src.pixel, m, out.data, out.stride, out.width,
                            out.height);
    Py_END_ALLOW_THREADS
    return done(status, &src, &out);
}

PyDoc_STRVAR(flip_doc, "flip(src, code, out)\n\n"
"src (any dtype) mirrored into out (its shape and dtype, C-contiguous): code 1 left-right, 0 upside down, -1 both.");

static PyObject *flip(PyObject *module, PyObject *args) {
    PyObject *src_obj, *out_obj;
    int code;
    Image src, out;
    (void)module;
    if (!PyArg_ParseTuple(args, "OiO:flip", &src_obj, &code, &out_obj))
        return NULL;
    if (code < -1 || code > 1) {
        PyErr_SetString(PyExc_ValueError, "flip: code must be 1, 0 or -1");
        return NULL;
    }
    if (get_image(src_obj, "flip: src", 0, 0, &src) < 0)
        return NULL;
    if (get_image(out_obj, "flip: out", 1, src.view.itemsize, &out) < 0) {
        PyBuffer_Release(&src.view);
        return NULL;
    }
    if (out.width != src.width || out.height != src.height || out.pixel != src.pixel) {
        PyErr_SetString(PyExc_ValueError, "flip: out must have the source's shape and dtype");
        return refuse(&src, &out);
    }
    Py_BEGIN_ALLOW_THREADS
    flip_pixels(src.data, src.stride, src.width, src.height, src.pixel, code, out.data, out.stride);
    Py_END_ALLOW_THREADS
    return done(KERNELS_OK, &src, &out);
}

/* -- a sample's plan: what the fused path (and finish, below) carries out --------------------------------------------- */

static int parse_floats(PyObject *values, float *into, int *count, const char *name) {
    PyObject *seq = PySequence_Fast(values, name);
    Py_ssize_t n, k;
    if (seq == NULL)
        return -1;
    n = PySequence_Fast_GET_SIZE(seq);
    if (n > 4) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "%s: at most 4 values", name);
        return -1;
    }
    for (k = 0; k < n; k++) {
        double v = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, k));
        if (PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        if (!(v >= -FLT_MAX && v <= FLT_MAX)) { /* (float) of a double past FLT_MAX is undefined */
            Py_DECREF(seq);
            PyErr_Format(PyExc_ValueError, "%s: a value that is not a finite float32", name);
            return -1;
        }
        into[k] = (float)v;
    }
    *count = (int)n;
    Py_DECREF(seq);
    return 0;
}

static int parse_plan(PyObject *geometry, PyObject *out, int dtype, int channel_first, PyObject *mean, PyObject *std,
                      int width, int height, int channels, Plan *plan) {
    double g[12];
    int k, w, h, fill;
    Geometry *p = &plan->geometry;
    size_t size;
    memset(plan, 0, sizeof *plan);
    if (!PyTuple_Check(geometry) ||
        !PyArg_ParseTuple(geometry, "dddddddddddd;geometry: 12 numbers", &g[0], &g[1], &g[2], &g[3], &g[4], &g[5],
                          &g[6], &g[7], &g[8], &g[9], &g[10], &g[11])) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "geometry: a tuple of 12 numbers");
        return -1;
    }
    for (k = 0; k < 12; k++) /* (int) of a NaN or of a number past INT_MAX is undefined: refused first */
        if (!(g[k] >= -MAX_NUMBER && g[k] <= MAX_NUMBER)) {
            PyErr_SetString(PyExc_ValueError, "bad geometry: a number that is not finite or past 1e9");
            return -1;
        }
    p->kind = (int)g[0];
    if (p->kind == GEOMETRY_SLICE) {
        p->x0 = (int)g[1], p->y0 = (int)g[2], p->x1 = (int)g[3], p->y1 = (int)g[4];
        p->interpolation = (int)g[5], p->flip = (int)g[6], p->width = (int)g[7], p->height = (int)g[8];
        if (p->x0 < 0 || p->y0 < 0 || p->x1 > width || p->y1 > height || p->x1 <= p->x0 || p->y1 <= p->y0 ||
            p->interpolation < NO_RESIZE || p->interpolation > RESIZE_AREA || p->flip < -1 || p->flip > NO_FLIP ||
            (p->interpolation == NO_RESIZE && (p->width != p->x1 - p->x0 || p->height != p->y1 - p->y0)))
            p->kind = -1;
    } else if (p->kind == GEOMETRY_WARP) {
        p->pre_width = (int)g[1], p->pre_height = (int)g[2];
        for (k = 0; k < 6; k++)
            p->m[k] = g[3 + k];
        fill = (int)g[9];
        p->width = (int)g[10], p->height = (int)g[11];
        if (fill < 0 || fill > 255 || p->pre_width < 0 || p->pre_height < 0 || p->pre_width > MAX_SIDE ||
            p->pre_height > MAX_SIDE || (p->pre_width == 0) != (p->pre_height == 0))
            p->kind = -1;
        p->fill = (uint8_t)(fill < 0 ? 0 : fill > 255 ? 255 : fill);
    } else if (p->kind == GEOMETRY_NONE) {
        p->width = width, p->height = height;
    }
    w = p->width, h = p->height;
    if (p->kind < GEOMETRY_NONE || p->kind > GEOMETRY_WARP || w < 1 || h < 1 || w > MAX_SIDE || h > MAX_SIDE ||
        (dtype != OUT_U8 && dtype != OUT_F32) || (channels != 1 && channels != 3)) {
        PyErr_SetString(PyExc_ValueError, "bad geometry, dtype or channels");
        return -1;
    }
    if (parse_floats(mean, plan->output.mean, &plan->output.means, "mean") < 0 ||
        parse_floats(std, plan->output.std, &plan->output.stds, "std") < 0)
        return -1;
    if ((plan->output.means > 1 && plan->output.means != channels) ||
        (plan->output.stds > 1 && plan->output.stds != channels) ||
        ((plan->output.means || plan->output.stds) && dtype != OUT_F32)) {
        PyErr_SetString(PyExc_ValueError, "mean and std: 1 value or one per channel, float32 output only");
        return -1;
    }
    if (PyObject_GetBuffer(out, &plan->out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    size = (size_t)w * h * channels * (dtype == OUT_F32 ? 4 : 1);
    if ((size_t)plan->out.len != size) {
        PyBuffer_Release(&plan->out);
        PyErr_Format(PyExc_ValueError, "out has %zd bytes, the sample needs %zu", plan->out.len, size);
        return -1;
    }
    plan->output.data = plan->out.buf, plan->output.dtype = dtype, plan->output.channel_first = channel_first;
    return 0;
}

PyDoc_STRVAR(finish_doc,
"finish(pixels, width, height, channels, geometry, out, dtype, channel_first, mean, std)\n\n"
"Decoded 8-bit pixels (a C-contiguous buffer of height x width x channels, 1 or 3) through ``geometry`` (12\n"
"numbers: picpac.image.sample.fused_geometry) and written into ``out`` (a writable C-contiguous buffer) as\n"
"picpac.image.transforms.convert writes them: dtype 0 uint8, 1 float32; mean, std: 0, 1 or ``channels`` values.\n"
"The fused sample's second half (picpac.image._jpeg.sample), on its own.");

static PyObject *finish(PyObject *module, PyObject *args) {
    Py_buffer pixels;
    PyObject *geometry, *out, *mean, *std;
    int width, height, channels, dtype, channel_first, status;
    Plan plan;
    Pixels src;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*iiiOOipOO:finish", &pixels, &width, &height, &channels, &geometry, &out, &dtype,
                          &channel_first, &mean, &std))
        return NULL;
    if (width < 1 || height < 1 || width > MAX_SIDE * 2 || height > MAX_SIDE * 2 || (channels != 1 && channels != 3) ||
        pixels.len != (Py_ssize_t)width * height * channels) {
        PyBuffer_Release(&pixels);
        PyErr_SetString(PyExc_ValueError, "finish: pixels do not hold width x height x channels (1 or 3) bytes");
        return NULL;
    }
    if (parse_plan(geometry, out, dtype, channel_first, mean, std, width, height, channels, &plan) < 0) {
        PyBuffer_Release(&pixels);
        return NULL;
    }
    src.data = pixels.buf, src.stride = (size_t)width * channels, src.width = width, src.height = height;
    src.channels = channels;
    Py_BEGIN_ALLOW_THREADS
    status = finish_u8(&src, &plan.geometry, &plan.output);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&plan.out);
    PyBuffer_Release(&pixels);
    if (status < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* -- variants --------------------------------------------------------------------------------------------------- */

PyDoc_STRVAR(select_doc, "select(name)\n\n"
"Run the loops of variant ``name`` from now on ('auto': the widest this CPU runs; see VARIANTS). Every variant gives\n"
"the same bytes; this is for tests and benchmarks. ValueError for one this CPU cannot run.");

static PyObject *select_variant(PyObject *module, PyObject *args) {
    const char *name;
    (void)module;
    if (!PyArg_ParseTuple(args, "s:select", &name))
        return NULL;
    if (kernels_select(name) < 0)
        return PyErr_Format(PyExc_ValueError, "select: %s is no variant of this build, or this CPU cannot run it",
                            name);
    Py_RETURN_NONE;
}

static PyObject *variant(PyObject *module, PyObject *args) {
    (void)module, (void)args;
    return PyUnicode_FromString(kernels_variant());
}

static PyMethodDef methods[] = {
    {"resize", resize, METH_VARARGS, resize_doc},
    {"warp", warp, METH_VARARGS, warp_doc},
    {"nearest", nearest, METH_VARARGS, nearest_doc},
    {"flip", flip, METH_VARARGS, flip_doc},
    {"finish", finish, METH_VARARGS, finish_doc},
    {"select", select_variant, METH_VARARGS, select_doc},
    {"variant", variant, METH_NOARGS, "variant() -> str: the variant of the loops that runs."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "picpac.image._kernels",
    "picpac's pixel kernels: resize, warp, nearest neighbour, flip, and a fused sample's geometry and output.",
    -1, methods, NULL, NULL, NULL, NULL,
};

static KernelsAPI api = {parse_plan, finish_u8};

PyMODINIT_FUNC PyInit__kernels(void) {
    PyObject *module, *capsule, *names;
    const char *chosen = getenv("PICPAC_KERNELS");
    if (kernels_select(chosen != NULL && *chosen ? chosen : "auto") < 0)
        return PyErr_Format(PyExc_ImportError, "PICPAC_KERNELS=%s is no variant this build and CPU run (portable%s)",
                            chosen,
#if defined(__x86_64__)
                            ", avx2, auto"
#else
                            ", auto"
#endif
        );
    module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    capsule = PyCapsule_New(&api, KERNELS_CAPSULE, NULL);
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
    names = Py_BuildValue("(ss)", "portable", "avx2");
#else
    names = Py_BuildValue("(s)", "portable");
#endif
    if (capsule == NULL || PyModule_AddObject(module, "API", capsule) < 0 || names == NULL ||
        PyModule_AddObject(module, "VARIANTS", names) < 0) {
        Py_XDECREF(capsule);
        Py_XDECREF(names);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
