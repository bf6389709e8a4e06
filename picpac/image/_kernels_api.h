/* What picpac.image._kernels exports to picpac.image._jpeg, as a capsule: the kernels (one copy, one variant chosen)
 * and the parsing of a sample's plan from Python's arguments. */
#ifndef PICPAC_KERNELS_API_H
#define PICPAC_KERNELS_API_H

#include <Python.h>

#include "_kernels.h"

/* A sample's geometry (12 numbers: picpac.image.sample.fused_geometry) and its output: the buffer to write, its dtype
 * and layout, mean and std. */
typedef struct {
    Geometry geometry;
    Output output;
    Py_buffer out;
} Plan;

typedef struct {
    /* Parse and check a plan for a source of width x height x channels (1 or 3): 0, or -1 with an exception set (a
     * ValueError naming what is wrong). On 0 the caller releases plan->out. */
    int (*parse_plan)(PyObject *geometry, PyObject *out, int dtype, int channel_first, PyObject *mean, PyObject *std,
                      int width, int height, int channels, Plan *plan);
    int (*finish_u8)(const Pixels *src, const Geometry *g, const Output *out);
} KernelsAPI;

#define KERNELS_CAPSULE "picpac.image._kernels.API"

#endif
