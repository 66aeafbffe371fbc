"""``python -m muxplm`` is the ``muxplm`` command."""

import sys

from .cli import entry_point

sys.exit(entry_point())
