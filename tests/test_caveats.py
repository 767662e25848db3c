"""The one wording of what a reader must be told next to a number (geofidelity_bench.caveats)."""

import pandas as pd
import pytest

from geofidelity_bench import caveats


def test_chance_sentence_says_one_in_k_or_the_mean():
    assert caveats.chance_sentence(0.25, 4) == "1 in 4 by chance here (4 candidates)"
    assert caveats.chance_sentence(1 / 3).startswith("1 in 3 by chance here")
    assert "0.29 by chance here" in caveats.chance_sentence(0.2875)
    assert caveats.chance_sentence(float("nan")) == "chance level unknown here"


def test_interval_caveat_thresholds_are_ten_blocks_and_five_cities():
    assert caveats.interval_caveat(10, 5) is None
    assert "9 block(s)" in caveats.interval_caveat(9, 5)
    assert "4 cities" in caveats.interval_caveat(10, 4)
    assert "1 city" in caveats.interval_caveat(10, 1)
    assert caveats.interval_caveat(10) is None
    assert caveats.bootstrap_text() == "5,000 bootstrap resamples, seed 42"


def test_thin_anchor_blocks_are_the_heldout_panels_that_repeat_photos():
    df = pd.DataFrame({
        "method": ["heldout_real", "heldout_real", "heldout_real", "random_global", "m"],
        "block_id": ["a", "b", "c", "d", "e"],
        "n_generated": [4, 4, 4, 4, 4],
        "n_distinct": [1, 4, float("nan"), 2, 1],
    })
    assert caveats.thin_anchor_blocks(df) == ["a"]  # NaN (not recorded) is not thin; other methods are not anchors
    assert caveats.thin_anchor_blocks(df.drop(columns="n_distinct")) == []
    assert caveats.thin_anchor_note(0, 7) is None
    assert caveats.thin_anchor_note(4, 7).startswith("4 of 7 block(s)")


def test_copied_mask_counts_only_positive_n_copied():
    df = pd.DataFrame({"n_copied": [0, 2, float("nan"), 1]})
    assert caveats.copied_mask(df).tolist() == [False, True, False, True]
    assert caveats.copied_mask(pd.DataFrame({"x": [1]})).tolist() == [False]
    assert caveats.copied_note(0, 0) is None
    assert "3 image(s) in 2 panel(s)" in caveats.copied_note(2, 3)
