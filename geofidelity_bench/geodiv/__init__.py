"""GeoDiv: geographic diversity of image sets through VQA (docs/benchmark.md section 9, GeoDiv).

A vision-language model answers a versioned bank of multiple-choice questions about every
image (SEVI affluence and maintenance ratings; VDI questions on the street's built form and
its background); a strict parser maps each reply to an option or counts it as unparseable;
per group (country, city, model, condition, ...) the answer distributions give normalized
Hill numbers (:func:`geofidelity_bench.metrics.normalized_hill`) and mean ratings.

    >>> from geofidelity_bench.geodiv import (                                   # doctest: +SKIP
    ...     AnswerCache, TransformersVQA, generated_images, run_geodiv)
    >>> bench = load_benchmark("demo")                                           # doctest: +SKIP
    >>> images = generated_images("generated/", bench)                           # doctest: +SKIP
    >>> answers, tables = run_geodiv(images, TransformersVQA(), group_by=["model", "country"],
    ...                              cache=AnswerCache())                        # doctest: +SKIP
    >>> tables.per_group[["model", "country", "affluence_mean", "entity_diversity"]]  # doctest: +SKIP

Importing this package is cheap (names load on first use); it never loads torch or transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "AnswerCache": "cache",
    "default_answer_cache_dir": "cache",
    "MIN_COVERAGE": "diversity",
    "NONE_SHARE_THRESHOLD": "diversity",
    "GeoDivTables": "diversity",
    "QuestionScore": "diversity",
    "diversity_tables": "diversity",
    "score_question": "diversity",
    "NONE": "parser",
    "OK": "parser",
    "UNPARSEABLE": "parser",
    "ParsedAnswer": "parser",
    "parse_answer": "parser",
    "GeoDivRun": "outputs",
    "run_geodiv_to_folder": "outputs",
    "GeoDivImage": "pipeline",
    "answer_questions": "pipeline",
    "run_geodiv": "pipeline",
    "Question": "questions",
    "QuestionBank": "questions",
    "QuestionBankError": "questions",
    "default_question_bank_path": "questions",
    "format_prompt": "questions",
    "load_question_bank": "questions",
    "question_bank_from_dict": "questions",
    "REAL_REFERENCES": "sources",
    "REAL_WORLD": "sources",
    "GeoDivInputError": "sources",
    "ORIGIN": "sources",
    "generated_images": "sources",
    "keep_sources_apart": "sources",
    "labelled_folder_images": "sources",
    "reference_images": "sources",
    "SizeMatching": "size_matching",
    "DEFAULT_VQA_MODEL": "vqa",
    "TransformersVQA": "vqa",
    "VQABackend": "vqa",
    "VQAPluginError": "vqa",
    "VQAUnavailableError": "vqa",
    "get_vqa_backend": "vqa",
    "is_vqa_plugin": "vqa",
    "load_vqa_plugin": "vqa",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'geofidelity_bench.geodiv' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return __all__
