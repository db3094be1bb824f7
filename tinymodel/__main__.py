"""``python -m tinymodel [--out DIR] [--scale full|ci] [--seed N]``: build the embedded model."""

import os
import sys

import runtime.quiet  # noqa: F401  before bitsandbytes loads (see its docstring)
from tinymodel import BUILD_KERNELS

for name, value in BUILD_KERNELS.items():  # before torch loads: it reads them once
    os.environ.setdefault(name, value)

from tinymodel.build import main

sys.exit(main())
