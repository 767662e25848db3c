"""Writes a small synthetic copy of the published GeoFidelity-Bench v3.1.0 release layout.

Used by tests/test_release_import.py and tests/test_published_scores.py, and runnable by hand from the
repository root, for an offline walk of the README's "Reproducing the paper" (its values are invented,
so the walk checks the plumbing, not a number)::

    python tests/data/release_fixture/make_fixture.py DIR               # the release layout, no scores
    python tests/data/release_fixture/make_fixture.py DIR --published   # + the release's published scores

``DIR`` must be new or empty (``--overwrite`` replaces a folder this script wrote before, and nothing
else); a marker file, ``SYNTHETIC_FIXTURE.txt``, says what the folder is.
The column names follow the release's README and croissant.json; the values are invented and
the images are tiny generated JPEGs. What it contains on purpose (``EXPECTED`` lists it):

* four blocks in blocks.csv (Paris x2, Tokyo with a non-ASCII id, London with only two
  references, so it is dropped), the release's negative column names plus an unmappable
  ``neg_same_climate`` column; benchmark_v3.json disagrees on one negative and holds one block
  (Rome) that blocks.csv lacks;
* references: one image shared by two blocks, one Windows absolute path from the authors'
  machine, one reference of an unknown block, one whose image file is missing;
* generated images of two models (``sdxl_base``, ``flux_schnell``) under L0, L1, L2, the three
  controls (``C_SHUFFLED_NBHD`` spelled short), plus rows with an unmappable level, an unknown
  block, the dropped block, a one-image ``GPS`` panel and a seed that cannot be verified; the
  seed column is blank for L0 and float-rounded elsewhere, as in v3.1.0 (L2 seeds use ``L3``);
* with ``published=...``, the release's published evaluation outputs as its ``eval/run_eval_v3.py``
  writes them: ``outputs/eval_v3/raw_results.csv`` (the three anchors under L0, both models under
  L0 and L1; the similarity columns POSITIONAL, as the release's evaluator fills them: Oberkampf
  has all four negatives, Rivoli lacks same-driving-side so its random-city value sits in the
  driving-side column, Tokyo has two; rows of the dropped London block, of Rome (not in
  blocks.csv) and of an unmappable level), ``summary_by_method_level.csv`` (the rounded means,
  one value off: ``SUMMARY_WRONG``), its copy ``results/main_scores_by_model_prompt.csv`` and a
  stability file.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import sys
from pathlib import Path

B_RIVOLI = "paris__major__1001__Rue_de_Rivoli"
B_OBERKAMPF = "paris__residential__1002__Rue_Oberkampf"
B_TOKYO = "tokyo__pedestrian__2001__仲見世通り"
B_LONDON = "london__tertiary__3001__Brick_Lane"
B_ROME = "rome__major__4001__Via_del_Corso"

BLOCKS = {
    B_RIVOLI: dict(city="paris", country="FR", driving_side="right", stratum="major", way_id="1001",
                   street_name="Rue de Rivoli", neighborhood="Louvre", highway_tag="primary",
                   centroid=(48.8606, 2.3376), color=(200, 60, 60)),
    B_OBERKAMPF: dict(city="paris", country="FR", driving_side="right", stratum="residential", way_id="1002",
                      street_name="Rue Oberkampf", neighborhood="Folie-Méricourt", highway_tag="residential",
                      centroid=(48.8650, 2.3780), color=(60, 200, 60)),
    B_TOKYO: dict(city="tokyo", country="JP", driving_side="left", stratum="pedestrian", way_id="2001",
                  street_name="仲見世通り", neighborhood="Asakusa", highway_tag="footway",
                  centroid=(35.7119, 139.7964), color=(60, 60, 200)),
    B_LONDON: dict(city="london", country="GB", driving_side="left", stratum="tertiary", way_id="3001",
                   street_name="Brick Lane", neighborhood="Spitalfields", highway_tag="tertiary",
                   centroid=(51.5215, -0.0717), color=(200, 200, 60)),
}

# Negatives as written in blocks.csv (release column names).
NEG_COLUMNS = ("neg_same_neighborhood_diff_block", "neg_same_city_diff_neighborhood",
               "neg_same_driving_side_diff_city", "neg_random_city")
NEGATIVES_CSV = {
    B_RIVOLI: (B_OBERKAMPF, B_OBERKAMPF, "", B_TOKYO),
    # the fixture has no other right-hand city, so Oberkampf's driving-side negative is Tokyo: it has all four
    B_OBERKAMPF: (B_RIVOLI, B_RIVOLI, B_TOKYO, B_LONDON),
    B_TOKYO: ("", "", B_LONDON, B_RIVOLI),
    B_LONDON: ("", "", B_TOKYO, B_OBERKAMPF),
}
# benchmark_v3.json disagrees on one value (Oberkampf's random city) and wins.
NEGATIVES_JSON = {**NEGATIVES_CSV, B_OBERKAMPF: (B_RIVOLI, B_RIVOLI, B_TOKYO, B_TOKYO)}

N_REFS = {B_RIVOLI: 5, B_OBERKAMPF: 4, B_TOKYO: 4, B_LONDON: 2}
MODELS = ("sdxl_base", "flux_schnell")
LEVELS = ("L0", "L1", "L2", "C_WRONG_STREET", "C_SHUFFLED_NBHD", "C_WRONG_STREET_NEIGHBORHOOD")
CONTROL_DONORS = {B_RIVOLI: B_OBERKAMPF, B_OBERKAMPF: B_RIVOLI, B_TOKYO: B_RIVOLI}

EXPECTED = {
    "blocks": [B_RIVOLI, B_OBERKAMPF, B_TOKYO],
    "dropped_block": B_LONDON,
    "json_only_block": B_ROME,
    "references_imported": 5 + 4 + 4,
    "distinct_images": 12,
    "generated_images": len(MODELS) * len(LEVELS) * 3 * 2,
    "unverified_seed": ("flux_schnell", "L1", B_TOKYO, 1),
}


ROLES = ("same_neighborhood", "same_city", "same_driving_side", "random_city")
#: The release's published scores (outputs/eval_v3/raw_results.csv): the columns its evaluator writes.
RAW_SCORE_COLUMNS = ("cos_sim", "dcsf", "mmd", "diversity_gap", "gaas", "retrieval_acc", "mrr", "sim_same_block")
RAW_SIM_COLUMNS = ("sim_neg_same_neighborhood_diff_block", "sim_neg_same_city_diff_neighborhood",
                   "sim_neg_same_driving_side_diff_city", "sim_neg_random_city")
RAW_HEADER = ("method", "level", "block_id", "city", "country", "stratum", "neighborhood", "street_name", "n_gen",
              "n_ref", *RAW_SCORE_COLUMNS, *RAW_SIM_COLUMNS)
PUBLISHED_ANCHORS = ("oracle_nn", "random_global", "random_same_country")
PUBLISHED_LEVELS = ("L0", "L1")
#: (method, level, column) of the one value of summary_by_method_level.csv that disagrees with the raw rows.
SUMMARY_WRONG = ("sdxl_base", "L1", "cos_sim")


def published_roles(bid: str) -> list[str]:
    """The roles of the negatives the release's evaluator scores for ``bid``, in order (benchmark_v3.json's
    negatives that name one of its blocks)."""
    known = set(BLOCKS) | {B_ROME}
    return [role for role, nid in zip(ROLES, NEGATIVES_JSON.get(bid, ("", "", "", ""))) if nid and nid in known]


def published_value(method: str, level: str, bid: str, column: str) -> float:
    """The default published score of a row: a fixed pseudo-random value in [0.05, 0.95] (4 decimals); the
    negatives' similarities are keyed by ROLE (``sim_same_city``), whatever column the release writes them to."""
    digest = hashlib.sha256(f"{method}|{level}|{bid}|{column}".encode()).digest()
    return round(0.05 + 0.9 * int.from_bytes(digest[:4], "big") / 2**32, 4)


def _published_rows(value) -> list[dict]:
    rows = []
    plan = [(m, "L0") for m in PUBLISHED_ANCHORS] + [(m, lv) for m in MODELS for lv in PUBLISHED_LEVELS]
    for method, level in plan:
        for bid in (B_RIVOLI, B_OBERKAMPF, B_TOKYO, B_LONDON, B_ROME):
            if bid == B_ROME and method != "oracle_nn":
                continue
            b = BLOCKS.get(bid, {"city": "rome", "country": "IT", "stratum": "major", "neighborhood": "Trevi",
                                 "street_name": "Via del Corso"})
            row = {"method": method, "level": level, "block_id": bid, "city": b["city"], "country": b["country"],
                   "stratum": b["stratum"], "neighborhood": b["neighborhood"], "street_name": b["street_name"],
                   "n_gen": 4 if method in PUBLISHED_ANCHORS else 2, "n_ref": N_REFS.get(bid, 3) - 1}
            for col in RAW_SCORE_COLUMNS:
                row[col] = value(method, level, bid, col)
            # positional: the i-th negative the block has goes to the i-th column, whatever its role
            for col, role in zip(RAW_SIM_COLUMNS, published_roles(bid)):
                row[col] = value(method, level, bid, f"sim_{role}")
            rows.append(row)
    rows.append({**rows[-1], "method": "sdxl_base", "level": "L9_STYLE", "block_id": B_RIVOLI})
    return rows


def _write_published(root: Path, value) -> None:
    rows = _published_rows(value)
    _write_csv(root / "outputs/eval_v3/raw_results.csv", list(RAW_HEADER), rows)
    numeric = [c for c in RAW_HEADER[8:]]
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["method"], row["level"]), []).append(row)
    summary = []
    for (method, level), part in sorted(groups.items()):
        out = {"method": method, "level": level}
        for col in numeric:
            vals = [float(r[col]) for r in part if r.get(col) not in (None, "")]
            out[col] = round(sum(vals) / len(vals), 4) if vals else ""
        summary.append(out)
    _write_csv(root / "results/main_scores_by_model_prompt.csv", ["method", "level", *numeric], summary)
    wrong = next(r for r in summary if (r["method"], r["level"]) == SUMMARY_WRONG[:2])
    wrong[SUMMARY_WRONG[2]] = round(wrong[SUMMARY_WRONG[2]] + 0.01, 4)
    _write_csv(root / "outputs/eval_v3/summary_by_method_level.csv", ["method", "level", *numeric], summary)
    _write_csv(root / "outputs/stability/rank_stability_L1.csv", ["method", "p_rank1", "rank_lo", "rank_hi"],
               [{"method": m, "p_rank1": 0.5, "rank_lo": 1, "rank_hi": 2} for m in MODELS])


def release_seed(model: str, block_id: str, level: str, k: int) -> int:
    digest = hashlib.sha256(f"{model}/{block_id}/{level}/{k}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)


def _jpeg(color, seed: int, size=(32, 24)) -> bytes:
    from PIL import Image

    img = Image.new("RGB", size, tuple(color))
    px = img.load()
    for i in range(size[0]):
        px[i, (seed * 7 + i) % size[1]] = ((seed * 37) % 256, (seed * 91) % 256, (i * 13) % 256)
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def _write_csv(path: Path, header: list[str], rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)


def _polyline(centroid):
    lat, lon = centroid
    return [[round(lat - 0.002, 6), round(lon, 6)], [round(lat, 6), round(lon, 6)], [round(lat + 0.002, 6), round(lon, 6)]]


def _prompt(block: dict, street: str, hood: str, level: str) -> str:
    city = block["city"].replace("_", " ").title()
    suffix = "Photorealistic, daytime, clear weather."
    if level == "L0":
        return (f"A street-level photograph taken in {city}, {block['country']}. The image shows a typical street scene "
                f"with buildings, roads, and urban environment characteristic of this location. {suffix}")
    where = f"{city}, {block['country']}"
    if level == "L2":
        where += f", near GPS coordinates ({block['centroid'][0]:.4f}, {block['centroid'][1]:.4f})"
    return (f"A street-level photograph taken on {street} in the {hood} district of {where}. The image shows a typical "
            f"street scene with buildings, roads, and urban environment characteristic of this block. {suffix}")


def write_release_fixture(root: str | Path, published=False) -> dict:
    """Writes the fixture under ``root`` and returns ``EXPECTED``.

    ``published``: also write the published evaluation outputs; ``True`` for the values of
    :func:`published_value`, or a function with its signature for other values."""
    root = Path(root)
    if published:
        _write_published(root, published_value if published is True else published)
    # -- blocks.csv --------------------------------------------------------------------------
    header = ["block_id", "city", "country", "driving_side", "stratum", "way_id", "street_name", "neighborhood",
              "highway_tag", "length_m", "centroid_lat", "centroid_lon", "polyline", *NEG_COLUMNS, "neg_same_climate",
              "n_images"]
    rows = []
    for bid, b in BLOCKS.items():
        row = {"block_id": bid, **{k: b[k] for k in ("city", "country", "driving_side", "stratum", "way_id",
                                                      "street_name", "neighborhood", "highway_tag")}}
        row.update(length_m="444.5", centroid_lat=b["centroid"][0], centroid_lon=b["centroid"][1],
                   polyline=json.dumps(_polyline(b["centroid"])), neg_same_climate=B_RIVOLI, n_images=N_REFS[bid])
        row.update(dict(zip(NEG_COLUMNS, NEGATIVES_CSV[bid])))
        rows.append(row)
    _write_csv(root / "metadata/blocks.csv", header, rows)

    # -- reference images ----------------------------------------------------------------------
    ref_rows, json_images = [], {bid: [] for bid in [*BLOCKS, B_ROME]}
    n = 0

    def add_ref(bid, image_id, *, write=True, path_style="relative", color=None):
        nonlocal n
        n += 1
        rel = f"data/raw/mapillary_v3/{bid}/mapillary_{image_id}.jpg"
        if write:
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(_jpeg(color or BLOCKS.get(bid, {"color": (90, 90, 90)})["color"], int(image_id) % 1000))
        shown = rel if path_style == "relative" else "C:\\Users\\author\\geofidelity\\" + rel.replace("/", "\\")
        centroid = BLOCKS.get(bid, {"centroid": (41.9, 12.48)})["centroid"]
        city = BLOCKS.get(bid, {"city": "rome"})["city"]
        country = BLOCKS.get(bid, {"country": "IT"})["country"]
        ref_rows.append({
            "reference_id": f"ref_{n:05d}", "image_id": image_id, "image_path": shown, "block_id": bid,
            "city": city, "country": country, "lat": centroid[0] + n * 1e-5, "lon": centroid[1],
            "captured_at_utc_ms": 1_650_000_000_000 + n,
            "image_url": f"https://huggingface.co/datasets/moss-vector-714/GeoFidelity-Bench/resolve/main/{rel}",
            "mapillary_url": f"https://www.mapillary.com/app/?pKey={image_id}",
        })
        json_images[bid].append({
            "image_id": image_id, "image_path": rel, "lat": centroid[0] + n * 1e-5, "lon": centroid[1],
            "captured_at_utc_ms": 1_650_000_000_000 + n, "compass_angle": float(n * 10 % 360),
            "sun_elev_deg": 35.5, "h3_r9_cell": "891fb466257ffff", "camera_type": "perspective",
            "mapillary_quality": 0.75,
        })

    base = {B_RIVOLI: 100000000000100, B_OBERKAMPF: 100000000000200, B_TOKYO: 100000000000300,
            B_LONDON: 100000000000400}
    for bid, count in N_REFS.items():
        for i in range(count):
            style = "windows" if (bid == B_TOKYO and i == 0) else "relative"
            add_ref(bid, str(base[bid] + i), path_style=style)
    # The last Rivoli image is also assigned to Oberkampf (shared by two nearby blocks).
    shared = str(base[B_RIVOLI] + 4)
    add_ref(B_OBERKAMPF, shared, color=BLOCKS[B_RIVOLI]["color"])
    # Oberkampf has one more row whose file is missing, and Rome is not in blocks.csv.
    add_ref(B_OBERKAMPF, "100000000000299", write=False)
    add_ref(B_ROME, "100000000000500")
    # Oberkampf keeps 4 usable references: 3 own + the shared one (the 4th own one is dropped below).
    ref_rows = [r for r in ref_rows if r["image_id"] != str(base[B_OBERKAMPF] + 3)]
    json_images[B_OBERKAMPF] = [j for j in json_images[B_OBERKAMPF] if j["image_id"] != str(base[B_OBERKAMPF] + 3)]
    _write_csv(root / "metadata/reference_images.csv", list(ref_rows[0]), ref_rows)

    # -- benchmark_v3.json ---------------------------------------------------------------------
    json_blocks = []
    for bid, b in [*BLOCKS.items(), (B_ROME, dict(city="rome", country="IT", driving_side="right", stratum="major",
                                                   way_id="4001", street_name="Via del Corso", neighborhood="Trevi",
                                                   highway_tag="secondary", centroid=(41.9, 12.48)))]:
        negs = NEGATIVES_JSON.get(bid, ("", "", "", ""))
        json_blocks.append({
            "block_id": bid, "city": b["city"], "country": b["country"], "driving_side": b["driving_side"],
            "stratum": b["stratum"], "way_id": b["way_id"], "street_name": b["street_name"],
            "neighborhood": b["neighborhood"], "highway_tag": b["highway_tag"], "length_m": 444.5,
            "centroid": list(b["centroid"]), "bbox": [b["centroid"][0] - 0.002, b["centroid"][1],
                                                       b["centroid"][0] + 0.002, b["centroid"][1]],
            "polyline": _polyline(b["centroid"]), "h3_r9_cells": [], "images": json_images[bid],
            **{col: (v or None) for col, v in zip(NEG_COLUMNS, negs)}, "source": "mapillary_v3",
        })
    bench_json = {"name": "GeoFidelity-Bench", "version": "3.1.0", "num_blocks": len(json_blocks),
                  "neg_levels": ["same_block_diff_images", "same_neighborhood_diff_block", "same_city_diff_neighborhood",
                                 "same_driving_side_diff_city", "random_city"],
                  "prompt_levels": ["L0", "L1", "L2", "GPS_ONLY"], "blocks": json_blocks}
    path = root / "data/processed/v3/benchmark_v3.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(bench_json, indent=2, ensure_ascii=False), encoding="utf-8")

    # -- prompt controls -------------------------------------------------------------------------
    ctrl_rows = []
    for bid in (B_RIVOLI, B_OBERKAMPF, B_TOKYO):
        donor = CONTROL_DONORS[bid]
        scope = "same_city" if BLOCKS[donor]["city"] == BLOCKS[bid]["city"] else "global_fallback"
        for level in ("C_WRONG_STREET", "C_SHUFFLED_NEIGHBORHOOD", "C_WRONG_STREET_NEIGHBORHOOD"):
            ctrl_rows.append({
                "block_id": bid, "city": BLOCKS[bid]["city"], "stratum": BLOCKS[bid]["stratum"], "level": level,
                "target_street_name": BLOCKS[bid]["street_name"], "target_neighborhood": BLOCKS[bid]["neighborhood"],
                "control_street_name": BLOCKS[donor]["street_name"] if "STREET" in level else BLOCKS[bid]["street_name"],
                "control_neighborhood": BLOCKS[donor]["neighborhood"] if "NEIGHBORHOOD" in level else BLOCKS[bid]["neighborhood"],
                "source_block_id": donor if level != "C_WRONG_STREET_NEIGHBORHOOD" else "",
                "selection_scope": scope,
                "street_source_block_id": donor if level == "C_WRONG_STREET_NEIGHBORHOOD" else "",
                "neighborhood_source_block_id": donor if level == "C_WRONG_STREET_NEIGHBORHOOD" else "",
            })
    _write_csv(root / "metadata/prompt_controls.csv", list(ctrl_rows[0]), ctrl_rows)

    # -- generated images ------------------------------------------------------------------------
    gen_rows = []

    def add_gen(model, level, bid, k, *, seed="auto", control=True):
        rel = f"generations_v3/{model}/{level}/{bid}/{k:02d}.jpg"
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(_jpeg((30 * len(model) % 256, 20 * len(level) % 256, 120), k + len(bid)))
        block = BLOCKS.get(bid, {"city": "rome", "country": "IT", "street_name": "Via del Corso",
                                 "neighborhood": "Trevi", "centroid": (41.9, 12.48)})
        donor = BLOCKS.get(CONTROL_DONORS.get(bid, ""), block)
        street = donor["street_name"] if level in ("C_WRONG_STREET", "C_WRONG_STREET_NEIGHBORHOOD") else block["street_name"]
        hood = donor["neighborhood"] if level in ("C_SHUFFLED_NBHD", "C_WRONG_STREET_NEIGHBORHOOD") else block["neighborhood"]
        meta = {"level": level}
        if level.startswith("C_") and control and bid in CONTROL_DONORS:
            d = CONTROL_DONORS[bid]
            meta["control"] = ({"street_source_block_id": d, "neighborhood_source_block_id": d}
                               if level == "C_WRONG_STREET_NEIGHBORHOOD" else {"source_block_id": d})
        if seed == "auto":
            seed_level = "L3" if level == "L2" else level
            seed = "" if level == "L0" else repr(float(release_seed(model, bid, seed_level, k)))
        gen_rows.append({
            "model": model, "block_id": bid, "city": block["city"], "country": block["country"], "level": level,
            "sample_index": k, "image_path": rel, "seed": seed,
            "prompt": _prompt(block, street, hood, level if level in ("L0", "L2") else "L1"),
            "prompt_meta": json.dumps(meta, ensure_ascii=False),
            "image_origin": "v2_city_pool" if level == "L0" else "v3_generation",
            "metadata_source": "generations_v3/manifest.csv",
            "image_url": f"https://huggingface.co/datasets/moss-vector-714/GeoFidelity-Bench/resolve/main/{rel}",
        })

    for model in MODELS:
        for level in LEVELS:
            for bid in (B_RIVOLI, B_OBERKAMPF, B_TOKYO):
                for k in (0, 1):
                    if (model, level, bid, k) == EXPECTED["unverified_seed"]:
                        add_gen(model, level, bid, k, seed="12.5")
                    else:
                        # flux's shuffled-neighborhood rows carry no control in prompt_meta:
                        # the donor then comes from prompt_controls.csv.
                        add_gen(model, level, bid, k, control=not (model == "flux_schnell" and level == "C_SHUFFLED_NBHD"))
    for k in (0, 1):
        add_gen("sdxl_base", "L9_STYLE", B_RIVOLI, k)   # a level with no equivalent
        add_gen("sdxl_base", "L1", B_ROME, k)           # a block not in blocks.csv
        add_gen("sdxl_base", "L1", B_LONDON, k)         # a block dropped for too few references
    add_gen("flux_schnell", "GPS", B_RIVOLI, 0)          # a one-image panel
    _write_csv(root / "metadata/generated_images.csv", list(gen_rows[0]), gen_rows)
    return EXPECTED


#: Written by :func:`main` into the folder: says the release is synthetic, and lets ``--overwrite`` tell
#: a folder of this script's from anything else (a real download of the release).
MARKER = "SYNTHETIC_FIXTURE.txt"


def main(argv: list[str] | None = None) -> int:
    import argparse
    import shutil

    parser = argparse.ArgumentParser(
        prog="python tests/data/release_fixture/make_fixture.py",
        description=("Writes a small synthetic copy of the GeoFidelity-Bench v3.1.0 release layout (invented values, "
                     "tiny JPEGs) for an offline walk of `geofidelity-bench import-release`, `report` and `compare`."),
    )
    parser.add_argument("out", help="the folder to write (new or empty)")
    parser.add_argument("--published", action="store_true",
                        help="also write the release's published scores (outputs/eval_v3/raw_results.csv and its "
                             "summaries), which import-release converts to OUT/published")
    parser.add_argument("--overwrite", action="store_true",
                        help=f"replace a folder this script wrote before (one holding {MARKER}); never anything else")
    args = parser.parse_args(argv)
    target = Path(args.out)
    if target.exists() and not target.is_dir():
        parser.error(f"{target} is a file, not a folder")
    if target.is_dir() and any(target.iterdir()):
        if not args.overwrite:
            parser.error(f"{target} is not empty; name a new folder (or pass --overwrite to replace a fixture "
                         f"written by this script)")
        if not (target / MARKER).is_file():
            parser.error(f"{target} has no {MARKER}: it was not written by this script, so --overwrite leaves it alone")
        shutil.rmtree(target)
    write_release_fixture(target, published=args.published)
    (target / MARKER).write_text(
        "A synthetic copy of the GeoFidelity-Bench v3.1.0 release layout, written by "
        "tests/data/release_fixture/make_fixture.py: its blocks, photos, generated images and scores are invented. "
        "It is not the release.\n", encoding="utf-8")
    what = "with" if args.published else "without"
    print(f"wrote a synthetic release ({what} published scores; invented values) to {target}")
    print(f"next: geofidelity-bench import-release {target} --out DIR (README.md, \"Reproducing the paper\")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
