"""`kit` as a user types it, with the stage notebooks taken from another folder (the stubs of
tests/test_runner.py: no model in the stages), for tests that drive `kit run` as a process:

    python tests/_kit_with_notebooks.py NOTEBOOKS_DIR run RECIPE --runs-dir ...
"""

import sys
from pathlib import Path

import kit.runner.execute as execute

execute.NOTEBOOKS_DIR = Path(sys.argv[1]).resolve()  # Runner's default notebooks folder

from kit.cli import main  # noqa: E402

sys.exit(main(sys.argv[2:]))
