"""The Gradio Blocks of the demo app: Explore, Score your images, Leaderboard, About.

Every event has an ``api_name``, so the same functions serve the web page and API clients
(``gradio_client``). Bad input (too few or too many files, non-images, oversized images, an
unknown block, an unreadable results table) is answered with a ``gr.Error`` whose message says
what to fix; anything unexpected is logged and answered with a generic message.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402
import pandas as pd  # noqa: E402

from .. import caveats  # noqa: E402
from ..benchmark import BenchmarkError  # noqa: E402
from ..evaluation import ANCHOR_PANEL_SIZE  # noqa: E402
from ..images import ImageDecodeError  # noqa: E402
from ..metrics.catalog import heading  # noqa: E402
from ..prompts import CONDITIONS  # noqa: E402
from . import figures, results as lb  # noqa: E402
from .state import RANKING_HEADERS, AppData, block_choices, block_label, city_choices  # noqa: E402
from .texts import (  # noqa: E402
    SCORES,
    about_markdown,
    anchor_comparison,
    anchor_labels,
    chance_phrase,
    fmt,
    md_escape,
    mrr_chance_phrase,
    score_label,
)
from .outputs import SessionFiles  # noqa: E402
from .page import APP_HEAD, CSS, SCROLL_TO_ANSWER_JS  # noqa: E402,F401 (re-exported: ui.CSS, ui.APP_HEAD)
from .uploads import (  # noqa: E402
    MAX_IMAGE_BYTES,
    MAX_IMAGES,
    MAX_PIXELS,
    MAX_RESULTS_BYTES,
    MIN_IMAGES,
    HeldUploads,
    RecentUploads,
    UploadError,
    discard_uploads,
    read_uploaded_images,
    read_uploaded_results,
)

log = logging.getLogger(__name__)

#: Requests waiting in the queue beyond this many are turned away ("queue is full").
MAX_QUEUE = 32
#: Concurrent runs of each event (the CPU is shared; scoring runs the encoder).
CONCURRENCY = 2
NOT_SCORED = "**Not scored.** Fix the upload (or the block) and press Score again."
NOT_LOADED = "**Not loaded.** The leaderboard still shows the previous results."


def theme():
    # Soft ships its fonts with Gradio: the page loads no external fonts (works offline).
    return gr.themes.Soft(primary_hue="blue", secondary_hue="slate")


def launch_kwargs(**overrides: Any) -> dict[str, Any]:
    """Arguments of ``Blocks.launch`` the app always uses (never shared; uploads capped)."""
    kwargs = dict(
        share=False,
        theme=theme(),
        css=CSS,
        head=APP_HEAD,
        max_file_size=max(MAX_IMAGE_BYTES, MAX_RESULTS_BYTES),
        show_error=False,
        ssr_mode=False,
    )
    kwargs.update(overrides)
    kwargs["share"] = False
    return kwargs


class LastErrors:
    """The last refusal of an event per browser session, so that the page can keep the reason
    next to the results (the toast of a ``gr.Error`` vanishes after a few seconds). Bounded:
    API clients that never ask for their message cannot make it grow."""

    def __init__(self, size: int = 512):
        self._messages: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()
        self._size = size

    @staticmethod
    def _key(request: gr.Request | None) -> str | None:
        return getattr(request, "session_hash", None) if request is not None else None

    def put(self, request: gr.Request | None, message: str) -> None:
        key = self._key(request)
        if key is None:
            return
        with self._lock:
            self._messages[key] = message
            self._messages.move_to_end(key)
            while len(self._messages) > self._size:
                self._messages.popitem(last=False)

    def pop(self, request: gr.Request | None) -> str | None:
        key = self._key(request)
        with self._lock:
            return self._messages.pop(key, None) if key is not None else None


def _failed_markdown(headline: str, reason: str | None) -> str:
    """The lasting note shown where the results would be: what was refused and why."""
    return headline if not reason else f"{headline}\n\n> {md_escape(reason)}"


def _friendly(action: str, remember: LastErrors | None = None) -> Callable:
    """Turns the library's user-facing errors into ``gr.Error`` and hides anything else.

    With ``remember``, the message is also kept for the session (the event's function takes a
    ``gr.Request``), for a ``.failure`` handler to show next to the results.
    """

    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            request = next((a for a in (*args, *kwargs.values()) if isinstance(a, gr.Request)), None)
            try:
                return fn(*args, **kwargs)
            except gr.Error as err:
                error = err
            except (UploadError, BenchmarkError, ImageDecodeError, lb.ResultsError) as err:
                error = gr.Error(str(err), title=f"Cannot {action}", print_exception=False)
            except Exception:  # noqa: BLE001 - never show a traceback to a visitor
                log.exception("error while trying to %s", action)
                error = gr.Error(f"Something went wrong while trying to {action}; the server log has the details.",
                                 title="Error")
            if remember is not None:
                remember.put(request, error.message)
            raise error from None

        return inner

    return wrap


def _thumbnail(image, size: int = 640):
    thumb = image.copy()
    thumb.thumbnail((size, size))
    return thumb


# -- explore --------------------------------------------------------------------------------


def _metadata_markdown(data: AppData, block_id: str) -> str:
    bench = data.benchmark
    block = bench.block(block_id)
    city = bench.cities.get(block.city)
    city_name = city.name if city else block.city_name
    lat, lon = block.centroid
    side = {"L": "left", "R": "right"}.get(block.driving_side, block.driving_side)
    way = f"[{block.way_id}](https://www.openstreetmap.org/way/{block.way_id})" if block.way_id else "unknown"
    rows = [
        ("block", f"`{block.block_id}`"),
        ("city", f"{md_escape(city_name)} ({block.country}), drives on the {side}"),
        ("street", md_escape(block.street_name) if block.street_name else "*unknown*"),
        ("neighborhood", md_escape(block.neighborhood) if block.neighborhood else "*unknown*"),
        ("stratum", block.stratum or "*unknown*"),
        ("OSM way", way),
        ("highway tag", block.highway_tag or "*unknown*"),
        ("length", f"{block.length_m:.0f} m"),
        ("centroid", f"{lat:.5f}, {lon:.5f}"),
        ("reference photos", f"{len(bench.references_of(block_id))} ({len(bench.heldout(block_id))} held out, "
                             f"{len(bench.gallery(block_id))} in the gallery)"),
    ]
    lines = ["| field | value |", "| --- | --- |"] + [f"| {k} | {v} |" for k, v in rows]
    lines += ["", "**Negatives** (the look-alike blocks of the retrieval line-up):", ""]
    for role, neg in bench.negatives(block_id).items():
        label = figures.ROLE_LABELS[role]
        if neg is None:
            lines.append(f"- {label}: *none in this benchmark*")
        else:
            other = bench.block(neg)
            where = bench.cities[other.city].name if other.city in bench.cities else other.city_name
            lines.append(f"- {label}: `{neg}` ({md_escape(where)})")
    off = figures.off_map_negatives(bench, block_id)
    if off:
        lines += ["", "Off the map: " + "; ".join(md_escape(x) for x in off)]
    anchors = data.anchors_of(block_id)
    if anchors:
        lines += _anchor_lines(data, block_id, anchors)
    if block.notes:
        lines += ["", f"*Notes:* {md_escape(block.notes)}"]
    return "\n".join(lines)


def _anchor_lines(data: AppData, block_id: str, anchors: dict) -> list[str]:
    """The block's real-image anchors, with the chance level of retrieval and the repeated-photo mark."""
    shown = ("cos_sim", "dcsf", "retrieval_acc", "mrr", "local_margin")
    thin = data.thin_anchor_blocks()
    candidates, chance_acc, chance_mrr = data.block_chance(block_id)
    n_distinct = len(set(candidates.values()))
    lines = ["", f"**Real-image anchors of this block** (encoder `{data.encoder.name}`):", "",
             "| anchor | " + " | ".join(heading(c) for c in shown) + " |", "| --- " * (len(shown) + 1) + "|"]
    same_country = data.same_country_note(block_id)
    for method, row in anchors.items():
        mark = f" {caveats.REPEATS_MARK}" if method == caveats.HELDOUT_METHOD and block_id in thin else ""
        if method == "random_same_country" and same_country:
            mark += " (all other blocks)"
        lines.append(f"| {method}{mark} | " + " | ".join(
            fmt(row[c], signed=c == "local_margin") for c in shown) + " |")
    lines += ["", f"Retrieval accuracy: {chance_phrase(chance_acc, len(candidates), n_distinct)}; "
                  f"MRR: {mrr_chance_phrase(chance_mrr)}."]
    if block_id in thin:
        n_held = len(data.benchmark.heldout(block_id))
        lines += ["", f"{caveats.REPEATS_MARK}: this block has {n_held} held-out photo(s), cycled to a panel of "
                      f"{ANCHOR_PANEL_SIZE}, so its held-out panel repeats photos."]
    note = caveats.thin_anchor_note(len(thin), len(data.benchmark.blocks))
    if note:
        lines += ["", f"*{note}.*"]
    if same_country and "random_same_country" in anchors:
        lines += ["", f"*{md_escape(same_country)}.*"]
    return lines


def _gallery_items(data: AppData, block_id: str) -> list[tuple[Any, str]]:
    bench = data.benchmark
    items = []
    for kind, refs in (("HELD-OUT (real query)", bench.heldout(block_id)), ("gallery", bench.gallery(block_id))):
        for ref in refs:
            credit = ", ".join(x for x in (ref.attribution, ref.license) if x)
            items.append((_thumbnail(ref.image()), f"{kind} · {ref.image_id}" + (f" · {credit}" if credit else "")))
    return items


def _source_text(results: pd.DataFrame, source: str, provenance: str | None = None) -> str:
    text = f"Showing: {source}." + (f" {provenance}" if provenance else "")
    empty = lb.empty_metrics(results)
    if empty:
        text += f" Empty throughout (not computed): {', '.join(empty)}."
    return text


# -- score ----------------------------------------------------------------------------------

#: Matched pairs shown side by side under the copy warning (uploaded image, benchmark photo).
COPY_PAIRS_SHOWN = 8


def _copy_warning(data: AppData, result, uploads) -> tuple[str, list[tuple[Any, str]]]:
    """The copy warning (Markdown, empty when nothing is flagged) and the (upload, matched photo) pairs.

    A copy is never presented as a result: the warning says that the copies are left out of every score, and
    whether the other images were scored (at least two left) or nothing was."""
    from ..caveats import COPIED_MARK
    from ..near_copies import COPY_COSINE, HASH_DISTANCE_MAX, WORLD

    flagged = result.near_copies
    if not flagged:
        return "", []
    by_name = {u.name: u for u in uploads}
    n, k = result.n_uploaded, len(flagged)
    if result.scored:
        what = (f"**Left out of every score below:** the scores, the table and the plot are those of the other "
                f"{len(result.names)} image{'s' if len(result.names) != 1 else ''} only.")
    else:
        what = (f"**Nothing is scored:** {len(result.names)} image{'s are' if len(result.names) != 1 else ' is'} "
                f"left once the copies are left out, and a set needs at least {MIN_IMAGES}. Upload at least "
                f"{MIN_IMAGES} images that are not copies of the benchmark's photos.")
    lines = [f"### {COPIED_MARK[0]} {k} of {n} uploaded images are copies of this benchmark's own photos", "",
             what, "",
             "A copy scores like the real photos of the block: its numbers would measure the benchmark's photos, "
             f"not a model. Flagged at hash distance <= {HASH_DISTANCE_MAX} of 256 bits, cosine >= {COPY_COSINE}, "
             "identical bytes, or an edited copy found by local features (cropped, rotated, mirrored, framed or "
             "pasted into a collage; the copy audit, docs/benchmark.md section 5). Below the list: each copy (left, "
             "the copied region outlined in red) beside the benchmark photo it copies (right).", ""]
    pairs = []
    for r in flagged:
        where = "the world pool" if r["reference_block_id"] == WORLD else f"block `{r['reference_block_id']}`"
        how = ", ".join(x for x in (f"hash distance {r['hash_distance']}" if r["hash_distance"] is not None else None,
                                    f"cosine {r['cosine']:.3f}" if r["cosine"] is not None else None) if x)
        edit = _copy_edit_text(r)
        lines.append(f"- **{md_escape(r['file'])}** copies photo **`{r['reference_id']}`** of {where} ({how})"
                     + (f"; {md_escape(edit)}" if edit else ""))
        if len(pairs) < 2 * COPY_PAIRS_SHOWN and r["file"] in by_name:
            photo = data.photo(r["reference_id"])
            pairs += [(_outlined_thumbnail(by_name[r["file"]].image, r.get("region") if edit else None, 320),
                       f"your image: {r['file']}" + (f" ({edit})" if edit else "")),
                      (_thumbnail(photo.image(), 320), f"benchmark photo: {r['reference_id']}")]
    return "\n".join(lines), pairs


def _copy_edit_text(r) -> str:
    """What the geometric check found of one flagged record: "edited: crop+rotation, copied region 0,0-307,230
    px" (empty for a plain copy, or a record written before the check)."""
    edit, region = r.get("edit"), r.get("region")
    if not edit or edit in ("copy", "identical"):
        return ""
    parts = [f"edited: {edit}"]
    if isinstance(region, (list, tuple)) and len(region) == 4:
        parts.append(f"copied region {region[0]},{region[1]}-{region[2]},{region[3]} px")
    return ", ".join(parts)


def _outlined_thumbnail(image, region, size: int = 320):
    """A thumbnail of an uploaded copy with the copied region (pixels of the full image) outlined in red."""
    from PIL import ImageDraw

    thumb = _thumbnail(image, size).convert("RGB")
    if isinstance(region, (list, tuple)) and len(region) == 4 and image.width and image.height:
        fx, fy = thumb.width / image.width, thumb.height / image.height
        x0, y0, x1, y1 = region
        box = [round(x0 * fx), round(y0 * fy), max(round(x0 * fx), round(x1 * fx) - 1),
               max(round(y0 * fy), round(y1 * fy) - 1)]
        ImageDraw.Draw(thumb).rectangle(box, outline=(230, 20, 20), width=max(2, round(min(thumb.size) / 80)))
    return thumb


def _scored_what(score) -> str:
    """Which images the numbers are of: all uploaded, or those that are not copies."""
    n = len(score.names)
    if not score.copies_left_out:
        return ""
    k = len(score.copies_left_out)
    return (f" (of the {n} image{'s' if n != 1 else ''} that {'are' if n != 1 else 'is'} not "
            f"{'copies' if n != 1 else 'a copy'}; {k} cop{'ies' if k != 1 else 'y'} left out)")


def _scores_markdown(score) -> str:
    if not score.scored:  # the copies are not a result: no score of them is shown
        return ""
    row = score.row
    readings = score.readings()
    lines = [
        f"**In short{_scored_what(score)}:** " + readings["retrieval_acc"] + "; " + readings["local_margin"] + ".",
        "",
        "| score | value | what it means here | vs this block's real-image anchors |",
        "| --- | --- | --- | --- |",
    ]
    anchors = {m: r.get for m, r in score.anchors.items()}
    labels = anchor_labels(bool(score.same_country_note))
    for info in SCORES:
        value = row.get(info.key)
        versus = anchor_comparison(info.key, value, {m: get(info.key) for m, get in anchors.items()}, labels)
        signed = info.key in ("local_margin", "strongest_margin", "diversity_gap")
        lines.append(f"| {score_label(info)} | {fmt(value, signed=signed)} | {readings[info.key]} | "
                     f"{versus or '–'} |")
    if score.same_country_note and "random_same_country" in score.anchors:
        lines += ["", f"*{md_escape(score.same_country_note)}.*"]
    return "\n".join(lines)


def _score_status(score, where: str, encoder: str, seconds: float, animated: list[str]) -> str:
    """The first line of an answer: what was scored against which block (or why nothing was), and what happens
    to the uploads."""
    # Gradio's cache cleanup (delete_cache=(1800, 3600) below) removes any upload older than an hour, checked
    # every half hour
    kept = ("Your uploads stay listed (to score another block) until you remove them or close this page; the "
            "server deletes them then (any upload within 1.5 hours at the latest).")
    n, k = score.n_uploaded, len(score.copies_left_out)
    if not score.scored:
        text = (f"**Not scored:** {k} of the {n} uploaded images copy this benchmark's photos (above), which leaves "
                f"fewer than {MIN_IMAGES} to score against **{where}**. {kept}")
    elif k:
        text = (f"Scored **{len(score.names)} of {n} images** against **{where}** with encoder `{encoder}` in "
                f"{seconds:.1f} s; {k} cop{'ies' if k != 1 else 'y'} of the benchmark's photos left out (above). "
                f"{kept}")
    else:
        text = (f"Scored **{n} images** against **{where}** with encoder `{encoder}` in {seconds:.1f} s. {kept}")
    if animated:
        text += " Animated images, of which the first frame was scored: " + ", ".join(animated) + "."
    return text


def _anchor_plot(score_json: dict | None, *, narrow: bool):
    """The Score tab's plot of a scored answer (``PanelScore.as_json``), with the block's chance lines; None when
    nothing was scored (copies only)."""
    from .state import candidate_chance

    if not score_json or score_json.get("withheld") or not score_json.get("scores"):
        return None
    n, k = score_json["n_images"], len(score_json.get("copies_left_out") or [])
    title = figures.ANCHOR_PLOT_TITLE
    if k:
        title = (f"Your {n} image{'s' if n != 1 else ''} that {'are' if n != 1 else 'is'} not copies "
                 f"({k} left out), against this block's real-image anchors")
    yours = {key: (float("nan") if v is None else v) for key, v in score_json["scores"].items()}
    anchors = {m: {key: (float("nan") if v is None else v) for key, v in r.items()}
               for m, r in score_json["anchors"].items()}
    return figures.anchor_figure(yours, anchors, block_id=score_json["block_id"],
                                 labels=anchor_labels(bool(score_json.get("same_country_note")), short=True),
                                 chance=candidate_chance(score_json["candidates"]), title=title, narrow=narrow)


def build_app(data: AppData, hub_board=None) -> gr.Blocks:
    """The app's Blocks, queued (bounded concurrency and queue size); launch with :func:`launch`.

    ``hub_board``: a :class:`~geofidelity_bench.demo_app.hub_board.HubBoard` (a results repo) for the
    "Hub leaderboard" tab."""
    from .hub_ui import hub_tabs

    bench = data.benchmark
    cities = city_choices(bench)
    first_city = cities[0][1]
    all_blocks = block_choices(bench)
    upload_root = None  # set from the File component below (Gradio's upload folder)
    default_images, default_report = lb.report_images(data.results, data.run_info)
    default_table = lb.display_table(lb.leaderboard_table(data.results))

    @_friendly("list the city's blocks")
    def city_blocks(city_key: str):
        choices = block_choices(bench, city_key)
        if not choices:
            raise BenchmarkError(f"unknown city {city_key!r}")
        return gr.Dropdown(choices=choices, value=choices[0][1])

    @_friendly("show the block")
    def explore(block_id: str):
        if not block_id:
            raise gr.Error("Choose a block.")
        bench.block(block_id)
        fig = figures.block_map_figure(bench, block_id)
        prompt_updates = []
        for view in data.prompts(block_id):
            label = view.condition if view.text is not None else f"{view.condition} (not available)"
            p = view.prompt
            if p is not None and p.street_donor:
                label += f" · street from {p.street_donor} ({p.street_donor_scope})"
            if p is not None and p.neighborhood_donor:
                label += f" · neighborhood from {p.neighborhood_donor} ({p.neighborhood_donor_scope})"
            prompt_updates.append(gr.Textbox(value=view.shown, label=label,
                                             elem_classes=[] if view.text is not None else ["gfb-unavailable"]))
        return [_gallery_items(data, block_id), fig, _metadata_markdown(data, block_id), *prompt_updates]

    refusals = LastErrors()
    answers = SessionFiles(None)  # its folder is Gradio's, known once the File component exists (below)
    recent = RecentUploads()  # identical uploads share a path: concurrent requests read its bytes here
    held = HeldUploads(None)  # the uploads each page lists (its folder is Gradio's, set below)

    @_friendly("score the images", refusals)
    def score(block_id: str, files: list | None, request: gr.Request):
        started = time.time()
        session = getattr(request, "session_hash", None)
        answers.drop(session, "score")  # the page's previous thumbnails are replaced (or cleared on a refusal)
        # the uploads stay while the page lists them (scored again after a refusal, or against another block)
        held.hold(session, files)
        if not block_id:
            raise gr.Error("Choose the target block first.")
        bench.block(block_id)
        uploads = read_uploaded_images(files, upload_root=upload_root, recent=recent)
        result = data.score(block_id, [u.image for u in uploads], [u.name for u in uploads])
        animated = [f"{u.name} ({u.frames} frames)" for u in uploads if u.frames > 1]
        status = _score_status(result, block_label(bench, block_id), data.encoder.name, time.time() - started,
                               animated)
        warning, pairs = _copy_warning(data, result, uploads)
        rows = result.ranking_rows()  # the images scored: never a copy
        ranking = pd.DataFrame(rows, columns=RANKING_HEADERS)
        by_name = {u.name: u for u in uploads}
        shown = [(_thumbnail(by_name[name].image, 320), f"{i}. {name} → {row[2]}")
                 for i, (name, row) in enumerate(zip(result.names, rows), start=1)]
        written = answers.write(session, "score", pairs + shown)  # one folder per answer, deleted at the next
        pairs, shown = written[:len(pairs)], written[len(pairs):]
        raw_json = result.as_json()
        return (status, warning, gr.Gallery(value=pairs, visible=bool(pairs)), _scores_markdown(result), ranking,
                shown, _anchor_plot(raw_json, narrow=False), raw_json)

    def not_scored(request: gr.Request):
        # every result component gets a value again (no red "Error" pill left); the file list stays as it is
        return (_failed_markdown(NOT_SCORED, refusals.pop(request)), "", gr.Gallery(value=[], visible=False), "",
                pd.DataFrame(columns=RANKING_HEADERS), [], None, None, None)

    def narrow_plot(score_json):
        return _anchor_plot(score_json, narrow=True)

    def uploads_listed(files, request: gr.Request):
        held.hold(getattr(request, "session_hash", None), files)  # files no longer listed are deleted

    def not_loaded(request: gr.Request):
        return _failed_markdown(NOT_LOADED, refusals.pop(request))

    def clear_scores():
        return ("Scoring ...", "", gr.Gallery(value=[], visible=False), "", pd.DataFrame(columns=RANKING_HEADERS), [],
                None, None, None)

    def _leaderboard_outputs(results: pd.DataFrame, source: str, status: str, request: gr.Request | None = None):
        run_info = data.run_info if results is data.results else None  # an uploaded table has no run.json
        images, report = lb.report_images(results, run_info)
        images = answers.write(getattr(request, "session_hash", None), "report", images, fmt="png")
        table = lb.display_table(lb.leaderboard_table(results))
        return (results, _source_text(results, source, lb.provenance_text(run_info, data.own_info)),
                gr.Dropdown(choices=lb.conditions_of(results), value=lb.ALL_CONDITIONS),
                gr.Dropdown(value=lb.SORT_CHOICES[0]), gr.Checkbox(value=True), gr.Radio(value=lb.VIEWS[0]),
                table, lb.leaderboard_notes(results), images, report, status)

    @_friendly("show the leaderboard")
    def leaderboard(results: pd.DataFrame, condition: str, sort_by: str, best_first: bool, view: str):
        return lb.display_table(lb.leaderboard_table(results, condition=condition or lb.ALL_CONDITIONS,
                                                     sort_by=sort_by or lb.SORT_CHOICES[0], best_first=bool(best_first),
                                                     view=view or lb.VIEWS[0]))

    @_friendly("read the results file", refusals)
    def upload_results(file, request: gr.Request):
        try:
            df = lb.annotate_results(read_uploaded_results(file, upload_root=upload_root))
        finally:  # read into memory (or refused): the uploaded file is not kept
            discard_uploads(file, upload_root=upload_root)
        name = md_escape(os.path.basename(str(file)))
        return _leaderboard_outputs(df, f"uploaded file {name} ({len(df)} rows)",
                                    f"Loaded {len(df)} result rows from {name}.", request)

    @_friendly("reset the leaderboard")
    def reset_results(request: gr.Request):
        return _leaderboard_outputs(data.results, data.results_source, "Showing the default results again.",
                                    request)

    def end_session(request: gr.Request):
        session = getattr(request, "session_hash", None)
        answers.release(session)  # the page was closed: its images go, and its uploads
        held.release(session)

    header = (
        "# GeoFidelity-Bench\n"
        "Does a text-to-image model draw the **named street block**, or a generic street of the city? "
        f"Benchmark `{md_escape(bench.name)}`: {len(bench.blocks)} blocks in {len(bench.cities)} cities; "
        f"encoder `{data.encoder.name}`"
        + (" (the offline encoder: numbers are not comparable with the paper's DINOv2 scores)"
           if data.encoder.name != "dinov2-base" else "")
        + "."
    )
    # delete_cache: Gradio's upload/cache files of this app older than an hour go, checked every 30 minutes.
    with gr.Blocks(title="GeoFidelity-Bench", delete_cache=(1800, 3600), analytics_enabled=False) as demo:
        results_state = gr.State(data.results)
        gr.Markdown(header)
        with gr.Tabs(overflow_behavior="wrap"):  # every tab in one tap, also on a phone
            with gr.Tab("Explore", id="explore"):
                with gr.Row(elem_classes=["gfb-pickers"]):
                    city = gr.Dropdown(choices=cities, value=first_city, label="City")
                    city_first = block_choices(bench, first_city)
                    # allow_custom_value: any block id may come from an API client; explore() checks it.
                    ex_block = gr.Dropdown(choices=city_first, value=city_first[0][1], label="Block",
                                           allow_custom_value=True)
                with gr.Row():
                    with gr.Column(scale=3):
                                gallery = gr.Gallery(label="Reference photos (held-out real queries first)", columns=4,
                                             height="auto", object_fit="cover", format="jpeg", elem_id="explore-gallery")
                    with gr.Column(scale=2):
                        block_map = gr.Plot(label="The block (blue) and its negatives")
                metadata = gr.Markdown(elem_id="explore-meta", elem_classes=["gfb-cards"])
                gr.Markdown("### Prompts of every condition\nNames are never invented: a condition that needs a "
                            "street or neighborhood the benchmark does not know is not available.")
                prompt_boxes = [gr.Textbox(label=c, interactive=False, lines=2, buttons=["copy"]) for c in CONDITIONS]
                gr.Textbox(value=data.negative_prompt, label="negative prompt (for models that take one)",
                           interactive=False, lines=1, buttons=["copy"])
            with gr.Tab("Score your images", id="score"):
                gr.Markdown(
                    f"Upload {MIN_IMAGES}-{MAX_IMAGES} images generated for one block (images only, at most "
                    f"{MAX_IMAGE_BYTES // (1024 * 1024)} MB and {MAX_PIXELS // 1_000_000} megapixels each). They are "
                    "compared with the block's real photos and with the photos of its look-alike blocks."
                )
                sc_block = gr.Dropdown(choices=all_blocks, value=all_blocks[0][1], label="Target block",
                                       allow_custom_value=True, elem_id="score-block")
                files = gr.File(file_count="multiple", type="filepath", label="Generated images",
                                elem_id="score-files")
                upload_root = getattr(files, "GRADIO_CACHE", None)
                answers.root = Path(upload_root) if upload_root else None
                held.upload_root = upload_root
                score_btn = gr.Button("Score", variant="primary", elem_id="score-button")
                # a copy warning is the first thing of an answer (the page scrolls to it); none: no box at all
                copy_warning = gr.Markdown(elem_id="score-copy-warning")
                status = gr.Markdown(elem_id="score-status")
                # its label is the warning's last line (a label over the pictures would cover them on a phone)
                copy_pairs = gr.Gallery(label="Copies: your image (left) and the benchmark photo it copies (right)",
                                        show_label=False, columns=2, height="auto", object_fit="contain",
                                        format="jpeg", visible=False, elem_id="score-copy-pairs")
                scores_md = gr.Markdown(elem_id="score-table")
                ranking = gr.Dataframe(headers=RANKING_HEADERS, interactive=False, wrap=True,
                                       label="Which candidate block each image matched best", elem_id="score-ranking")
                shown = gr.Gallery(label="Your images (→ best match)", columns=8, height=220, format="jpeg",
                                   elem_id="score-shown")
                # the plot's title is drawn in the figure (a label over it would cover it on a phone); a phone gets
                # the same plot one score a row (drawn after the answer, from its numbers)
                # (PNG: thin lines and small text stay sharp, as lossy WebP does not keep them)
                anchor_plot = gr.Plot(label=figures.ANCHOR_PLOT_TITLE, show_label=False, format="png",
                                      elem_id="score-plot")
                anchor_plot_narrow = gr.Plot(label=figures.ANCHOR_PLOT_TITLE, show_label=False, format="png",
                                             elem_id="score-plot-narrow")
                with gr.Accordion("All numbers (JSON)", open=False):
                    raw = gr.JSON(label="scores")
            with gr.Tab("Leaderboard", id="leaderboard"):
                source = gr.Markdown(_source_text(data.results, data.results_source,
                                                  lb.provenance_text(data.run_info, data.own_info)), elem_id="lb-source")
                with gr.Row():
                    # The choices change with an uploaded table; leaderboard() checks the value.
                    condition = gr.Dropdown(choices=lb.conditions_of(data.results), value=lb.ALL_CONDITIONS,
                                            label="Condition", allow_custom_value=True)
                    sort_by = gr.Dropdown(choices=list(lb.SORT_CHOICES), value=lb.SORT_CHOICES[0], label="Sort by")
                    best_first = gr.Checkbox(value=True, label="best first")
                    view = gr.Radio(choices=list(lb.VIEWS), value=lb.VIEWS[0], label="Rows")
                table = gr.Dataframe(value=default_table, interactive=False, wrap=True, label="Results", elem_id="lb-table")
                # a phone shows the same rows as cards (every score under its name; the table is hidden there)
                lb_cards = gr.HTML(lb.leaderboard_cards(default_table), elem_id="lb-cards", padding=False)
                lb_notes = gr.Markdown(lb.leaderboard_notes(data.results), elem_id="lb-notes")
                with gr.Row():
                    results_file = gr.File(file_count="single", type="filepath",
                                           label="Show your own results.csv (from `geofidelity-bench evaluate`)")
                    reset = gr.Button("Back to the default results")
                lb_status = gr.Markdown()
                # one plot per row: the leaderboard plot is wide and must be readable (click opens it full size)
                plots = gr.Gallery(value=default_images, label="Report plots", columns=1, height="auto",
                                   object_fit="contain", format="png", allow_preview=True, elem_id="lb-plots")
                with gr.Accordion("Full report (all tables)", open=False):
                    report_md = gr.Markdown(default_report)
            hub_tabs(hub_board)
            with gr.Tab("About", id="about"):
                gr.Markdown(about_markdown(), elem_id="about", elem_classes=["gfb-cards"])

        city.change(city_blocks, inputs=city, outputs=ex_block, api_name="city_blocks")
        # "always_last": a block picked while another is still loading is shown once that one is done (the
        # default "once" drops the pick, leaving the first block's facts under the second block's name)
        gr.on([demo.load, ex_block.change], explore, inputs=ex_block,
              outputs=[gallery, block_map, metadata, *prompt_boxes], api_name="explore", trigger_mode="always_last")
        score_outputs = [status, copy_warning, copy_pairs, scores_md, ranking, shown, anchor_plot, raw]
        # Clear the previous scores first, so that a refused upload never leaves stale numbers on the page.
        scoring = score_btn.click(clear_scores, outputs=[*score_outputs, anchor_plot_narrow], queue=False,
                                  api_visibility="private").then(
            score, inputs=[sc_block, files], outputs=score_outputs, api_name="score", scroll_to_output=True)
        # The reason stays next to the results until the next action (the toast vanishes); the uploads stay listed.
        scoring.failure(not_scored, outputs=[*score_outputs, anchor_plot_narrow], queue=False,
                        api_visibility="private")
        scoring.success(narrow_plot, inputs=raw, outputs=anchor_plot_narrow, api_visibility="private")
        # the answer's first line (the copy warning, else the status) at the top of the screen, when it is not in
        # the upper half already: on a phone the file list pushes it below the fold
        scoring.then(None, js=SCROLL_TO_ANSWER_JS, queue=False, api_visibility="private")
        # files removed from the list (or replaced) are deleted at once, unless another page lists them
        files.change(uploads_listed, inputs=files, queue=False, api_visibility="private")
        gr.on([condition.change, sort_by.change, best_first.change, view.change], leaderboard,
              inputs=[results_state, condition, sort_by, best_first, view], outputs=table, api_name="leaderboard",
              trigger_mode="always_last")
        lb_outputs = [results_state, source, condition, sort_by, best_first, view, table, lb_notes, plots, report_md,
                      lb_status]
        # the cards follow the table, whichever event changed it
        table.change(lambda shown, key: lb.leaderboard_cards(shown, key), inputs=[table, sort_by], outputs=lb_cards,
                     queue=False, api_visibility="private")
        uploading = results_file.upload(upload_results, inputs=results_file, outputs=lb_outputs,
                                        api_name="upload_results", concurrency_limit=1)
        uploading.failure(not_loaded, outputs=lb_status, queue=False, api_visibility="private")
        uploading.then(lambda: None, outputs=results_file, queue=False, api_visibility="private")
        reset.click(reset_results, outputs=lb_outputs, api_name="reset_results")
        demo.unload(end_session)
    demo.queue(default_concurrency_limit=CONCURRENCY, max_size=MAX_QUEUE)
    return demo


def launch(demo: gr.Blocks, *, host: str | None = "127.0.0.1", port: int | None = None, **kwargs: Any):
    """Launches the app (never shared). ``host=None`` lets ``$GRADIO_SERVER_NAME`` decide (Spaces)."""
    return demo.launch(**launch_kwargs(server_name=host, server_port=port, **kwargs))
