"""`python -m observatory.scaling`: fit scaling laws to a CSV of rungs (see observatory/scaling/cli.py)."""

import sys

from observatory.scaling.cli import main

sys.exit(main())
