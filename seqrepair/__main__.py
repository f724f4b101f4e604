"""``python -m seqrepair ...``: the ``seqrepair`` command."""

import sys

from seqrepair.cli import main

sys.exit(main())
