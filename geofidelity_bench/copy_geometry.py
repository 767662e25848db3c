"""Geometric verification for the copy audit: is this the same photograph, edited?

The hashes and the embedding nearest neighbours of :mod:`geofidelity_bench.near_copies` pick a few
candidate photos for each audited image; this module decides, for one image and one candidate, whether
the image contains the photo, moved by a similarity transform (resize, crop, rotation, mirror, a
border, a place in a collage), and where. Docs: docs/benchmark.md section 5 (Copy audit).

1. **Local features**: ORB keypoints (OpenCV) of both images in grayscale at :data:`WORK_SIDE` pixels on
   the long side (the image and its mirror image for the audited image; many more for the photo,
   :data:`PHOTO_FEATURES`, so a small crop of it still holds enough; a low-texture image is searched again
   at lower corner thresholds, :data:`FAST_THRESHOLDS`); a match must pass Lowe's ratio test (:data:`RATIO`),
   the photo's keypoints looked up in the image and the image's in the photo.
2. **Geometry**: a similarity transform (rotation, one scale, shift), then, when it does not line up, an
   affine one (at most :data:`ANISOTROPY_MAX` of aspect change), fitted with RANSAC
   (``cv2.estimateAffinePartial2D``, ``cv2.estimateAffine2D``, :data:`RANSAC_PX`); at least
   :data:`MIN_INLIERS` matches must agree.
3. **Photometry**: the alignment is refined on the pixels (ECC, ``cv2.findTransformECC``), the larger
   side is warped onto the smaller, and the two are compared over the overlap in 16-pixel tiles: the
   median normalized cross-correlation of the tiles that have texture in both (:func:`_photometric`;
   each tile is normalized on its own, so brightness, contrast and colour edits do not matter). An edited
   copy lines up pixel for pixel (>= :data:`LOCAL_NCC_MIN`); a second photograph of the same place, taken
   from elsewhere, at another time or in other light, does not, even where its keypoints agree on a
   facade (parallax and light change the fine texture of every tile).

An image is a copy of a photo when both hold; the verdict records the region of the image the photo
occupies (pixels of the audited image) and the kinds of edit found (:data:`KINDS`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: Long side (pixels) of the grayscale images keypoints are detected in.
WORK_SIDE = 512
#: ORB keypoints of an audited image (and of its mirror image) ...
ORB_FEATURES = 800
#: ... and of a candidate photo: many more, so that a small crop of the photo (40 % of each side is 16 % of
#: its area) still holds enough of them, wherever the photo's strongest corners lie.
PHOTO_FEATURES = 2500
#: FAST thresholds tried in turn until an image has MIN_KEYPOINTS keypoints (OpenCV's default first).
FAST_THRESHOLDS = (10, 5, 2)
MIN_KEYPOINTS = 300
#: Lowe's ratio test: the best match's Hamming distance must be below this fraction of the second best.
RATIO = 0.8
#: RANSAC reprojection threshold of the similarity transform, pixels at WORK_SIDE.
RANSAC_PX = 4.0
#: Matches that must agree with the transform.
MIN_INLIERS = 12
#: Guided matching after the first fit (:func:`_guided`): a photo keypoint carried to within this many working
#: pixels of an image keypoint, with descriptors at most this many bits (of 256) apart.
GUIDED_PX = 6.0
GUIDED_HAMMING = 64
#: The photo must cover at least this fraction of the audited image (or the image of the photo), and at
#: least MIN_OVERLAP_PX working pixels: a copied sliver smaller than this is not looked for.
MIN_OVERLAP = 0.04
MIN_OVERLAP_PX = 3000
#: Scales of the transform considered (image pixels per photo pixel, at working resolution).
SCALE_RANGE = (0.15, 8.0)
#: Largest ratio of the transform's two scales (a photo squeezed to another aspect ratio in a collage).
ANISOTROPY_MAX = 2.0
#: Median normalized cross-correlation of the aligned pixels over textured 16-pixel tiles from which the
#: image is the photo, edited (docs/benchmark.md section 5: distinct photos <= 0.664 (the Berlin originals
#: 02 ~ 01; the demo's 0.648), edited copies >= 0.831, all but one >= 0.97: the midpoint).
LOCAL_NCC_MIN = 0.75
#: Tiles (16 x 16 pixels at the compared resolution) compared; fewer textured tiles in the overlap: no verdict.
TILE = 16
MIN_TILES = 8
#: The kinds of edit a verdict names.
KINDS = ("crop", "rotation", "mirror", "border", "collage/partial", "resize")
#: An edit is named when the rotation exceeds this (degrees) ...
ROTATION_MIN_DEG = 2.0
#: ... or the photo covers less than this fraction of the image (border, collage) or of itself (crop).
COVER_MAX = 0.92


def opencv_version() -> str:
    """The installed OpenCV's version, read without importing it (a warm audit that finds every verdict in
    its cache never imports OpenCV)."""
    from importlib import metadata

    for dist in ("opencv-python-headless", "opencv-python", "opencv-contrib-python-headless", "opencv-contrib-python"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    import cv2

    return cv2.__version__


def index_settings() -> str:
    """What the retrieval index's descriptors depend on (part of the name of its file in the cache)."""
    return (f"ORB {PHOTO_FEATURES} fast {list(FAST_THRESHOLDS)} min {MIN_KEYPOINTS} side {WORK_SIDE}; "
            f"{INDEX_FEATURES} per photo over a {INDEX_GRID}x{INDEX_GRID} grid and 4 level pairs")


def settings() -> dict[str, Any]:
    return {"library": f"opencv {opencv_version()}", "features": f"ORB {ORB_FEATURES}",
            "photo_features": PHOTO_FEATURES, "fast_thresholds": list(FAST_THRESHOLDS),
            "min_keypoints": MIN_KEYPOINTS, "work_side": WORK_SIDE, "ratio": RATIO, "matching": "both ways",
            "transform": "similarity (cv2.estimateAffinePartial2D), else affine (cv2.estimateAffine2D); RANSAC, "
                         "refined by ECC",
            "ransac_px": RANSAC_PX, "min_inliers": MIN_INLIERS, "min_overlap": MIN_OVERLAP,
            "photometric": "median normalized cross-correlation of the aligned grayscale pixels in textured 16-px tiles",
            "local_ncc_min": LOCAL_NCC_MIN}


@dataclass
class Features:
    """Keypoints of one image at working resolution (and of its mirror image, for audited images)."""

    size: tuple[int, int]  # (width, height) of the original image
    scale: float  # working pixels per original pixel
    gray: np.ndarray  # uint8 (h, w) at working resolution
    xy: np.ndarray  # (n, 2) float32 keypoint positions
    desc: np.ndarray | None  # (n, 32) uint8 ORB descriptors
    mirror: "Features | None" = None


def _orb(n: int, fast_threshold: int):
    import cv2

    return cv2.ORB_create(nfeatures=n, scaleFactor=1.2, nlevels=8, edgeThreshold=15, patchSize=31,
                          fastThreshold=fast_threshold)


def _gray_work(image) -> tuple[np.ndarray, float, tuple[int, int]]:
    from PIL import Image

    if not isinstance(image, Image.Image):
        from .images import load_image

        image = load_image(image)
    size = image.size
    gray = image.convert("L")
    scale = min(1.0, WORK_SIDE / max(size))
    if scale < 1.0:
        gray = gray.resize((max(1, round(size[0] * scale)), max(1, round(size[1] * scale))), Image.Resampling.BILINEAR,
                           reducing_gap=2.0)
    return np.asarray(gray, dtype=np.uint8), gray.size[0] / size[0], size


def _keypoints(gray: np.ndarray, n: int = ORB_FEATURES) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Up to ``n`` keypoint positions, pyramid levels and descriptors, strongest first. A low-texture image
    (sky, a wall, a road: fewer than :data:`MIN_KEYPOINTS` corners at OpenCV's usual FAST threshold) is
    searched again at the lower thresholds of :data:`FAST_THRESHOLDS`, so its few corners still count."""
    kps, desc = (), None
    for threshold in FAST_THRESHOLDS:
        kps, desc = _orb(n, threshold).detectAndCompute(gray, None)
        if desc is not None and len(kps) >= min(n, MIN_KEYPOINTS):
            break
    if desc is None or not kps:
        return np.zeros((0, 2), np.float32), np.zeros(0, np.int64), None
    order = np.argsort([-k.response for k in kps], kind="stable")
    return (np.array([kps[i].pt for i in order], dtype=np.float32),
            np.array([kps[i].octave for i in order], dtype=np.int64), desc[order])


def _detect(gray: np.ndarray, n: int = ORB_FEATURES) -> tuple[np.ndarray, np.ndarray | None]:
    """Keypoint positions and descriptors (:func:`_keypoints`)."""
    xy, _, desc = _keypoints(gray, n)
    return xy, desc


def features(image, *, mirror: bool = False, n: int = ORB_FEATURES) -> Features:
    """The :class:`Features` of a PIL image (or anything ``load_image`` reads); ``mirror``: also of its mirror;
    ``n``: keypoints kept (:data:`ORB_FEATURES` for an audited image, :data:`PHOTO_FEATURES` for a photo)."""
    gray, scale, size = _gray_work(image)
    xy, desc = _detect(gray, n)
    out = Features(size=size, scale=scale, gray=gray, xy=xy, desc=desc)
    if mirror:
        g2 = np.ascontiguousarray(gray[:, ::-1])
        xy2, d2 = _detect(g2, n)
        out.mirror = Features(size=size, scale=scale, gray=g2, xy=xy2, desc=d2)
    return out


def _ratio_pairs(a: np.ndarray, b: np.ndarray) -> list[tuple[int, int]]:
    """(index in a, index in b) of each descriptor of ``a`` whose nearest in ``b`` passes the ratio test."""
    import cv2

    pairs = cv2.BFMatcher(cv2.NORM_HAMMING).knnMatch(a, b, k=2)
    return [(p[0].queryIdx, p[0].trainIdx) for p in pairs if len(p) == 2 and p[0].distance < RATIO * p[1].distance]


def _match(q: Features, r: Features) -> tuple[np.ndarray, np.ndarray]:
    """Putative matches (photo positions, image positions): the ratio-test matches of the photo's keypoints
    in the image and of the image's keypoints in the photo, together. Both ways, because a crop's keypoints
    all lie in the photo while most of the photo's lie outside the crop (and the other way round for a
    photo framed or pasted into a collage)."""
    if q.desc is None or r.desc is None or len(q.desc) < 2 or len(r.desc) < 2:
        return np.zeros((0, 2), np.float32), np.zeros((0, 2), np.float32)
    pairs = set(_ratio_pairs(r.desc, q.desc)) | {(j, i) for i, j in _ratio_pairs(q.desc, r.desc)}
    if not pairs:
        return np.zeros((0, 2), np.float32), np.zeros((0, 2), np.float32)
    idx = np.array(sorted(pairs))
    return r.xy[idx[:, 0]], q.xy[idx[:, 1]]


def _photometric(q: np.ndarray, r: np.ndarray, m: np.ndarray) -> tuple[dict, int, np.ndarray]:
    """Compares image ``q`` and photo ``r`` aligned by ``m`` (2x3, photo -> image pixels) over their overlap,
    at the lower of the two resolutions (the larger side is warped onto the smaller), after refining the
    alignment (ECC). Returns (measures, overlap px, refined m)."""
    import cv2

    s = float(np.sqrt(abs(np.linalg.det(m[:, :2]))))
    inverse = s >= 1.0
    if inverse:  # the photo is enlarged in the image: warp the image onto the photo (fewer pixels)
        src, dst, a = q, r, cv2.invertAffineTransform(m).astype(np.float32)
    else:  # reduced: warp the photo onto the image
        src, dst, a = r, q, m.astype(np.float32)
        s = 1.0 / s
    h, w = dst.shape
    src_f = src.astype(np.float32)
    if s > 1.5:
        src_f = cv2.GaussianBlur(src_f, (0, 0), 0.5 * s)
    # ECC wants the template in dst coordinates and warps src onto it: refine a (src -> dst)
    warped = cv2.warpAffine(src_f, a, (w, h), flags=cv2.INTER_LINEAR, borderValue=0)
    mask = cv2.warpAffine(np.ones(src.shape, np.uint8), a, (w, h), flags=cv2.INTER_NEAREST, borderValue=0)
    mask = cv2.erode(mask, np.ones((7, 7), np.uint8))
    n = int(mask.sum())
    if n < 64:
        return {"local_ncc": 0.0, "n_tiles": 0}, n, m
    try:
        ai = cv2.invertAffineTransform(a)  # dst -> src, what ECC estimates (template = dst, input = src)
        # no input mask: every pixel of src is valid, and ECC itself leaves out the template's pixels that
        # src does not cover (the mask argument is in src's frame: the template's overlap mask is not one)
        _, ai = cv2.findTransformECC(dst.astype(np.float32), src_f, ai.astype(np.float32), cv2.MOTION_AFFINE,
                                     (cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, 40, 1e-4), None, 3)
        a2 = cv2.invertAffineTransform(ai)
        if np.abs(a2[:, :2] - a[:, :2]).max() < 0.1 and np.abs(a2[:, 2] - a[:, 2]).max() < 0.1 * max(w, h):
            a = a2.astype(np.float32)
            warped = cv2.warpAffine(src_f, a, (w, h), flags=cv2.INTER_LINEAR, borderValue=0)
            mask = cv2.erode(cv2.warpAffine(np.ones(src.shape, np.uint8), a, (w, h), flags=cv2.INTER_NEAREST,
                                            borderValue=0), np.ones((7, 7), np.uint8))
            n = int(mask.sum())
    except cv2.error:  # ECC did not converge: the keypoints' transform stands
        pass
    m_out = cv2.invertAffineTransform(a) if inverse else a
    x = cv2.GaussianBlur(warped, (0, 0), 1.0)
    y = cv2.GaussianBlur(dst.astype(np.float32), (0, 0), 1.0)
    out = {}
    out["local_ncc"], out["n_tiles"] = _tile_ncc(x, y, mask)
    return out, n, np.asarray(m_out, np.float64)


def _tile_ncc(x: np.ndarray, y: np.ndarray, mask: np.ndarray) -> tuple[float, int]:
    """Median normalized cross-correlation of x and y over the :data:`TILE`-pixel tiles inside ``mask`` that
    have texture in both (standard deviation >= 4 grey levels); 0 with fewer than :data:`MIN_TILES` tiles."""
    t = TILE
    h, w = (x.shape[0] // t) * t, (x.shape[1] // t) * t
    if h == 0 or w == 0:
        return 0.0, 0

    def tiles(a):
        return a[:h, :w].reshape(h // t, t, w // t, t).transpose(0, 2, 1, 3).reshape(-1, t * t).astype(np.float64)

    a, b, inside = tiles(x), tiles(y), tiles(mask.astype(np.float32)).min(axis=1) > 0
    a -= a.mean(axis=1, keepdims=True)
    b -= b.mean(axis=1, keepdims=True)
    sa, sb = np.sqrt((a * a).mean(axis=1)), np.sqrt((b * b).mean(axis=1))
    keep = inside & (sa >= 4) & (sb >= 4)
    if keep.sum() < MIN_TILES:
        return 0.0, int(keep.sum())
    ncc = (a[keep] * b[keep]).mean(axis=1) / (sa[keep] * sb[keep])
    return float(np.median(ncc)), int(keep.sum())


def _corr(a: np.ndarray, b: np.ndarray) -> float:
    a = a.astype(np.float64) - a.mean()
    b = b.astype(np.float64) - b.mean()
    den = float(np.sqrt((a * a).sum() * (b * b).sum()))
    return float((a * b).sum() / den) if den > 0 else 0.0


def _uniform_outside(gray: np.ndarray, box: tuple[int, int, int, int]) -> bool:
    """Whether the image outside ``box`` (working pixels) is one flat colour (a border or padding)."""
    x0, y0, x1, y1 = box
    mask = np.ones(gray.shape, bool)
    mask[y0:y1, x0:x1] = False
    if mask.sum() < 16:
        return True
    return float(gray[mask].std()) < 10.0


def _fit(src: np.ndarray, dst: np.ndarray, similarity: bool) -> tuple[np.ndarray, int] | None:
    """A transform (photo -> image, 2x3) fitted to the matches with RANSAC and its inlier count, or None
    (fewer than :data:`MIN_INLIERS` inliers, a scale outside :data:`SCALE_RANGE`, too anisotropic, or a
    reflection). ``similarity``: rotation, one scale and a shift (``cv2.estimateAffinePartial2D``), which
    few matches clustered in a small region fit far better; else a full affine (``cv2.estimateAffine2D``:
    a photo squeezed to another aspect ratio in a collage)."""
    import cv2

    cv2.setRNGSeed(0)  # RANSAC's samples: the same verdict on every run (OpenCV's RNG is per thread)
    estimate = cv2.estimateAffinePartial2D if similarity else cv2.estimateAffine2D
    m, inl = estimate(src, dst, method=cv2.RANSAC, ransacReprojThreshold=RANSAC_PX, maxIters=2000,
                      confidence=0.995, refineIters=10)
    if m is None or inl is None:
        return None
    n_in = int(inl.sum())
    if n_in < MIN_INLIERS:
        return None
    sv = np.linalg.svd(m[:, :2], compute_uv=False)
    s = float(np.sqrt(sv[0] * sv[1]))
    if not SCALE_RANGE[0] <= s <= SCALE_RANGE[1] or sv[0] > ANISOTROPY_MAX * sv[1] or np.linalg.det(m[:, :2]) <= 0:
        return None
    return m, n_in


def _guided(q: Features, r: Features, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Matches guided by a transform ``m`` (photo -> image): each photo keypoint that ``m`` carries to within
    :data:`GUIDED_PX` of an image keypoint whose descriptor is within :data:`GUIDED_HAMMING` bits of its own,
    the nearest such in descriptor space. No ratio test: on a repetitive facade the ratio test rejects most
    true matches (every window looks like its neighbour), which leaves the first fit imprecise."""
    if q.desc is None or r.desc is None or not len(q.xy) or not len(r.xy):
        return np.zeros((0, 2), np.float32), np.zeros((0, 2), np.float32)
    moved = r.xy @ m[:, :2].T.astype(np.float32) + m[:, 2].astype(np.float32)
    d2 = ((moved[:, None, :] - q.xy[None, :, :]) ** 2).sum(axis=2)
    ri, qi = np.nonzero(d2 <= GUIDED_PX ** 2)
    if not len(ri):
        return np.zeros((0, 2), np.float32), np.zeros((0, 2), np.float32)
    ham = np.unpackbits(r.desc[ri] ^ q.desc[qi], axis=1).sum(axis=1)
    ok = ham <= GUIDED_HAMMING
    ri, qi, ham = ri[ok], qi[ok], ham[ok]
    order = np.lexsort((qi, ham, ri))  # per photo keypoint, its nearest image keypoint by descriptor
    ri, qi = ri[order], qi[order]
    first = np.r_[True, ri[1:] != ri[:-1]]
    return r.xy[ri[first]], q.xy[qi[first]]


def _verify_one(q: Features, r: Features, mirrored: bool) -> dict | None:
    import cv2

    src, dst = _match(q, r)
    if len(src) < MIN_INLIERS:
        return None
    best = None
    for similarity in (True, False):  # the similarity first; the affine when it does not line up
        fit = _fit(src, dst, similarity)
        if fit is None:
            continue
        g_src, g_dst = _guided(q, r, fit[0])
        if len(g_src) > fit[1]:  # refit on the guided matches when they are more
            fit = _fit(g_src, g_dst, similarity) or fit
        meas, n_px, m = _photometric(q.gray, r.gray, fit[0])
        if best is None or meas["local_ncc"] > best[0]["local_ncc"]:
            best = (meas, n_px, m, fit[1])
        if meas["local_ncc"] >= LOCAL_NCC_MIN:
            break
    if best is None:
        return None
    meas, n_px, m, n_in = best
    sv = np.linalg.svd(m[:, :2], compute_uv=False)
    s = float(np.sqrt(sv[0] * sv[1]))

    qh, qw = q.gray.shape
    rh, rw = r.gray.shape
    # the photo's outline in the image (working pixels), and the image's outline in the photo
    corners = np.array([[0, 0], [rw, 0], [rw, rh], [0, rh]], np.float64)
    in_q = corners @ m[:, :2].T + m[:, 2]
    mi = cv2.invertAffineTransform(m)
    qcorners = np.array([[0, 0], [qw, 0], [qw, qh], [0, qh]], np.float64)
    in_r = qcorners @ mi[:, :2].T + mi[:, 2]
    cover_q = _poly_cover(in_q, qw, qh)  # fraction of the image the photo covers
    cover_r = _poly_cover(in_r, rw, rh)  # fraction of the photo the image shows
    if max(cover_q, cover_r) < MIN_OVERLAP or n_px < MIN_OVERLAP_PX * min(1.0, (qw * qh) / WORK_SIDE ** 2):
        return None
    x0, y0 = np.clip(in_q.min(axis=0), 0, [qw, qh])
    x1, y1 = np.clip(in_q.max(axis=0), 0, [qw, qh])
    box = (int(x0), int(y0), int(np.ceil(x1)), int(np.ceil(y1)))  # in q's own (possibly mirrored) pixels
    angle = float(np.degrees(np.arctan2(m[1, 0], m[0, 0])))
    if mirrored:  # back to the submitted image's own pixels
        x0, x1 = qw - x1, qw - x0
        angle = -angle
    f = 1.0 / q.scale
    region = [int(round(x0 * f)), int(round(y0 * f)), int(round(x1 * f)), int(round(y1 * f))]
    region = [max(0, min(v, lim)) for v, lim in zip(region, (q.size[0], q.size[1], q.size[0], q.size[1]))]
    kinds = []
    if cover_r < COVER_MAX:
        kinds.append("crop")
    if abs(angle) > ROTATION_MIN_DEG:
        kinds.append("rotation")
    if mirrored:
        kinds.append("mirror")
    if cover_q < COVER_MAX:
        if _uniform_outside(q.gray, box):
            kinds.append("border")  # a frame or padding of one colour
        elif abs(angle) <= ROTATION_MIN_DEG or cover_q < 0.6:
            kinds.append("collage/partial")
    scale_orig = s * r.scale / q.scale  # submitted pixels per original photo pixel
    if not kinds and abs(np.log(max(scale_orig, 1e-6))) > np.log(1.05):
        kinds.append("resize")
    return {"inliers": n_in, "matches": len(src), "overlap_px": n_px, "tiles": meas["n_tiles"],
            "region": region, "angle": round(angle, 2), "scale": round(scale_orig, 4), "mirror": mirrored,
            "cover_image": round(cover_q, 4), "cover_photo": round(cover_r, 4), "kinds": kinds,
            "local_ncc": round(meas["local_ncc"], 4),
            "verified": meas["local_ncc"] >= LOCAL_NCC_MIN}


def _poly_cover(poly: np.ndarray, w: int, h: int) -> float:
    """Fraction of the w x h rectangle (working pixels) that the convex polygon ``poly`` covers, counted in
    pixels of the rectangle (OpenCV's ``intersectConvexConvex`` loses area when the two outlines nearly
    coincide, as they do for a plain copy once ECC has refined the transform to the identity)."""
    import cv2

    mask = np.zeros((max(1, int(h)), max(1, int(w))), np.uint8)
    cv2.fillConvexPoly(mask, np.round(np.asarray(poly, np.float64) * 4).astype(np.int32), 1, cv2.LINE_8, 2)
    return float(mask.mean())


def verify(q: Features, r: Features, orientations: tuple[bool, ...] = (False, True)) -> dict | None:
    """The best geometric match of photo ``r`` in image ``q`` (direct, then the mirror image), or None.

    Returns the match (``verified`` True when it passes the photometric check, :data:`LOCAL_NCC_MIN`) with
    ``region`` [x0, y0, x1, y1] in the image's pixels, ``kinds`` (:data:`KINDS`), ``angle``, ``scale``,
    ``inliers`` and ``local_ncc``. ``orientations``: which of the image (False) and its mirror image (True)
    are matched."""
    best = None
    for mirrored, feats in ((False, q), (True, q.mirror)):
        if feats is None or mirrored not in orientations:
            continue
        found = _verify_one(feats, r, mirrored)
        if found is None:
            continue
        if found["verified"] and found["local_ncc"] >= EXACT_NCC:
            return found
        if best is None or found["local_ncc"] > best["local_ncc"]:
            best = found  # the better of the two (a symmetric facade, mirrored, lines up roughly with itself)
    return best


# -- the audit's geometry stage -----------------------------------------------------------------

#: Strongest keypoints of each benchmark photo kept in the retrieval index (the photos sharing the most
#: ratio-test matches with an audited image, or with any part of it, become candidates: a collage's pasted
#: photos need not be its embedding neighbours).
INDEX_FEATURES = 200
#: The index's keypoints are spread over a grid of this many cells a side (:func:`index_descriptors`).
INDEX_GRID = 4
#: Strongest keypoints of the audited image (and of its mirror) looked up in the index.
QUERY_INDEX_FEATURES = 800
#: Photos taken from the index per audited image (besides the hash and embedding candidates).
INDEX_CANDIDATES = 4
#: Index matches a photo needs before its geometry is checked.
MIN_VOTES = 3
#: Index matches a hash or embedding candidate needs before its geometry is checked (pools with an index).
MIN_VOTES_CANDIDATE = 3
#: A verified match below this local_ncc (not pixel for pixel) has its block's other photos checked too, up to
#: SIBLINGS_MAX of them (the world pool's photos have no block).
EXACT_NCC = 0.99
SIBLINGS_MAX = 16
WORLD_BLOCK = "world"
#: A progress bar is shown while the index of a pool of at least this many photos is built.
INDEX_PROGRESS_MIN = 500
#: Photos whose features are kept in memory (each ~0.3 MB).
_FEATURE_MEMO = 384


def index_descriptors(gray: np.ndarray) -> np.ndarray | None:
    """The :data:`INDEX_FEATURES` descriptors of a photo kept in the retrieval index: its keypoints
    (:data:`PHOTO_FEATURES`) taken in turn from each cell of an :data:`INDEX_GRID` x :data:`INDEX_GRID` grid and
    each pair of pyramid levels, strongest first within one, so that every part of the photo is represented
    at every scale (a crop of a quiet part of a photo, enlarged, is found too, not only crops of its busiest
    part; and a photo reduced into a collage tile still meets its coarse keypoints)."""
    xy, octave, desc = _keypoints(gray, PHOTO_FEATURES)
    if desc is None:
        return None
    h, w = gray.shape
    cell = (np.minimum(xy[:, 1] * INDEX_GRID // h, INDEX_GRID - 1) * INDEX_GRID
            + np.minimum(xy[:, 0] * INDEX_GRID // w, INDEX_GRID - 1)).astype(np.int64)
    group = cell * 4 + np.minimum(octave // 2, 3)  # levels 0-1, 2-3, 4-5, 6-7 of ORB's 8
    rank = np.zeros(len(group), np.int64)  # the keypoint's rank by strength within its group
    seen = np.zeros(INDEX_GRID * INDEX_GRID * 4, np.int64)
    for i, g in enumerate(group):  # keypoints come strongest first
        rank[i] = seen[g]
        seen[g] += 1
    keep = np.lexsort((np.arange(len(rank)), rank))[:INDEX_FEATURES]
    return desc[np.sort(keep)]


class GeometryStage:
    """Verifies candidate photos of audited images, for one :class:`~geofidelity_bench.near_copies.ReferencePool`.

    Photo features are computed when first needed (and kept for :data:`_FEATURE_MEMO` photos); the
    retrieval index (:class:`~geofidelity_bench.keypoint_index.KeypointIndex`, exact on a small pool, LSH on
    a large one) is built only when an audited image is not found in the verdict cache, and kept in
    ``index_dir`` (beside the verdicts), so a pool's photos are indexed once."""

    def __init__(self, pool, index_dir: str | os.PathLike | None = None, write_guard=None) -> None:
        import threading

        self.pool = pool
        self.index_dir = None if index_dir is None else Path(index_dir)
        self._write_guard = write_guard  # the caches' one warning for a folder that cannot be written
        self._feats: dict[int, Features] = {}
        self._index = None
        self._lock = threading.Lock()
        self._index_lock = threading.Lock()

    def photo(self, j: int) -> Features | None:
        with self._lock:
            f = self._feats.get(j)
        if f is not None:
            return f
        item = self.pool.items[j] if self.pool.items is not None else None
        if item is None:
            return None
        try:
            f = features(item.image_bytes, n=PHOTO_FEATURES)
        except Exception:  # noqa: BLE001 - an unreadable photo has no geometry (its hashes say so already)
            return None
        with self._lock:
            if len(self._feats) >= _FEATURE_MEMO:
                self._feats.pop(next(iter(self._feats)))
            self._feats[j] = f
        return f

    def _index_path(self) -> Path | None:
        if self.index_dir is None:
            return None
        import hashlib

        from . import keypoint_index

        key = hashlib.sha256(("\n".join(self.pool.shas) + f"|{index_settings()}|{keypoint_index.FORMAT}")
                             .encode()).hexdigest()[:20]
        return self.index_dir / f"keypoint-index-{key}.npz"

    def index(self):
        """The pool's :class:`~geofidelity_bench.keypoint_index.KeypointIndex` of every photo's
        :func:`index_descriptors` (read from ``index_dir`` when it was built before)."""
        with self._index_lock:
            if self._index is None:
                self._index = self._load_or_build()
            return self._index

    def _load_or_build(self):
        from .keypoint_index import KeypointIndex

        path = self._index_path()
        if path is not None and path.is_file():
            found = KeypointIndex.load(path)
            if found is not None and (not len(found.owners) or found.owners.max() < len(self.pool)):
                return found
        from contextlib import closing

        from tqdm.auto import tqdm

        from .prefetch import ordered_map, resolve_num_workers

        def one(j: int):
            item = self.pool.items[j] if self.pool.items is not None else None
            if item is None:
                return None
            try:
                return index_descriptors(_gray_work(item.image_bytes)[0])
            except Exception:  # noqa: BLE001 - an unreadable photo is not indexed (its hashes say so already)
                return None

        descs, owners = [], []
        n = len(self.pool)
        workers = resolve_num_workers(None)
        with tqdm(total=n, desc="copy audit: indexing the pool's keypoints", unit="photo",
                  disable=n < INDEX_PROGRESS_MIN) as bar, \
                closing(ordered_map(one, range(n), num_workers=workers, ahead=2 * max(1, workers))) as found:
            for j, d in zip(range(n), found):
                bar.update(1)
                if d is not None:
                    descs.append(d)
                    owners.append(np.full(len(d), j, np.int64))
        index = (KeypointIndex(np.concatenate(descs), np.concatenate(owners)) if descs
                 else KeypointIndex(np.zeros((0, 32), np.uint8), np.zeros(0, np.int64)))
        if path is not None:
            try:
                index.save(path)
            except OSError as err:  # a cache that cannot be written: the index is built again next run
                if self._write_guard is not None:
                    self._write_guard.fail(path.parent, err)
        return index

    def retrieve(self, q: Features) -> np.ndarray:
        """Votes of every photo: ratio-test matches between its index keypoints and ``q``'s strongest
        :data:`QUERY_INDEX_FEATURES` (and its mirror's)."""
        direct, mirror = self.retrieve_each(q)
        return direct + mirror

    def retrieve_each(self, q: Features) -> tuple[np.ndarray, np.ndarray]:
        """The votes of :meth:`retrieve`, of the image and of its mirror image apart."""
        index = self.index()
        return tuple(index.votes([f.desc[:QUERY_INDEX_FEATURES] if f is not None and f.desc is not None else None],
                                 len(self.pool), ratio=RATIO) for f in (q, q.mirror))

    def check(self, image, candidates: list[int], exclude: set[int] = frozenset(), *,
              retrieve: bool = True) -> dict[int, dict]:
        """Verdicts (:func:`verify`) of ``image`` against its candidates (the hash and embedding neighbours)
        and the :data:`INDEX_CANDIDATES` photos with the most index votes (at least :data:`MIN_VOTES`). A
        candidate is verified only with :data:`MIN_VOTES_CANDIDATE` votes (an image that shares no keypoint
        with a photo is not a copy of it: most audited images are matched against nothing).

        ``retrieve=False``: the candidates only, both orientations, without the index (an image the hashes
        already flag is checked against the photos they matched, for the edit and the region)."""
        q = features(image, mirror=True)
        if not retrieve:  # the hashes name the photo: no search for a better one among its block's
            return self._verify_all(q, [j for j in dict.fromkeys(candidates) if j not in exclude])
        direct, mirror = self.retrieve_each(q)
        votes = direct + mirror
        if exclude:
            votes[list(exclude)] = 0
        top = [int(j) for j in np.argsort(-votes, kind="stable")[:INDEX_CANDIDATES] if votes[j] >= MIN_VOTES]
        cand = list(dict.fromkeys([*(j for j in candidates if votes[j] >= MIN_VOTES_CANDIDATE), *top]))
        # the orientation that drew a photo's votes is matched; the other only when it drew as many as a
        # candidate needs (a copy is mirrored or not: its votes come from one side)
        sides = {j: tuple(side for side, v in ((False, direct[j]), (True, mirror[j]))
                          if v >= MIN_VOTES_CANDIDATE or v == max(direct[j], mirror[j])) for j in cand}
        return self._with_siblings(q, self._verify_all(q, cand, sides), exclude)

    def _with_siblings(self, q: Features, out: dict[int, dict], exclude) -> dict[int, dict]:
        # a match that lines up but not pixel for pixel may be another photo of the same facade, taken from
        # nearly the same place (a small crop of a planar facade lines up with both): the block's other
        # photos are checked too, so the record names the photo that was copied (the best local_ncc)
        blocks = getattr(self.pool, "blocks", None)
        weak = {blocks[j] for j, v in out.items() if v["verified"] and v["local_ncc"] < EXACT_NCC} if blocks else set()
        weak.discard(WORLD_BLOCK)
        if weak:
            siblings = [k for k in range(len(self.pool)) if blocks[k] in weak and k not in out and k not in exclude]
            out.update(self._verify_all(q, siblings[:SIBLINGS_MAX]))
        return out

    def _verify_all(self, q: Features, positions, sides: dict | None = None) -> dict[int, dict]:
        out = {}
        for j in positions:
            r = self.photo(j)
            if r is None:
                continue
            v = verify(q, r, sides[j]) if sides is not None else verify(q, r)
            if v is not None:
                out[j] = v
        return out
