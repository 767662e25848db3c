"""The app tells the printed table's and the report's truth (issue 39, the app's side): a results table of
two encoders is never averaged into one row."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("gradio", reason="the app needs gradio (pip install -e '.[app]')")

from geofidelity_bench.evaluation import RESULT_COLUMNS


def _row(**values) -> dict:
    row = {c: np.nan for c in RESULT_COLUMNS}
    row.update(values)
    return row


def test_app_refuses_results_of_two_encoders_as_the_report_does(tmp_path):
    """Issue 39 case 2: a results.csv with dinov2-base and clip-vit-b32 rows of the same 6 blocks was one
    "SDXL L1" row averaging both; the app refuses it, naming the file and the encoders, like `report`."""
    from geofidelity_bench.demo_app import results as lb
    from geofidelity_bench.demo_app.uploads import UploadError, read_uploaded_results
    from geofidelity_bench.results import ResultsFolderError, check_encoders

    rows = [_row(method="sdxl", condition="L1", block_id=f"b{i}", encoder=enc, n_generated=4.0, n_distinct=4.0,
                 cos_sim=0.4 + 0.05 * i + (0.2 if enc == "clip-vit-b32" else 0.0), retrieval_acc=0.5, mrr=0.6)
            for enc in ("dinov2-base", "clip-vit-b32") for i in range(6)]
    df = pd.DataFrame(rows)
    with pytest.raises(ResultsFolderError):  # the report's rule refuses this file
        check_encoders(df, allow_mixed=False)
    path = tmp_path / "mixed.csv"
    df.to_csv(path, index=False)
    with pytest.raises(UploadError, match=r"mixed\.csv mixes encoders \(clip-vit-b32, dinov2-base\)"):
        read_uploaded_results(str(path), upload_root=tmp_path)
    with pytest.raises(lb.ResultsError, match="mixes encoders"):
        lb.leaderboard_table(df)  # never averaged, whichever way the rows arrive
    # one encoder alone is shown, its own 6 blocks
    one = lb.check_results(df[df["encoder"] == "dinov2-base"], "one.csv")
    table = lb.leaderboard_table(one)
    assert table["blocks"].tolist() == [6]
    assert table["CosSim ↑"].iloc[0] == pytest.approx(np.mean([0.4 + 0.05 * i for i in range(6)]), abs=1e-12)
