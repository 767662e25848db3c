"""Building a benchmark from OpenStreetMap and Mapillary (docs/benchmark.md section 8, Curation).

Modules, one concern each:

* :mod:`.osm` - Overpass client and offline OSM readers (XML, bz2, PBF) -> named ways, place nodes;
* :mod:`.carving` - block carving (strata, spacing, truncation, neighborhoods, block ids);
* :mod:`.streets` - streets from OSM ways (merged chains by default, single ways under the release rules);
* :mod:`.neighborhoods` - neighborhood labels (areas, place nodes; never invented by default);
* :mod:`.mapillary` - Graph API v4 search boxes, pagination, retries, resumable downloads;
* :mod:`.solar` - NOAA solar position (tier 1's sun elevation);
* :mod:`.filters` - spatial filter and tiers 1, 3, 4, 5 as measurement tables;
* :mod:`.negatives` - retrieval negatives;
* :mod:`.pipeline` - the checkpointed run that writes a benchmark folder;
* :mod:`.runner` - :func:`run_curation`: the clients and the run from options (the ``curate`` command);
* :mod:`.cities` - the 25 release cities and user city files.

Importing this package loads no model and touches no network.
"""

from .carving import CarveParams, carve_blocks, read_blocks_table, write_blocks_table
from .cities import BUILTIN_CITIES, CitySpec, load_city_file, resolve_cities
from .errors import CurationError
from .filters import FilterThresholds, TIER3_TEXTS, image_statistics
from .http import RetryPolicy, redact
from .mapillary import MapillaryClient, search_boxes
from .negatives import assign_negatives
from .osm import OsmData, OverpassClient, PlaceNode, WayRecord, read_osm_file
from .pipeline import CurationConfig, CurationResult, Curator
from .runner import run_curation
from .solar import solar_position, sun_elevation_deg

__all__ = [
    "BUILTIN_CITIES",
    "CarveParams",
    "CitySpec",
    "CurationConfig",
    "CurationError",
    "CurationResult",
    "Curator",
    "FilterThresholds",
    "MapillaryClient",
    "OsmData",
    "OverpassClient",
    "PlaceNode",
    "RetryPolicy",
    "TIER3_TEXTS",
    "WayRecord",
    "assign_negatives",
    "carve_blocks",
    "image_statistics",
    "load_city_file",
    "read_blocks_table",
    "read_osm_file",
    "redact",
    "resolve_cities",
    "run_curation",
    "search_boxes",
    "solar_position",
    "sun_elevation_deg",
    "write_blocks_table",
]
