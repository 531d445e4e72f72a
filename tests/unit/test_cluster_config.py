"""The Ray cluster launcher configurations (cluster.yaml, cluster-aws.yaml) pass Ray's own config
validation, use only commands and flags that exist, and start every node as a raylog broker.

No cluster is started and no cloud is contacted: the shell commands are split into simple
commands and checked against Ray's click commands and raylog's argparse parser.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
import sys

import pytest
import yaml
from ray._private.label_utils import parse_node_labels_string
from ray.autoscaler._private.util import prepare_config, validate_config
from ray.scripts.scripts import cli as ray_cli

from raylog import cli
from raylog.actors.broker_finder import BROKER_LABEL
from raylog.cli import cluster as cluster_cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = ["cluster.yaml", "cluster-aws.yaml"]
COMMAND_LISTS = [
    "initialization_commands",
    "setup_commands",
    "head_setup_commands",
    "worker_setup_commands",
    "head_start_ray_commands",
    "worker_start_ray_commands",
]
#: The shell variable the start commands put the node's broker id in, for `--labels`.
BROKER_ID_VARIABLE = "$RAYLOG_BROKER_ID"
#: Where raylog looks for a broker's data directory when the node has no `raylog.data_dir` label.
DATA_DIR_VARIABLE = "RAYLOG_DATA_DIR"
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_SEPARATORS = {"&&", "||", ";", "|", "(", ")", "&"}


def _load(name: str) -> dict:
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        return yaml.safe_load(f)


def _simple_commands(line: str) -> list[tuple[dict[str, str], list[str]]]:
    """The simple commands of a shell command line, split at ``&&``, ``||``, ``;``, ``|`` and
    parentheses (so ``$(...)`` is a command of its own), each as (leading variable
    assignments, words). Quoted text stays one word."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token in _SEPARATORS:
            commands.append([])
        else:
            commands[-1].append(token)
    result = []
    for words in filter(None, commands):
        env = {}
        while words and _ASSIGNMENT.match(words[0]):
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        result.append((env, words))
    return result


def _invocations(config: dict, lists: list[str], program: str) -> list[tuple[dict[str, str], list[str], str]]:
    """Every run of ``program`` in the given command lists: (environment, arguments, line)."""
    found = []
    for key in lists:
        for line in config.get(key) or []:
            found += [(env, words[1:], line) for env, words in _simple_commands(line) if words and words[0] == program]
    return found


def _option(args: list[str], name: str) -> str | None:
    """The value of ``--name=V`` or ``--name V`` in ``args``, if present."""
    for i, arg in enumerate(args):
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
        if arg == name and i + 1 < len(args):
            return args[i + 1]
    return None


@functools.cache
def _run_python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def _broker_id(line: str) -> str:
    """The broker id that the ``python3 -c`` in a start command prints on this machine."""
    codes = [words[2] for _, words in _simple_commands(line) if words[:2] == ["python3", "-c"]]
    assert len(codes) == 1, f"expected one `python3 -c` deriving the broker id in: {line}"
    return _run_python(codes[0])


def _ray_start(config: dict, key: str) -> tuple[dict[str, str], list[str], str]:
    starts = [(env, args, line) for env, args, line in _invocations(config, [key], "ray") if args[:1] == ["start"]]
    assert len(starts) == 1, f"{key} must run `ray start` once"
    return starts[0]


def _data_dir(config: dict) -> str:
    env, _, _ = _ray_start(config, "head_start_ray_commands")
    return env[DATA_DIR_VARIABLE]


@pytest.mark.parametrize("name", CONFIGS)
def test_ray_validates_the_config(name):
    """Ray's launcher accepts the file: the same prepare and schema validation `ray up` runs first."""
    config = prepare_config(_load(name))
    validate_config(config)
    assert config["max_workers"] > 0
    # Brokers run actors that reserve no CPU: a node type that may scale down could lose one.
    assert all(t["min_workers"] == t["max_workers"] for t in config["available_node_types"].values())


@pytest.mark.parametrize("name", CONFIGS)
def test_ray_commands_use_only_existing_flags(name):
    """Every `ray <command>` exists, and every flag it is given is one of that command's options."""
    invocations = _invocations(_load(name), COMMAND_LISTS, "ray")
    assert invocations
    for _, args, line in invocations:
        assert args[0] in ray_cli.commands, f"no `ray {args[0]}`: {line}"
        options = {o for p in ray_cli.commands[args[0]].params for o in [*p.opts, *p.secondary_opts]}
        unknown = [a.split("=", 1)[0] for a in args[1:] if a.startswith("-") and a.split("=", 1)[0] not in options]
        assert not unknown, f"`ray {args[0]}` has no {unknown}: {line}"


@pytest.mark.parametrize("name", CONFIGS)
def test_raylog_commands_parse(name):
    """Every `raylog ...` command line is accepted by raylog's own argument parser."""
    invocations = _invocations(_load(name), COMMAND_LISTS, "raylog")
    assert invocations
    for _, args, line in invocations:
        try:
            cli._parser().parse_args(args)
        except SystemExit:
            pytest.fail(f"raylog rejects the arguments of: {line}")


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("key", ["head_start_ray_commands", "worker_start_ray_commands"])
def test_every_node_starts_ray_as_a_broker(name, key):
    """Head and workers start Ray with a `raylog.broker=<integer>` label Ray accepts and with the
    data directory in RAYLOG_DATA_DIR, the same on every node and prepared by the setup commands."""
    config = _load(name)
    env, args, line = _ray_start(config, key)
    assert ("--head" in args) == (key == "head_start_ray_commands")
    labels_text = _option(args, "--labels")
    assert labels_text is not None and BROKER_ID_VARIABLE in labels_text, line
    labels = parse_node_labels_string(labels_text.replace(BROKER_ID_VARIABLE, _broker_id(line)))
    assert set(labels) == {BROKER_LABEL}
    assert int(labels[BROKER_LABEL]) >= 0
    assert env.get(DATA_DIR_VARIABLE) == _data_dir(config)
    assert os.path.isabs(env[DATA_DIR_VARIABLE])
    assert any(env[DATA_DIR_VARIABLE] in line for line in config["setup_commands"])


@pytest.mark.parametrize("name", CONFIGS)
def test_head_starts_raylog_after_ray(name):
    """The head joins the Ray it just started with `raylog start --address auto`, keeping the
    controller's journal in the node's data directory."""
    config = _load(name)
    lines = config["head_start_ray_commands"]
    _, _, ray_line = _ray_start(config, "head_start_ray_commands")
    starts = [
        (lines.index(line), cli._parser().parse_args(args))
        for _, args, line in _invocations(config, ["head_start_ray_commands"], "raylog")
        if args[:1] == ["start"]
    ]
    assert len(starts) == 1
    position, args = starts[0]
    assert position > lines.index(ray_line)
    assert args.run is cluster_cli._start
    assert args.address == "auto"
    assert args.data_dir == _data_dir(config)
    assert not _invocations(config, ["worker_start_ray_commands"], "raylog"), "only the head starts raylog"
