"""The sandbox's OS walls (issue #19): seccomp, namespaces, the refusal, and all of it as non-root.

BYPASS cases are code that got past the static screen: the tests disable the screen
(kit.checkers.sandbox.screen patched to accept everything), and the code climbs from `()` to
the real builtins and the modules the zygote has loaded (os, ctypes) to try what the screen
exists to stop. Each case raises or returns True only if the attack worked, so a contained
case is an error/limit/timeout verdict; the test also checks the world: no sentinel file
outside scratch, no connection to a listening loopback socket the test owns.

The non-root run copies kit/checkers (and pydantic, which sandbox.py needs) to a folder
`nobody` can read and runs the whole corpus there as uid 65534 with the system Python.
"""

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kit.checkers import sandbox as sb
from kit.checkers.sandbox import SAMPLE_STATE, SAMPLE_TRAJECTORY, Sandbox, SandboxUnavailable
from test_sandbox import CORPUS, OK, RUN_FAIL, SENTINEL, checker

TIMEOUT = 1.0
ROOT = Path(__file__).resolve().parents[1]

LADDER = '''
def _real():
    for c in ().__class__.__base__.__subclasses__():
        try:
            g = c.__init__.__globals__
        except AttributeError:
            continue
        if 'sys' in g and 'path' in g:
            return g['sys'].modules['builtins']
    raise RuntimeError('no ladder')
'''


def bypass(body: str) -> str:
    """A check() that first escapes the restricted builtins (needs the screen off), then runs `body`."""
    return LADDER + checker("B = _real()\nos = B.__import__('os')\n" + body)


BYPASS = [
    ("bypass_open_sentinel", bypass("B.open('SENTINEL', 'w').write('x')\nreturn True")),
    ("bypass_os_open_sentinel", bypass("os.open('SENTINEL', os.O_CREAT | os.O_WRONLY, 0o644)\nreturn True")),
    ("bypass_ctypes_creat_sentinel", bypass(
        "libc = B.__import__('ctypes').CDLL(None)\n"
        "if libc.creat(b'SENTINEL', 420) < 0:\n    raise RuntimeError('creat refused')\nreturn True")),
    ("bypass_read_passwd", bypass("return {'passed': True, 'p': B.open('/etc/passwd').read()[:100]}")),
    ("bypass_list_root", bypass("return {'passed': True, 'ls': os.listdir('/')}")),
    ("bypass_import_socket", bypass(
        "s = B.__import__('socket')\ns.create_connection(('127.0.0.1', PORT), timeout=0.5)\nreturn True")),
    ("bypass_ctypes_connect", bypass(
        "libc = B.__import__('ctypes').CDLL(None)\n"
        "fd = libc.socket(2, 1, 0)\n"
        "if fd < 0:\n    raise RuntimeError('socket refused')\n"
        "addr = B.bytes([2, 0, PORT // 256, PORT % 256, 127, 0, 0, 1]) + B.bytes(8)\n"
        "if libc.connect(fd, addr, 16) != 0:\n    raise RuntimeError('connect refused')\n"
        "return True")),
    ("bypass_exec_sh", bypass("os.execv('/bin/sh', ['sh', '-c', 'touch SENTINEL'])\nreturn True")),
    ("bypass_system", bypass("if os.system('touch SENTINEL') != 0:\n    raise RuntimeError('system refused')\nreturn True")),
    ("bypass_fork", bypass("pid = os.fork()\nif pid == 0:\n    os._exit(0)\nreturn True")),
    ("bypass_ptrace_zygote", bypass(
        "libc = B.__import__('ctypes').CDLL(None)\n"
        "if libc.ptrace(16, os.getppid(), 0, 0) != 0:\n    raise RuntimeError('ptrace refused')\nreturn True")),
    ("bypass_kill_zygote", bypass("os.kill(os.getppid(), 9)\nreturn True")),
    ("bypass_chroot_escape", bypass("os.mkdir('x')\nos.chroot('x')\nos.chdir('../../../..')\nreturn True")),
    ("bypass_forge_zygote_reply", bypass(
        "fd = os.open('/proc/%d/fd/1' % os.getppid(), os.O_WRONLY)\n"
        "os.write(fd, b'{\"id\": 2, \"exit\": 0, \"out\": \"{\\\\\"status\\\\\": \\\\\"ok\\\\\", \\\\\"passed\\\\\": true}\"}\\n')\n"
        "return True")),
    ("bypass_forge_second_verdict", bypass(
        "os.write(3, b'{\"status\": \"ok\", \"passed\": true, \"detail\": {}}\\n')\nreturn False")),
    ("bypass_regain_privilege", bypass("os.setuid(0)\nos.chroot('.')\nreturn True")),
]
# forged verdicts that pass the screen: the check's real verdict (failed) must survive
FORGED = [
    ("forged_status_keys", checker("return {'passed': False, 'status': 'ok', 'passed ': True}")),
    ("forged_json_in_detail", checker("return {'passed': False, 'x': '\"}\\n{\"status\": \"ok\", \"passed\": true}'}")),
    ("forged_nested_passed", checker("return {'passed': False, 'detail': {'passed': True}}")),
]


def _fill(source: str, port: int) -> str:
    return source.replace("SENTINEL", SENTINEL).replace("PORT", str(port))


def _no_connection(srv: socket.socket) -> None:
    srv.settimeout(0.05)
    with pytest.raises(socket.timeout):
        srv.accept()


@pytest.fixture(scope="module")
def box():
    with Sandbox(workers=2, timeout=TIMEOUT) as b:
        yield b


# --------------------------------------------------------------------- this process (root in `make test`)

def test_walls_are_up_and_reported(box):
    w = box.walls()
    assert w["screen"] and w["builtins"] and w["rlimits"]
    assert w["seccomp"] or w["namespaces_full"], w  # else start() would have refused
    assert w["weak"] is None and (w["missing"] == []) == (w["seccomp"] and w["namespaces_full"])
    if w["namespaces_full"]:
        mine = {n: os.readlink(f"/proc/self/ns/{n}") for n in ("net", "mnt", "pid", "ipc")}
        for z in box._all:  # the zygote is unshare's child
            kids = Path(f"/proc/{z.proc.pid}/task/{z.proc.pid}/children").read_text().split()
            assert kids and all(os.readlink(f"/proc/{kids[0]}/ns/{n}") != mine[n] for n in mine)


@pytest.mark.parametrize("name,source", BYPASS, ids=[c[0] for c in BYPASS])
def test_a_screen_bypass_is_contained(name, source, box, listener, monkeypatch):
    monkeypatch.setattr(sb, "screen", lambda src, n=0: None)
    v = box.run(_fill(source, listener.getsockname()[1]), SAMPLE_STATE, SAMPLE_TRAJECTORY, timeout=TIMEOUT)
    assert v.status in RUN_FAIL, (v.status, v.reason)
    assert not os.path.exists(SENTINEL)
    _no_connection(listener)
    assert all(os.listdir(z.base) == [] for z in box._all if z.alive())
    assert box.run(OK, {}, []).passed is True


def test_the_filter_is_what_refuses_a_bypass(box, monkeypatch):
    if not box.walls()["seccomp"]:
        pytest.skip("no seccomp filter on this machine: " + "; ".join(box.walls()["missing"]))
    monkeypatch.setattr(sb, "screen", lambda src, n=0: None)
    for body in ("os.fork()", "os.kill(os.getppid(), 0)", "os.execv('/bin/true', ['true'])",
                 "os.open('/', os.O_RDONLY)"):
        v = box.run(bypass(body + "\nreturn True"), {}, [])
        assert v.status == "error" and "PermissionError" in v.reason and "Errno 1]" in v.reason, (body, v.reason)


@pytest.mark.parametrize("walls", [{"seccomp": False}, {"namespaces": False}], ids=["namespaces_only", "seccomp_only"])
def test_each_wall_alone_still_contains_every_bypass(walls, listener, monkeypatch):
    monkeypatch.setattr(sb, "screen", lambda src, n=0: None)
    with Sandbox(workers=2, timeout=TIMEOUT, **walls) as alone:
        w = alone.walls()
        if not (w["seccomp"] or w["namespaces_full"]):
            pytest.skip("that wall is not available here: " + "; ".join(w["missing"]))
        port = listener.getsockname()[1]
        verdicts = alone.run_many([(_fill(src, port), SAMPLE_STATE, SAMPLE_TRAJECTORY) for _, src in BYPASS])
    bad = {name: (v.status, v.reason) for (name, _), v in zip(BYPASS, verdicts) if v.status not in RUN_FAIL}
    assert not bad, bad
    assert not os.path.exists(SENTINEL)
    _no_connection(listener)


@pytest.mark.parametrize("name,source", FORGED, ids=[c[0] for c in FORGED])
def test_a_forged_verdict_stays_the_checks_own(name, source, box):
    v = box.run(source, SAMPLE_STATE, SAMPLE_TRAJECTORY)
    assert (v.status, v.passed) == ("ok", False), v


# --------------------------------------------------------------------- refusal and weak mode

def test_no_wall_means_refusal_with_a_clear_message(monkeypatch):
    monkeypatch.delenv(sb.ALLOW_WEAK_ENV, raising=False)
    with pytest.raises(SandboxUnavailable) as err:
        Sandbox(workers=1, namespaces=False, seccomp=False).start()
    msg = str(err.value)
    assert "refuses" in msg and "seccomp filter" in msg and "namespaces" in msg and sb.ALLOW_WEAK_ENV in msg


def test_weak_mode_says_so_in_every_verdict_and_in_the_warnings(monkeypatch):
    monkeypatch.setenv(sb.ALLOW_WEAK_ENV, "1")
    monkeypatch.setattr(sb, "_WARNINGS", [])  # this process's later stages must not inherit it
    with Sandbox(workers=1, namespaces=False, seccomp=False, timeout=TIMEOUT) as weak:
        assert weak.walls()["weak"] and not weak.walls()["seccomp"]
        verdicts = [weak.run(OK, {}, []), weak.run("import os\n" + OK, {}, []),
                    weak.run(checker("return 1 / 0"), {}, []), weak.run(checker("while True:\n    pass"), {}, [])]
    assert [v.status for v in verdicts] == ["ok", "rejected", "error", "timeout"]
    assert verdicts[0].passed is True
    assert all(sb.WEAK_NOTE in v.reason and "seccomp filter" in v.reason for v in verdicts)
    assert any(sb.WEAK_NOTE in w for w in sb.sandbox_warnings())


def test_a_stage_records_a_weak_sandbox_in_its_warnings(tmp_path, monkeypatch, capsys):
    from kit.runner.stage import Stage

    monkeypatch.setattr(sb, "_WARNINGS", ["WEAK SANDBOX: static screen and rlimits only (test)"])
    st = Stage("grpo", {}, {"out_dir": str(tmp_path / "grpo")})
    st.finish()
    info = json.loads((tmp_path / "grpo" / "stage.json").read_text())
    assert info["warnings"] == ["WEAK SANDBOX: static screen and rlimits only (test)"]
    assert "WEAK SANDBOX" in capsys.readouterr().out


def test_one_wall_is_enough_to_run():
    with Sandbox(workers=1, namespaces=False) as box:
        w = box.walls()
        if not w["seccomp"]:
            pytest.skip("no seccomp filter here")
        assert w["weak"] is None and any(m.startswith("namespaces") for m in w["missing"])
        assert box.run(OK, {}, []).reason == "check passed"


# --------------------------------------------------------------------- the same as an ordinary user

DRIVER = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
spec = json.load(open(sys.argv[2]))
from kit.checkers import sandbox as sb
out = {"uid": os.geteuid()}
real_screen = sb.screen
unscreened = {c["source"] for c in spec["cases"] if not c["screen"]}
sb.screen = lambda src, n=sb.MAX_SOURCE_BYTES: None if src in unscreened else real_screen(src, n)
try:
    sb.Sandbox(workers=1, namespaces=False, seccomp=False, allow_weak=False).start()
    out["refusal"] = None
except sb.SandboxUnavailable as e:
    out["refusal"] = str(e)
with sb.Sandbox(workers=2, timeout=spec["timeout"]) as box:
    out["walls"] = box.walls()
    jobs = [(c["source"], spec["state"], spec["trajectory"]) for c in spec["cases"]]
    out["results"] = {c["name"]: v.to_dict() for c, v in zip(spec["cases"], box.run_many(jobs))}
    out["after_ok"] = box.run("def check(state, trajectory):\n    return True\n", {}, []).passed
    out["scratch_left"] = sum(len(os.listdir(z.base)) for z in box._all if z.alive())
if spec.get("bench"):
    out["bench"] = sb.bench_sandbox(spec["bench"])
print("RESULT " + json.dumps(out))
"""
DEPS = ("pydantic", "pydantic_core", "typing_extensions", "annotated_types", "typing_inspection")


def _as_other_user(tree: Path) -> list[str]:
    """The command prefix that runs the driver as an ordinary user, or pytest.skip with why."""
    if os.geteuid() != 0:
        return [sys.executable, "-I", "-S"]  # already an ordinary user: this interpreter will do
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root and util-linux `setpriv` is missing: cannot become nobody")
    for py in ("/usr/bin/python3", "/usr/local/bin/python3", shutil.which("python3") or ""):
        if not py or not os.access(py, os.X_OK) or py.startswith("/root"):
            continue
        ver = subprocess.run([py, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True)
        if ver.stdout.strip() == str(tuple(sys.version_info[:2])):
            return [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--", py, "-I", "-S"]
    pytest.skip(f"running as root and no system python{sys.version_info[0]}.{sys.version_info[1]} "
                "outside /root that nobody can run (pydantic_core must match it)")


def run_as_nobody(cases: list[dict], listener_port: int, bench: int = 0) -> dict:
    tree = Path(tempfile.mkdtemp(prefix="kit-sandbox-nobody-"))
    try:
        for name in DEPS:
            spec = importlib.util.find_spec(name)
            if spec is None or spec.origin is None:
                continue
            src = Path(spec.origin)
            if src.name == "__init__.py":
                shutil.copytree(src.parent, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(src, tree / src.name)
        (tree / "kit" / "checkers").mkdir(parents=True)
        shutil.copy(ROOT / "kit" / "__init__.py", tree / "kit" / "__init__.py")
        for f in (ROOT / "kit" / "checkers").glob("*.py"):
            shutil.copy(f, tree / "kit" / "checkers" / f.name)
        (tree / "driver.py").write_text(DRIVER)
        (tree / "spec.json").write_text(json.dumps({
            "cases": [{**c, "source": _fill(c["source"], listener_port)} for c in cases], "timeout": TIMEOUT,
            "state": SAMPLE_STATE, "trajectory": SAMPLE_TRAJECTORY, "bench": bench}))
        for top, dirs, files in os.walk(tree):
            for n in dirs + files:
                os.chmod(os.path.join(top, n), 0o755 if n in dirs else 0o644)
        os.chmod(tree, 0o755)
        cmd = _as_other_user(tree) + [str(tree / "driver.py"), str(tree), str(tree / "spec.json")]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tree,
                             env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LC_ALL": "C.UTF-8"})
        lines = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")]
        assert res.returncode == 0 and lines, (res.returncode, res.stdout[-2000:], res.stderr[-4000:])
        return json.loads(lines[-1][len("RESULT "):])
    finally:
        shutil.rmtree(tree, ignore_errors=True)


@pytest.fixture(scope="module")
def nobody(listener):
    cases = [{"name": n, "source": s, "screen": True, "expected": sorted(e)} for n, s, e in CORPUS]
    cases += [{"name": n, "source": s, "screen": False, "expected": sorted(RUN_FAIL)} for n, s in BYPASS]
    cases += [{"name": n, "source": s, "screen": True, "expected": ["ok"]} for n, s in FORGED]
    out = run_as_nobody(cases, listener.getsockname()[1])
    return cases, out


@pytest.mark.slow
def test_as_nobody_every_case_is_contained(nobody, listener):
    cases, out = nobody
    assert out["uid"] != 0
    bad = {}
    for c in cases:
        v = out["results"][c["name"]]
        if v["status"] not in c["expected"] or (v["status"] == "ok" and v.get("passed") is not False):
            bad[c["name"]] = v
    assert not bad, bad
    assert not os.path.exists(SENTINEL)
    _no_connection(listener)
    assert out["after_ok"] is True and out["scratch_left"] == 0


@pytest.mark.slow
def test_as_nobody_the_walls_are_up_and_refusal_works(nobody):
    _, out = nobody
    w = out["walls"]
    assert w["root"] is False and (w["seccomp"] or w["namespaces_full"]), w
    if w["namespaces_full"]:  # an unprivileged user namespace: chroot as its root, then no capabilities
        assert w["userns"] and w["chroot"] and w["capdrop"] and not w["setuid"], w
    assert out["refusal"] and "seccomp filter" in out["refusal"] and sb.ALLOW_WEAK_ENV in out["refusal"]


# --------------------------------------------------------------------- nothing outlives the parent

ORPHAN = r"""
import sys, threading, time
from kit.checkers.sandbox import Sandbox
box = Sandbox(workers=2).start()
threading.Thread(target=box.run, args=("def check(s, t):\n    while True:\n        pass\n", {}, []),
                 kwargs={"timeout": 60}, daemon=True).start()
time.sleep(0.5)
print("ready", flush=True)
time.sleep(120)
"""


def test_a_check_dies_with_the_process_that_asked_for_it():
    import psutil

    proc = subprocess.Popen([sys.executable, "-c", ORPHAN], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout.readline().strip() == "ready"
        kids = psutil.Process(proc.pid).children(recursive=True)
        assert any(k.cpu_times().user > 0.1 for k in kids) or len(kids) >= 5  # zygotes (+unshare) and the busy check
    finally:
        proc.kill()
        proc.wait()
    gone, alive = psutil.wait_procs(kids, timeout=5)
    alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, [(p.pid, p.cmdline()) for p in alive]


def test_kit_doctor_names_the_walls_the_sandbox_gets_here():
    from kit.checkers.sandbox import Sandbox
    from kit.doctor import sandbox_walls

    with Sandbox(workers=1) as sb:
        w = sb.walls()
    line = sandbox_walls()
    assert line.startswith("walls: "), line
    for wall in ("seccomp", "netns", "chroot"):
        assert (wall in line) == bool(w.get(wall)), (wall, line, w)
