"""The kit loads tau2's domains without tau2.registry, whose LLM agents import litellm (most of
tau2's import time in every stage kernel and test process); the referee still loads it when used."""

import os
import subprocess
import sys

from kit import _tau2


def test_builtin_domain_functions_are_the_ones_tau2s_registry_registers():
    registry = _tau2.registry  # imported on first use
    for name in _tau2.DOMAIN_FUNCTIONS:
        assert _tau2.env_constructor(name) is registry.get_env_constructor(name), name
        assert _tau2.tasks_loader(name) is registry.get_tasks_loader(name), name


def test_loading_verifying_and_the_stage_modules_do_not_import_litellm():
    code = ("import sys\n"
            "from kit.envs import load_domain\n"
            "from kit.replay import gold_trajectory\n"
            "from kit.verify import verify\n"
            "import kit.stages.synthesize, kit.stages.sft, kit.stages.grpo, kit.stages.evaluate, kit.eval.runner\n"
            "import kit.engine, kit.rollout, kit.checkers.checker\n"
            "for name in ('mock', 'airline', 'retail', 'telecom'):\n"
            "    dom = load_domain(name)\n"
            "    task = dom.tasks()[0]\n"
            "    assert verify(dom, task, gold_trajectory(dom, task)).reward == 1.0, name\n"
            "print('litellm' in sys.modules)\n"
            "from kit.verify import tau2_verdict\n"
            "print('litellm' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "True"]
