"""`python -m interlayer`: the `interlayer` command."""

import sys

from .cli import main

sys.exit(main())
