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


@pytest.fixture
def gpu_env(tmp_path, monkeypatch):
    """GPU recipes name their model folders through environment variables: point them at stand-ins."""
    for var in ("KIT_AGENT_MODEL", "KIT_USER_MODEL"):
        d = tmp_path / var
        d.mkdir()
        (d / "config.json").write_text("{}")
        monkeypatch.setenv(var, str(d))


@pytest.fixture(scope="session")
def tiny_chain(tmp_path_factory):
    """The tiny whole chain under papermill (tests/_tiny_chain.py), once per worker: mark its users
    `xdist_group("tiny_chain")`."""
    from _tiny_chain import run_tiny_chain

    return run_tiny_chain(tmp_path_factory.mktemp("tiny_chain"))


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


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """`--dist loadgroup` (make test) sends the tests of one `xdist_group` to one worker, so that they share
    their expensive module fixture. pytest-xdist 3.8 marks a grouped test by appending '@<group>' to
    `item._nodeid`, which pytest 9 no longer reads (the node id is `item._id`): every group was split over
    both workers and each built its fixture (the engine's shared run: 2 x 110 s in CI). Marked here the way
    pytest 9 reads it; a no-op where xdist's own marking worked."""
    if not os.environ.get("PYTEST_XDIST_WORKER") or not getattr(config.option, "loadgroup", False):
        return
    # Longest first: xdist hands out work units in collection order (groups of several tests before single
    # ones), so a long test collected late (the rehearsal, ~8 min) would start late and leave the other
    # worker idle at the end. Slow tests first, the many short ones last to even out the two workers.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # pytest < 9: xdist's own marking works
        return
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if names and "@" not in item.nodeid and hasattr(item, "_id"):
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")
