"""The `kit` command line.

  kit doctor                                   versions, domains, embedded model, CPU/GPU
  kit replay [--domains ...] [--no-tau2]       gold-replay table over τ² domains
  kit verify --domain D --input FILE.jsonl     one JSON verdict per SimulationRun line
  kit export --domain D --out FILE.jsonl       gold + near-miss trajectories as SimulationRuns
  kit bench verify --domain D [--tasks N]      kit vs tau2: speed and agreement
  kit bench rollout [--arms A,B] [--group 8]    the kit's engine vs transformers' generate (and OpenVINO), per arm
  kit bench export-openvino --python PY --out DIR   an OpenVINO export of the model for the openvino arms
  kit bench grpo [--group 4 --steps 2 --out F]  GRPO steps: rollout / score / update seconds, episodes/s
  kit bench sft [--data RUN --steps 4 --out F]  SFT steps: seconds per trained token, tokens seen / computed
    (bench sft|grpo --against REV [--repeats R]: the same workload from git revision REV too, side by side)
  kit bench sandbox [--n 500]                   honest checker verdicts per second (sandbox pool)
  kit eval --domain D (--split S | --tasks-file FILE) --model M --user-model U --trials N   (every `evaluate` parameter)
  kit synthesize --domain D --out DIR [--rounds N --num-plans N ...]                      (every `synthesize` parameter)
  kit checker sandbox --code FILE.py            run check() sandboxed; one JSON verdict line
  kit checker mutate --domain D --task-id ID    mutation report of a task's checker
  kit run RECIPE.yaml [--run-id ID] [--set K=V]  validate a recipe, run its stage notebooks, render the report
  kit results RUN... [--out reports/RESULTS.md]  the measured numbers of run folders as one Markdown page
  kit view RUN [--arm A] [--task T]             one episode of a run as a dialogue with its verdict (first failed)
  kit report RUN [--out DIR]                    (re)render a run's report: one self-contained HTML file
  kit compare RUN_A RUN_B ... [--out DIR]       one comparison report of finished runs (paired B − A on shared tasks)
  kit audit RUN                                 what an engine run made: tasks load, gold earns 1, rules, duplicates, mix
  kit chaos RECIPE [--kills N --seed S]         SIGKILL a run at seeded moments, rerun, compare every artifact
  kit ablations [RECIPES...]                    the ablation recipes (resumable), then one page of paired arms

A user error (unknown name, missing file, dead endpoint, ...) prints `error:` and `fix:` and exits 2;
add --debug for its traceback.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from kit import metrics as M
from kit.errors import USAGE_STATUS, BadInput, describe, disk_error, is_user_error
from kit.stages.base import add_config_arguments, config_from_args
from kit.sources import parse_source


def _cmd_doctor(args: argparse.Namespace) -> int:
    from kit.doctor import report

    rows = report()
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    from kit.bench.verify import gold_replay

    rows = [gold_replay(d, with_tau2=not args.no_tau2, limit=args.limit) for d in args.domains]
    print(f"{'domain':<9} {'tasks':>5} {'kit=1':>6} {'tau2=1':>6} {'kit ms/task':>11} {'tau2 ms/task':>12}")
    for r in rows:
        tau2 = f"{r.tau2_pass:>6}" if not args.no_tau2 else f"{'-':>6}"
        print(f"{r.domain:<9} {r.tasks:>5} {r.kit_pass:>6} {tau2} {1000 * r.kit_s / max(r.tasks, 1):>11.2f} "
              f"{1000 * r.tau2_s / max(r.tasks, 1):>12.1f}")
    for r in rows:
        for f in r.failures:
            print(f"  not 1 in {r.domain}: {f}")
    if any(r.domain == "mock" and r.failures for r in rows):
        print("  note: mock task 'update_task_with_history_and_env_assertions' asserts task_2 is 'completed' "
              "but lists no gold action that completes it, so its own gold replay fails in tau2 as well.")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from kit.envs import load_domain
    from kit.errors import NotFound
    from kit.trajectory import BadLine, Trajectory, read_simulations
    from kit.verify import verify

    if not Path(args.input).is_file():
        raise NotFound(f"no simulations file {args.input}", "give a tau2 results JSON or a JSONL of simulations "
                       "(one per line), e.g. a run's episodes.jsonl")
    dom = load_domain(args.domain)
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    bad = 0
    try:
        for item in read_simulations(args.input):
            if isinstance(item, BadLine):
                bad += 1
                print(f"error: {item}", file=sys.stderr)
                out.write(json.dumps({"line": item.lineno, "error": item.reason}) + "\n")
                continue
            try:
                task = dom.task(item.task_id)
            except KeyError as e:
                bad += 1
                print(f"error: {args.input}: {e.args[0]}", file=sys.stderr)
                out.write(json.dumps({"task_id": item.task_id, "error": e.args[0]}) + "\n")
                continue
            verdict = verify(dom, task, Trajectory.from_tau2(item, args.domain))
            out.write(json.dumps(verdict.summary()) + "\n")
            out.flush()
    finally:
        if out is not sys.stdout:
            out.close()
    return 1 if bad else 0


def _cmd_export(args: argparse.Namespace) -> int:
    from kit.bench.verify import trajectory_set

    pairs = trajectory_set(args.domain, limit=args.tasks, min_mutants=args.mutants)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        for _, traj in pairs:
            f.write(traj.to_tau2().model_dump_json() + "\n")
    print(f"wrote {len(pairs)} trajectories to {args.out}")
    return 0


def _cmd_bench_verify(args: argparse.Namespace) -> int:
    from kit.bench.verify import bench_verify, trajectory_set

    t0 = time.perf_counter()
    pairs = trajectory_set(args.domain, limit=args.tasks, min_mutants=args.mutants)
    print(f"{len(pairs)} trajectories ({len({t.id for t, _ in pairs})} tasks, gold + near-misses) "
          f"built in {time.perf_counter() - t0:.1f} s")
    res = bench_verify(args.domain, pairs)
    for d in res.disagreements[:20]:
        print("DISAGREE", d)
    print(f"median: kit {statistics.median(res.kit_ms):.2f} ms, tau2 {statistics.median(res.tau2_ms):.1f} ms; "
          f"p90 kit {sorted(res.kit_ms)[int(0.9 * (res.n - 1))]:.2f} ms")
    print(res.line())
    return 0 if res.agree == res.n else 1


CLI_RUN = Path("runs") / "cli"  # where `kit eval` / `kit synthesize` write without --out: a run folder


def _stage_context(stage: str, config, out: str | None, wait: bool = False):
    """What a stage's run() gets when called from the command line: its folder is --out, else
    runs/cli/<stage>, which `_record_cli_stage` then lists in runs/cli/manifest.json. The stage holds
    the folder's lock (one writer: kit/runner/lock.py); `wait` (--wait) waits for another holder."""
    from kit.runner.stage import Stage, process_settings

    process_settings(config.model_dump())
    return Stage(stage, config.model_dump(), {"out_dir": out or str(CLI_RUN / stage), "run_id": "cli",
                                              "lock_wait": wait})


def _record_cli_stage(st, out: str | None, own_run: bool = False) -> None:
    """Make the folder a command-line stage wrote a run folder `kit view`, `kit compare` and `kit report` read:
    without --out, runs/cli, whose manifest lists each stage the command line completed there (a later command
    replaces its entry); with --out and `own_run` (`kit eval`), that folder itself, a run of one stage named
    after the folder. (`kit synthesize --out` folders hold the engine's own manifest: left as they are.)"""
    if out is not None and not own_run:
        return
    from kit.files import read_json, write_json
    from kit.runner.manifest import environment, now

    run_dir = Path(out) if out is not None else CLI_RUN
    run_id = run_dir.resolve().name if out is not None else "cli"
    path = run_dir / "manifest.json"
    m = read_json(path) or {"run_id": run_id, "recipe": {"name": "cli", "path": None}, "stages": []}
    env = environment()  # the latest command's: commit, tau2, machine (`kit results` and reports show them)
    m.update(env, updated=now())
    entry = {"key": st.stage_id, "stage": st.stage, "id": st.stage_id, "arm": None, "status": "complete",
             "dir": str(Path(st.out_dir).resolve()), "params": st.params, "finished": now(),
             "git_commit": (env.get("git") or {}).get("commit")}
    m["stages"] = [e for e in m.get("stages", []) if e.get("key") != entry["key"]] + [entry]
    write_json(path, m)


def _cmd_eval(args: argparse.Namespace) -> int:
    from kit.stages import evaluate

    # `kit eval` runs the `evaluate` stage; its flags are the stage's Config fields (kit/stages/evaluate.py)
    config = config_from_args(evaluate.Config, args, model=args.model or "embedded",
                              user_model=args.user_model or args.model or "embedded",
                              split=None if args.split == "all" else args.split,
                              training_data=args.training_data or [])
    st = _stage_context(evaluate.CONTRACT.name, config, args.out, args.wait)
    out = evaluate.run(config, st)
    res = out.result
    st.finish(out)
    _record_cli_stage(st, args.out, own_run=True)
    df = res.episodes
    if len(df):
        print(df.groupby("task_id")["reward"].agg(["mean", "count"]).to_string())
        print("terminations:", df["termination"].value_counts().to_dict())
    print("pass^k:", {k: round(v, 4) for k, v in res.passk.items()})
    m = res.meta
    fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
    print(f"protocol {m.get('protocol', 'kit')}; pass^1 95% CI {m.get(M.PASS1_CI95)}; "
          f"user: request stated {fmt(m.get(M.REQUEST_STATED_RATE))}, proper end {fmt(m.get(M.PROPER_END_RATE))}, "
          f"deviation rate {fmt(m.get(M.USER_DEVIATION_RATE))}  "
          f"(model={out.model}, user={out.user_model}, agent T={config.temperature}, "
          f"user T={config.user_temperature}, tau2 {m.get('tau2_version')})")
    if config.cross_check:
        print(f"tau2 agreement: {100 * res.meta.get('tau2_agreement', 0):.1f}%")
    return 0


def _cmd_synthesize(args: argparse.Namespace) -> int:
    import importlib

    from kit.stages import synthesize

    for module in args.register or []:
        importlib.import_module(module).register()
    # `kit synthesize` runs the `synthesize` stage; its flags are the stage's Config fields
    config = config_from_args(synthesize.Config, args, model=args.model or "embedded")
    st = _stage_context(synthesize.CONTRACT.name, config, args.out, args.wait)
    out = synthesize.run(config, st)
    st.finish(out)
    _record_cli_stage(st, args.out)
    import pandas as pd

    cols = ["round", "proposals", "accepted", "acceptance_rate", "episodes", M.PASS_RATE, "diversity"]
    for row in pd.read_csv(out.files["rounds"]).to_dict("records"):
        print("  ".join(f"{c}={row[c]}" for c in cols))
    return 0


def _cmd_view(args: argparse.Namespace) -> int:
    from kit.report.browser import view

    print(view(args.run, arm=args.arm, task=args.task, status=args.status))  # a bad name: UserError, exit 2
    return 0


def _cmd_audit(args: argparse.Namespace) -> int:
    import importlib

    from kit.engine.audit import audit_run

    for module in args.register or []:
        importlib.import_module(module).register()
    rep = audit_run(args.run)
    for p in rep["problems"]:
        print("PROBLEM", p)
    print(f"audit {rep['out_dir']}: {rep['gold_reward_1']}/{rep['tasks']} accepted tasks replay to reward 1 "
          f"({rep['referee']} evaluator), {rep['rule_refusals']} break a policy rule, "
          f"{rep['sft_ungrounded']} SFT samples dropped as ungrounded, {len(rep['problems'])} problems")
    n_writes = len(rep["write_tools"])
    print(f"  mix: {' '.join(f'{k}:{v}' for k, v in sorted(rep['kinds'].items()))}; with a write "
          f"{rep['write_share']}; write tools covered {rep['write_tools_covered']}/{n_writes}: "
          + " ".join(f"{k}:{v}" for k, v in rep["write_tools"].items()))
    if rep["device_actions"]:
        print("  device fixes (the user's own actions): "
              + " ".join(f"{k}:{v}" for k, v in rep["device_actions"].items()))
    return 0 if not rep["problems"] else 1


def _at_least_one(text: str) -> int:
    """argparse type: an integer >= 1 (a bad value is a usage error before anything loads)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _against_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--against", default=None, metavar="REV",
                   help="also run the same workload from this git revision (a temporary worktree), each run in "
                        "its own process, alternating; print both side by side (kit/bench/against.py)")
    p.add_argument("--repeats", type=_at_least_one, default=None,
                   help="rounds of the --against comparison (default 3); the table gives each arm's median")


def _cmd_bench_sandbox(args: argparse.Namespace) -> int:
    from kit.checkers.sandbox import bench_sandbox

    walls: dict = {}
    rate = bench_sandbox(args.n, args.workers, walls)
    up = [k for k in ("namespaces_full", "userns", "chroot", "setuid", "capdrop", "seccomp") if walls.get(k)]
    print(json.dumps({"checks": args.n, "verdicts_per_s": round(rate, 1), "root": walls.get("root"), "walls": up,
                      "missing": walls.get("missing", [])}))
    return 0


def _cmd_bench_rollout(args: argparse.Namespace) -> int:
    from kit.bench.rollout import bench_arms, check_arms, report_lines
    from kit.llm import make_backend

    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    check_arms(arms)  # before the model loads
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    results = bench_arms(make_backend(args.model), arms, args.domain, args.task_index, args.group,
                         args.max_messages, args.max_new_tokens, args.seed, repeat=args.repeat,
                         openvino_model=args.openvino_model, threads=args.threads)
    best = " (fastest of each)" if args.repeat > 1 else ""
    print(f"group {args.group}, {args.max_messages} messages, {args.max_new_tokens} new tokens, seed {args.seed}, "
          f"{args.repeat} repeat(s){best}:")
    for line in report_lines(results):
        print(line)
    by_arm = {r.arm: r for r in results if r.error is None}
    if "kit" in by_arm and "kit-sequential" in by_arm:
        b, s = by_arm["kit"], by_arm["kit-sequential"]
        print(f"rollout speedup: {b.tok_s / max(s.tok_s, 1e-9):.1f}x ({b.tok_s:.1f} tok/s vs {s.tok_s:.1f} tok/s)")
    for ov in ("openvino", "openvino-native"):
        if "kit" in by_arm and ov in by_arm:
            b, o = by_arm["kit"], by_arm[ov]
            print(f"kit vs {ov}: {b.tok_s / max(o.tok_s, 1e-9):.2f}x ({b.tok_s:.1f} tok/s vs {o.tok_s:.1f} tok/s)")
    return 0


def _cmd_bench_export_openvino(args: argparse.Namespace) -> int:
    from kit.bench.openvino_export import export_openvino

    info = export_openvino(args.python, args.out, model=args.model, weight_format=args.weight_format,
                           force=args.force, check=not args.no_check, log=lambda m: print(m, file=sys.stderr))
    print(json.dumps(info))
    return 0


def _bench_against(kind: str, kwargs: dict, args: argparse.Namespace) -> int:
    """`kit bench sft|grpo --against REV`: both revisions' runs alternating, then the side-by-side table."""
    from kit.bench.against import run_against, table
    from kit.files import write_json

    ab = run_against(kind, kwargs, args.against, args.repeats or 3)
    for line in table(kind, ab):
        print(line)
    if args.out:
        write_json(Path(args.out), ab)
        print(f"wrote {args.out}")
    return 0


def _refuse_repeats_alone(args: argparse.Namespace) -> None:
    if args.repeats is not None and not args.against:
        raise BadInput("--repeats counts the rounds of an --against comparison", "add --against REV, or drop --repeats")


def _cmd_bench_sft(args: argparse.Namespace) -> int:
    from kit.bench.sft import bench_sft, resolve_data
    from kit.files import write_json

    _refuse_repeats_alone(args)
    kwargs = {"data": resolve_data(args.data), "steps": args.steps, "batch_size": args.batch_size,
              "max_seq_len": args.max_seq_len, "lora": args.lora, "threads": args.threads,
              "dialogues": args.dialogues, "seed": args.seed, "micro_batch_size": args.micro_batch,
              "recipe": args.recipe}
    if args.against:
        import tempfile

        from kit.bench import against
        from kit.bench.against import resolve_rev
        from kit.bench.sft import gold_samples
        from kit.train.sft_data import write_samples

        resolve_rev(args.against)  # a bad revision fails before anything loads
        with tempfile.TemporaryDirectory(prefix="kit-bench-sft-data-") as d:
            if kwargs["data"] is None:  # both arms train the same samples: this checkout's gold ones
                kwargs["data"] = str(write_samples(gold_samples(args.dialogues), Path(d) / "gold_mock_agent.jsonl"))
                kwargs["dialogues"] = None
            return _bench_against(against.SFT, kwargs, args)
    res = bench_sft(**kwargs)
    s = res.settings
    print(f"{s['data']}, {s['steps']} steps of batch {s['batch_size']}, max_seq_len {s['max_seq_len']}, "
          f"{'LoRA' if s['lora'] else 'full'}, whole_dialogues {s['whole_dialogues']}; loaded in {res.load_s:.1f} s")
    print(res.line())
    if args.out:
        write_json(Path(args.out), res.to_json())
        print(f"wrote {args.out}")
    return 0


def _cmd_bench_grpo(args: argparse.Namespace) -> int:
    from kit.bench.grpo import bench_grpo
    from kit.files import write_json

    _refuse_repeats_alone(args)
    if args.against:
        from kit.bench import against
        from kit.bench.against import resolve_rev

        resolve_rev(args.against)
        tasks_file = str(Path(args.tasks_file).resolve()) if args.tasks_file else None
        kwargs = {"group": args.group, "tasks_per_step": args.tasks_per_step, "steps": args.steps,
                  "max_new_tokens": args.max_new_tokens, "max_messages": args.max_messages, "model": args.model,
                  "user_model": args.user_model, "domain": args.domain, "split": args.split,
                  "tasks_file": tasks_file, "filter_mode": args.filter_mode, "seed": args.seed,
                  "pack_turns": not args.no_pack, "micro_batch_size": args.micro_batch,
                  "micro_batch_tokens": args.micro_batch_tokens, "threads": args.threads,
                  **({"lora": True} if args.lora else {}), **({"cpu_bf16": True} if args.cpu_bf16 else {})}
        return _bench_against(against.GRPO, kwargs, args)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    res = bench_grpo(args.group, args.tasks_per_step, args.steps, args.max_new_tokens, args.max_messages,
                     args.model, args.user_model, args.domain, args.split, args.tasks_file, args.filter_mode,
                     args.seed, pack_turns=not args.no_pack, micro_batch_size=args.micro_batch,
                     micro_batch_tokens=args.micro_batch_tokens, lora=args.lora, cpu_bf16=args.cpu_bf16)
    print(f"{res.settings['n_tasks']} tasks ({res.settings['tasks']}), group {args.group} x {args.tasks_per_step} "
          f"tasks per step, {args.max_new_tokens} new tokens, {args.max_messages} messages, filter "
          f"{args.filter_mode}; loaded in {res.load_s:.1f} s")
    print(res.total.line())
    if args.out:
        write_json(Path(args.out), res.to_json())
        print(f"wrote {args.out}")
    return 0


def _cmd_checker_sandbox(args: argparse.Namespace) -> int:
    from kit.checkers.sandbox import sandbox_cli

    try:
        verdict = sandbox_cli(args.code)
    except BaseException as e:  # the contract: one JSON line and exit 0, whatever the code does
        verdict = {"status": "error", "reason": f"{type(e).__name__}: {e}"}
    print(json.dumps(verdict))
    return 0


def _cmd_checker_mutate(args: argparse.Namespace) -> int:
    from kit.checkers.checker import CheckedTask, Checker
    from kit.checkers.mutation import mutation_test
    from kit.envs import load_domain

    dom = load_domain(args.domain)
    if args.all:
        from kit.checkers.codegen import state_checker_source
        from kit.checkers.mutation import domain_mutation_summary

        s = domain_mutation_summary(dom, code_for=state_checker_source if args.state_code else None)
        print(json.dumps({k: v for k, v in s.items() if k != "slipped_examples"}))
        for ex in s["slipped_examples"][:10]:
            print("  slipped:", ex)
        print(f"mutation {args.domain}{' +state-code' if args.state_code else ''}: {s['tasks']} tasks, "
              f"{s['mutants']} mutants, {s['must_reject']} must be rejected, {s['rejected_must']} rejected, "
              f"{s['slipped']} slipped ({s['slipped_state_differs']} with a different final state, "
              f"{s['slipped_action_only']} only missing a required non-read action)")
        return 0
    if not args.task_id:
        raise SystemExit("kit checker mutate: give --task-id ID or --all")
    code = open(args.code, encoding="utf-8").read() if args.code else None
    rep = mutation_test(dom, CheckedTask(task=dom.task(args.task_id), checker=Checker(code=code)))
    for r in rep.results:
        status = "rejected" if r.rejected else "accepted"
        must = "must reject (" + ",".join(r.why) + ")" if r.must_reject else "may pass"
        print(f"  {r.kind:<16} {status:<9} {must:<36} {r.detail}")
    print(rep.line())
    return 0 if rep.accepted else 1


def _cmd_run(args: argparse.Namespace) -> int:
    from kit.runner import load_recipe, parse_override
    from kit.runner.execute import Runner, StageFailed

    try:
        overrides = dict(parse_override(x) for x in args.set or [])
    except ValueError as e:
        raise BadInput(str(e), "--set takes KEY=VALUE, e.g. --set grpo.train_steps=4") from None
    recipe = load_recipe(args.recipe, overrides, check_gpu=not args.validate)
    if args.validate:
        for ps in recipe.plan:
            refs = ", ".join(f"{k}<-{v}" + ("/" + o if (o := getattr(parse_source(str(ps.params.get(k))), "output", None))
                                            else "") for k, v in ps.refs.items())
            how = ""
            if ps.launch:  # accelerate launch instead of the notebook (kit/runner/launch.py)
                la = ps.launch
                how = (f"  [accelerate launch: {la['num_processes']} process{'es' if la['num_processes'] > 1 else ''}"
                       f"{', cpu' if la['cpu'] else ''}{', config ' + la['config_file'] if la['config_file'] else ''}"
                       f"{', ' + ' '.join(la['extra_args']) if la['extra_args'] else ''}]")
            used = ", ".join(f"{k}<-server:{v}" for k, v in ps.servers.items())
            print(f"{ps.key:<28} {ps.stage:<11} {', '.join(x for x in (refs, used) if x)}{how}")
        if recipe.servers:  # kit/runner/servers.py: started and stopped by kit run
            print("servers (started and stopped by `kit run`; logs in runs/<run id>/servers/):")
            for sp in recipe.servers:
                print("\n".join(sp.describe()))
        if recipe.memory:
            from kit.runner.memory import table

            print("\n".join(table(recipe.memory, recipe.spec.hardware)))
        if recipe.spec.rehearsal:  # a CPU rehearsal of GPU recipes: the gap, where people look
            print(f"rehearsal of {', '.join(recipe.spec.rehearsal.of)}: what they declare that this run does not "
                  "exercise:")
            print("\n".join(f"  - {line}" for line in recipe.spec.rehearsal.not_exercised))
        print(f"{args.recipe}: valid ({len(recipe.plan)} stages)")
        return 0
    run_id = args.run_id or recipe.name
    if args.new:
        run_id = f"{run_id}-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        res = Runner(recipe, run_id, args.runs_dir, args.reports_dir, force=tuple(args.force or ()),
                     keep=tuple(args.keep or ()), share_from=tuple(args.share_from or ()), wait=args.wait).run()
    except StageFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return USAGE_STATUS if e.user_error else 1
    except KeyboardInterrupt:
        print(f"\ninterrupted: run the same command again to resume ({args.runs_dir}/{run_id}/manifest.json)",
              file=sys.stderr)
        return 130
    print(f"[kit run] done in {res.wall_s:.0f}s: {len(res.executed)} executed, {len(res.skipped)} already complete, "
          f"{len(res.shared)} shared; manifest {res.run_dir / 'manifest.json'}")
    if res.report_html:
        print(f"[kit run] report: {res.report_html}")
    return 0


def _cmd_chaos(args: argparse.Namespace) -> int:
    from kit.runner.chaos import chaos

    res = chaos(args.recipe, kills=args.kills, seed=args.seed, runs_dir=args.runs_dir,
                sets=tuple(args.set or ()), name=args.name, say=lambda text: print(text, flush=True))
    print(res.table())
    return 0 if res.identical else 1


ABLATIONS = ("no_validation", "no_evolution", "user_model", "batch_size", "dynamic_filtering")  # the paper's order


def _cmd_ablations(args: argparse.Namespace) -> int:
    """Every ablation recipe in turn (each `kit run`, resumable; a stage identical to one another run of the
    batch completed is shared from it), then one page over all of them; a recipe that fails does not stop the
    others, and the page says which failed."""
    from kit.report.ablations import ablations_page
    from kit.runner import load_recipe, parse_override
    from kit.runner.execute import Runner, StageFailed

    paths = args.recipes or [str(Path(args.folder) / f"{a}.yaml") for a in ABLATIONS]
    try:
        overrides = dict(parse_override(x) for x in args.set or [])
    except ValueError as e:
        raise BadInput(str(e), "--set takes KEY=VALUE, e.g. --set domain=airline") from None
    recipes = [load_recipe(p, overrides, check_gpu=not args.report_only) for p in paths]  # all valid before any runs
    status, failed = {}, 0
    for rec in recipes:
        if args.report_only:
            status[rec.name] = "not run (--report-only)"
            continue
        print(f"[kit ablations] {rec.name} ({rec.path})")
        try:
            # a stage identical to one of another ablation of the batch (the common engine, SFT and referee
            # stages) is shared from that run's folder, not rerun
            others = tuple(Path(args.runs_dir) / r.name for r in recipes if r.name != rec.name)
            res = Runner(rec, rec.name, args.runs_dir, args.reports_dir, share_from=others).run()
            status[rec.name] = (f"{len(res.executed)} stages executed, {len(res.skipped)} already complete, "
                                f"{len(res.shared)} shared, {res.wall_s:.0f}s")
        except StageFailed as e:
            failed += 1
            status[rec.name] = f"FAILED: {e}"
            print(f"[kit ablations] {rec.name} failed: {e} (the others go on; rerun to resume)", file=sys.stderr)
        except KeyboardInterrupt:
            print("\ninterrupted: run the same command again to resume", file=sys.stderr)
            return 130
    runs = [Path(args.runs_dir) / r.name for r in recipes if (Path(args.runs_dir) / r.name / "manifest.json").exists()]
    page = ablations_page(runs, Path(args.reports_dir) / "ablations", status=status, n_boot=args.bootstrap)
    carried = sorted(p.stem for p in (page.parent / "rows").glob("*.json") if p.stem not in {r.name for r in runs})
    print(f"[kit ablations] page: {page} ({len(runs)} of {len(recipes)} runs from their folders"
          + (f", {len(carried)} from saved rows ({', '.join(carried)})" if carried else "")
          + (f", {failed} failed" if failed else "") + ")")
    return 1 if failed else 0


def _cmd_report(args: argparse.Namespace) -> int:
    from kit.report.build import build_report, run_folder

    run = run_folder(args.run)
    rep = build_report(run, args.out or Path("reports") / run.name, title=args.title, bootstrap=args.bootstrap)
    for diff in rep.data.get("paired") or []:  # evaluations of this run on the same tasks: B − A
        print("paired:", diff.summary_line())
    print(f"report: {rep.html_path} (one self-contained file, {rep.html_path.stat().st_size / 1e3:.0f} kB)")
    return 0


def _cmd_results(args: argparse.Namespace) -> int:
    from kit.report.results import results_page

    text = results_page(args.runs, n_boot=args.bootstrap)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"results: {args.out} ({len(args.runs)} runs)")
    else:
        print(text, end="")
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from kit.report.build import build_comparison

    rep = build_comparison(args.runs, args.out, title=args.title, bootstrap=args.bootstrap)
    for diff in rep.data.get("paired") or []:  # evaluations of different runs on the same tasks: B − A
        print("paired:", diff.summary_line())
    print(f"comparison: {rep.html_path} (one self-contained file, {rep.html_path.stat().st_size / 1e3:.0f} kB)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from kit.stages import evaluate as evaluate_stage  # the stages' Configs give their commands' flags
    from kit.stages import synthesize as synthesize_stage

    p = argparse.ArgumentParser(prog="kit", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--debug", action="store_true", help="show the traceback of a user error too")
    sub = p.add_subparsers(dest="cmd", required=True)

    sub.add_parser("doctor", help="versions, domains, embedded model, CPU/GPU").set_defaults(fn=_cmd_doctor)

    r = sub.add_parser("replay", help="gold-replay table (kit and tau2 rewards)")
    r.add_argument("--domains", nargs="+", default=["mock", "airline", "retail", "telecom"])
    r.add_argument("--no-tau2", action="store_true", help="skip tau2's evaluator (kit only)")
    r.add_argument("--limit", type=int, default=None, help="first N tasks per domain")
    r.set_defaults(fn=_cmd_replay)

    v = sub.add_parser("verify", help="verify tau2 SimulationRuns (JSONL)")
    v.add_argument("--domain", required=True)
    v.add_argument("--input", required=True, help="JSONL, one tau2 SimulationRun per line")
    v.add_argument("--output", default=None, help="write verdicts here (default: stdout)")
    v.set_defaults(fn=_cmd_verify)

    e = sub.add_parser("export", help="write gold + near-miss trajectories as SimulationRun JSONL")
    e.add_argument("--domain", required=True)
    e.add_argument("--out", required=True)
    e.add_argument("--tasks", type=int, default=None, help="first N tasks (default: all)")
    e.add_argument("--mutants", type=int, default=5, help="at least this many near-misses per task")
    e.set_defaults(fn=_cmd_export)

    ev = sub.add_parser("eval", help="pass^k of an agent on a τ² task set (the `evaluate` stage; flags = its "
                                     "Config, kit/stages/evaluate.py)")
    add_config_arguments(ev, evaluate_stage.Config)
    ev.add_argument("--out", default=None, help="directory for trajectories.jsonl, eval.json (resumable)")
    ev.add_argument("--wait", action="store_true", help="when another process writes into the folder, wait for it instead of stopping (kit/runner/lock.py)")
    ev.set_defaults(fn=_cmd_eval)

    sy = sub.add_parser(synthesize_stage.CONTRACT.name, help="the self-evolving data engine (the `synthesize` stage; flags = its "
                                           "Config, kit/stages/synthesize.py; resumable: rerun the same --out)")
    add_config_arguments(sy, synthesize_stage.Config)
    sy.add_argument("--out", required=True, help="run folder, e.g. runs/mock-engine")
    sy.add_argument("--wait", action="store_true", help="when another process writes into the folder, wait for it instead of stopping (kit/runner/lock.py)")
    sy.add_argument("--register", action="append", help="module whose register() adds a custom domain")
    sy.set_defaults(fn=_cmd_synthesize)

    au = sub.add_parser("audit", help="check an engine run: tasks load, gold replays earn reward 1, policy rules hold, no duplicates; the task mix")
    au.add_argument("run")
    au.add_argument("--register", action="append")
    au.set_defaults(fn=_cmd_audit)

    vw = sub.add_parser("view", help="one episode of a run in the terminal, as the report's episode browser shows it")
    vw.add_argument("run", help="runs/<run-id> (or the run id)")
    vw.add_argument("--arm", default=None, help="an evaluation's arm, stage id or label, or an engine stage (synthesize[:r0])")
    vw.add_argument("--task", default=None, help="a task id (default: any)")
    vw.add_argument("--status", default="failed", choices=["failed", "passed", "max_steps", "all"],
                    help="the first episode that is this (default failed; none: the first episode)")
    vw.set_defaults(fn=_cmd_view)

    rn = sub.add_parser("run", help="run a recipe: stage notebooks via papermill, resumable, then the report")
    rn.add_argument("recipe", help="recipes/<name>.yaml")
    rn.add_argument("--run-id", default=None, help="runs/<run-id>/ (default: the recipe's name; rerun = resume)")
    rn.add_argument("--new", action="store_true", help="a fresh run: append a timestamp to the run id")
    rn.add_argument("--set", action="append", metavar="KEY=VALUE",
                    help="override: domain=airline, base_model=/models/x, defaults.threads=2, <stage id>.<param>=4")
    rn.add_argument("--force", action="append", metavar="STAGE_KEY", help="rerun this stage even if complete")
    rn.add_argument("--keep", action="append", metavar="STAGE_KEY",
                    help="reuse this complete stage although its fingerprint changed (the code it reaches, its "
                         "parameters or upstream): you vouch the change does not matter to it; stage.json and the "
                         "manifest record the old fingerprint (kept_from)")
    rn.add_argument("--share-from", action="append", metavar="RUN_DIR",
                    help="another run whose complete stages this run shares where a stage is identical (same "
                         "fingerprint: stage, parameters, notebook, kit code, upstream) instead of rerunning it; "
                         "the manifest records the folder (shared_with), so keep that run")
    rn.add_argument("--validate", action="store_true", help="validate and print the plan; run nothing")
    rn.add_argument("--wait", action="store_true", help="when another process writes into the run folder, wait for it instead of stopping (kit/runner/lock.py)")
    rn.add_argument("--runs-dir", default="runs")
    rn.add_argument("--reports-dir", default="reports")
    rn.set_defaults(fn=_cmd_run)

    ch = sub.add_parser("chaos", help="kill `kit run RECIPE` with SIGKILL at seeded random moments, rerun after each, "
                                      "and compare every artifact with an uninterrupted run (kit/runner/chaos.py)")
    ch.add_argument("recipe")
    ch.add_argument("--kills", type=int, default=20, help="how many kill points (default 20)")
    ch.add_argument("--seed", type=int, default=0, help="draws the kill points (recorded)")
    ch.add_argument("--set", action="append", metavar="KEY=VALUE", help="as for kit run")
    ch.add_argument("--name", default=None, help="the chaos folder under --runs-dir (default <recipe name>-chaos)")
    ch.add_argument("--runs-dir", default="runs", help="the chaos folder goes under it (each run with its report)")
    ch.set_defaults(fn=_cmd_chaos)

    ab = sub.add_parser("ablations", help="run the ablation recipes (each resumable), then one page: each arm's "
                        "pass^1, its paired difference to the reference arm, the paper's direction")
    ab.add_argument("recipes", nargs="*", help="ablation recipes (default: the five in --folder, the paper's order)")
    ab.add_argument("--folder", default="recipes/ablations")
    ab.add_argument("--set", action="append", metavar="KEY=VALUE", help="override in every recipe (as kit run)")
    ab.add_argument("--report-only", action="store_true", help="run nothing: the page from the run folders there are")
    ab.add_argument("--runs-dir", default="runs")
    ab.add_argument("--reports-dir", default="reports")
    ab.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples of every interval")
    ab.set_defaults(fn=_cmd_ablations)

    rp = sub.add_parser("report", help="(re)render a run's report: one self-contained HTML file")
    rp.add_argument("run", help="runs/<run-id>")
    rp.add_argument("--out", default=None, help="report folder (default: reports/<run-id>)")
    rp.add_argument("--title", default=None)
    rp.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples of the pass^1 interval")
    rp.set_defaults(fn=_cmd_report)

    co = sub.add_parser("compare", help="one comparison report of finished runs (pass^k, paired "
                        "differences on shared tasks, engine, SFT, GRPO)")
    co.add_argument("runs", nargs="+", help="runs/<run-id> folders")
    co.add_argument("--out", default="reports/compare", help="report folder")
    co.add_argument("--title", default=None)
    co.add_argument("--bootstrap", type=int, default=2000)
    co.set_defaults(fn=_cmd_compare)
    rs = sub.add_parser("results", help="a Markdown page of the measured numbers of run folders (for reports/RESULTS.md)")
    rs.add_argument("runs", nargs="+", help="run folders (runs/<run-id>) or run ids")
    rs.add_argument("--out", default=None, help="write the page here (default: print it)")
    rs.add_argument("--bootstrap", type=_at_least_one, default=2000, help="bootstrap resamples of the intervals")
    rs.set_defaults(fn=_cmd_results)

    ck = sub.add_parser("checker", help="sandboxed checkers and mutation testing")
    cks = ck.add_subparsers(dest="checker", required=True)
    cs = cks.add_parser("sandbox", help="run check() from FILE.py in the sandbox on a built-in example")
    cs.add_argument("--code", required=True)
    cs.set_defaults(fn=_cmd_checker_sandbox)
    cm = cks.add_parser("mutate", help="mutation report of a τ² task's checker")
    cm.add_argument("--domain", required=True)
    cm.add_argument("--task-id", default=None)
    cm.add_argument("--all", action="store_true", help="every default task: summary counts")
    cm.add_argument("--state-code", action="store_true", help="with --all: add the gold-state code checker")
    cm.add_argument("--code", default=None, help="optional model-written check() source to add to the criteria")
    cm.set_defaults(fn=_cmd_checker_mutate)

    b = sub.add_parser("bench", help="benchmarks (not tests)")
    bsub = b.add_subparsers(dest="bench", required=True)
    bv = bsub.add_parser("verify", help="kit vs tau2 on the same trajectories")
    bv.add_argument("--domain", required=True)
    bv.add_argument("--tasks", type=int, default=None, help="first N tasks (default: all)")
    bv.add_argument("--mutants", type=int, default=5)
    bv.set_defaults(fn=_cmd_bench_verify)
    br = bsub.add_parser("rollout", help="one group of G episodes: the kit's engine vs transformers' generate")
    br.add_argument("--model", default="embedded")
    br.add_argument("--domain", default="mock")
    br.add_argument("--task-index", type=int, default=0)
    br.add_argument("--group", type=int, default=8)
    br.add_argument("--max-messages", type=int, default=8, help="messages per episode")
    br.add_argument("--max-new-tokens", type=int, default=64)
    br.add_argument("--seed", type=int, default=0)
    br.add_argument("--threads", type=int, default=None,
                    help="torch CPU threads (and the openvino arms' INFERENCE_NUM_THREADS; default: torch's count)")
    br.add_argument("--openvino-model", default=None, metavar="DIR",
                    help="the OpenVINO export the openvino arms load (kit bench export-openvino --out DIR)")
    br.add_argument("--repeat", type=_at_least_one, default=1,
                    help="alternate the arms' runs N times (same seeds) and keep each arm's fastest (a noisy machine)")
    br.add_argument("--arms", default="kit,kit-sequential,hf-generate,hf-generate-batch",
                    help="comma-separated arms (kit.bench.rollout.ARMS), run side by side in this process")
    br.set_defaults(fn=_cmd_bench_rollout)
    bo = bsub.add_parser("export-openvino", help="an OpenVINO export of the model (fp32) for bench rollout's "
                         "openvino arms, made by optimum-intel in a side venv")
    bo.add_argument("--python", required=True,
                    help="the side venv's python, with optimum-intel[openvino] (it does not install beside the kit's "
                         "transformers), e.g. /work/ov-export-venv/bin/python")
    bo.add_argument("--out", required=True, help="the export folder (then: kit bench rollout --openvino-model DIR)")
    bo.add_argument("--model", default="embedded", help="the HF folder to export (default: the embedded model)")
    bo.add_argument("--weight-format", default="fp32", choices=["fp32", "fp16", "int8"],
                    help="optimum-cli's --weight-format (default fp32: the kit's float32 weights as they are)")
    bo.add_argument("--force", action="store_true", help="redo an export already in --out")
    bo.add_argument("--no-check", action="store_true",
                    help="skip the greedy check against transformers (needs the openvino extra in this venv)")
    bo.set_defaults(fn=_cmd_bench_export_openvino)
    bg = bsub.add_parser("grpo", help="GRPO steps on the embedded model and mock: rollout, score, update seconds")
    bg.add_argument("--model", default=None, help="policy HF folder (default: the embedded model)")
    bg.add_argument("--user-model", default="embedded", help="user simulator spec (default: the embedded model)")
    bg.add_argument("--domain", default="mock")
    bg.add_argument("--split", default="heldout", help="tasks of this split (without --tasks-file)")
    bg.add_argument("--tasks-file", default=None, help="JSONL of checked tasks (a synthesize stage's rl_tasks.jsonl)")
    bg.add_argument("--group", type=_at_least_one, default=4, help="episodes per task (G, >= 2)")
    bg.add_argument("--tasks-per-step", type=_at_least_one, default=2, help="groups per step (B)")
    bg.add_argument("--steps", type=_at_least_one, default=2)
    bg.add_argument("--max-new-tokens", type=_at_least_one, default=64)
    bg.add_argument("--max-messages", type=int, default=12, help="messages per episode")
    bg.add_argument("--filter-mode", default="off", choices=["off", "all_equal", "all_success"],
                    help="dynamic filtering (default off: every group trains, so the update is always timed)")
    bg.add_argument("--seed", type=int, default=0)
    bg.add_argument("--no-pack", action="store_true", help="one row per turn (default: an episode's turns packed)")
    bg.add_argument("--micro-batch", type=_at_least_one, default=4, help="rows per forward/backward")
    bg.add_argument("--micro-batch-tokens", type=_at_least_one, default=None,
                    help="most padded tokens per forward/backward (bounds the update's memory; default: rows only)")
    bg.add_argument("--lora", action="store_true", help="LoRA adapters (the kit's defaults: r 16, all linear layers) "
                    "instead of full fine-tuning: the update computes no weight gradients for the frozen weights")
    bg.add_argument("--cpu-bf16", action="store_true", help="bf16 matmuls on a CPU with bf16 instructions, as a "
                    "stage's cpu_bf16 (kit/llm/precision.py); with --against, a revision without it runs float32")
    bg.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    bg.add_argument("--out", default=None, help="write the numbers as JSON here")
    _against_arguments(bg)
    bg.set_defaults(fn=_cmd_bench_grpo)
    bt = bsub.add_parser("sft", help="SFT optimizer steps on the embedded model: seconds per trained token")
    bt.add_argument("--data", default=None, help="SFT JSONL, or a run folder (its synthesize/sft_agent.jsonl); "
                    "default: the mock domain's gold agent samples")
    bt.add_argument("--dialogues", type=_at_least_one, default=None, help="only the first N dialogues of the data")
    bt.add_argument("--steps", type=_at_least_one, default=4, help="optimizer steps")
    bt.add_argument("--batch-size", type=_at_least_one, default=4, help="rows per step")
    bt.add_argument("--max-seq-len", type=int, default=4096)
    bt.add_argument("--lora", action="store_true", help="LoRA adapters (default: full fine-tuning)")
    bt.add_argument("--micro-batch", type=_at_least_one, default=None,
                    help="rows per forward/backward inside a batch (SFT's micro_batch_size; default: the whole batch)")
    bt.add_argument("--recipe", default=None, metavar="FILE:STAGE_ID",
                    help="take the batch shape and knobs from this stage of this recipe (each --against revision "
                         "reads its own copy of FILE), e.g. recipes/quickstart-cpu.yaml:sft_agent")
    bt.add_argument("--seed", type=int, default=0)
    bt.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    bt.add_argument("--out", default=None, help="write the numbers as JSON here")
    _against_arguments(bt)
    bt.set_defaults(fn=_cmd_bench_sft)
    bs = bsub.add_parser("sandbox", help="honest checker verdicts per second over a warm sandbox pool")
    bs.add_argument("--n", type=_at_least_one, default=500, help="checks to time")
    bs.add_argument("--workers", type=int, default=None, help="sandbox worker processes (default: min(2, CPUs))")
    bs.set_defaults(fn=_cmd_bench_sandbox)
    return p


def _close_progress_bars() -> None:
    """Close the progress bars an error interrupted, so that `error:` starts its own line."""
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        return
    for bar in list(getattr(tqdm, "_instances", None) or []):
        bar.close()


def _written_folder(args: argparse.Namespace) -> Path:
    """The folder a command writes in: --out, kit run's run folder (or its runs folder), else runs/cli."""
    if getattr(args, "out", None):
        return Path(args.out)
    if getattr(args, "runs_dir", None):
        return Path(args.runs_dir) / args.run_id if getattr(args, "run_id", None) else Path(args.runs_dir)
    return CLI_RUN


def main(argv: list[str] | None = None) -> int:
    """Run one command. A user error (kit/errors.py) prints `error:` and `fix:` lines, no traceback,
    and exits 2 (`--debug`: with the traceback); anything else is a bug and keeps its traceback."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv  # anywhere on the line: `kit eval ... --debug` too
    args = build_parser().parse_args([a for a in argv if a != "--debug"])
    try:
        return int(args.fn(args) or 0)
    except Exception as e:
        # a write the disk refused where the kit does not write itself (torch, papermill, a report):
        # named with the folder the command writes when the error names no file
        disk = None if debug or is_user_error(e) else disk_error(e, writing=False, where=_written_folder(args))
        if disk is not None:
            e = disk
        if debug or not is_user_error(e):
            raise
        message, hint = describe(e)
        _close_progress_bars()
        print(f"error: {message}", file=sys.stderr)
        if hint:
            print(f"fix: {hint}", file=sys.stderr)
        return USAGE_STATUS


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
