"""``python -m tinymodel [--out DIR] [--scale full|ci] [--seed N]``: build the embedded model."""

import sys

from tinymodel.build import main

sys.exit(main())
