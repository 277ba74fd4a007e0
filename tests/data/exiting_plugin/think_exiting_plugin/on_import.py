"""A plugin module that calls ``sys.exit()`` at import time, as a careless script would."""

import sys

sys.exit(3)
