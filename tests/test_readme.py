"""The README's first lines are the two fresh-machine commands, and CI runs exactly the test one."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _commands():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines[:10] if line.startswith("    ")]


def test_readme_starts_with_the_two_commands():
    main_cmd, test_cmd = _commands()
    assert main_cmd.startswith("python3 -m venv .venv") and "pip install torch==2.13.0" in main_cmd
    assert main_cmd.endswith("geofidelity-bench demo")
    assert '".[all,test]"' in test_cmd and "pytest" in test_cmd


def test_ci_runs_exactly_the_readme_test_command():
    test_cmd = _commands()[1]
    run_tests = test_cmd.split(" && ")[-1]
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert run_tests in ci_lines
    assert "python -m pip install --quiet torch==2.13.0" in ci_lines
    assert ci_lines.index("python -m pip install --quiet torch==2.13.0") < ci_lines.index(
        'python -m pip install --quiet -e ".[all,test]"'
    )


def test_readme_lists_the_metric_configs_of_the_metric_card_and_the_module():
    import ast
    import re

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    sentence = re.search(r"^Configs: (.*?)\. The metric card", readme, re.M | re.S).group(1)
    listed = re.findall(r"`(\w+)`\s+\(", sentence)
    card = (ROOT / "metric_card" / "geofidelity" / "README.md").read_text(encoding="utf-8")
    in_card = list(dict.fromkeys(re.findall(r"^Config `(\w+)` \(", card, re.M)))
    module = ast.parse((ROOT / "geofidelity_bench" / "evaluate_module" / "geofidelity" / "geofidelity.py").read_text())
    configs = next(node.value for node in module.body if isinstance(node, ast.Assign)
                   and getattr(node.targets[0], "id", None) == "_CONFIGS")
    in_module = [key.value for key in configs.keys]
    assert listed == in_card == in_module, (listed, in_card, in_module)


def test_what_the_readmes_commands_write_is_ignored_by_git(tmp_path):
    """Every folder or file a README command writes into the current folder (``--out NAME``, the
    defaults of ``demo`` and ``audit``, the Python API's folders) is in .gitignore."""
    import re
    import shutil
    import subprocess

    import pytest

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = [line for line in readme.splitlines() if "geofidelity-bench" in line and not line.startswith("|")]
    written = {m for line in commands for m in re.findall(r"--out ([\w.\-]+)", line)}
    written -= {"DIR", "FILE", "OUT", "FILE.parquet"}
    written |= {"geofidelity-demo", "geofidelity-audit"}  # the defaults of `demo` and `audit`
    written |= set(re.findall(r'(?:Path\(|write_results\(|report_from_dirs\()"([\w\-]+)"', readme))
    assert {"gen", "results", "geofidelity-demo", "generated"} <= written, written
    probes = [name if "." in name else f"{name}/x.csv" for name in sorted(written)]
    r = subprocess.run(["git", "check-ignore", "--no-index", *probes], cwd=ROOT, capture_output=True, text=True)
    ignored = set(r.stdout.split())
    assert set(probes) <= ignored, f"not in .gitignore: {sorted(set(probes) - ignored)}"
