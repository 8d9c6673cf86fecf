"""`transformers serve` on loopback for tests: a real OpenAI-compatible server, offline."""

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve_cli() -> str | None:
    exe = Path(sys.executable).with_name("transformers")
    return str(exe) if exe.exists() else shutil.which("transformers")


@contextlib.contextmanager
def serving(folder: str | None, log_path: Path, port: int | None = None, procs: list | None = None):
    """`transformers serve FOLDER` on a free loopback port (or `port`), offline; yields its /v1 URL. With
    folder None the server is not pinned to one model: it loads whatever folder a request names. `procs`
    gets the server's Popen (a test that kills the server mid-run)."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    cli = _serve_cli()
    if cli is None:
        pytest.skip("the `transformers` CLI is not installed")
    port = port or free_port()
    # One OpenMP thread: on a small shared CPU, spinning threads make the server 10x slower.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    with log_path.open("w") as log:  # a file, not a pipe: a full pipe would block the server
        proc = subprocess.Popen(
            [cli, "serve", *([folder] if folder else []), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )
        if procs is not None:
            procs.append(proc)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    pytest.fail(f"transformers serve exited ({proc.returncode}):\n{log_path.read_text()[-3000:]}")
                try:
                    if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.5)
            else:
                pytest.fail("transformers serve did not come up within 180 s")
            yield f"{base}/v1"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
