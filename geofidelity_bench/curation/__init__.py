"""Building a benchmark from OpenStreetMap and Mapillary (SPEC section 8)."""
