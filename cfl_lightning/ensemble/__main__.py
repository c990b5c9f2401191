"""``python -m cfl_lightning.ensemble SPEC.json``: see :mod:`cfl_lightning.ensemble.run`."""

import sys

from cfl_lightning.ensemble.run import main

sys.exit(main())
