"""A plugin class whose constructor calls ``sys.exit()``."""

import sys


class ExitsOnConstruct:
    def __init__(self) -> None:
        sys.exit("exits_on_construct refuses to start")
