"""Reading plotted values back out of a PNG: the colour-mapped image area and the cells' values
through the inverse of the colour map, the axes frame, pixels of a line's colour."""
import matplotlib
import matplotlib.image
import numpy as np

LUT_SIZE = 256  # matplotlib's colour maps have 256 entries


def read_rgb(path):
    """The PNG as (H, W, 3) uint8."""
    img = matplotlib.image.imread(str(path))
    assert img.dtype == np.float32 and img.ndim == 3
    return np.rint(img[..., :3] * 255).astype(np.int16)


def colormap_lut(name="viridis"):
    lut = matplotlib.colormaps[name](np.linspace(0, 1, LUT_SIZE))[:, :3]
    return np.rint(lut * 255).astype(np.int16)


def nearest_lut_index(rgb, lut):
    """For each pixel: the index of the nearest colour-map entry and its distance (0..255 RGB
    units), computed once per distinct colour."""
    flat = rgb.reshape(-1, 3)
    packed = (flat[:, 0].astype(np.int64) << 16) | (flat[:, 1].astype(np.int64) << 8) | flat[:, 2]
    colours, inverse = np.unique(packed, return_inverse=True)
    c = np.stack([(colours >> 16) & 255, (colours >> 8) & 255, colours & 255], axis=1)
    d = np.sqrt(((c[:, None, :] - lut[None, :, :]) ** 2).sum(axis=2))
    index = d.argmin(axis=1)
    return index[inverse].reshape(rgb.shape[:2]), d.min(axis=1)[inverse].reshape(rgb.shape[:2])


def _runs(flags):
    """(start, stop) of the runs of True in a 1-d bool array."""
    padded = np.concatenate([[False], flags, [False]]).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return list(zip(edges[::2], edges[1::2]))


def image_areas(rgb, lut, tolerance=2.5):
    """The colour-mapped rectangles (images and colour bars) as (top, bottom, left, right) pixel
    bounds (bottom and right exclusive), widest first."""
    _, dist = nearest_lut_index(rgb, lut)
    mapped = dist <= tolerance
    areas = []
    counts = mapped.sum(axis=0)
    for left, right in _runs(counts >= 20):
        middle = (left + right) // 2
        rows = _runs(mapped[:, middle])
        top, bottom = max(rows, key=lambda r: r[1] - r[0])
        areas.append((int(top), int(bottom), int(left), int(right)))
    return sorted(areas, key=lambda a: a[3] - a[2], reverse=True)


def _fit_grids(line, start, stop, n):
    """Candidate (origin, pitch) of n cells drawn between about `start` and `stop` along `line`
    (colour-map indices), fitted to the positions where the colour changes. Matplotlib places
    the resampled image to a pixel or two (the spines then cover part of an edge cell, or all of
    it), so the bounds of the visible area alone are not enough when cells are a few pixels
    wide; the boundaries inside are exact. The candidates differ in which boundary the first
    change is: the first, second or third."""
    pitch = (stop - start) / n
    changes = np.flatnonzero(line[start + 1:stop] != line[start:stop - 1]) + start + 1
    if len(changes) < 2:
        return [(float(start), pitch)]
    # Boundary numbers counted from one change to the next (a gap of two cells where two
    # neighbours have the same colour), so that an error in the first pitch does not add up.
    step = np.concatenate([[0], np.maximum(1, np.rint(np.diff(changes) / pitch))])
    k = np.cumsum(step)
    out = []
    for first in (1, 2, 3):
        if k[-1] + first <= n - 1:
            slope, origin = np.polyfit(k + first, changes, 1)
            out.append((float(origin), float(slope)))
    return out


def cell_values(rgb, area, rows, cols, vmin, vmax, lut, expected=None):
    """The values of an image of rows x cols cells drawn over `area` with row 0 at the bottom,
    read at the cells' centres and mapped back through the colour map (bin centres of the entry
    found), and the colour distance of each pixel read (> 2.5: no cell of the image is visible
    there). With `expected`, the registration of the grid (which change is the first boundary,
    see _fit_grids) is the one that reads closest to it."""
    top, bottom, left, right = area
    index, dist = nearest_lut_index(rgb, lut)
    best = None
    for x0, w in _fit_grids(index[(top + bottom) // 2], left, right, cols):
        for y0, h in _fit_grids(index[:, (left + right) // 2], top, bottom, rows):
            values, d = _read_cells(index, dist, rows, cols, x0, w, y0, h, vmin, vmax)
            if expected is None:
                return values, d
            score = np.abs(values - expected)[d <= 2.5].mean()
            if best is None or score < best[0]:
                best = (score, values, d)
    return best[1], best[2]


def _read_cells(index, dist, rows, cols, x0, w, y0, h, vmin, vmax):
    ys = y0 + (rows - 1 - np.arange(rows) + 0.5) * h
    xs = x0 + (np.arange(cols) + 0.5) * w
    yi = np.clip(np.floor(ys).astype(int), 0, index.shape[0] - 1)
    xi = np.clip(np.floor(xs).astype(int), 0, index.shape[1] - 1)
    k = index[np.ix_(yi, xi)]
    d = dist[np.ix_(yi, xi)]
    # The cells along the edges are partly under the spines: where the centre pixel is blended
    # with a spine, the nearest clean pixel of the same cell is read instead.
    reach_x, reach_y = int(w / 2 - 0.5), int(h / 2 - 0.5)
    for dy in sorted(range(-reach_y, reach_y + 1), key=abs):
        for dx in sorted(range(-reach_x, reach_x + 1), key=abs):
            yy = np.clip(yi + dy, 0, index.shape[0] - 1)
            xx = np.clip(xi + dx, 0, index.shape[1] - 1)
            kk, dd = index[np.ix_(yy, xx)], dist[np.ix_(yy, xx)]
            better = (d > 2.5) & (dd <= 2.5)
            k = np.where(better, kk, k)
            d = np.where(better, dd, d)
    return vmin + (k + 0.5) / LUT_SIZE * (vmax - vmin), d


def axes_frame(rgb, darkness=90, fraction=0.5):
    """The axes' frame (spines) of a plot without colour bar: (top, bottom, left, right) rows and
    columns of the long dark lines."""
    dark = (rgb < darkness).all(axis=2)
    rows = np.flatnonzero(dark.sum(axis=1) >= fraction * dark.sum(axis=1).max())
    cols = np.flatnonzero(dark.sum(axis=0) >= fraction * dark.sum(axis=0).max())
    return int(rows.min()), int(rows.max()), int(cols.min()), int(cols.max())


def pixels_of_colour(rgb, colour, tolerance=40):
    d = np.sqrt(((rgb - np.asarray(colour)[None, None, :]) ** 2).sum(axis=2))
    return d <= tolerance
