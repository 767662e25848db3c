"""geofidelity_bench.values: the optional-value parsers shared by benchmark.py (records) and release_import (text)."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest

from geofidelity_bench import values
from geofidelity_bench.values import NULL_WORDS, BadValue, is_missing, opt_float, opt_int, opt_str

NAN = float("nan")


def _check_both(parse, kind, value, records, text):
    """``parse`` gives ``records`` without and ``text`` with ``text=True`` (an exception class: raises it)."""
    for as_text, expected in ((False, records), (True, text)):
        if isinstance(expected, type):
            with pytest.raises(expected):
                parse(value, "field", text=as_text)
        else:
            out = parse(value, "field", text=as_text)
            assert out == expected and (out is None or type(out) is kind)


@pytest.mark.parametrize(
    "value, records, text",
    [
        (None, None, None),
        (NAN, None, None),
        (np.float64("nan"), None, None),  # a float subclass: missing in both
        ("", None, None),
        ("  \t", None, None),
        ("x", "x", "x"),
        ("  Rue de Rivoli ", "  Rue de Rivoli ", "Rue de Rivoli"),  # records keep the string as written
        ("nan", "nan", None),  # only the text convention knows spelled-out nulls ...
        (" N/A ", " N/A ", None),
        ("NULL", "NULL", None),
        ("None", "None", None),
        ("na", "na", None),
        ("NaNa", "NaNa", "NaNa"),  # ... and only whole words
        (12, "12", "12"),
        (2.5, "2.5", "2.5"),
        (True, "True", "True"),
    ],
)
def test_opt_str(value, records, text):
    assert opt_str(value) == records
    assert opt_str(value, text=True) == text


@pytest.mark.parametrize(
    "value, records, text",
    [
        (None, None, None),
        (NAN, None, None),
        ("nan", None, None),  # float("nan") is NaN -> None; in text "nan" is a null word
        (" 2.5 ", 2.5, 2.5),  # float() itself ignores surrounding blanks
        ("1e3", 1000.0, 1000.0),
        ("-0.25", -0.25, -0.25),
        (7, 7.0, 7.0),
        ("inf", math.inf, math.inf),
        ("NA", ValueError, None),  # records: float("NA") fails; text: a null word
        ("", ValueError, None),
        ("abc", ValueError, BadValue),
    ],
)
def test_opt_float(value, records, text):
    _check_both(opt_float, float, value, records, text)


def test_opt_float_text_error_names_the_field_and_value():
    with pytest.raises(BadValue, match=r"^compass_angle='north' is not a number$"):
        opt_float(" north ", "compass_angle", text=True)
    # records keep float()'s own error (not a BadValue)
    with pytest.raises(ValueError) as info:
        opt_float("north")
    assert not isinstance(info.value, BadValue)


def test_opt_float_np_float32_differs_only_by_design():
    # records convert the number itself; text reads its printed form ("0.1")
    x = np.float32(0.1)
    assert opt_float(x) == 0.10000000149011612
    assert opt_float(x, "q", text=True) == 0.1


@pytest.mark.parametrize(
    "value, records, text",
    [
        (None, None, None),
        (NAN, None, None),
        ("", ValueError, None),
        ("12", 12, 12),
        (" 12 ", 12, 12),  # int() ignores surrounding blanks
        ("-3", -3, -3),
        ("12.0", ValueError, 12),  # text: an integral float (a float64 column) is an integer
        ("1e3", ValueError, 1000),
        ("3.7", ValueError, BadValue),
        ("abc", ValueError, BadValue),
        (12.0, 12, 12),
        (3.7, 3, BadValue),  # records truncate like int(); text refuses a fraction
        (np.int64(9), 9, 9),
        ("n/a", ValueError, None),
    ],
)
def test_opt_int(value, records, text):
    _check_both(opt_int, int, value, records, text)


def test_opt_int_text_error_names_the_field_and_value():
    with pytest.raises(BadValue, match=r"^sample_index='1.5' is not an integer$"):
        opt_int("1.5", "sample_index", text=True)
    with pytest.raises(BadValue, match=r"^sample_index='two' is not an integer$"):
        opt_int("two", "sample_index", text=True)


def test_is_missing_and_null_words():
    assert is_missing(None) and is_missing(NAN) and is_missing(np.float64("nan"))
    assert not is_missing("") and not is_missing("nan") and not is_missing(0) and not is_missing(np.float32("nan"))
    assert NULL_WORDS == {"", "nan", "none", "null", "na", "n/a"}
    assert issubclass(BadValue, ValueError)


def test_docstring_examples_run():
    result = doctest.testmod(values, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
