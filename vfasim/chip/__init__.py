"""A chip of identical cores: kernel styles and occupancy, work units, L2 reuse, the event loop over units."""
