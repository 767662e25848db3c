"""One call from options to a curated benchmark folder: the Overpass and Mapillary clients, the
:class:`~.pipeline.Curator` and its run (what ``geofidelity-bench curate`` does).

    >>> from geofidelity_bench.curation import CurationConfig, RetryPolicy, resolve_cities  # doctest: +SKIP
    >>> from geofidelity_bench.curation.runner import run_curation                          # doctest: +SKIP
    >>> result = run_curation(resolve_cities(["lund"]), "bench/", CurationConfig(skip_tier3=True),
    ...                       retry=RetryPolicy(max_rate_retries=10))                        # doctest: +SKIP
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Mapping, Sequence

from .cities import CitySpec
from .errors import CurationError
from .http import RetryPolicy, redact
from .mapillary import MAPILLARY_URL, TOKEN_ENV, MapillaryClient
from .osm import DEFAULT_OVERPASS_ENDPOINTS, OverpassClient
from .pipeline import CurationConfig, CurationResult, Curator


def run_curation(
    cities: Sequence[CitySpec],
    out_dir: str | os.PathLike,
    config: CurationConfig | None = None,
    *,
    osm_files: Mapping[str, str | os.PathLike] | None = None,
    overpass_endpoints: Sequence[str] | None = None,
    mapillary_url: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    timeout_s: float = 60.0,
    max_workers: int = 8,
    retry: RetryPolicy | None = None,
    log: Callable[[str], None] | None = None,
) -> CurationResult:
    """Curates ``cities`` into ``out_dir`` (resuming from ``out_dir/_work``).

    Args:
        cities: the cities (:func:`~.cities.resolve_cities`).
        out_dir: the benchmark folder.
        config: what curation produces (:class:`~.pipeline.CurationConfig`).
        osm_files: city key -> OSM extract carved offline instead of querying Overpass.
        overpass_endpoints: Overpass interpreter URLs, tried in order (default: the public ones).
        mapillary_url: the Graph API root (default https://graph.mapillary.com).
        cache_dir: the Overpass response cache (default ``out_dir/_work/overpass_cache``).
        timeout_s: socket timeout of one HTTP request.
        max_workers: parallel Mapillary requests.
        retry: the retry policy of both clients (default :class:`~.http.RetryPolicy`), recorded
            in ``curation_summary.json``.
        log: where progress messages go (default: stderr).

    Raises:
        CurationError: a bad input, a missing token or model, a service that stays down; the
            message never holds the Mapillary token.
    """
    retry = retry or RetryPolicy()
    out = Path(out_dir)
    try:
        overpass = OverpassClient(overpass_endpoints or DEFAULT_OVERPASS_ENDPOINTS,
                                  cache_dir=Path(cache_dir) if cache_dir else out / "_work" / "overpass_cache",
                                  timeout_s=timeout_s, retry=retry)

        def make_client() -> MapillaryClient:
            return MapillaryClient(base_url=mapillary_url or MAPILLARY_URL, max_workers=max_workers,
                                   timeout_s=timeout_s, retry=retry)

        curator = Curator(cities, out, config, osm_files=osm_files, overpass=overpass, mapillary=make_client,
                          log=log, retry=retry)
        return curator.run()
    except CurationError as err:
        raise CurationError(redact(err, [os.environ.get(TOKEN_ENV)])) from None
