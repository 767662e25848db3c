"""The importer: release tables -> a canonical :class:`~geofidelity_bench.benchmark.Benchmark` and generation panels.

One ``_Importer`` holds the state of one import (the issues found so far, the release -> our block id
map, the dropped blocks and why); :func:`geofidelity_bench.release_import.import_release` drives it.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Mapping

from ..benchmark import (
    NEGATIVE_FIELDS,
    STRATA,
    Benchmark,
    Block,
    ReferenceImage,
    is_safe_id,
)
from ..geo import polyline_length_m
from .files import _copy, _decode_check, _read_table, _relocate, _Table, _to_jpeg, _write_csv
from .layout import (
    _BLOCK_COLUMNS,
    _CONTROL_COLUMNS,
    _GENERATED_COLUMNS,
    _REFERENCE_COLUMNS,
    BENCHMARK_JSON,
    BLOCKS_CSV,
    CONTROLS_CSV,
    DEFAULT_LICENSE,
    GENERATED_CSV,
    GENERATION_DIR,
    MIN_PANEL_IMAGES,
    MIN_REFERENCES,
    REFERENCE_DIR,
    REFERENCES_CSV,
    RELEASE_INDEX_FILE,
    RELEASE_VERSION,
)
from ..record_checks import reserved_method_problem
from .names import _DRIVING_SIDES, canonical_block_id, map_level, map_model, map_negative_column, release_seed
from .parsers import _BadValue, _f, _i, _json_value, _pairs, _s
from .report import ImportIssue, ReleaseImportError

#: The largest ``sample_index`` imported (it names the file ``{k:02d}.jpg``); a larger one is an issue.
MAX_SAMPLE_INDEX = 9999


class _Importer:
    def __init__(self, root: Path, out: Path, *, keep_model_names: bool, hardlink: bool):
        self.root, self.out = root, out
        self.keep_model_names, self.hardlink = keep_model_names, hardlink
        self.issues: list[ImportIssue] = []
        self.id_map: dict[str, str] = {}  # release block id -> ours (accepted blocks only)
        self.dropped: dict[str, str] = {}  # release block id -> why it was dropped
        self.negative_columns: dict[str, str] = {}
        self.json_blocks: dict[str, dict[str, Any]] = {}
        self.json_images: dict[tuple[str, str], dict[str, Any]] = {}
        self.version: str | None = None
        self._controls: dict[tuple[str, str], dict[str, str | None]] = {}
        self._tables: dict[str, _Table] = {}

    def table(self, rel: str, columns: Mapping[str, Mapping]) -> _Table:
        """The CSV table ``rel`` of the release, read once (:meth:`read_tables` reads them all first)."""
        if rel not in self._tables:
            self._tables[rel] = _read_table(self.root, rel, columns["required"], columns["optional"])
        return self._tables[rel]

    def read_tables(self, generations: bool) -> None:
        """Reads every CSV table the import uses before anything is written: a table that cannot be read
        (not UTF-8, a field over the csv module's limit, a missing column) stops the import with nothing written."""
        self.table(BLOCKS_CSV, _BLOCK_COLUMNS)
        self.table(REFERENCES_CSV, _REFERENCE_COLUMNS)
        if generations and (self.root / GENERATED_CSV).is_file():
            self.table(GENERATED_CSV, _GENERATED_COLUMNS)
            if (self.root / CONTROLS_CSV).is_file():
                self.table(CONTROLS_CSV, _CONTROL_COLUMNS)

    def issue(self, kind: str, file: str, line: int | None, action: str, reason: str, **values: Any) -> None:
        self.issues.append(ImportIssue(kind, file, line, action, reason, {k: v for k, v in values.items() if v is not None}))

    # -- benchmark_v3.json ----------------------------------------------------------------------
    def read_json(self) -> None:
        path = self.root / BENCHMARK_JSON
        if not path.is_file():
            self.issue("missing_optional_file", BENCHMARK_JSON, None, "not used",
                       "not found; capture metadata beyond reference_images.csv and the JSON negatives are unavailable")
            return
        try:
            payload = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as err:
            raise ReleaseImportError(f"{BENCHMARK_JSON}: not valid JSON ({err})") from None
        blocks = payload.get("blocks") if isinstance(payload, dict) else None
        if not isinstance(blocks, list):
            raise ReleaseImportError(f"{BENCHMARK_JSON}: expected an object with a 'blocks' list")
        self.version = _s(payload.get("version"))
        for b in blocks:
            if not isinstance(b, dict) or not _s(b.get("block_id")):
                continue
            bid = str(b["block_id"])
            self.json_blocks[bid] = b
            for img in b.get("images") or []:
                if isinstance(img, dict) and _s(img.get("image_id")):
                    self.json_images[(bid, str(img["image_id"]))] = img

    # -- blocks ----------------------------------------------------------------------------------
    def read_blocks(self) -> dict[str, dict[str, Any]]:
        table = self.table(BLOCKS_CSV, _BLOCK_COLUMNS)
        neg_cols = [h for h in table.header if h.lower().startswith("neg_")]
        for col in neg_cols:
            role = map_negative_column(col)
            if role is None:
                self.issue("unmapped_negative_column", BLOCKS_CSV, None, "column ignored",
                           f"column {col!r} has no equivalent among {list(NEGATIVE_FIELDS.values())} "
                           "(see NEGATIVE_ALIASES in geofidelity_bench.release_import)", column=col)
            else:
                self.negative_columns[col] = NEGATIVE_FIELDS[role]
        blocks: dict[str, dict[str, Any]] = {}
        for line, row in table.rows:
            rid = _s(table.get(row, "block_id"))
            if rid is None:
                self.issue("bad_value", BLOCKS_CSV, line, "skipped", "empty block_id")
                continue
            if rid in blocks:
                self.issue("duplicate", BLOCKS_CSV, line, "skipped", f"block {rid!r} appears again", block_id=rid)
                continue
            try:
                rec = self._block_record(table, row, rid, line, neg_cols)
            except _BadValue as err:
                self.dropped[rid] = str(err)
                self.issue("bad_value", BLOCKS_CSV, line, "block dropped", f"block {rid!r}: {err}", block_id=rid)
                continue
            blocks[rid] = rec
        for rid in sorted(set(self.json_blocks) - set(blocks) - set(self.dropped)):
            self.issue("block_not_in_blocks_csv", BENCHMARK_JSON, None, "skipped",
                       f"block {rid!r} is in {BENCHMARK_JSON} but not in {BLOCKS_CSV}", block_id=rid)
        return blocks

    def _block_record(self, table: _Table, row, rid: str, line: int, neg_cols: list[str]) -> dict[str, Any]:
        jb = self.json_blocks.get(rid, {})
        city = _s(table.get(row, "city"))
        country = _s(table.get(row, "country"))
        if city is None or country is None:
            raise _BadValue("empty city or country")
        side_raw = _s(table.get(row, "driving_side")) or ""
        side = _DRIVING_SIDES.get(side_raw.lower())
        if side is None:
            raise _BadValue(f"driving_side={side_raw!r} is not L/R/left/right")
        lat, lon = _f(table.get(row, "centroid_lat"), "centroid_lat"), _f(table.get(row, "centroid_lon"), "centroid_lon")
        if lat is None or lon is None:
            raise _BadValue("empty centroid_lat/centroid_lon")
        notes = []
        polyline = None
        try:
            polyline = _pairs(table.get(row, "polyline"), "polyline")
        except _BadValue as err:
            self.issue("bad_value", BLOCKS_CSV, line, "taken from the JSON or the centroid", f"block {rid!r}: {err}", block_id=rid)
        if polyline is None and jb.get("polyline"):
            try:
                polyline = _pairs(jb["polyline"], "polyline")
            except _BadValue:
                polyline = None
        if polyline is None:
            polyline = [(lat, lon)]
            self.issue("missing_value", BLOCKS_CSV, line, "set to the centroid",
                       f"block {rid!r} has no usable polyline", block_id=rid)
        bbox = None
        for source in (table.get(row, "bbox"), jb.get("bbox")):
            try:
                data = _json_value(source, "bbox")
            except _BadValue:
                data = None
            if isinstance(data, list) and len(data) == 4:
                try:
                    bbox = tuple(float(v) for v in data)
                    break
                except (TypeError, ValueError):
                    bbox = None
        if bbox is None:
            lats, lons = [p[0] for p in polyline], [p[1] for p in polyline]
            bbox = (min(lats), min(lons), max(lats), max(lons))
        length = _f(table.get(row, "length_m"), "length_m")
        if length is None:
            length = _f(jb.get("length_m"), "length_m")
        if length is None:
            length = polyline_length_m(polyline)
            self.issue("missing_value", BLOCKS_CSV, line, "computed from the polyline",
                       f"block {rid!r} has no length_m", block_id=rid)
        stratum = _s(table.get(row, "stratum"))
        if stratum is not None and stratum.lower() not in STRATA:
            self.issue("bad_value", BLOCKS_CSV, line, "set to null",
                       f"block {rid!r}: stratum {stratum!r} is not one of {STRATA}", block_id=rid)
            notes.append(f"release stratum: {stratum}")
            stratum = None
        way_id = None
        try:
            way_id = _i(table.get(row, "way_id"), "way_id")
        except _BadValue as err:
            self.issue("bad_value", BLOCKS_CSV, line, "set to null", f"block {rid!r}: {err}", block_id=rid)
        negs: dict[str, str | None] = {}
        for col in neg_cols:
            fld = self.negative_columns.get(col)
            value = _s(row.get(col))
            if fld is None or value is None:
                continue
            if negs.get(fld) not in (None, value):
                self.issue("negative_conflict", BLOCKS_CSV, line, f"kept {negs[fld]!r}",
                           f"block {rid!r}: two columns give {fld} = {negs[fld]!r} and {value!r}", block_id=rid)
                continue
            negs[fld] = value
        for key, value in jb.items():
            if not key.lower().startswith("neg_"):
                continue
            role = map_negative_column(key)
            value = _s(value)
            if role is None or value is None:
                continue
            fld = NEGATIVE_FIELDS[role]
            if negs.get(fld) is not None and negs[fld] != value:
                self.issue("negative_conflict", BLOCKS_CSV, line, f"kept {value!r} from {BENCHMARK_JSON}",
                           f"block {rid!r}: {fld} is {negs[fld]!r} in {BLOCKS_CSV} but {value!r} in {BENCHMARK_JSON}",
                           block_id=rid)
            negs[fld] = value
        return {
            "line": line,
            "block_id": rid,
            "city": city,
            "country": country.upper(),
            "driving_side": side,
            "stratum": stratum.lower() if stratum else None,
            "way_id": way_id,
            "street_name": _s(table.get(row, "street_name")),
            "neighborhood": _s(table.get(row, "neighborhood")),
            "highway_tag": _s(table.get(row, "highway_tag")),
            "length_m": float(length),
            "polyline": tuple(polyline),
            "centroid": (lat, lon),
            "bbox": bbox,
            "negatives": negs,
            "notes": notes,
        }

    # -- references ------------------------------------------------------------------------------
    def read_references(self, blocks: Mapping[str, dict[str, Any]]) -> dict[str, list[ReferenceImage]]:
        table = self.table(REFERENCES_CSV, _REFERENCE_COLUMNS)
        per_block: dict[str, list[ReferenceImage]] = defaultdict(list)
        seen: set[str] = set()
        listed: set[tuple[str, str]] = set()
        for line, row in table.rows:
            ref_id, image_id, rid = (_s(table.get(row, n)) for n in ("reference_id", "image_id", "block_id"))
            if ref_id is None or image_id is None or rid is None:
                self.issue("bad_value", REFERENCES_CSV, line, "skipped", "empty reference_id, image_id or block_id",
                           reference_id=ref_id, image_id=image_id, block_id=rid)
                continue
            listed.add((rid, image_id))
            if rid not in blocks:
                why = f"block {rid!r} was dropped: {self.dropped[rid]}" if rid in self.dropped else (
                    f"block {rid!r} is not in {BLOCKS_CSV}")
                self.issue("unknown_block", REFERENCES_CSV, line, "skipped", f"reference {ref_id!r}: {why}",
                           reference_id=ref_id, block_id=rid)
                continue
            if ref_id in seen:
                self.issue("duplicate", REFERENCES_CSV, line, "skipped", f"reference_id {ref_id!r} appears again",
                           reference_id=ref_id)
                continue
            block = blocks[rid]
            for name in ("city", "country"):
                value = _s(table.get(row, name))
                if value is not None and value.lower() != str(block[name]).lower():
                    self.issue("block_mismatch", REFERENCES_CSV, line, "kept",
                               f"reference {ref_id!r}: {name} {value!r} differs from its block's {block[name]!r}",
                               reference_id=ref_id)
            path, outside = _relocate(
                self.root,
                _s(table.get(row, "image_path")),
                [f"{REFERENCE_DIR}/{rid}/mapillary_{image_id}.jpg", f"{REFERENCE_DIR}/{rid}/{image_id}.jpg"],
            )
            if path is None and outside:
                self.issue("path_outside_release", REFERENCES_CSV, line, "skipped", f"reference {ref_id!r}: {outside}",
                           reference_id=ref_id, image_path=_s(table.get(row, "image_path")))
                continue
            if path is None:
                self.issue("missing_image", REFERENCES_CSV, line, "skipped",
                           f"reference {ref_id!r}: image file not found ({_s(table.get(row, 'image_path')) or 'no image_path'})",
                           reference_id=ref_id, image_path=_s(table.get(row, "image_path")))
                continue
            data = path.read_bytes()
            bad = _decode_check(data)
            if bad:
                self.issue("undecodable_image", REFERENCES_CSV, line, "skipped",
                           f"reference {ref_id!r}: {path.relative_to(self.root) if path.is_relative_to(self.root) else path} "
                           f"is not a decodable image ({bad})", reference_id=ref_id)
                continue
            img = self.json_images.get((rid, image_id), {})
            try:
                ref = ReferenceImage(
                    reference_id=ref_id,
                    image_id=image_id,
                    block_id=rid,  # rewritten to our id below
                    lat=_first(_f(table.get(row, "lat"), "lat"), _f(img.get("lat"), "lat")),
                    lon=_first(_f(table.get(row, "lon"), "lon"), _f(img.get("lon"), "lon")),
                    captured_at=_first(_i(table.get(row, "captured_at"), "captured_at_utc_ms"),
                                       _i(img.get("captured_at_utc_ms"), "captured_at_utc_ms")),
                    compass_angle=_first(_f(table.get(row, "compass_angle"), "compass_angle"),
                                         _f(img.get("compass_angle"), "compass_angle")),
                    sun_elevation_deg=_first(_f(table.get(row, "sun_elevation_deg"), "sun_elevation_deg"),
                                             _f(img.get("sun_elev_deg"), "sun_elev_deg")),
                    camera_type=_first(_s(table.get(row, "camera_type")), _s(img.get("camera_type"))),
                    quality_score=_first(_f(table.get(row, "quality_score"), "quality_score"),
                                         _f(img.get("mapillary_quality"), "mapillary_quality")),
                    source_url=_s(table.get(row, "source_url")),
                    license=_s(table.get(row, "license")) or DEFAULT_LICENSE,
                    attribution=_s(table.get(row, "attribution")) or f"Mapillary contributors (image {image_id})",
                    image_bytes=data,
                )
            except _BadValue as err:
                self.issue("bad_value", REFERENCES_CSV, line, "skipped", f"reference {ref_id!r}: {err}", reference_id=ref_id)
                continue
            seen.add(ref_id)
            per_block[rid].append(ref)
        for key in sorted(set(self.json_images) - listed):
            if key[0] in blocks:
                self.issue("reference_not_in_reference_csv", BENCHMARK_JSON, None, "skipped",
                           f"image {key[1]!r} of block {key[0]!r} is in {BENCHMARK_JSON} but not in {REFERENCES_CSV} "
                           "(the authoritative index)", block_id=key[0], image_id=key[1])
        return per_block

    # -- assembling the benchmark -----------------------------------------------------------------
    def assemble(self, blocks: dict[str, dict[str, Any]], refs: dict[str, list[ReferenceImage]]) -> Benchmark:
        for rid in sorted(blocks):
            n = len(refs.get(rid, []))
            if n < MIN_REFERENCES:
                self.dropped[rid] = f"{n} usable reference image(s); a block needs at least {MIN_REFERENCES}"
                self.issue("too_few_references", BLOCKS_CSV, blocks[rid]["line"], "block dropped",
                           f"block {rid!r}: {self.dropped[rid]}", block_id=rid,
                           reference_ids=[r.reference_id for r in refs.get(rid, [])] or None)
                del blocks[rid]
        if not blocks:
            raise ReleaseImportError(f"{self.root}: no block could be imported (see the issues above)")
        used: dict[str, str] = {}
        for rid in sorted(blocks):
            ours = canonical_block_id(rid)
            if ours in used:
                raise ReleaseImportError(f"{BLOCKS_CSV}: block ids {used[ours]!r} and {rid!r} both map to {ours!r}")
            used[ours] = rid
            self.id_map[rid] = ours
        out_blocks = []
        for rid, rec in sorted(blocks.items()):
            negs = {}
            for fld in NEGATIVE_FIELDS.values():
                target = rec["negatives"].get(fld)
                if target is None:
                    negs[fld] = None
                elif target == rid:
                    self.issue("self_negative", BLOCKS_CSV, rec["line"], "set to null",
                               f"block {rid!r}: {fld} points to the block itself", block_id=rid)
                    negs[fld] = None
                elif target not in self.id_map:
                    why = f"was dropped: {self.dropped[target]}" if target in self.dropped else "is not in the release"
                    self.issue("dangling_negative", BLOCKS_CSV, rec["line"], "set to null",
                               f"block {rid!r}: {fld} = {target!r}, which {why}", block_id=rid, negative=target)
                    negs[fld] = None
                else:
                    negs[fld] = self.id_map[target]
            notes = list(rec["notes"])
            if self.id_map[rid] != rid:
                notes.insert(0, f"release block_id: {rid}")
            out_blocks.append(
                Block(
                    block_id=self.id_map[rid], city=rec["city"], country=rec["country"],
                    driving_side=rec["driving_side"], stratum=rec["stratum"], way_id=rec["way_id"],
                    street_name=rec["street_name"], neighborhood=rec["neighborhood"],
                    highway_tag=rec["highway_tag"], length_m=rec["length_m"], polyline=rec["polyline"],
                    centroid=rec["centroid"], bbox=rec["bbox"], notes="; ".join(notes), **negs,
                )
            )
        out_refs = []
        for rid in blocks:
            for ref in refs[rid]:
                out_refs.append(_replace_block(ref, self.id_map[rid]))
        version = self.version or RELEASE_VERSION
        return Benchmark(out_blocks, out_refs, name=f"GeoFidelity-Bench v{version} (imported)", source=str(self.root))

    # -- generations -----------------------------------------------------------------------------
    def read_controls(self) -> dict[tuple[str, str], dict[str, str]]:
        if not (self.root / CONTROLS_CSV).is_file():
            self.issue("missing_optional_file", CONTROLS_CSV, None, "not used",
                       "not found; control donors come from prompt_meta only")
            return {}
        table = self.table(CONTROLS_CSV, _CONTROL_COLUMNS)
        out = {}
        for line, row in table.rows:
            rid, cond = _s(table.get(row, "block_id")), map_level(_s(table.get(row, "level")))
            if rid is None or cond is None:
                self.issue("unmapped_level" if rid else "bad_value", CONTROLS_CSV, line, "skipped",
                           f"control row with block {rid!r} and level {_s(table.get(row, 'level'))!r} cannot be mapped")
                continue
            out[(rid, cond)] = {k: _s(table.get(row, k)) for k in _CONTROL_COLUMNS["optional"]}
        return out

    def import_generations(self, bench: Benchmark, gen_out: Path) -> dict[str, Any]:
        from ..manifest_format import file_sha256, panel_relpath, write_manifest

        table = self.table(GENERATED_CSV, _GENERATED_COLUMNS)
        self._controls = self.read_controls()
        entries: dict[tuple[str, str, str, int], dict[str, Any]] = {}
        model_map: dict[str, str] = {}
        level_map: dict[str, str] = {}
        for line, row in table.rows:
            model_raw, rid, level_raw = (_s(table.get(row, n)) for n in ("model", "block_id", "level"))
            k_raw = table.get(row, "sample_index")
            vals = dict(model=model_raw, level=level_raw, block_id=rid, sample_index=_s(k_raw))
            if model_raw is None or rid is None or level_raw is None:
                self.issue("bad_value", GENERATED_CSV, line, "skipped", "empty model, block_id or level", **vals)
                continue
            model = map_model(model_raw, self.keep_model_names)
            if not is_safe_id(model):
                self.issue("unsafe_model", GENERATED_CSV, line, "skipped",
                           f"model name {model_raw!r} is not usable as a folder name", **vals)
                continue
            if reserved_method_problem(model):
                self.issue("reserved_model", GENERATED_CSV, line, "skipped", reserved_method_problem(model), **vals)
                continue
            cond = map_level(level_raw)
            if cond is None:
                self.issue("unmapped_level", GENERATED_CSV, line, "skipped",
                           f"level {level_raw!r} has no equivalent among our conditions "
                           "(see LEVEL_ALIASES in geofidelity_bench.release_import)", **vals)
                continue
            if rid not in self.id_map:
                why = f"block {rid!r} was dropped: {self.dropped[rid]}" if rid in self.dropped else (
                    f"block {rid!r} is not in {BLOCKS_CSV}")
                self.issue("unknown_block", GENERATED_CSV, line, "skipped", why, **vals)
                continue
            try:
                k = _i(k_raw, "sample_index")
            except _BadValue as err:
                self.issue("bad_value", GENERATED_CSV, line, "skipped", str(err), **vals)
                continue
            if k is None or k < 0:
                self.issue("bad_value", GENERATED_CSV, line, "skipped", f"sample_index {k_raw!r} is not >= 0", **vals)
                continue
            if k > MAX_SAMPLE_INDEX:  # it names a file ({k:02d}.jpg): 1e300 would be a 301-digit name
                self.issue("bad_value", GENERATED_CSV, line, "skipped",
                           f"sample_index {k_raw!r} is over {MAX_SAMPLE_INDEX}", **vals)
                continue
            key = (model, cond, self.id_map[rid], k)
            if key in entries:
                self.issue("duplicate", GENERATED_CSV, line, "skipped",
                           f"image {panel_relpath(*key)} is already given by line {entries[key]['line']}", **vals)
                continue
            path, outside = _relocate(
                self.root,
                _s(table.get(row, "image_path")),
                [f"{GENERATION_DIR}/{model_raw}/{level_raw}/{rid}/{k:02d}.jpg"],
            )
            if path is None and outside:
                self.issue("path_outside_release", GENERATED_CSV, line, "skipped", outside,
                           image_path=_s(table.get(row, "image_path")), **vals)
                continue
            if path is None:
                self.issue("missing_image", GENERATED_CSV, line, "skipped",
                           f"image file not found ({_s(table.get(row, 'image_path')) or 'no image_path'})", **vals)
                continue
            model_map[model_raw] = model
            level_map[level_raw] = cond
            entries[key] = {"line": line, "row": row, "path": path, "model_raw": model_raw, "level_raw": level_raw,
                            "rid": rid, "k": k}
        panels: dict[tuple[str, str, str], list[tuple]] = defaultdict(list)
        for key in entries:
            panels[key[:3]].append(key)
        seeds = Counter()
        manifest_rows, index_rows = [], []
        gen_out.mkdir(parents=True, exist_ok=True)
        for panel, keys in sorted(panels.items()):
            if len(keys) < MIN_PANEL_IMAGES:
                for key in keys:
                    e = entries[key]
                    self.issue("panel_too_small", GENERATED_CSV, e["line"], "skipped",
                               f"panel {'/'.join(panel)} has {len(keys)} image(s); evaluation needs at least "
                               f"{MIN_PANEL_IMAGES}", model=e["model_raw"], level=e["level_raw"], block_id=e["rid"],
                               sample_index=e["k"])
                continue
            for key in sorted(keys):
                e = entries[key]
                rel = panel_relpath(*key)
                data = e["path"].read_bytes()
                bad = _decode_check(data)
                if bad:
                    self.issue("undecodable_image", GENERATED_CSV, e["line"], "skipped",
                               f"{rel}: not a decodable image ({bad})", model=e["model_raw"], block_id=e["rid"])
                    continue
                target = gen_out / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                if not data.startswith(b"\xff\xd8"):
                    data = _to_jpeg(data)
                    self.issue("converted_to_jpeg", GENERATED_CSV, e["line"], "kept", f"{rel}: re-encoded as JPEG")
                    target.write_bytes(data)
                else:
                    _copy(e["path"], target, self.hardlink)
                manifest_rows.append(self._manifest_row(bench, key, e, target, rel, seeds, table, file_sha256))
                index_rows.append(self._index_row(e, rel, table))
        write_manifest(gen_out, manifest_rows)
        _write_csv(gen_out / RELEASE_INDEX_FILE, index_rows)
        written = Counter(r["model"] for r in manifest_rows)
        return {
            "generated_images": len(manifest_rows),
            "panels": len({(r["model"], r["condition"], r["block_id"]) for r in manifest_rows}),
            "images_per_model": dict(sorted(written.items())),
            "conditions": sorted({r["condition"] for r in manifest_rows}),
            "seeds_exact": seeds["exact"],
            "seeds_missing": seeds["missing"],
            "seeds_unverified": seeds["unverified"],
            "model_map": {k: v for k, v in sorted(model_map.items()) if written.get(v)},
            "level_map": dict(sorted(level_map.items())),
        }

    def _seed(self, e, table, seeds: Counter) -> int | None:
        raw = _s(table.get(e["row"], "seed"))
        if raw is None:
            seeds["missing"] += 1
            return None
        level_names = [e["level_raw"]] + (["L3"] if map_level(e["level_raw"]) == "L2" else [])
        candidates = [release_seed(e["model_raw"], e["rid"], lv, e["k"]) for lv in level_names]
        if re.fullmatch(r"-?\d+", raw):
            seeds["exact"] += 1
            return int(raw)
        try:
            recorded = float(raw)
        except ValueError:
            recorded = float("nan")
        for cand in candidates:
            if float(cand) == recorded:
                seeds["exact"] += 1
                return cand
        seeds["unverified"] += 1
        self.issue("seed_unverified", GENERATED_CSV, e["line"], "set to null",
                   f"seed {raw!r} is not an exact integer and matches no recomputed seed", model=e["model_raw"],
                   level=e["level_raw"], block_id=e["rid"], sample_index=e["k"])
        return None

    def _donor(self, rid: str | None, e) -> str | None:
        if rid is None:
            return None
        if rid in self.id_map:
            return self.id_map[rid]
        self.issue("unknown_donor", GENERATED_CSV, e["line"], "set to null",
                   f"control donor {rid!r} is not an imported block", model=e["model_raw"], block_id=e["rid"])
        return None

    def _manifest_row(self, bench, key, e, target: Path, rel: str, seeds: Counter, table, file_sha256) -> dict[str, Any]:
        from ..generation.registry import REGISTRY, GeneratorError
        from ..prompts import NEGATIVE_PROMPT

        model, cond, block_id, k = key
        row = e["row"]
        spec = None
        try:
            spec = REGISTRY.get(map_model(e["model_raw"]))
        except GeneratorError:
            spec = None
        street_donor = neighborhood_donor = None
        if cond.startswith("C_"):
            meta = {}
            try:
                meta = _json_value(table.get(row, "prompt_meta"), "prompt_meta") or {}
            except _BadValue:
                meta = {}
            control = meta.get("control") if isinstance(meta, dict) else None
            control = control if isinstance(control, dict) else self._controls.get((e["rid"], cond), {})
            if cond == "C_WRONG_STREET":
                street_donor = self._donor(_s(control.get("source_block_id")), e)
            elif cond == "C_SHUFFLED_NEIGHBORHOOD":
                neighborhood_donor = self._donor(_s(control.get("source_block_id")), e)
            else:
                street_donor = self._donor(_s(control.get("street_source_block_id")), e)
                neighborhood_donor = self._donor(_s(control.get("neighborhood_source_block_id")), e)
        return {
            "model": model,
            "block_id": block_id,
            "condition": cond,
            "k": k,
            "seed": self._seed(e, table, seeds),
            "prompt": _s(table.get(row, "prompt")),
            "negative_prompt": (NEGATIVE_PROMPT if spec.negative_prompt else None) if spec else None,
            "steps": spec.steps if spec else None,
            "guidance": spec.guidance if spec else None,
            "dtype": spec.dtype if spec else None,
            "height": spec.height if spec else None,
            "width": spec.width if spec else None,
            "weights": spec.source if spec else None,
            "weights_revision": spec.revision if spec else None,
            "pipeline": spec.pipeline_class if spec else None,
            "call_kwargs": json.dumps(dict(spec.call_kwargs), sort_keys=True) if spec else None,
            "street_donor": street_donor,
            "neighborhood_donor": neighborhood_donor,
            "benchmark": bench.name,
            "benchmark_fingerprint": bench.fingerprint,
            "path": rel,
            "sha256": file_sha256(target),
            "file_size": target.stat().st_size,
        }

    def _index_row(self, e, rel: str, table) -> dict[str, Any]:
        row = e["row"]
        return {
            "path": rel,
            "release_model": e["model_raw"],
            "release_level": e["level_raw"],
            "release_block_id": e["rid"],
            "sample_index": e["k"],
            "release_image_path": e["path"].relative_to(self.root).as_posix()
            if e["path"].is_relative_to(self.root) else str(e["path"]),
            "release_seed": _s(table.get(row, "seed")),
            "image_origin": _s(table.get(row, "image_origin")),
            "metadata_source": _s(table.get(row, "metadata_source")),
            "image_url": _s(table.get(row, "image_url")),
            "prompt_meta": _s(table.get(row, "prompt_meta")),
        }


def _first(*values):
    return next((v for v in values if v is not None), None)


def _replace_block(ref: ReferenceImage, block_id: str) -> ReferenceImage:
    import dataclasses

    return dataclasses.replace(ref, block_id=block_id)
