import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs two pytest-xdist workers on a 2-core machine: one OpenMP thread each (and in
    # every subprocess they start), or spinning threads oversubscribe the cores (measured 10x slower).
    os.environ["OMP_NUM_THREADS"] = "1"

import sys

import pytest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # shared test helpers (tests/_serving.py)


@pytest.fixture(scope="module")
def listener():
    """A listening loopback socket the sandbox tests own (one per test module): a contained checker
    never connects to it."""
    import socket

    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    yield srv
    srv.close()
