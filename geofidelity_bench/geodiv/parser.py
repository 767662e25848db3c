"""A strict parser of multiple-choice answers.

A model's reply counts as choosing option X only when it says exactly that: the letter
(``"B"``, ``"B."``, ``"(B)"``, ``"B)"``, ``"Answer: B"``, ``"The answer is B."``), the letter with
X's own text (``"B. Stone"``), or X's exact text, case-insensitively (``"stone"``). Everything
else is unparseable and counted, never guessed: empty replies, two letters (``"B or C"``,
``"BC"``), a letter whose text names another option (``"B. Brick"`` when B is Stone), a letter
outside the offered range, another option's text, hedging (``"maybe B"``, ``"B?"``) and any
added explanation.

Harmless decoration is removed first: surrounding whitespace, markdown emphasis or code
marks (``**B**``, `` `B` ``) and matching quotes. Bare letters must be upper case, as the
prompt shows them (a lone ``"a"`` is too easily an article); after ``"Answer:"`` either case
is read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

#: Status of a parsed answer.
OK, NONE, UNPARSEABLE = "ok", "none", "unparseable"

_DECORATION = "*_`\"' \t\r\n"
_PREFIX = re.compile(r"^(?:(?:the\s+)?(?:correct\s+|final\s+)?answer(?:\s+is)?|option|choice)\s*[:\-]?\s*", re.IGNORECASE)
_LETTER = re.compile(r"^(?:\((?P<a>[A-Za-z])\)|(?P<b>[A-Za-z])\)?)[.:]?$")
_LETTER_TEXT = re.compile(r"^(?:\((?P<a>[A-Za-z])\)\s*[.:\-]?|(?P<b>[A-Za-z])\s*[.:)\-])\s*(?P<text>.+?)$")


@dataclass(frozen=True)
class ParsedAnswer:
    """The outcome of parsing one reply.

    Attributes:
        status: ``"ok"`` (an option), ``"none"`` (the none-of-the-above choice) or ``"unparseable"``.
        choice: the chosen text (an option or the none option), None when unparseable.
        index: its position in the choices (0 = A), None when unparseable.
    """

    status: str
    choice: str | None = None
    index: int | None = None


def _strip(text: str) -> str:
    prev = None
    while prev != text:
        prev = text
        text = text.strip(_DECORATION)
        if text.endswith(".") and len(text) > 1 and text[-2] in _DECORATION:
            text = text[:-1]
    return text


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def parse_answer(reply: str | None, choices: Sequence[str], none_option: str | None = None) -> ParsedAnswer:
    """Maps a model's reply onto one of ``choices`` (lettered A, B, ... in order), or unparseable.

    Args:
        reply: the generated text (None counts as empty).
        choices: the choices in the order the prompt lettered them (options, then the none option).
        none_option: which choice is "none of the above" (its status is ``"none"``), if any.

    Example:
        >>> choices = ["Brick", "Stone", "None of the above"]
        >>> parse_answer("(B)", choices, "None of the above")
        ParsedAnswer(status='ok', choice='Stone', index=1)
        >>> parse_answer("C.", choices, "None of the above").status
        'none'
        >>> parse_answer("B or C", choices).status
        'unparseable'
    """
    if not choices:
        raise ValueError("choices is empty")
    n = len(choices)

    def pick(i: int) -> ParsedAnswer:
        choice = choices[i]
        status = NONE if none_option is not None and choice == none_option else OK
        return ParsedAnswer(status, choice, i)

    def letter_index(letter: str, any_case: bool) -> int | None:
        if not any_case and not letter.isupper():
            return None
        i = ord(letter.upper()) - ord("A")
        return i if 0 <= i < n else None

    text = _strip(reply or "")
    if not text:
        return ParsedAnswer(UNPARSEABLE)
    normed = {_norm(c): i for i, c in enumerate(choices)}
    prefixed = _PREFIX.match(text)
    candidates = [(text, False)]
    if prefixed and prefixed.end() > 0:
        candidates.append((_strip(text[prefixed.end():]), True))
    for body, after_prefix in candidates:
        if not body:
            continue
        m = _LETTER.match(body)
        if m:
            i = letter_index(m.group("a") or m.group("b"), after_prefix)
            if i is not None:
                return pick(i)
            continue
        m = _LETTER_TEXT.match(body)
        if m:
            i = letter_index(m.group("a") or m.group("b"), after_prefix)
            if i is not None and _norm(_strip(m.group("text")).rstrip(".")) == _norm(choices[i]):
                return pick(i)
        key = _norm(body.rstrip(".")) if not body.endswith("..") else None
        if key in normed:
            return pick(normed[key])
    return ParsedAnswer(UNPARSEABLE)
