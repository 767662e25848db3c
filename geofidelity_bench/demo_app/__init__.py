"""The GeoFidelity-Bench demo app (Gradio): explore a benchmark's blocks, score your own generated
images against a block, browse a leaderboard, read what the scores mean.

    >>> from geofidelity_bench.demo_app import load_app_data, build_app, launch  # doctest: +SKIP
    >>> demo = build_app(load_app_data("demo", "efficientnet-lite0"))          # doctest: +SKIP
    >>> launch(demo, host="127.0.0.1", port=7860)                               # doctest: +SKIP

or ``geofidelity-bench app``. Offline it runs on the embedded demo benchmark with the offline
encoder; with network and weights on the Hub benchmark with DINOv2
(``geofidelity-bench app --benchmark user/name --encoder dinov2-base``).

Only :mod:`.ui` imports gradio; :mod:`.state`, :mod:`.uploads`, :mod:`.results`,
:mod:`.figures` and :mod:`.texts` are plain library code (the wording of :mod:`.texts` is meant
to be shared by every front end).
"""

from __future__ import annotations

from typing import Any

from .hub_board import HubBoard
from .state import AppData, PanelScore, block_choices, block_label, city_choices, load_app_data
from .uploads import MAX_IMAGE_BYTES, MAX_IMAGES, MAX_PIXELS, MIN_IMAGES, UploadError, read_uploaded_images


def build_app(data: AppData, hub_board: HubBoard | None = None):
    """The Gradio Blocks of the app (imports gradio); ``hub_board`` adds the Hub leaderboard tab."""
    from .ui import build_app as _build

    return _build(data, hub_board)


def network_exposure_warning(host: str | None, port: int | None = None) -> str | None:
    """The warning for a listening address other than this machine's loopback (None for 127.0.0.1,
    ``localhost``, ``::1``): with ``0.0.0.0``, ``::`` or a network address, anyone who can reach the
    machine can use the app and upload files to it."""
    import ipaddress

    if host is None or host.strip().lower() == "localhost":
        return None
    try:
        if ipaddress.ip_address(host.strip("[]")).is_loopback:
            return None
    except ValueError:  # a host name other than localhost: it may resolve to a network address
        pass
    return (f"warning: --host {host}: the app is reachable from the network, not only from this machine: anyone "
            f"who can reach it on port {port or 7860} can use it and upload files to it (it has no login); use "
            "--host 127.0.0.1 to keep it local")


def launch(demo, *, host: str | None = "127.0.0.1", port: int | None = None, **kwargs: Any):
    """Launches ``demo`` locally (never with a public share link)."""
    from .ui import launch as _launch

    return _launch(demo, host=host, port=port, **kwargs)


__all__ = [
    "AppData",
    "HubBoard",
    "MAX_IMAGES",
    "MAX_IMAGE_BYTES",
    "MAX_PIXELS",
    "MIN_IMAGES",
    "PanelScore",
    "UploadError",
    "block_choices",
    "block_label",
    "build_app",
    "city_choices",
    "launch",
    "load_app_data",
    "network_exposure_warning",
    "read_uploaded_images",
]
