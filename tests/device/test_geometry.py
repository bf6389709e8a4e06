"""The device warp's plan of a sample's map (NumPy only): what it reads, how it pools, where it falls back."""
import cv2
import numpy as np

from picpac.device.geometry import Geometry, plan, thetas

CONSTANT = (cv2.BORDER_CONSTANT, 0)


def test_no_map_reads_the_whole_source_one_to_one():
    g = plan(None, (40, 30), (40, 30), CONSTANT)
    assert g == Geometry((0, 0, 40, 30), 1, (1.0, 0.0, 0.0, 0.0, 1.0, 0.0), None, (40, 30), False, None)


def test_a_crop_reads_its_window_alone_clamped_at_its_edges_as_cv2_resize():
    g = plan(np.array([[1.0, 0, -10], [0, 1, -5]]), (100, 80), (20, 10), CONSTANT)
    assert g.crop == (10, 5, 30, 15) and g.pool == 1 and not g.area and g.shrink is None and g.fill is None
    assert g.inverse == (1.0, 0.0, 0.0, 0.0, 1.0, 0.0)


def test_a_warp_reads_its_window_and_one_pixel_more_each_side():
    g = plan(np.array([[1.0, 0, -10.5], [0, 1, -5.5]]), (100, 80), (20, 10), CONSTANT)
    assert g.crop == (9, 4, 32, 17) and g.fill == 0.0
    assert g.inverse == (1.0, 0.0, 1.5, 0.0, 1.0, 1.5)  # output (0, 0) is source (10.5, 5.5): crop pixel (1.5, 1.5)


def test_a_jpeg_the_cpu_path_decodes_at_a_quarter_pools_4x4_blocks_on_the_grid_of_the_source():
    g = plan(np.array([[0.25, 0, -1.5], [0, 0.25, 0]]), (402, 300), (50, 40), CONSTANT, reduction=4)
    assert g.pool == 4 and g.crop[0] % 4 == 0 and g.crop[1] % 4 == 0
    # source x 6 + 4 * [0, 50]: pooled pixels 1.5 .. 51.5, one more each side; the last block is cut by the edge
    assert g.crop == (0, 0, 212, 164) and not g.area and g.shrink is None
    assert np.allclose(g.inverse, (1.0, 0.0, 1.5, 0.0, 1.0, 0.0))


def test_a_warp_that_shrinks_more_than_2x_shrinks_by_inter_areas_boxes_first():
    rotation = cv2.getRotationMatrix2D((200, 150), 20, 0.3)
    g = plan(rotation, (400, 300), (120, 90), CONSTANT)
    fx, fy, ox, oy, nx, ny = g.shrink
    assert (round(400 / fx), round(300 / fy)) == (240, 180)  # the CPU path's cv2.resize to 2x the map's scale
    assert 0 <= ox < 1 and 0 <= oy < 1 and nx <= 240 and ny <= 180 and g.pool == 1


def test_integer_slices_that_shrink_are_box_averaged_and_warps_are_not():
    assert plan(np.array([[0.7, 0, -7], [0, 0.7, -14]]), (400, 300), (140, 140), CONSTANT).area
    rotation = cv2.getRotationMatrix2D((100, 100), 20, 0.7)
    assert not plan(rotation, (400, 300), (140, 140), CONSTANT).area
    assert not plan(np.array([[1.5, 0, 0], [0, 1.5, 0]]), (40, 30), (60, 45), CONSTANT).area  # an enlargement
    assert not plan(np.array([[0.7, 0, -7], [0, 0.7, -14]]), (400, 300), (140, 140), CONSTANT, nearest=True).area


def test_borders_the_warp_cannot_follow_give_no_plan():
    m = np.array([[1.0, 0, 5], [0, 1, 5]])
    assert plan(m, (40, 30), (40, 30), (cv2.BORDER_REFLECT_101, 0)) is None
    assert plan(m, (40, 30), (40, 30), (cv2.BORDER_CONSTANT, (1, 2, 3))) is None
    assert plan(np.array([[0.0, 0, 5], [0, 0, 5]]), (40, 30), (40, 30), CONSTANT) is None  # collapses the image
    assert plan(m, (40, 30), (40, 30), (cv2.BORDER_REPLICATE, 0)).fill is None
    assert plan(m, (40, 30), (40, 30), (cv2.BORDER_CONSTANT, 7)).fill == 7.0
    assert plan(m, (40, 30), (40, 30), (cv2.BORDER_CONSTANT, 7), nearest=True).fill == 0.0  # masks: label 0


def test_a_map_reading_outside_the_image_still_gets_a_crop_inside_it():
    g = plan(np.array([[1.0, 0, 500], [0, 1, 0]]), (40, 30), (20, 20), CONSTANT)
    x0, y0, x1, y1 = g.crop
    assert 0 <= x0 < x1 <= 40 and 0 <= y0 < y1 <= 30


def test_thetas_map_normalised_output_to_the_canvas_and_bound_replicated_samples():
    g = plan(None, (10, 8), (10, 8), (cv2.BORDER_REPLICATE, 0))
    theta, bounds = thetas([g, g._replace(fill=0.0)], [(10, 8), (10, 8)], (10, 8), (20, 16))
    # output x = -1 (its left edge) is canvas pixel 0: normalised -1; x = 1 is pixel 10 of 20: 0
    assert np.allclose(theta[0], [[0.5, 0, -0.5], [0, 0.5, -0.5]])
    assert np.allclose(bounds[0], [1 / 20 - 1, 19 / 20 - 1, 1 / 16 - 1, 15 / 16 - 1])
    assert np.isnan(bounds[1]).all()
