"""The one exception type curation raises for problems a user can fix (printed without a traceback)."""

from __future__ import annotations

from ..errors import GeoFidelityError


class CurationError(GeoFidelityError, RuntimeError):
    """A curation input, service or stage failed; the message says what and how to go on."""
