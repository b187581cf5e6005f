"""A chip of identical cores: kernel occupancy, work units, L2 reuse, the event loop over units."""
