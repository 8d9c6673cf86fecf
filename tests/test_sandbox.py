"""The checker sandbox (kit/checkers/sandbox.py) against hostile model-written code.

Each corpus case runs for real in the sandbox; the test then checks the verdict and the
world around it: no sentinel file, nothing new in the test's cwd, no scratch left over,
no connection to a listening socket, the parent's memory flat, the sandbox still working.
"""

import json
import os
import socket
import subprocess
import sys
import uuid

import psutil
import pytest

from kit.checkers import worker
from kit.checkers.sandbox import SAMPLE_STATE, SAMPLE_TRAJECTORY, Sandbox, run_code, sandbox_cli
from kit.checkers.screen import screen

SENTINEL = f"/tmp/kit_sandbox_pwned_{uuid.uuid4().hex}"
TIMEOUT = 1.0
OK = "def check(state, trajectory):\n    return True\n"


def checker(body: str) -> str:
    """A check() whose body is `body` (one statement per line)."""
    return "def check(state, trajectory):\n" + "".join(f"    {line}\n" for line in body.splitlines())


REJECT, RUN_FAIL = {"rejected"}, {"error", "limit", "timeout"}
CORPUS = [
    # imports, in every spelling
    ("import_os", "import os\n" + checker("os.system('touch SENTINEL')\nreturn True"), REJECT),
    ("from_os_import_system", "from os import system\n" + checker("system('touch SENTINEL')\nreturn True"), REJECT),
    ("dunder_import", checker("__import__('os').system('touch SENTINEL')\nreturn True"), REJECT),
    ("importlib", "import importlib\n" + checker("importlib.import_module('os').system('touch SENTINEL')"), REJECT),
    ("import_inside_check", checker("import subprocess\nsubprocess.run(['touch', 'SENTINEL'])\nreturn True"), REJECT),
    # files
    ("open_write", checker("open('SENTINEL', 'w').write('x')\nreturn True"), REJECT),
    ("open_read_passwd", checker("return {'passed': True, 'p': open('/etc/passwd').read()}"), REJECT),
    ("io_open", "import io\n" + checker("io.open('SENTINEL', 'w').write('x')"), REJECT),
    ("write_relative_file", checker("open('pwned.txt', 'w').write('x')\nreturn True"), REJECT),
    # introspection ladders out of the restricted namespace
    ("subclasses_walk", checker("return ().__class__.__bases__[0].__subclasses__() is None"), REJECT),
    ("function_globals", checker("return check.__globals__['__builtins__'] is None"), REJECT),
    ("builtins_name", checker("return __builtins__['open']('SENTINEL', 'w') is None"), REJECT),
    ("generator_frame_walk", checker("g = (x for x in [])\nreturn g.gi_frame.f_back.f_globals is None"), REJECT),
    ("traceback_frame", checker("try:\n    1 / 0\nexcept Exception as e:\n    return e.__traceback__.tb_frame is None"), REJECT),
    ("code_object", checker("f = lambda: 0\nreturn f.__code__ is None"), REJECT),
    ("fullwidth_eval", checker("return \uff45val('1') == 1"), REJECT),  # NFKC: ｅval is eval
    ("fullwidth_frame_attr", checker("g = (x for x in [])\nreturn g.\uff47i_frame is None"), REJECT),
    ("match_class_attr", checker("match state:\n    case dict(__class__=c):\n        return c is None\nreturn False"), REJECT),
    ("mro", checker("return str.mro() is None"), REJECT),
    ("class_definition", "class A(dict):\n    pass\n" + OK, REJECT),
    ("global_statement", "X = 1\n" + checker("global X\nX = 2\nreturn True"), REJECT),
    ("async_def", "async def f():\n    return 1\n" + OK, REJECT),
    # eval and friends
    ("eval", checker("return eval('1 + 1') == 2"), REJECT),
    ("exec", checker("exec('import os')\nreturn True"), REJECT),
    ("compile", checker("return compile('1', 'x', 'eval') is None"), REJECT),
    ("globals_vars_dir", checker("return len(globals()) + len(vars()) + len(dir()) > 0"), REJECT),
    ("breakpoint_input", checker("breakpoint()\nreturn input() == 'x'"), REJECT),
    ("memoryview", checker("return memoryview(b'x') is None"), REJECT),
    # format strings reach attributes where no AST can see them
    ("format_attr", checker("return '{0.__class__}'.format(1) != ''"), REJECT),
    ("format_map_attr", checker("return '{x.gi_frame}'.format_map({'x': 1}) != ''"), REJECT),
    ("format_dynamic", checker("f = 'x'.format\nreturn f() != ''"), REJECT),
    ("format_builtin", checker("return format(1, 'x') == '1'"), REJECT),
    # getattr / type tricks
    ("getattr_dunder", checker("return getattr(1, '__cl' + 'ass__') is None"), REJECT),
    ("setattr", checker("setattr(check, 'x', 1)\nreturn True"), REJECT),
    ("type_3arg", checker("T = type('T', (object,), {})\nreturn T is None"), REJECT),
    ("type_1arg_mro", checker("return type(1).mro() is None"), REJECT),
    # modules that are not there without an import
    ("ctypes", "import ctypes\n" + checker("ctypes.CDLL(None).system(b'touch SENTINEL')"), REJECT),
    ("signal", "import signal\n" + checker("signal.alarm(1)\nreturn True"), REJECT),
    ("os_fork_unimported", checker("os.fork()\nreturn True"), {"error"}),
    ("socket_connect", "import socket\n" + checker("socket.create_connection(('127.0.0.1', PORT))\nreturn True"), REJECT),
    ("socket_unimported", checker("socket.create_connection(('127.0.0.1', PORT))\nreturn True"), {"error"}),
    ("sys_exit", "import sys\n" + checker("sys.exit(0)"), REJECT),
    ("sys_exit_unimported", checker("sys.exit(0)"), {"error"}),
    # exits and interrupts
    ("raise_systemexit", checker("raise SystemExit(0)"), {"error"}),
    ("raise_keyboardinterrupt", checker("raise KeyboardInterrupt"), {"error"}),
    ("raise_baseexception", checker("raise BaseException('bye')"), {"error"}),
    # CPU
    ("infinite_loop", checker("while True:\n    pass"), {"timeout"}),
    ("loop_swallowing_everything", checker("while True:\n    try:\n        pass\n    except:\n        pass"), {"timeout"}),
    ("infinite_iterator", checker("return sum(iter(int, 1)) > 0"), {"timeout"}),
    ("module_level_loop", "while True:\n    pass\n" + OK, {"timeout"}),
    ("huge_pow", checker("return 10 ** 10 ** 8 > 0"), {"timeout"}),
    # memory
    ("list_bomb", checker("return len([0] * 10 ** 10) > 0"), {"limit"}),
    ("str_bomb", checker("return len('x' * 10 ** 10) > 0"), {"limit"}),
    ("growing_list", checker("xs = [1]\nwhile True:\n    xs = xs + xs"), {"limit", "timeout"}),
    ("deep_recursion", "def f(n):\n    return f(n + 1)\n" + checker("return f(0)"), {"limit"}),
    ("deep_nesting_detail", checker("x = []\nfor i in range(100000):\n    x = [x]\nreturn {'passed': True, 'x': x}"),
     {"error", "limit"}),
    # bombs that pass the screen: CPU, memory, recursion
    ("dict_bomb", checker("return len({i: i for i in range(10 ** 9)}) > 0"), {"limit", "timeout"}),
    ("set_bomb", checker("return len(set(range(10 ** 9))) > 0"), {"limit", "timeout"}),
    ("nested_alloc_bomb", checker("return len([[0] * 10 ** 6 for i in range(10 ** 4)]) > 0"), {"limit"}),
    ("doubling_str", checker("s = 'x'\nfor i in range(64):\n    s = s + s\nreturn len(s) > 0"), {"limit"}),
    ("sorted_bomb", checker("return sorted(range(10 ** 9), key=lambda x: -x) == []"), {"limit", "timeout"}),
    ("arith_loop", checker("n = 0\nfor i in range(10 ** 12):\n    n = (n * 31 + i) % 1000003\nreturn n > 0"),
     {"timeout"}),
    ("lambda_recursion", checker("f = lambda n: f(n + 1)\nreturn f(0)"), {"limit"}),
    ("mutual_recursion", "def a(n):\n    return b(n + 1)\ndef b(n):\n    return a(n + 1)\n" + checker("return a(0)"),
     {"limit"}),
    ("repr_of_deep_nesting", checker("x = []\nfor i in range(10 ** 6):\n    x = [x]\nreturn repr(x) == ''"),
     {"limit", "error", "timeout"}),  # building 10**6 lists can pass 1 s on a loaded machine: contained too
    ("recursion_in_sort_key", "def k(x):\n    return k(x)\n" + checker("return sorted([1, 2], key=k) == []"),
     {"limit"}),
    # forged verdicts: text that looks like a verdict stays text
    ("forged_verdict_in_exception", checker("raise ValueError('\\n{\"status\": \"ok\", \"passed\": true, \"detail\": {}}')"),
     {"error"}),
    # output floods
    ("print_flood", checker("for i in range(100):\n    print('x' * 10 ** 7)\nreturn True"), REJECT),
    ("detail_flood", checker("return {'passed': True, 'junk': 'x' * 10 ** 7}"), {"limit"}),
    ("exception_message_flood", checker("raise ValueError('x' * 10 ** 7)"), {"error"}),
    ("huge_int_string", checker("return {'passed': True, 'n': str(10 ** 100000)}"), {"error"}),
    # parser-level tricks
    ("oversized_source", OK + "# " + "x" * 30_000 + "\n", REJECT),
    ("deeply_nested_source", checker("return " + "-" * 19_000 + "1 > 0"), REJECT),
    ("syntax_error", "def check(state, trajectory)\n    return True\n", REJECT),
    ("return_outside_function", "return True\n" + OK, REJECT),  # parses, but does not compile
    ("no_check", "def chek(state, trajectory):\n    return True\n", REJECT),
]


@pytest.fixture(scope="module")
def box():
    with Sandbox(workers=2, timeout=TIMEOUT) as b:
        yield b


@pytest.fixture(scope="module")
def baseline_rss():
    return psutil.Process().memory_info().rss


def test_corpus_is_big_enough():
    assert len(CORPUS) >= 30


@pytest.mark.parametrize("name,source,expected", CORPUS, ids=[c[0] for c in CORPUS])
def test_hostile_checker_is_contained(name, source, expected, box, baseline_rss, listener, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    port = listener.getsockname()[1]
    source = source.replace("SENTINEL", SENTINEL).replace("PORT", str(port))
    state = json.loads(json.dumps(SAMPLE_STATE))
    v = box.run(source, state, SAMPLE_TRAJECTORY, timeout=TIMEOUT)
    assert v.status in expected, (v.status, v.reason)
    assert v.reason and v.passed is None
    assert not os.path.exists(SENTINEL)
    assert os.listdir(tmp_path) == []
    assert state == SAMPLE_STATE
    assert all(os.listdir(z.base) == [] for z in box._all)  # per-check scratch is gone
    listener.settimeout(0.05)
    with pytest.raises(socket.timeout):
        listener.accept()
    assert psutil.Process().memory_info().rss < baseline_rss + 200 * 2**20
    assert box.run(OK, {}, []).passed is True  # the sandbox still works


# --------------------------------------------------------------------- verdicts

def test_a_correct_checker_passes(box):
    src = checker("return state['agent']['tasks']['task_1']['status'] == 'completed'")
    v = box.run(src, SAMPLE_STATE, SAMPLE_TRAJECTORY)
    assert (v.status, v.passed, v.reason) == ("ok", True, "check passed")


def test_a_failing_checker_fails(box):
    v = box.run(checker("return state['agent']['tasks']['task_3']['status'] == 'completed'"),
                SAMPLE_STATE, SAMPLE_TRAJECTORY)
    assert (v.status, v.passed, v.reason) == ("ok", False, "check failed")


def test_a_dict_verdict_carries_its_detail(box):
    src = checker("calls = [c['name'] for m in trajectory for c in (m.get('tool_calls') or [])]\n"
                  "return {'passed': 'create_task' in calls, 'calls': calls}")
    v = box.run(src, SAMPLE_STATE, SAMPLE_TRAJECTORY)
    assert v.status == "ok" and v.passed is True
    assert v.detail == {"calls": ["create_task", "update_task_status"]}


@pytest.mark.parametrize("ret", ["{'passed': 1}", "{'ok': True}", "1", "'yes'", "None"])
def test_a_return_value_without_a_bool_verdict_is_an_error(box, ret):
    v = box.run(checker(f"return {ret}"), {}, [])
    assert v.status == "error" and "bool" in v.reason


def test_an_exception_in_check_names_its_type(box):
    v = box.run(checker("return state['agent']['nope']"), SAMPLE_STATE, SAMPLE_TRAJECTORY)
    assert v.status == "error" and "KeyError" in v.reason and "nope" in v.reason


def test_the_checker_mutating_state_changes_nothing_outside(box):
    state = json.loads(json.dumps(SAMPLE_STATE))
    src = checker("state['agent']['tasks'].clear()\nstate['pwned'] = True\ntrajectory.clear()\nreturn True")
    assert box.run(src, state, SAMPLE_TRAJECTORY).passed is True
    assert state == SAMPLE_STATE and len(SAMPLE_TRAJECTORY) == 3
    seen = box.run(checker("return len(state['agent']['tasks']) == 2 and 'pwned' not in state"), state, [])
    assert seen.passed is True


def test_non_json_state_is_an_error_not_an_exception(box):
    assert box.run(OK, {"x": object()}, []).status == "error"
    assert box.run(OK, {"x": float("nan")}, []).status == "error"
    assert box.run(b"def check(s, t): return True", {}, []).status == "rejected"


def test_run_many_keeps_job_order(box):
    jobs = [(checker(f"return {i} % 2 == 0"), {}, []) for i in range(20)] + [(checker("while True:\n    pass"), {}, [])]
    verdicts = box.run_many(jobs, timeout=0.5)
    assert [v.passed for v in verdicts[:20]] == [i % 2 == 0 for i in range(20)]
    assert verdicts[20].status == "timeout"


def test_a_dead_worker_is_replaced(box):
    for z in list(box._all):
        z.proc.kill()
        z.proc.wait()
    assert [v.passed for v in box.run_many([(OK, {}, [])] * 4)] == [True] * 4


def test_run_code_uses_a_shared_sandbox():
    assert run_code(OK, {}, []).passed is True


# --------------------------------------------------------------------- the OS walls, screen aside

def test_zygotes_live_in_their_own_network_namespace(box):
    if not box.isolation["netns"]:
        pytest.skip("no network namespace here (needs root and `unshare`)")
    mine = os.readlink("/proc/self/ns/net")
    assert all(os.readlink(f"/proc/{z.proc.pid}/ns/net") != mine for z in box._all)


PROBE = r"""
import json, os, socket, sys
sys.path.insert(0, sys.argv[1])
import worker
walls = worker._probe_walls(sys.argv[2])
worker._confine(sys.argv[2], {"memory_mb": 256, "timeout": 1}, int(sys.argv[3]), walls)
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = "allowed"
    except BaseException as e:
        out[name] = type(e).__name__
attempt("read_passwd", lambda: open("/etc/passwd").read())
attempt("write_sentinel", lambda: open(sys.argv[4], "w").write("x"))
attempt("socket", lambda: socket.create_connection(("127.0.0.1", int(sys.argv[5])), timeout=0.5))
attempt("fork", lambda: os.fork() or None)
attempt("alloc_1GB", lambda: bytearray(2**30))
out["uid"], out["walls"] = os.getuid(), walls
os.write(3, json.dumps(out).encode())
"""


def test_a_screen_escape_still_meets_the_os_walls(tmp_path, listener):
    """What code that got past the screen (with real builtins and imports) could still do."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    r, w = os.pipe()
    cmd = [sys.executable, "-I", "-S", "-c", PROBE, os.path.dirname(worker.__file__), str(scratch), str(w),
           SENTINEL, str(listener.getsockname()[1])]
    subprocess.run(cmd, pass_fds=(w,), timeout=30, check=False)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = json.loads(f.read(65536))
    assert set(out) == {"read_passwd", "write_sentinel", "socket", "fork", "alloc_1GB", "uid", "walls"}
    assert all(out[k] != "allowed" for k in ("read_passwd", "write_sentinel", "socket", "fork", "alloc_1GB")), out
    assert not os.path.exists(SENTINEL)
    listener.settimeout(0.05)
    with pytest.raises(socket.timeout):
        listener.accept()
    if out["walls"]["setuid"]:
        assert out["uid"] == worker.NOBODY


# --------------------------------------------------------------------- sandbox_cli and the screen

def test_sandbox_cli_runs_a_file_against_the_sample(tmp_path):
    path = tmp_path / "good.py"
    path.write_text(checker("return any(c['name'] == 'create_task' for m in trajectory for c in (m.get('tool_calls') or []))"))
    assert sandbox_cli(str(path)) == {"status": "ok", "reason": "check passed", "passed": True, "detail": {}}


@pytest.mark.parametrize("content", [None, b"\xff\xfe\x00binary", b"import os\n", b""])
def test_sandbox_cli_never_raises(tmp_path, content):
    path = tmp_path / "c.py"
    if content is not None:
        path.write_bytes(content)
    out = sandbox_cli(str(path))
    assert out["status"] in ("error", "rejected") and out["reason"]


def test_sandbox_cli_on_a_directory_or_dev_zero():
    assert sandbox_cli("/")["status"] == "error"
    assert sandbox_cli("/dev/zero")["status"] in ("error", "rejected")


def test_screen_accepts_ordinary_checker_code():
    src = (
        "MAX = 3\n"
        "def count(xs, pred=lambda x: True):\n"
        "    return sum(1 for x in xs if pred(x))\n"
        "def check(state, trajectory):\n"
        "    tasks = state.get('agent', {}).get('tasks', {})\n"
        "    done = {k for k, t in tasks.items() if t.get('status') == 'completed'}\n"
        "    texts = [m['content'].lower() for m in trajectory if m.get('role') == 'assistant' and m.get('content')]\n"
        "    try:\n"
        "        n = count(trajectory, lambda m: m['role'] == 'user')\n"
        "    except (KeyError, TypeError) as err:\n"
        "        return {'passed': False, 'why': f'bad message: {err!r:.40}'}\n"
        "    match len(done):\n"
        "        case 0:\n"
        "            return False\n"
        "        case _:\n"
        "            return {'passed': n <= MAX and any('task_1' in t for t in texts), 'done': sorted(done)}\n"
    )
    assert screen(src) is None
    v = run_code(src, SAMPLE_STATE, SAMPLE_TRAJECTORY)
    assert (v.status, v.passed, v.detail) == ("ok", True, {"done": ["task_1"]})


def test_a_workers_status_is_parsed_once_into_check_status_and_json_keeps_the_strings():
    """The worker's reply names its status as text; the parent parses it into CheckStatus (only the
    statuses a worker may report), and a verdict's JSON carries the same strings as before."""
    from kit.checkers.sandbox import CheckResult, _child_verdict
    from kit.checkers.status import CheckStatus

    def reply(raw) -> CheckResult:
        return _child_verdict({"exit": 0, "out": json.dumps(raw), "wall_s": 0.1}, timeout=1.0)

    assert reply({"status": "limit", "reason": "recursion"}).status is CheckStatus.LIMIT
    ok = reply({"status": "ok", "passed": True, "detail": {}})
    assert ok.status is CheckStatus.OK and ok.status == "ok" and ok.passed is True
    for forged in ({"status": "rejected"}, {"status": "timeout"}, {"status": ["ok"]}, {"status": "OK"}, ["ok"]):
        assert reply(forged).status is CheckStatus.ERROR, forged  # a child cannot claim what only the parent decides
    assert json.dumps(ok.to_dict()) == '{"status": "ok", "reason": "check passed", "passed": true, "detail": {}}'
    assert json.loads(ok.model_dump_json())["status"] == "ok" and f"{CheckStatus.TIMEOUT}" == "timeout"
    assert CheckResult.model_validate({"status": "limit"}).status is CheckStatus.LIMIT
