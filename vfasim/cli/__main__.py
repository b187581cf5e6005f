"""``python -m vfasim.cli``: the command line, as the ``vfasim`` script runs it."""

import sys

from vfasim.cli import main

sys.exit(main())
