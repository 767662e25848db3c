"""The GeoFidelity-Bench demo Space: a thin launcher around ``geofidelity_bench.demo_app``.

Space variables (Settings -> Variables) choose what it serves:

- ``GEOFIDELITY_BENCHMARK``: ``demo`` (default, embedded, offline) or a Hub dataset id ``user/name``;
- ``GEOFIDELITY_ENCODER``: ``efficientnet-lite0`` (default, offline) or ``dinov2-base`` (the
  reference encoder; only its scores are comparable with the paper);
- ``GEOFIDELITY_RESULTS``: optional path of a results.csv in this repository for the leaderboard;
- ``GEOFIDELITY_RESULTS_REPO``: optional results repo ``org/name`` (``push-results``) shown on the
  "Hub leaderboard" tab, loaded at start and on refresh.

Locally: ``python app.py`` (listens on 127.0.0.1) or ``geofidelity-bench app``.
"""

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from geofidelity_bench.demo_app import HubBoard, build_app, launch, load_app_data  # noqa: E402

_repo = os.environ.get("GEOFIDELITY_RESULTS_REPO") or None
demo = build_app(
    load_app_data(
        os.environ.get("GEOFIDELITY_BENCHMARK", "demo"),
        os.environ.get("GEOFIDELITY_ENCODER", "efficientnet-lite0"),
        results_csv=os.environ.get("GEOFIDELITY_RESULTS") or None,
    ),
    HubBoard(_repo).refresh() if _repo else None,
)

if __name__ == "__main__":
    # host=None: $GRADIO_SERVER_NAME decides (Spaces sets 0.0.0.0), else 127.0.0.1. Never shared.
    launch(demo, host=None)
