"""Asking the question bank about a set of images, through the answer cache.

:func:`answer_questions` asks every question of the bank about every image (each distinct
image content once per question; replies come from the :class:`AnswerCache` when present),
parses the replies and returns the long answers table that
:func:`~geofidelity_bench.geodiv.diversity.diversity_tables` groups. :func:`run_geodiv` does
both.
"""

from __future__ import annotations

import math
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import pandas as pd

from ..images import ImageSource, content_sha256, load_image
from ..prefetch import ordered_map, prefetch_items, resolve_num_workers
from .cache import AnswerCache
from .diversity import GeoDivTables, diversity_tables
from .parser import parse_answer
from .questions import QuestionBank, load_question_bank
from .vqa import VQABackend

ANSWER_COLUMNS = ["image", "image_sha256", "question_id", "kind", "reply", "status", "choice", "rating", "cached"]


@dataclass(frozen=True)
class GeoDivImage:
    """One image to ask about.

    Attributes:
        name: a unique key (a relative path, ``reference:<id>``, ...).
        source: the image: a path, encoded bytes, a PIL image or a uint8 array.
        labels: grouping values (``country``, ``city``, ``model``, ``condition``, ``block_id``, ...).
    """

    name: str
    source: ImageSource = field(repr=False)
    labels: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class AnswerStats:
    n_images: int = 0
    n_distinct_images: int = 0
    n_pairs: int = 0
    n_cached: int = 0
    n_asked: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


def _source_hash(source: ImageSource) -> str:
    if isinstance(source, Mapping):  # a datasets image {"bytes", "path"}
        return content_sha256(source.get("bytes") or source["path"])
    return content_sha256(source)


def _decode(source: ImageSource, name: str):
    if isinstance(source, Mapping):
        source = source.get("bytes") or source["path"]
    return load_image(source, name=name)


def answer_questions(
    images: Sequence[GeoDivImage],
    bank: QuestionBank | None,
    backend: VQABackend,
    *,
    cache: AnswerCache | None = None,
    progress: bool = False,
    num_workers: int | None = None,
) -> pd.DataFrame:
    """Asks every question of ``bank`` about every image; returns the parsed answers table.

    Returns:
        One row per (image, question): ``image`` (the name), ``image_sha256``,
        ``question_id``, ``kind``, ``reply`` (raw text), ``status`` (``ok`` / ``none`` /
        ``unparseable``), ``choice`` (the option, None when unparseable), ``rating`` (SEVI,
        else NaN), ``cached`` (whether the reply came from the cache), then every label
        column of the images. ``df.attrs`` holds ``vqa_model``, ``vqa_config``,
        ``vqa_config_hash``, ``question_bank``, ``answer_stats`` and ``num_workers`` (threads that
        decoded the images ahead of the model, default: the cores this process may use; 0: the
        calling thread; it changes no reply).

    Raises:
        ValueError: duplicate image names. ImageDecodeError: an image that cannot be decoded.
    """
    bank = load_question_bank(bank)
    names = [img.name for img in images]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})[:10]
        raise ValueError(f"image names must be unique; repeated: {dup}")
    shas = [_source_hash(img.source) for img in images]
    first_of: dict[str, int] = {}
    for i, sha in enumerate(shas):
        first_of.setdefault(sha, i)
    pairs = [(sha, q) for sha in first_of for q in bank]
    config_hash = backend.config_hash
    replies: dict[tuple[str, str], str] = {}
    if cache is not None:
        replies.update(cache.get(config_hash, [(q.cache_key, sha) for sha, q in pairs]))
    from_cache = set(replies)
    todo = [(sha, q) for sha, q in pairs if (q.cache_key, sha) not in replies]
    chunk = max(1, backend.batch_size) * max(1, len(bank))  # whole images per chunk: each decoded once
    bar = None
    if progress and todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc=f"VQA {backend.model_id}", unit="question")
    # Each chunk's distinct images, decoded (and downscaled by the backend's own ``prepare``, which is
    # idempotent, where it has one) by worker threads ahead of the model, in the serial order.
    chunks = [todo[start:start + chunk] for start in range(0, len(todo), chunk)]
    to_decode = [list(dict.fromkeys(sha for sha, _ in part)) for part in chunks]
    prepare = getattr(backend, "prepare", None)

    def decode(sha: str):
        img = images[first_of[sha]]
        decoded = _decode(img.source, img.name)
        return prepare(decoded) if callable(prepare) else decoded

    workers = resolve_num_workers(num_workers)
    results = ordered_map(decode, [sha for shas_of in to_decode for sha in shas_of], num_workers=workers,
                          ahead=prefetch_items(workers, max(1, backend.batch_size)))
    with closing(results):  # an error or an interrupt stops the workers at once
        for part, distinct in zip(chunks, to_decode):
            decoded = {sha: next(results) for sha in distinct}
            got = backend.ask([decoded[sha] for sha, _ in part], [q for _, q in part])
            if len(got) != len(part):
                raise RuntimeError(f"VQA backend {backend!r} returned {len(got)} replies for {len(part)} questions")
            new = {(q.cache_key, sha): str(r) for (sha, q), r in zip(part, got)}
            replies.update(new)
            if cache is not None:
                cache.put(config_hash, new, config=backend.config)
            if bar is not None:
                bar.update(len(part))
    if bar is not None:
        bar.close()
    label_cols: list[str] = []
    for img in images:
        for k in img.labels:
            if k not in label_cols and k not in ANSWER_COLUMNS:
                label_cols.append(k)
    rows = []
    for img, sha in zip(images, shas):
        for q in bank:
            reply = replies[(q.cache_key, sha)]
            parsed = parse_answer(reply, q.choices, q.none_option)
            rating = q.rating_of(parsed.choice) if parsed.choice is not None else None
            rows.append({
                "image": img.name, "image_sha256": sha, "question_id": q.id, "kind": q.kind, "reply": reply,
                "status": parsed.status, "choice": parsed.choice,
                "rating": float(rating) if rating is not None else math.nan,
                "cached": (q.cache_key, sha) in from_cache,
                **{k: img.labels.get(k) for k in label_cols},
            })
    df = pd.DataFrame(rows, columns=ANSWER_COLUMNS + label_cols)
    df.attrs.update(
        vqa_model=backend.model_id,
        vqa_config=backend.config,
        vqa_config_hash=config_hash,
        question_bank=bank.label,
        answer_stats=AnswerStats(len(images), len(first_of), len(pairs), len(from_cache), len(todo)).as_dict(),
        num_workers=workers,
    )
    return df


def run_geodiv(
    images: Sequence[GeoDivImage],
    backend: VQABackend,
    *,
    group_by: str | Sequence[str] = "country",
    bank: QuestionBank | str | None = None,
    cache: AnswerCache | None = None,
    progress: bool = False,
    num_workers: int | None = None,
) -> tuple[pd.DataFrame, GeoDivTables]:
    """(answers table, diversity tables): :func:`answer_questions` then :func:`diversity_tables`."""
    bank = load_question_bank(bank)
    answers = answer_questions(images, bank, backend, cache=cache, progress=progress, num_workers=num_workers)
    return answers, diversity_tables(answers, bank, group_by)
