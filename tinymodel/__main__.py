"""``python -m tinymodel [--out DIR] [--scale full|ci] [--seed N]``: build the embedded model."""

import os
import sys

from tinymodel import BUILD_KERNELS

for name, value in BUILD_KERNELS.items():  # before torch loads: it reads them once
    os.environ.setdefault(name, value)

from tinymodel.build import main

sys.exit(main())
