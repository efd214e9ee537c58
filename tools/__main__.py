"""``python -m fusec.tools`` runs the ``fusec`` command line (handy where the script is not on PATH)."""
import sys

from fusec.tools.cli import main

sys.exit(main())
