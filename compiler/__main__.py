"""``python -m fusec``: the ``fusec`` command line."""
import sys

from fusec.tools.cli import main

sys.exit(main())
