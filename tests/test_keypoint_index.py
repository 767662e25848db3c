"""The copy audit's keypoint index (geofidelity_bench/keypoint_index.py) against an independent numpy
brute-force ratio test, on real ORB descriptors of the demo benchmark's photos and edited copies of them."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")
from PIL import Image  # noqa: E402

from geofidelity_bench import keypoint_index as ki  # noqa: E402

N_PHOTOS = 40  # ~8,000 descriptors; each test sets EXACT_MAX to choose its backend
_POP = np.array([bin(i).count("1") for i in range(256)], np.uint8)


def _hamming(q, d):
    """(len(q), len(d)) Hamming distances of 32-byte descriptors (as four 64-bit words)."""
    a, b = q.view(np.uint64), d.view(np.uint64)
    if hasattr(np, "bitwise_count"):
        return sum(np.bitwise_count(a[:, None, k] ^ b[None, :, k]).astype(np.int32) for k in range(4))
    return _POP[q[:, None, :] ^ d[None, :, :]].sum(-1, dtype=np.int32)


def _reference_votes(index_desc, owners, queries, n_owners, ratio=0.8):
    """Ratio-test votes by numpy: Hamming distances of every query descriptor to every index descriptor."""
    votes = np.zeros(n_owners, np.int64)
    index_desc = np.ascontiguousarray(index_desc)
    for q in queries:
        if q is None or len(q) < 2 or len(index_desc) < 2:
            continue
        q = np.ascontiguousarray(q)
        for s in range(0, len(q), 256):
            d = _hamming(q[s:s + 256], index_desc)
            part = np.partition(d, 1, axis=1)
            best = d.argmin(1)
            ok = part[:, 0] < ratio * part[:, 1]
            np.add.at(votes, owners[best[ok]], 1)
    return votes


@pytest.fixture(scope="module")
def demo():
    from geofidelity_bench import load_benchmark
    from geofidelity_bench import near_copies as nc
    from geofidelity_bench.copy_geometry import _gray_work

    items = nc.pool_items(load_benchmark("demo"))[:N_PHOTOS]
    orb = cv2.ORB_create(nfeatures=200, edgeThreshold=15, fastThreshold=10)
    descs, owners = [], []
    for j, item in enumerate(items):
        _, d = orb.detectAndCompute(_gray_work(item.image_bytes)[0], None)
        descs.append(d)
        owners.append(np.full(len(d), j))
    return items, np.concatenate(descs), np.concatenate(owners)


def _query(image):
    from geofidelity_bench.copy_geometry import QUERY_INDEX_FEATURES, features

    f = features(image, mirror=True)
    return [None if g.desc is None else g.desc[:QUERY_INDEX_FEATURES] for g in (f, f.mirror)]


def _edits(items, j):
    im = Image.open(io.BytesIO(items[j].image_bytes)).convert("RGB")
    w, h = im.size
    other = Image.open(io.BytesIO(items[(j + 7) % len(items)].image_bytes)).convert("RGB").resize((w, h))
    collage = Image.new("RGB", (2 * w, h))
    collage.paste(other, (0, 0))
    collage.paste(im, (w, 0))
    return {"crop50": im.crop((w // 4, h // 4, w // 4 + w // 2, h // 4 + h // 2)),
            "rotate10": im.rotate(10, resample=Image.Resampling.BILINEAR),
            "collage": collage}


@pytest.fixture(scope="module")
def queries(demo):
    items, _, _ = demo
    return [(j, name, _query(e)) for j in (0, 9, 18, 27, 36) for name, e in _edits(items, j).items()]


def test_exact_backend_equals_numpy_ratio_test(demo, queries, monkeypatch):
    _, desc, owners = demo
    monkeypatch.setattr(ki, "EXACT_MAX", 10 ** 9)
    index = ki.KeypointIndex(desc, owners)
    assert index.backend == "exact"
    total = 0
    for _, _, q in queries[:6]:
        got = index.votes(q, N_PHOTOS)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, _reference_votes(desc, owners, q, N_PHOTOS))
        total += got.sum()
    assert total > 0


def test_lsh_ranks_the_true_photo_like_brute_force(demo, queries, monkeypatch):
    _, desc, owners = demo
    monkeypatch.setattr(ki, "EXACT_MAX", 100)
    index = ki.KeypointIndex(desc, owners)
    assert index.backend == "lsh"
    found_ref = found_lsh = 0
    for j, name, q in queries:
        ref = _reference_votes(desc, owners, q, N_PHOTOS)
        lsh = index.votes(q, N_PHOTOS)
        in_ref = j in np.argsort(-ref, kind="stable")[:4] and ref[j] >= 3
        in_lsh = j in np.argsort(-lsh, kind="stable")[:4] and lsh[j] >= 3
        found_ref += in_ref
        found_lsh += in_lsh
        assert in_lsh or not in_ref, (j, name, ref[j], lsh[j])
    assert found_ref >= len(queries) - 1
    assert found_lsh >= found_ref


_CHILD = textwrap.dedent("""
    import sys, numpy as np, cv2
    from geofidelity_bench import keypoint_index as ki
    ki.EXACT_MAX = 100
    burn = int(sys.argv[2])
    if burn:  # move this thread's OpenCV RNG: the index must seed it itself
        cv2.randu(np.zeros((burn, 1), np.float32), 0, 1)
    z = np.load(sys.argv[1])
    index = ki.KeypointIndex.load(sys.argv[3])
    qs = [z[k] for k in sorted(z.files)]
    sys.stdout.write(np.concatenate([index.votes([q], int(index.owners.max()) + 1) for q in qs]).tobytes().hex())
""")


def test_lsh_votes_are_the_same_in_separate_processes(demo, queries, tmp_path, monkeypatch):
    _, desc, owners = demo
    ki.KeypointIndex(desc, owners).save(tmp_path / "index.npz")
    qs = [q for _, _, pair in queries for q in pair if q is not None]
    np.savez(tmp_path / "q.npz", **{f"q{i:03d}": q for i, q in enumerate(qs)})
    runs = [subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / "q.npz"), str(burn), str(tmp_path / "index.npz")],
                           capture_output=True, text=True, check=True, timeout=120).stdout for burn in (0, 1234)]
    assert runs[0] and runs[0] == runs[1]
    monkeypatch.setattr(ki, "EXACT_MAX", 100)
    cv2.randu(np.zeros((77, 1), np.float32), 0, 1)
    index = ki.KeypointIndex(desc, owners)
    here = np.concatenate([index.votes([q], N_PHOTOS) for q in qs])
    assert here.tobytes().hex() == runs[0]
    assert here.sum() > 0


@pytest.mark.parametrize("exact_max", [100, 10 ** 9])
def test_concurrent_queries_match_serial(demo, queries, monkeypatch, exact_max):
    _, desc, owners = demo
    monkeypatch.setattr(ki, "EXACT_MAX", exact_max)
    index = ki.KeypointIndex(desc, owners)
    qs = [q for _, _, q in queries[:8]]
    results: dict[int, np.ndarray] = {}

    def work(i):
        results[i] = index.votes(qs[i % len(qs)], N_PHOTOS)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]  # first use builds the tables
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    serial = [index.votes(q, N_PHOTOS) for q in qs]
    assert len(results) == 16
    for i, v in results.items():
        np.testing.assert_array_equal(v, serial[i % len(qs)])


def test_save_load_round_trip_and_foreign_files(demo, queries, tmp_path, monkeypatch):
    _, desc, owners = demo
    monkeypatch.setattr(ki, "EXACT_MAX", 100)
    index = ki.KeypointIndex(desc, owners)
    path = index.save(tmp_path / "sub" / "index.npz")
    assert [p.name for p in path.parent.iterdir()] == ["index.npz"]  # no temporary file left
    back = ki.KeypointIndex.load(path)
    np.testing.assert_array_equal(back.descriptors, desc)
    np.testing.assert_array_equal(back.owners, owners)
    with np.load(path) as z:
        assert str(z["settings"]) == ki.settings()
    q = queries[0][2]
    np.testing.assert_array_equal(back.votes(q, N_PHOTOS), index.votes(q, N_PHOTOS))
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    np.savez(tmp_path / "other.npz", descriptors=desc, owners=owners)
    assert ki.KeypointIndex.load(tmp_path / "junk.npz") is None
    assert ki.KeypointIndex.load(tmp_path / "other.npz") is None
    assert ki.KeypointIndex.load(tmp_path / "missing.npz") is None


@pytest.mark.parametrize("exact_max", [0, 10 ** 9])
def test_empty_and_tiny_inputs_give_zero_votes(demo, monkeypatch, exact_max):
    _, desc, owners = demo
    monkeypatch.setattr(ki, "EXACT_MAX", exact_max)
    zero = np.zeros(5, np.int64)
    empty = ki.KeypointIndex(np.zeros((0, 32), np.uint8), np.zeros(0, np.int64))
    np.testing.assert_array_equal(empty.votes([desc[:10], None], 5), zero)
    one = ki.KeypointIndex(desc[:1], np.zeros(1, np.int64))
    np.testing.assert_array_equal(one.votes([desc[:10]], 5), zero)
    full = ki.KeypointIndex(desc, owners)
    np.testing.assert_array_equal(full.votes([None, desc[:1], np.zeros((0, 32), np.uint8)], N_PHOTOS),
                                  np.zeros(N_PHOTOS, np.int64))
    np.testing.assert_array_equal(full.votes([], N_PHOTOS), np.zeros(N_PHOTOS, np.int64))
    with pytest.raises(ValueError):
        ki.KeypointIndex(desc[:3], owners[:2])
