"""``python -m tinymodel [--out DIR] [--scale full|ci] [--seed N]``: build the embedded model."""

import os
import sys

from tinymodel import BUILD_KERNELS

for name, value in BUILD_KERNELS.items():  # before torch loads: it reads them once
    os.environ.setdefault(name, value)

from tinymodel.mkl import answer_intel

if (why_not := answer_intel()) is not None:  # before torch loads: MKL asks once
    print(f"python -m tinymodel: {why_not}; MKL takes its own path and the weights will differ", file=sys.stderr)

from tinymodel.build import main

sys.exit(main())
