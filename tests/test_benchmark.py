import dataclasses
import hashlib
import json
import random
import re
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import make_block, make_refs
from geofidelity_bench.benchmark import (
    Benchmark,
    BenchmarkError,
    config_file,
    heldout_count,
    load_benchmark,
    save_benchmark,
    split_references,
    split_seed,
)


def test_heldout_count_hand_worked():
    # k = max(1, min(4, n // 2))
    assert [heldout_count(n) for n in (2, 3, 4, 5, 7, 8, 9, 100)] == [1, 1, 2, 2, 3, 4, 4, 4]


def test_split_seed_is_first_8_bytes_big_endian_of_sha256():
    digest = hashlib.sha256(b"0|lund_seg1").hexdigest()
    assert split_seed("lund_seg1") == int(digest[:16], 16)


def test_split_matches_independent_procedure_and_is_deterministic(tiny_benchmark):
    for block_id in tiny_benchmark.block_ids:
        refs = tiny_benchmark.references_of(block_id)
        ids = sorted(r.reference_id for r in refs)
        seed = int(hashlib.sha256(f"0|{block_id}".encode()).hexdigest()[:16], 16)
        order = list(ids)
        random.Random(seed).shuffle(order)
        k = max(1, min(4, len(ids) // 2))
        assert [r.reference_id for r in tiny_benchmark.heldout(block_id)] == order[:k]
        assert [r.reference_id for r in tiny_benchmark.gallery(block_id)] == order[k:]
        held = {r.reference_id for r in tiny_benchmark.heldout(block_id)}
        assert held.isdisjoint(r.reference_id for r in tiny_benchmark.gallery(block_id))


def test_split_does_not_depend_on_input_order(tiny_benchmark):
    shuffled = list(tiny_benchmark.references)
    random.Random(7).shuffle(shuffled)
    again = Benchmark(tiny_benchmark.blocks, shuffled, name="again")
    for block_id in tiny_benchmark.block_ids:
        assert again.heldout(block_id) == tiny_benchmark.heldout(block_id)


@pytest.mark.parametrize("order", ["reversed", "shuffled", "sorted"])
def test_split_references_sorts_its_input_itself(tiny_benchmark, order):
    """The public function, called directly (not through Benchmark, which sorts its references first):
    the split is the documented one (section 1: sort by reference id, shuffle with the block's seed, first
    k) whatever order the caller passes."""
    for block_id in tiny_benchmark.block_ids:
        refs = sorted(tiny_benchmark.references_of(block_id), key=lambda r: r.reference_id)
        assert len(refs) >= 3  # enough for the order to matter
        given = {"reversed": refs[::-1], "sorted": list(refs),
                 "shuffled": random.Random(block_id).sample(refs, len(refs))}[order]
        ids = [r.reference_id for r in refs]
        random.Random(int(hashlib.sha256(f"0|{block_id}".encode()).hexdigest()[:16], 16)).shuffle(ids)
        k = max(1, min(4, len(ids) // 2))
        heldout, gallery = split_references(block_id, given)
        assert [r.reference_id for r in heldout] == ids[:k]
        assert [r.reference_id for r in gallery] == ids[k:]
        assert heldout == tiny_benchmark.heldout(block_id) and gallery == tiny_benchmark.gallery(block_id)


def test_negatives_are_named(tiny_benchmark):
    assert tiny_benchmark.negatives("a1") == {
        "same_neighborhood": "a2",
        "same_city": "a2",
        "same_driving_side": "b1",
        "random_city": "b1",
    }
    assert tiny_benchmark.negatives("b1")["same_city"] is None


def test_round_trip_keeps_every_field_and_image(tiny_benchmark, tmp_path):
    save_benchmark(tiny_benchmark, tmp_path / "bench")
    loaded = load_benchmark(tmp_path / "bench")
    assert loaded.blocks == tiny_benchmark.blocks
    assert loaded.references == tiny_benchmark.references  # every field but the image
    for a, b in zip(loaded.references, tiny_benchmark.references):
        assert a.image_bytes == b.image_bytes
    assert loaded.cities == tiny_benchmark.cities
    assert loaded.fingerprint == tiny_benchmark.fingerprint


def test_saved_folder_loads_with_plain_datasets(tiny_benchmark, tmp_path):
    import datasets

    save_benchmark(tiny_benchmark, tmp_path / "bench")
    refs = datasets.load_dataset(str(tmp_path / "bench"), "references", split="train")
    assert len(refs) == len(tiny_benchmark.references)
    assert refs.features["image"].__class__.__name__ == "Image"
    assert refs[0]["image"].size == (48, 32)
    blocks = datasets.load_dataset(str(tmp_path / "bench"), "blocks", split="train")
    assert sorted(blocks["block_id"]) == tiny_benchmark.block_ids


def test_demo_loads_with_plain_datasets_and_api():
    import datasets

    from geofidelity_bench.benchmark import demo_path

    bench = load_benchmark("demo")
    assert {c for c in bench.cities} == {"lund", "arezzo", "berlin"}
    assert len(bench.blocks) == 7 and len(bench.world) == 71
    for name in ("blocks", "references", "cities", "world"):
        ds = datasets.load_dataset(str(demo_path()), name, split="train")
        assert len(ds) > 0
    refs = datasets.load_dataset(str(demo_path()), "references", split="train")
    assert len(refs) == len(bench.references)
    assert all(lic in ("BSD-2-Clause", "CC-BY-SA-4.0") for lic in refs["license"])
    assert all(url and url.startswith("https://") for url in refs["source_url"])
    # Names are never invented: only Berlin's are known.
    named = [b.block_id for b in bench.blocks if b.street_name]
    assert named == ["berlin_am_lustgarten"]
    lund = [b for b in bench.blocks if b.city == "lund"]
    assert all("segment" in b.notes.lower() for b in lund)


def test_demo_negatives_follow_spec_rules():
    from geofidelity_bench.geo import haversine_m

    bench = load_benchmark("demo")
    for block in bench.blocks:
        negs = bench.negatives(block.block_id)
        for role in ("same_neighborhood", "same_city"):
            if negs[role] is not None:
                assert bench.block(negs[role]).city == block.city
        if negs["same_neighborhood"]:
            other = bench.block(negs["same_neighborhood"])
            assert haversine_m(*block.centroid, *other.centroid) <= 1000
        assert bench.block(negs["same_driving_side"]).city != block.city
        assert bench.block(negs["same_driving_side"]).driving_side == block.driving_side
        assert bench.block(negs["random_city"]).city != block.city
    assert bench.negatives("berlin_am_lustgarten")["same_city"] is None


# -- validation ---------------------------------------------------------------------------------


def _bench(blocks, refs):
    return Benchmark(blocks, refs, name="t")


def test_duplicate_block_id_is_named():
    with pytest.raises(BenchmarkError, match="duplicate block_id 'x1'"):
        _bench([make_block("x1"), make_block("x1")], make_refs("x1", 4))


@pytest.mark.parametrize("bad", ["a/b", "..", "", "a\\b", ".", "a b", "../x"])
def test_unsafe_block_id_is_named(bad):
    with pytest.raises(BenchmarkError, match="unsafe block_id"):
        _bench([make_block(bad)], make_refs(bad, 4))


def test_negative_to_unknown_block_is_named():
    with pytest.raises(BenchmarkError, match=r"x1.*neg_same_city.*'ghost'"):
        _bench([make_block("x1", neg_same_city="ghost")], make_refs("x1", 4))


def test_reference_of_unknown_block_is_named():
    refs = make_refs("x1", 4) + make_refs("nowhere", 1)
    with pytest.raises(BenchmarkError, match=r"nowhere__000.*unknown block 'nowhere'"):
        _bench([make_block("x1")], refs)


def test_undecodable_image_names_reference():
    refs = make_refs("x1", 4)
    refs[2] = dataclasses.replace(refs[2], image_bytes=b"not an image at all")
    with pytest.raises(BenchmarkError, match="x1__002"):
        _bench([make_block("x1")], refs)


def test_truncated_image_names_reference():
    refs = make_refs("x1", 4)
    refs[1] = dataclasses.replace(refs[1], image_bytes=refs[1].image_bytes[:40])
    with pytest.raises(BenchmarkError, match="x1__001"):
        _bench([make_block("x1")], refs)


def test_block_with_too_few_gallery_images_is_named():
    with pytest.raises(BenchmarkError, match=r"'x2'.*at least 2 gallery"):
        _bench([make_block("x1"), make_block("x2")], make_refs("x1", 4) + make_refs("x2", 2))


_BAD_BLOCK_FIELDS = [
    ({"centroid": (999.0, float("inf"))}, r"block 'x1' field centroid: lat 999\.0 is outside \[-90, 90\]"),
    ({"centroid": (48.8, float("nan"))}, r"block 'x1' field centroid: lon nan is not finite"),
    ({"centroid": (48.8, 181.0)}, r"block 'x1' field centroid: lon 181\.0 is outside \[-180, 180\]"),
    ({"polyline": ((48.8, 2.3), (float("inf"), 2.3))}, r"block 'x1' field polyline\[1\]: lat inf is not finite"),
    ({"polyline": ()}, r"block 'x1' field polyline: has no points"),
    ({"bbox": (48.8, 2.3, 48.9, -200.0)}, r"block 'x1' field bbox \(max corner\): lon -200\.0 is outside"),
    ({"length_m": 0.0}, r"block 'x1' field length_m: 0\.0 is not a finite positive length"),
    ({"length_m": -5.0}, r"block 'x1' field length_m: -5\.0"),
    ({"length_m": float("nan")}, r"block 'x1' field length_m: nan"),
    ({"city": "paris\n"}, r"block 'x1' field city: 'paris\\n' contains control character"),
    ({"country": ""}, r"block 'x1' field country: is empty"),
]


@pytest.mark.parametrize("change, message", _BAD_BLOCK_FIELDS)
def test_bad_block_values_are_named_with_block_and_field(change, message):
    block = dataclasses.replace(make_block("x1"), **change)
    with pytest.raises(BenchmarkError, match=message):
        _bench([block], make_refs("x1", 4))


@pytest.mark.parametrize("change, message", [
    ({"lat": 91.0}, r"reference 'x1__002' \(block 'x1'\) field lat/lon: lat 91\.0 is outside \[-90, 90\]"),
    ({"lon": float("-inf")}, r"reference 'x1__002' \(block 'x1'\) field lat/lon: lon -inf is not finite"),
    ({"lat": None, "lon": 200.0}, r"reference 'x1__002' \(block 'x1'\) field lat/lon: lon 200\.0 is outside"),
    ({"image_id": "img\x00"}, r"reference 'x1__002' \(block 'x1'\) field image_id: .* control character"),
])
def test_bad_reference_values_are_named_with_reference_and_field(change, message):
    refs = make_refs("x1", 4)
    refs[2] = dataclasses.replace(refs[2], **change)
    with pytest.raises(BenchmarkError, match=message):
        _bench([make_block("x1")], refs)


def test_missing_reference_coordinates_are_allowed():
    refs = [dataclasses.replace(r, lat=None, lon=None) for r in make_refs("x1", 4)]
    refs[1] = dataclasses.replace(refs[1], lat=45.0)
    assert _bench([make_block("x1")], refs).references[0].lat is None


def test_every_bad_row_is_listed_and_a_trailing_newline_is_not_a_safe_id():
    blocks = [dataclasses.replace(make_block("x1"), length_m=-1.0), dataclasses.replace(make_block("x2"), centroid=(0, 999))]
    with pytest.raises(BenchmarkError, match=r"2 problem\(s\)") as err:
        _bench(blocks, make_refs("x1", 4) + make_refs("x2", 4))
    assert "'x1' field length_m" in str(err.value) and "'x2' field centroid" in str(err.value)
    with pytest.raises(BenchmarkError, match=re.escape("unsafe block_id 'x1\\n'")):
        _bench([make_block("x1\n")], make_refs("x1\n", 4))


def test_loader_refuses_non_finite_coordinates_in_parquet(tiny_benchmark, tmp_path):
    folder = save_benchmark(tiny_benchmark, tmp_path / "bench")
    path = config_file(folder, "blocks")
    table = pq.read_table(path)
    rows = table.to_pylist()
    rows[1]["centroid"] = [999.0, float("inf")]
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)
    with pytest.raises(BenchmarkError, match=rf"block '{rows[1]['block_id']}' field centroid: lat 999\.0"):
        load_benchmark(folder)


def test_loader_reports_bad_image_in_parquet(tiny_benchmark, tmp_path):
    folder = save_benchmark(tiny_benchmark, tmp_path / "bench")
    path = config_file(folder, "references")
    table = pq.read_table(path)
    rows = table.to_pylist()
    rows[3]["image"] = {"bytes": b"\x00garbage", "path": "x.jpg"}
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)
    bench = load_benchmark(folder)  # images are checked where they are used, or on request:
    with pytest.raises(BenchmarkError, match=rows[3]["reference_id"]):
        load_benchmark(folder, validate_images=True)
    bad = [r for r in bench.references if r.reference_id == rows[3]["reference_id"]][0]
    with pytest.raises(ValueError, match=rows[3]["reference_id"]):
        bad.image()


def test_loader_reports_missing_field(tiny_benchmark, tmp_path):
    folder = save_benchmark(tiny_benchmark, tmp_path / "bench")
    path = config_file(folder, "blocks")
    pq.write_table(pq.read_table(path).drop(["length_m"]), path)
    with pytest.raises(BenchmarkError, match="missing field 'length_m'"):
        load_benchmark(folder)


def test_unknown_block_lookup_is_named(tiny_benchmark):
    with pytest.raises(BenchmarkError, match="unknown block_id 'zzz'"):
        tiny_benchmark.gallery("zzz")


def test_bad_benchmark_argument():
    with pytest.raises(BenchmarkError, match="neither 'demo'"):
        load_benchmark("./no/such/folder")


def test_offline_hub_id_gives_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(BenchmarkError, match="Offline, pass a local benchmark folder or 'demo'"):
        load_benchmark("someone/not-downloaded-benchmark")


def test_import_is_light():
    code = (
        "import sys; import geofidelity_bench, geofidelity_bench.cli; "
        "geofidelity_bench.cli.build_parser(); "
        "print([m for m in ('evaluate','gradio','diffusers','accelerate','torch','transformers','datasets') "
        "if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    # Heavy libraries load only when a command needs them (the import-time budget is 2 s).
    assert out.strip() == "[]", out


# -- issue 29: types and presence of every column, NaN like infinity, every problem at once --------


def _rewrite(path, change):
    table = pq.read_table(path)
    pq.write_table(change(table), path)


def test_a_nan_latitude_is_refused_like_infinity(tiny_benchmark, tmp_path):
    folder = save_benchmark(tiny_benchmark, tmp_path / "bench")
    path = config_file(folder, "references")
    table = pq.read_table(path)
    rows = table.to_pylist()
    rows[2]["lat"] = float("nan")
    rows[4]["lon"] = float("inf")
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)
    with pytest.raises(BenchmarkError) as err:
        load_benchmark(folder)
    text = str(err.value)
    assert f"reference {rows[2]['reference_id']!r} (block {rows[2]['block_id']!r}) field lat/lon: lat nan is not finite" in text
    assert f"reference {rows[4]['reference_id']!r}" in text and "lon inf is not finite" in text
    rows[2]["lat"], rows[4]["lon"] = None, None  # missing (null) stays allowed
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)
    assert load_benchmark(folder).references[2].lat is None


def test_a_renamed_or_missing_column_is_named_with_its_file(tiny_benchmark, tmp_path):
    folder = save_benchmark(tiny_benchmark, tmp_path / "bench")
    refs, blocks = config_file(folder, "references"), config_file(folder, "blocks")
    _rewrite(refs, lambda t: t.rename_columns(["latitude" if n == "lat" else n for n in t.column_names]))
    _rewrite(blocks, lambda t: t.drop(["stratum"]))
    with pytest.raises(BenchmarkError) as err:
        load_benchmark(folder)
    text = str(err.value)
    assert f"{refs}: missing field 'lat', a required column of config 'references'" in text
    assert "it has other columns: 'latitude'" in text
    assert f"{blocks}: missing field 'stratum'" in text and "2 problem(s)" in text


def test_columns_added_to_the_format_later_may_be_absent(tiny_benchmark, tmp_path):
    folder = save_benchmark(tiny_benchmark, tmp_path / "bench")
    _rewrite(config_file(folder, "blocks"), lambda t: t.drop(["way_ids", "neighborhood_source",
                                                               "neg_same_neighborhood_kind"]))
    _rewrite(config_file(folder, "references"), lambda t: t.drop(["image_sha256"]))
    assert load_benchmark(folder).fingerprint == tiny_benchmark.fingerprint


def test_a_number_stored_as_text_is_refused(tiny_benchmark, tmp_path):
    folder = save_benchmark(tiny_benchmark, tmp_path / "bench")
    blocks = config_file(folder, "blocks")

    def as_text(table):
        i = table.column_names.index("length_m")
        return table.set_column(i, "length_m", pa.array([str(v) for v in table["length_m"].to_pylist()]))

    _rewrite(blocks, as_text)
    with pytest.raises(BenchmarkError, match=re.escape(f"{blocks}: column 'length_m' has type string, but the "
                                                       "format stores a number there")):
        load_benchmark(folder)
    # and a block record read elsewhere (a carving table) with text where a number belongs
    from geofidelity_bench.benchmark import _block_record, block_from_record

    rec = _block_record(tiny_benchmark.blocks[0])
    rec["length_m"] = "100.0"
    with pytest.raises(BenchmarkError, match=r"length_m '100\.0' is not a number \(stored as text\)"):
        block_from_record(rec)


def test_integer_and_float_widths_still_load(tiny_benchmark, tmp_path):
    folder = save_benchmark(tiny_benchmark, tmp_path / "bench")

    def narrow(table):
        i = table.column_names.index("length_m")
        return table.set_column(i, "length_m", table["length_m"].cast(pa.float32()))

    _rewrite(config_file(folder, "blocks"), narrow)
    assert len(load_benchmark(folder).blocks) == len(tiny_benchmark.blocks)


def test_every_problem_of_a_benchmark_is_reported_at_once():
    """Today only the first class surfaced: an unknown-block reference hid the control character
    and the bad driving side."""
    blocks = [make_block("x1"), dataclasses.replace(make_block("x2"), driving_side="X"),
              dataclasses.replace(make_block("x3"), stratum="highway", neg_same_city="ghost"), make_block("x1"),
              make_block("x4")]
    refs = make_refs("x1", 4) + make_refs("x2", 4) + make_refs("x3", 4) + make_refs("x4", 2)
    refs[1] = dataclasses.replace(refs[1], image_id="img\x07")
    refs += [dataclasses.replace(refs[0], reference_id="orphan", block_id="nowhere"),
             dataclasses.replace(refs[0], image_bytes=b"")]  # a duplicate reference_id with no data
    with pytest.raises(BenchmarkError) as err:
        _bench(blocks, refs)
    text = str(err.value)
    for expected in ("duplicate block_id 'x1'", "field image_id: 'img\\x07' contains control character",
                     "block 'x2' has driving_side 'X'", "block 'x3' has stratum 'highway'",
                     "block 'x3' field neg_same_city points to unknown block 'ghost'",
                     "duplicate reference_id 'x1__000'", "reference 'orphan' belongs to unknown block 'nowhere'",
                     "block 'x4' has 2 reference image(s), leaving 1 in its gallery"):
        assert expected in text, expected
    assert text.startswith("t: 8 problem(s)")


def test_a_long_list_of_problems_is_cut_at_50_with_a_count():
    blocks = [dataclasses.replace(make_block(f"b{i:02d}"), driving_side="?") for i in range(60)]
    refs = [r for i in range(60) for r in make_refs(f"b{i:02d}", 3)]
    with pytest.raises(BenchmarkError) as err:
        _bench(blocks, refs)
    text = str(err.value)
    assert "60 problem(s)" in text and "... and 10 more" in text
    assert "block 'b49'" in text and "block 'b50'" not in text


def test_every_bad_record_of_a_folder_is_reported_at_once(tiny_benchmark, tmp_path):
    folder = save_benchmark(tiny_benchmark, tmp_path / "bench")
    path = config_file(folder, "blocks")
    table = pq.read_table(path)
    rows = table.to_pylist()
    rows[0]["centroid"], rows[2]["bbox"] = [1.0], None
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)
    with pytest.raises(BenchmarkError) as err:
        load_benchmark(folder)
    text = str(err.value)
    assert "2 problem(s)" in text and repr(rows[0]["block_id"]) in text and repr(rows[2]["block_id"]) in text


# -- the kind of the same-neighborhood negative (docs/benchmark.md sections 1, 8 and 11) ---------------


def _with_kind(bench, kind):
    blocks = [dataclasses.replace(b, neg_same_neighborhood_kind=kind if b.neg_same_neighborhood else None)
              for b in bench.blocks]
    return Benchmark(blocks, bench.references, name=bench.name)


def _old_rule_fingerprint(bench) -> str:
    """The fingerprint as docs/benchmark.md section 1 defined it before the kind column: block records
    without the later fields while unset, then reference ids with their image hashes."""
    h = hashlib.sha256()
    for b in bench.blocks:
        rec = dataclasses.asdict(b)
        rec.update(polyline=[list(p) for p in b.polyline], centroid=list(b.centroid), bbox=list(b.bbox),
                   way_ids=list(b.way_ids))
        for key in ("way_ids", "neighborhood_source", "neg_same_neighborhood_kind"):
            if not rec.get(key):
                rec.pop(key, None)
        h.update(json.dumps(rec, sort_keys=True, default=str).encode())
    for r in bench.references:
        h.update(f"{r.reference_id}|{r.block_id}|".encode() + hashlib.sha256(r.image_bytes).digest())
    return h.hexdigest()


def test_the_same_neighborhood_kind_is_kept_and_enters_the_fingerprint_only_when_set(tiny_benchmark, tmp_path):
    marked = _with_kind(tiny_benchmark, "fallback_nearby")
    assert marked.block("a1").neg_same_neighborhood_kind == "fallback_nearby"
    folder = save_benchmark(marked, tmp_path / "bench")
    loaded = load_benchmark(folder)
    assert loaded.blocks == marked.blocks and loaded.block("a1").neg_same_neighborhood_kind == "fallback_nearby"
    assert pq.read_table(config_file(folder, "blocks")).column("neg_same_neighborhood_kind").to_pylist() == [
        "fallback_nearby", None, None]
    # unset: the fingerprint of before the column (demo, release); set: covered like every block field
    assert tiny_benchmark.fingerprint == _old_rule_fingerprint(tiny_benchmark)
    assert marked.fingerprint == _old_rule_fingerprint(marked) != tiny_benchmark.fingerprint
    assert _with_kind(tiny_benchmark, "same_neighborhood").fingerprint != marked.fingerprint
    # counted apart
    assert loaded.same_neighborhood_negatives() == {"same_neighborhood": [], "fallback_nearby": ["a1"],
                                                    "fallback_far": [], "unknown": []}
    assert loaded.summary()["same_neighborhood_kinds"] == {"same_neighborhood": 0, "fallback_nearby": 1,
                                                           "fallback_far": 0, "unknown": 0}


def test_a_folder_without_the_kind_column_reads_it_as_unknown(tiny_benchmark, tmp_path):
    folder = save_benchmark(_with_kind(tiny_benchmark, "same_neighborhood"), tmp_path / "bench")
    _rewrite(config_file(folder, "blocks"), lambda t: t.drop(["neg_same_neighborhood_kind"]))
    loaded = load_benchmark(folder)
    assert all(b.neg_same_neighborhood_kind is None for b in loaded.blocks)
    assert loaded.fingerprint == tiny_benchmark.fingerprint
    assert loaded.summary()["same_neighborhood_kinds"]["unknown"] == 1
    demo = load_benchmark("demo")  # the embedded demo has no such column: every kind unknown
    n_with = sum(b.neg_same_neighborhood is not None for b in demo.blocks)
    assert demo.summary()["same_neighborhood_kinds"] == {"same_neighborhood": 0, "fallback_nearby": 0,
                                                         "fallback_far": 0, "unknown": n_with}


@pytest.mark.parametrize("kind, block, message", [
    ("nearby", "a1", "field neg_same_neighborhood_kind is 'nearby'; expected one of"),
    ("same_neighborhood", "b1", "field neg_same_neighborhood_kind is 'same_neighborhood' but the block has no "
                                "neg_same_neighborhood"),
])
def test_a_bad_same_neighborhood_kind_is_named(tiny_benchmark, kind, block, message):
    blocks = [dataclasses.replace(b, neg_same_neighborhood_kind=kind) if b.block_id == block else b
              for b in tiny_benchmark.blocks]
    with pytest.raises(BenchmarkError, match=re.escape(f"block {block!r} {message}")):
        Benchmark(blocks, tiny_benchmark.references, name="t")


def test_info_counts_same_neighborhood_negatives_apart(tiny_benchmark, tmp_path, capsys):
    from geofidelity_bench.cli import main

    folder = save_benchmark(_with_kind(tiny_benchmark, "fallback_far"), tmp_path / "bench")
    assert main(["info", "--benchmark", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "same_neighborhood:    1 fallback: a farther block of the same city" in out
    assert main(["info", "--benchmark", str(folder), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["same_neighborhood_kinds"]["fallback_far"] == 1
