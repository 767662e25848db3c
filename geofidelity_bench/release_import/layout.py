"""The published release's layout (v3.1.0): where its files are, and how their columns may be spelled.

Paths are relative to the release folder. Each column map gives, for every name the importer uses, the
header spellings it accepts (case-insensitive, the first one present wins; see ``files._read_table``):
a missing ``required`` column is an error, a missing ``optional`` one gives nulls.
"""

from __future__ import annotations

RELEASE_VERSION = "3.1.0"
BLOCKS_CSV = "metadata/blocks.csv"
REFERENCES_CSV = "metadata/reference_images.csv"
GENERATED_CSV = "metadata/generated_images.csv"
CONTROLS_CSV = "metadata/prompt_controls.csv"
BENCHMARK_JSON = "data/processed/v3/benchmark_v3.json"
REFERENCE_DIR = "data/raw/mapillary_v3"
GENERATION_DIR = "generations_v3"
REPORT_FILE = "import_report.json"
#: The release's published evaluation outputs (eval/run_eval_v3.py, eval/reviewer_analysis_v3.py).
RAW_RESULTS_CSV = "outputs/eval_v3/raw_results.csv"
SUMMARY_CSV = "outputs/eval_v3/summary_by_method_level.csv"
MAIN_SCORES_CSV = "results/main_scores_by_model_prompt.csv"
STABILITY_DIR = "outputs/stability"
#: The results folder ``import-release`` writes the published scores to, inside OUT.
PUBLISHED_DIR = "published"
RELEASE_INDEX_FILE = "release_index.csv"
DEFAULT_LICENSE = "CC-BY-SA-4.0"
MIN_REFERENCES = 3
MIN_PANEL_IMAGES = 2

_BLOCK_COLUMNS = {
    "required": {
        "block_id": ("block_id",),
        "city": ("city",),
        "country": ("country",),
        "driving_side": ("driving_side",),
        "centroid_lat": ("centroid_lat", "centroid_latitude"),
        "centroid_lon": ("centroid_lon", "centroid_longitude"),
    },
    "optional": {
        "stratum": ("stratum",),
        "way_id": ("way_id",),
        "street_name": ("street_name", "street"),
        "neighborhood": ("neighborhood", "neighbourhood"),
        "highway_tag": ("highway_tag", "highway"),
        "length_m": ("length_m",),
        "polyline": ("polyline",),
        "bbox": ("bbox",),
    },
}
_REFERENCE_COLUMNS = {
    "required": {"reference_id": ("reference_id",), "image_id": ("image_id",), "block_id": ("block_id",)},
    "optional": {
        "image_path": ("image_path", "path"),
        "city": ("city",),
        "country": ("country",),
        "lat": ("lat", "latitude"),
        "lon": ("lon", "longitude"),
        "captured_at": ("captured_at_utc_ms", "captured_at"),
        "compass_angle": ("compass_angle",),
        "sun_elevation_deg": ("sun_elevation_deg", "sun_elev_deg"),
        "camera_type": ("camera_type",),
        "quality_score": ("quality_score", "mapillary_quality"),
        "source_url": ("source_url", "mapillary_url", "mapillary_page_url", "mapillary_link"),
        "license": ("license",),
        "attribution": ("attribution", "creator", "creator_username"),
    },
}
_GENERATED_COLUMNS = {
    "required": {
        "model": ("model",),
        "block_id": ("block_id",),
        "level": ("level", "condition"),
        "sample_index": ("sample_index", "k"),
    },
    "optional": {
        "image_path": ("image_path", "path"),
        "seed": ("seed",),
        "prompt": ("prompt",),
        "prompt_meta": ("prompt_meta",),
        "image_origin": ("image_origin",),
        "metadata_source": ("metadata_source",),
        "image_url": ("image_url", "url"),
    },
}
_CONTROL_COLUMNS = {
    "required": {"block_id": ("block_id",), "level": ("level", "condition")},
    "optional": {
        "source_block_id": ("source_block_id",),
        "street_source_block_id": ("street_source_block_id",),
        "neighborhood_source_block_id": ("neighborhood_source_block_id",),
    },
}
