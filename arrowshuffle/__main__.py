"""``python -m arrowshuffle``: the ``arrowshuffle`` command."""

import sys

from arrowshuffle.cli import main

sys.exit(main())
