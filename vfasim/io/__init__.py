"""Where the package meets the file system and the process: atomic outputs, Q/K/V files, interrupts, the
reference cache."""
