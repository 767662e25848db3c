"""The README's first lines are the two fresh-machine commands, and CI runs exactly the test one."""

import re
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


# --- what the README's commands write into the current folder -----------------------------------------

_FENCE = re.compile(r"^```(\w*)\s*$")
_SPAN = re.compile(r"`([^`\n]+)`")
#: In prose (inline code), a name in capitals is a placeholder of the option's syntax (`--out DIR`,
#: `hf download ID --local-dir DIR`); in a code block every name is written as it stands (`--out OUT`).
_PLACEHOLDER = re.compile(r"^[A-Z_]+(\.\w+)?$")
#: Options whose value a command writes: `--out`, hf's `--local-dir`.
_WRITE_OPTIONS = ("--out", "--local-dir")
#: Python calls whose first string argument is a path the code writes (or a folder it writes under).
_PY_WRITES = re.compile(r"\b(?:Path|save_pretrained|write_results|report_from_dirs|open|to_csv|to_parquet)\(\s*"
                        r"[\"']([^\"']+)[\"']")
_PY_LOOP = re.compile(r"^\s*for (\w+) in \(([^)]*)\):", re.M)


def _readme_code() -> tuple[list[tuple[str, bool]], list[str]]:
    """The README's shell command lines, each with whether it is literal (a code block) or prose (an
    inline code span naming a command), and its Python code blocks. Table rows (the command reference,
    in placeholders) are left out; a heredoc's body is text for a file, not commands."""
    shell, python = [], []
    fence, body, heredoc = None, [], None
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        m = _FENCE.match(line)
        if fence is None and m:
            fence, body = m.group(1) or "bash", []
            continue
        if fence is not None:
            if m and not m.group(1):
                if fence == "python":
                    python.append("\n".join(body))
                fence = None
            elif fence == "python":
                body.append(line)
            elif fence in ("bash", "sh", "shell"):
                if heredoc is not None:
                    heredoc = None if line.strip() == heredoc else heredoc
                    continue
                h = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line)
                heredoc = h.group(1) if h else None
                shell.append((line, True))
            continue
        if line.startswith("    "):  # an indented code block
            shell.append((line.strip(), True))
        elif not line.startswith("|"):
            shell += [(span, False) for span in _SPAN.findall(line)
                      if re.match(r"(?:geofidelity-bench|hf download|python|timeout)\b", span)]
    joined = []  # shell continuation lines joined
    for line, literal in shell:
        if joined and joined[-1][0].endswith("\\"):
            joined[-1] = (joined[-1][0][:-1] + " " + line.strip(), joined[-1][1])
        else:
            joined.append((line, literal))
    return joined, python


def _out_defaults() -> dict[str, str]:
    """``geofidelity-bench`` subcommand -> the default of its ``--out`` (``demo``: geofidelity-demo), from the parser."""
    import argparse

    from geofidelity_bench.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {name: action.default for name, parser in sub.choices.items() for action in parser._actions
            if "--out" in action.option_strings and isinstance(action.default, str)}


def _written_by_shell(line: str, literal: bool, defaults: dict[str, str]) -> set[str]:
    import shlex

    line = re.sub(r"\s#.*$", "", line)
    written = set()
    for part in re.split(r"&&|\|\||[;|&]", line):
        try:
            tokens = shlex.split(part)
        except ValueError:
            tokens = part.split()
        for i, token in enumerate(tokens):
            value = None
            if token in _WRITE_OPTIONS + (">", ">>", "venv") and i + 1 < len(tokens):
                value = tokens[i + 1]  # `--out X`, `cat > X`, `python3 -m venv X`
            elif token.split("=", 1)[0] in _WRITE_OPTIONS and "=" in token:
                value = token.split("=", 1)[1]
            elif token.endswith("release_fixture/make_fixture.py") and i + 1 < len(tokens):
                value = tokens[i + 1]  # its first argument is the folder it writes
            if value and not (not literal and _PLACEHOLDER.match(value)):
                written.add(value)
        for marker in ("geofidelity-bench", "geofidelity_bench.cli"):
            if marker in tokens and tokens.index(marker) + 1 < len(tokens):
                command = tokens[tokens.index(marker) + 1]
                if command in defaults and not any(t == "--out" or t.startswith("--out=") for t in tokens):
                    written.add(defaults[command])  # `geofidelity-bench demo` writes ./geofidelity-demo
    return written


def _written_by_python(code: str) -> set[str]:
    written = set(_PY_WRITES.findall(code))
    for var, names in _PY_LOOP.findall(code):  # for folder in ("gen_tiles", "gt_tiles"): Path(folder)...
        if re.search(rf"\bPath\({var}\b", code):
            written |= set(re.findall(r"[\"']([^\"']+)[\"']", names))
    return written


def readme_written_paths() -> set[str]:
    """The first component of every path a README command writes relative to the current folder: ``--out X``,
    ``--local-dir X``, ``> X``, ``-m venv X``, make_fixture.py's folder, the ``--out`` default of a
    ``geofidelity-bench`` command run without one, and the Python blocks' ``Path("X")``/``save_pretrained("X")``/
    ``write_results("X")``... (absolute paths, ``$VARIABLES`` and prose placeholders are left out)."""
    shell, python = _readme_code()
    defaults = _out_defaults()
    found = set()
    for line, literal in shell:
        found |= _written_by_shell(line, literal, defaults)
    for code in python:
        found |= _written_by_python(code)
    return {p.removeprefix("./").split("/")[0] for p in found
            if p and not p.startswith(("/", "$", "~", "-", "../")) and p not in (".", "..")}


def test_readme_written_paths_parser_finds_what_the_commands_write():
    """The parser above sees each kind of write (so the test below cannot pass by finding nothing)."""
    found = readme_written_paths()
    expected = {
        ".venv",  # python3 -m venv .venv
        "gen", "results", "hub_report", "shares.parquet",  # --out X
        "geofidelity-demo",  # `geofidelity-bench demo` without --out
        "release", "models",  # hf download --local-dir X (models/dino-vitb8)
        "OUT", "rerun",  # "Reproducing the paper": literal names in a code block
        "fixture_release", "fixture_out", "fixture_rerun",  # its offline walk (make_fixture.py's folder)
        "my_vqa.py",  # cat > X
        "generated", "tiny-dino", "clip-tokenizer", "gen_tiles", "gt_tiles",  # the Python blocks
    }
    assert expected <= found, sorted(expected - found)
    assert not found & {"DIR", "FILE", "ID"}, sorted(found)  # prose placeholders


def test_what_the_readmes_commands_write_is_ignored_by_git():
    """Every folder or file a README command writes into the current folder is in .gitignore, so following
    the README from the repository root leaves nothing untracked (``git check-ignore``)."""
    import shutil
    import subprocess

    import pytest

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    written = readme_written_paths()
    probes = {name: name if "." in name.lstrip(".") else f"{name}/x.csv" for name in sorted(written)}
    r = subprocess.run(["git", "check-ignore", "--no-index", *probes.values()], cwd=ROOT, capture_output=True,
                       text=True)
    assert r.returncode in (0, 1), r.stderr
    ignored = set(r.stdout.split())
    missing = sorted(name for name, probe in probes.items() if probe not in ignored)
    assert not missing, f"written by a README command but not in .gitignore: {missing}"
