"""``python -m muxplm`` is the ``muxplm`` command."""

import sys

from .cli import main

sys.exit(main())
