"""`python -m fusefs`: the same as the `fusefs` command."""

import sys

from .cli import main

sys.exit(main())
