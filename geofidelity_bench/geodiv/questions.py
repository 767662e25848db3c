"""The GeoDiv question bank: a versioned data file of multiple-choice questions (docs/benchmark.md section 9, GeoDiv).

The bank shipped with the package (``data/geodiv_questions_v1.json``) is written for street
scenes: two SEVI rating questions (affluence, maintenance; 5 labelled levels each) and VDI
questions about the street's built form (``kind == "entity"``) and its context
(``kind == "background"``). Every VDI question is asked with its options plus the bank's
"none of the above" option; SEVI questions have exactly their 5 levels.

A bank is plain data (JSON, or YAML if PyYAML is installed)::

    {"name": ..., "version": "1.0.0", "none_option": "None of the above",
     "questions": [{"id": ..., "kind": "sevi" | "entity" | "background", "attribute": ...,
                    "question": ..., "options": [...], "ratings": [1, 2, 3, 4, 5]  # sevi only
                   }, ...]}

:func:`format_prompt` turns a question into the text the VQA model sees (lettered options,
"Answer with the letter"); :attr:`Question.fingerprint` hashes exactly what the model is asked,
so cached answers never outlive an edit of the question.
"""

from __future__ import annotations

import hashlib
import json
import os
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from ..errors import GeoFidelityError

KINDS = ("sevi", "entity", "background")
VDI_KINDS = ("entity", "background")
#: Version of :func:`format_prompt`'s layout; part of every question fingerprint.
PROMPT_FORMAT = "geodiv-mcq/1"
DEFAULT_BANK_FILE = "geodiv_questions_v1.json"
_LETTERS = string.ascii_uppercase


class QuestionBankError(GeoFidelityError, ValueError):
    """A question bank file is missing or malformed; the message names the file and the question."""


@dataclass(frozen=True)
class Question:
    """One multiple-choice question.

    Attributes:
        id: unique id within the bank (``"entity_facade_material"``).
        kind: ``"sevi"``, ``"entity"`` or ``"background"``.
        attribute: what is asked about, in words (``"facade material"``).
        text: the question as the model reads it.
        options: the answer options, in the order they are lettered (A, B, ...).
        none_option: the "none of the above" text appended after ``options`` (VDI), or None (SEVI).
        ratings: for SEVI, the rating of each option (1..5); None otherwise.
    """

    id: str
    kind: str
    attribute: str
    text: str
    options: tuple[str, ...]
    none_option: str | None = None
    ratings: tuple[int, ...] | None = None

    @property
    def choices(self) -> tuple[str, ...]:
        """What the model chooses among, in letter order: the options, then the none option if any."""
        return self.options + ((self.none_option,) if self.none_option else ())

    @property
    def letters(self) -> tuple[str, ...]:
        return tuple(_LETTERS[: len(self.choices)])

    @property
    def n_options(self) -> int:
        """|A|: the number of real options (the none option not included)."""
        return len(self.options)

    @property
    def prompt(self) -> str:
        return format_prompt(self)

    @property
    def fingerprint(self) -> str:
        """sha256 (first 16 hex digits) of the prompt format, id and exact prompt text."""
        raw = f"{PROMPT_FORMAT}\n{self.id}\n{self.prompt}".encode("utf-8")
        return hashlib.sha256(raw).hexdigest()[:16]

    @property
    def cache_key(self) -> str:
        """``{id}@{fingerprint}``: how the answer cache names this question."""
        return f"{self.id}@{self.fingerprint}"

    def rating_of(self, choice: str) -> int | None:
        if self.ratings is None or choice not in self.options:
            return None
        return self.ratings[self.options.index(choice)]


def format_prompt(question: Question) -> str:
    """The multiple-choice prompt: the question, one ``"A. option"`` line per choice, the instruction.

    Example:
        >>> q = Question("q", "entity", "x", "What is the road made of?", ("Asphalt", "Gravel"), "None of the above")
        >>> print(format_prompt(q))
        What is the road made of?
        A. Asphalt
        B. Gravel
        C. None of the above
        Answer with the option's letter from the given choices directly.
    """
    lines = [question.text.strip()]
    lines += [f"{letter}. {choice}" for letter, choice in zip(question.letters, question.choices)]
    lines.append("Answer with the option's letter from the given choices directly.")
    return "\n".join(lines)


@dataclass(frozen=True)
class QuestionBank:
    """A versioned list of questions. Iterating yields the questions in file order."""

    name: str
    version: str
    questions: tuple[Question, ...]
    none_option: str
    source: str = ""
    description: str = ""
    _by_id: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._by_id.update({q.id: q for q in self.questions})

    def __iter__(self) -> Iterator[Question]:
        return iter(self.questions)

    def __len__(self) -> int:
        return len(self.questions)

    def __getitem__(self, question_id: str) -> Question:
        try:
            return self._by_id[question_id]
        except KeyError:
            raise KeyError(f"question bank {self.name} v{self.version} has no question {question_id!r}") from None

    def of_kind(self, *kinds: str) -> list[Question]:
        return [q for q in self.questions if q.kind in kinds]

    @property
    def label(self) -> str:
        """``name@version``, as recorded next to every result."""
        return f"{self.name}@{self.version}"

    @property
    def fingerprint(self) -> str:
        h = hashlib.sha256(f"{self.name}@{self.version}".encode())
        for q in self.questions:
            h.update(f"|{q.kind}|{q.cache_key}".encode())
        return h.hexdigest()

    def select(self, ids: Sequence[str] | None = None, kinds: Sequence[str] | None = None) -> "QuestionBank":
        """A bank restricted to some question ids and/or kinds (same name and version)."""
        chosen = [q for q in self.questions if (ids is None or q.id in ids) and (kinds is None or q.kind in kinds)]
        if ids is not None:
            missing = sorted(set(ids) - {q.id for q in self.questions})
            if missing:
                raise QuestionBankError(f"question bank {self.label} has no question(s) {missing}")
        return QuestionBank(self.name, self.version, tuple(chosen), self.none_option, self.source, self.description)

    def to_dict(self) -> dict[str, Any]:
        """The bank as data (the format :func:`load_question_bank` reads)."""
        out = []
        for q in self.questions:
            rec: dict[str, Any] = {"id": q.id, "kind": q.kind, "attribute": q.attribute, "question": q.text,
                                   "options": list(q.options)}
            if q.ratings is not None:
                rec["ratings"] = list(q.ratings)
            out.append(rec)
        return {"name": self.name, "version": self.version, "description": self.description,
                "none_option": self.none_option, "questions": out}


def default_question_bank_path() -> Path:
    """The bank shipped with the package."""
    return Path(__file__).resolve().parents[1] / "data" / DEFAULT_BANK_FILE


def _read(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise QuestionBankError(f"cannot read question bank {path}: {err}") from err
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as err:  # pragma: no cover - PyYAML comes with transformers
            raise QuestionBankError(f"reading {path} needs PyYAML (pip install pyyaml), or use JSON") from err
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise QuestionBankError(f"question bank {path} is not valid YAML: {err}") from err
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise QuestionBankError(f"question bank {path} is not valid JSON: {err}") from err


def _str(rec: Mapping[str, Any], key: str, where: str) -> str:
    value = rec.get(key)
    if not isinstance(value, str) or not value.strip():
        raise QuestionBankError(f"{where}: {key!r} must be a non-empty string, got {value!r}")
    return value.strip()


def question_bank_from_dict(data: Mapping[str, Any], source: str = "<dict>") -> QuestionBank:
    """Validates bank data (see the module docstring) and builds a :class:`QuestionBank`.

    Checks: name, version and none option present; ids unique; kinds known; options unique
    (case-insensitively), none of them a bare letter or the none option; at most 25 options
    (26 letters with the none option); SEVI questions have exactly 5 options rated 1..5.
    """
    if not isinstance(data, Mapping):
        raise QuestionBankError(f"{source}: a question bank must be a mapping, got {type(data).__name__}")
    name = _str(data, "name", source)
    version = str(data.get("version", "")).strip()
    if not version:
        raise QuestionBankError(f"{source}: the bank needs a 'version'")
    none_option = _str(data, "none_option", source)
    raw = data.get("questions")
    if not isinstance(raw, list) or not raw:
        raise QuestionBankError(f"{source}: 'questions' must be a non-empty list")
    questions, seen = [], set()
    for i, rec in enumerate(raw):
        where = f"{source}: questions[{i}]"
        if not isinstance(rec, Mapping):
            raise QuestionBankError(f"{where} must be a mapping")
        qid = _str(rec, "id", where)
        where = f"{source}: question {qid!r}"
        if qid in seen:
            raise QuestionBankError(f"{where}: duplicate id")
        seen.add(qid)
        kind = _str(rec, "kind", where)
        if kind not in KINDS:
            raise QuestionBankError(f"{where}: kind {kind!r} is not one of {KINDS}")
        options = rec.get("options")
        if not isinstance(options, list) or len(options) < 2 or not all(isinstance(o, str) and o.strip() for o in options):
            raise QuestionBankError(f"{where}: 'options' must be a list of at least 2 non-empty strings")
        options = [o.strip() for o in options]
        lowered = [o.casefold() for o in options]
        if len(set(lowered)) != len(lowered):
            raise QuestionBankError(f"{where}: options repeat (compared case-insensitively)")
        if none_option.casefold() in lowered:
            raise QuestionBankError(f"{where}: the none option {none_option!r} is added automatically; do not list it")
        bare = [o for o in options if len(o) == 1 and o.isalpha()]
        if bare:
            raise QuestionBankError(f"{where}: options {bare} are bare letters and would be confused with answer letters")
        ratings = None
        if kind == "sevi":
            ratings = rec.get("ratings", list(range(1, len(options) + 1)))
            if len(options) != 5 or list(ratings) != [1, 2, 3, 4, 5]:
                raise QuestionBankError(f"{where}: a SEVI question has exactly 5 options rated [1, 2, 3, 4, 5]")
            ratings = tuple(int(r) for r in ratings)
        elif "ratings" in rec:
            raise QuestionBankError(f"{where}: only SEVI questions have 'ratings'")
        n_choices = len(options) + (0 if kind == "sevi" else 1)
        if n_choices > len(_LETTERS):
            raise QuestionBankError(f"{where}: {n_choices} choices do not fit the letters A-Z")
        questions.append(
            Question(
                id=qid,
                kind=kind,
                attribute=str(rec.get("attribute") or qid),
                text=_str(rec, "question", where),
                options=tuple(options),
                none_option=None if kind == "sevi" else none_option,
                ratings=ratings,
            )
        )
    return QuestionBank(name, version, tuple(questions), none_option, source, str(data.get("description", "")))


def load_question_bank(path: str | os.PathLike | QuestionBank | None = None) -> QuestionBank:
    """Loads a question bank: ``None`` -> the shipped bank; a path to a JSON/YAML file; a bank -> itself.

    Example:
        >>> bank = load_question_bank()
        >>> bank.label, len(bank.of_kind("sevi"))
        ('geodiv-street@1.0.0', 2)
    """
    if isinstance(path, QuestionBank):
        return path
    file = default_question_bank_path() if path is None else Path(path).expanduser()
    if not file.is_file():
        raise QuestionBankError(f"question bank file not found: {file}")
    return question_bank_from_dict(_read(file), source=str(file) if path is not None else DEFAULT_BANK_FILE)
