"""``python -m raylog.cli``: the ``raylog`` command."""

import sys

from raylog.cli import main

sys.exit(main())
