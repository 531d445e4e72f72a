"""librdkafka's own test suite against raylog: the yardstick of Kafka conformance.

Builds librdkafka and the test-runner of its tests directory from a librdkafka source
release, starts an embedded raylog cluster (a local Ray, three brokers, a Kafka listener each, configured as the
suite's own clusters are where raylog's defaults differ: topics created automatically with 4
partitions, groups waiting 3 s before their first rebalance), and runs every broker test of
the suite against it, one test-runner per test number (``TEST_KAFKA_VERSION`` 3.0.0: the broker
version the tests are told, which sets the features they expect), deleting the topics each
test made before the next one starts. A test that needs another of the suite's scenarios
(``noautocreate``) runs against a cluster of its own set up that way, and the tests that run
Kafka's ``kafka-topics.sh`` or ``kafka-acls.sh`` get stand-ins making the same admin requests
(:func:`kafka_topics`, :func:`kafka_acls`). The tests of SASL (:data:`SASL_TESTS`) run
against a cluster whose listeners speak SASL_PLAINTEXT, as a user made for them. The
clusters run Kafka's ACLs
(``authorizer=acl``) allowing every request on a resource no ACL names
(``allow.everyone.if.no.acl.found``), so the ACLs tests set apply and the rest is open.
Local-only tests (no broker), the sockem tests (a
socket emulator raylog has nothing to do with) and manual ones are left out; tests that
cannot apply to raylog are named in :data:`NOT_APPLICABLE` with the reason. It prints a
table of every test's outcome and, with ``--docs``, writes it into ``docs/kafka.md``
between the markers there.

One difference from the suite's clusters: topics created automatically get one replica,
not three. Each partition replica is a process of its own here, and test 0042 alone creates
20 topics automatically (240 processes at three replicas, beyond a 24 GiB machine); tests
that create topics by request name their own replication factor.

librdkafka's source: ``--source`` names a source tree or release tarball. Its GitHub
releases are the upstream; machines that reach only package registries can take the same
release as node-rdkafka bundles it on npm (``npm pack node-rdkafka@3.6.1`` carries librdkafka
v2.12.0 under ``package/deps/librdkafka``). The build is kept under ``--build-dir`` and
reused. Building needs a C toolchain and zlib; SSL, SASL and curl are left out.

Not in the default test command: a full run takes tens of minutes, and the machine should
be otherwise idle (several tests measure timings). ``--tests`` runs a subset.

Usage (or ``python -m raylog.benchmarks.librdkafka_suite``)::

    raylog bench librdkafka --source ~/librdkafka-2.12.0 [--tests 0001,0012] [--docs]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import raylog
from raylog.benchmarks import common

#: The broker version the tests are told (``TEST_KAFKA_VERSION``): the features they expect.
KAFKA_VERSION = "3.0.0"
#: Where every broker listens (port 0: any free port of the loopback address).
LISTENERS = "PLAINTEXT://127.0.0.1:0"
#: Kafka's broker defaults where raylog's differ (as the suite's own clusters run them).
CLUSTER_CONFIG = {
    "listeners": LISTENERS,
    "authorizer": "acl",
    "allow.everyone.if.no.acl.found": "true",
    "auto.create.topics.enable": "true",
    "num.partitions": "4",
    "group.initial.rebalance.delay.ms": "3000",
    "super.users": "User:rdkafka",  # SASL_USER: raylog's own clients of the run act as it
}
#: The suite's scenarios (the JSON files of its tests directory), as raylog settings over
#: CLUSTER_CONFIG: a test names the one it needs, and each gets a cluster of its own.
SCENARIOS = {"default": {}, "noautocreate": {"auto.create.topics.enable": "false"}}
#: Tests that authenticate with SASL (they skip themselves on a plaintext client): they run
#: against a SASL_PLAINTEXT cluster, as the user SASL_USER, with the client's SASL settings in
#: their test.conf (PLAIN: this librdkafka is built without SSL, which SCRAM needs).
SASL_TESTS = ("0135", "0142")
SASL_USER = ("rdkafka", "rdkafka-secret")
SASL_CONFIG = {
    "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "connections.max.reauth.ms": "10000",  # 0142 re-authenticates (KIP-368)
}
#: raylog.connect's settings of that user (raylog's clients of the run act as it): SCRAM, which
#: every cluster enables (PLAIN only the SASL one, for this librdkafka).
SASL_CREATOR = {
    "security_protocol": "SASL_PLAINTEXT",
    "sasl_mechanism": "SCRAM-SHA-512",
    "sasl_plain_username": SASL_USER[0],
    "sasl_plain_password": SASL_USER[1],
}
SASL_CLIENT = {
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "PLAIN",
    "sasl.username": SASL_USER[0],
    "sasl.password": SASL_USER[1],
}
#: What librdkafka's own harness writes into every test.conf when it runs the suite against a
#: Kafka cluster (LibrdkafkaTestApp.py of its tests directory, through trivup): IPv4 brokers,
#: and each test's timeout doubled.
HARNESS_CONF = {"broker.address.family": "v4", "test.timeout.multiplier": "2"}
#: One test's bound (the runner has its own timeout per test as well).
TEST_TIMEOUT_S = 1800
#: Flags of tests that need no broker, a socket emulator, or a person.
_NOT_BROKER_FLAGS = ("TEST_F_LOCAL", "TEST_F_SOCKEM", "TEST_F_MANUAL")
_SCENARIO = re.compile(r'\.scenario\s*=\s*"(\w+)"')
#: The scenario a test-runner ran in, as it prints it.
_SCENARIO_RUN = re.compile(r"Test scenario: (\w+)")
#: Tests that cannot apply to raylog or to this machine (by number), and why.
NOT_APPLICABLE: dict[str, str] = {
    "0052": "its 0.9.0.0 cases make librdkafka send Kafka 0.9's message format (api.version.request=false), "
    "which raylog does not serve, as Kafka 4 does not (KIP-896; the test leaves them out for 4.0+); "
    "its 0.10.1.0 cases pass",
    "0092": "sends a config twice in one AlterConfigs, as Kafka before 3.2 allowed when told 3.0.0; "
    "raylog refuses it (INVALID_REQUEST), as Kafka does from 3.2",
    "0098": "its producer is Kafka's Java client (TransactionProducerCli built against a Kafka "
    "distribution's jars), which this machine does not have",
}
#: A summary line of the test-runner: ``| name | state | seconds s | why``, colors removed.
_SUMMARY = re.compile(r"^\|\s*(\d{4}\S*)\s*\|\s*([A-Z]+)\s*\|\s*[\d.]+s\s*\|\s*(.*)$")
_COLOR = re.compile(r"\x1b\[[0-9;]*m")
#: A failed assertion: ``### Test "name (sub test)" failed at file.c:line:function() at date: ###``.
_FAILED = re.compile(r'^### Test "([^"]+)" failed at (\S+?)\(\) at .*###$')
#: Markers of the table in docs/kafka.md.
BEGIN, END = "<!-- librdkafka-suite:begin -->", "<!-- librdkafka-suite:end -->"
#: The raylog checkout (or site-packages) this module runs from.
ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "kafka.md"


class SuiteError(RuntimeError):
    """The suite could not be built or run (not a test's failure)."""


@dataclass(frozen=True)
class Outcome:
    test: str  # e.g. "0001_multiobj"
    state: str  # PASSED, FAILED, SKIPPED, NOT APPLICABLE
    note: str = ""


def source_tree(source: str, build_dir: Path) -> Path:
    """The librdkafka source tree at ``source`` (a directory, or a tarball unpacked under
    ``build_dir`` once).

    Raises:
        SuiteError: no librdkafka source there.
    """
    path = Path(source).expanduser()
    if path.is_file():
        unpacked = build_dir / "source"
        if not unpacked.exists():
            with tarfile.open(path) as archive:
                archive.extractall(unpacked, filter="data")
        candidates = [p.parent.parent for p in unpacked.glob("**/src/rdkafka.h")]
        if not candidates:
            raise SuiteError(f"{source}: no librdkafka source (src/rdkafka.h) in the archive")
        path = candidates[0]
    if not (path / "src" / "rdkafka.h").exists() or not (path / "tests" / "test.c").exists():
        raise SuiteError(f"{source}: not a librdkafka source tree (no rdkafka.h in src, or no test.c in tests)")
    return path


def build(tree: Path) -> Path:
    """librdkafka and its test-runner, built in ``tree`` unless they are already; the
    test-runner's path.

    Raises:
        SuiteError: a build step failed (its output's tail in the message).
    """
    runner = tree / "tests" / "test-runner"
    if runner.exists():
        return runner
    if shutil.which("make") is None or shutil.which("cc") is None:
        raise SuiteError("building librdkafka needs make and a C compiler (cc)")
    steps = [
        ["./configure", "--disable-ssl", "--disable-gssapi", "--disable-curl", "--disable-sasl"],
        ["make", f"-j{os.cpu_count() or 1}", "libs"],
        ["make", "-C", "tests", f"-j{os.cpu_count() or 1}", "build"],
    ]
    for step in steps:
        done = subprocess.run(step, cwd=tree, capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stdout + done.stderr)[-2000:]
            raise SuiteError(f"{' '.join(step)} failed ({done.returncode}):\n{tail}")
    return runner


def broker_tests(tests_dir: Path) -> dict[str, str]:
    """The suite's broker tests in its order (from the test table of its test.c), each with the scenario
    it needs."""
    source = (tests_dir / "test.c").read_text()
    start = source.index("struct test tests[] = {")
    found = {}
    for entry in source[start : source.index("\n};", start)].split("_TEST(")[1:]:
        name, flags = (part.strip() for part in entry.split(",")[:2])
        if not any(flag in flags for flag in _NOT_BROKER_FLAGS):
            scenario = _SCENARIO.search(entry)
            found[name] = scenario.group(1) if scenario else "default"
    return found


def run_number(
    runner: Path, bootstrap: str, number: str, scenario: str, workdir: Path, log: Path, client: dict | None = None
) -> str:
    """Every test of ``number`` and ``scenario`` against ``bootstrap`` (the runner picks
    tests by number: 0045 is five tests) with :data:`HARNESS_CONF` and the ``client``
    settings in its test.conf; the runner's output, which is also appended to ``log``. Tests
    that call Kafka's ``kafka-topics.sh`` or ``kafka-acls.sh`` get :data:`TOOLS`."""
    tests_dir = runner.parent
    conf = workdir / "test.conf"
    settings = {"bootstrap.servers": bootstrap, **HARNESS_CONF, **(client or {})}
    conf.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    env = {
        **os.environ,
        "RDKAFKA_TEST_CONF": str(conf),
        "TEST_KAFKA_VERSION": KAFKA_VERSION,
        "LD_LIBRARY_PATH": f"{tests_dir.parent / 'src'}:{tests_dir.parent / 'src-cpp'}",
        "TESTS": number,
        "KAFKA_PATH": str(_kafka_tools(workdir)),
        "BROKERS": bootstrap,
    }
    args = [str(runner), "-p1", "-L", "-E", "-V", KAFKA_VERSION, "-s", scenario]
    with log.open("a") as out:
        start = out.tell()
        try:  # (from the tests directory: tests open files there by relative paths)
            subprocess.run(args, cwd=tests_dir, env=env, timeout=TEST_TIMEOUT_S, stdout=out, stderr=subprocess.STDOUT)
        except subprocess.TimeoutExpired:
            out.write(
                f'\n### Test "{number}" failed at the_runners_bound() at now: ###\nno end in {TEST_TIMEOUT_S} s\n'
            )
    with log.open(errors="replace") as out:
        out.seek(start)
        return out.read()


def outcome_of(test: str, output: str) -> Outcome:
    """A test's outcome from the test-runner's output: its summary line, or, when a failed
    assertion aborted the runner before it printed one, the failure's place and message."""
    lines = [_COLOR.sub("", line).strip() for line in output.splitlines()]
    for line in lines:
        found = _SUMMARY.match(line)
        if found and found.group(1) == test:
            return Outcome(test, found.group(2), found.group(3).strip()[:160])
    for i, line in enumerate(lines):
        failed = _FAILED.match(line)
        if failed and failed.group(1).split(" (")[0] in (test, test[:4]):
            why = lines[i + 1] if i + 1 < len(lines) else ""
            return Outcome(test, "FAILED", f"{failed.group(2)}: {why}"[:160])
    return Outcome(test, "FAILED", "the test-runner printed no outcome (it crashed)")


def run_suite(
    runner: Path,
    bootstrap: str,
    tests: list[str],
    scenario: str,
    workdir: Path,
    log: Path,
    between: Callable[[], None],
    client: dict | None = None,
) -> list[Outcome]:
    """``tests`` (of ``scenario``) one number after another with the ``client`` settings,
    ``between`` each two (it clears the cluster)."""
    outcomes = []
    for number, names in itertools.groupby(tests, key=lambda name: name[:4]):
        names = list(names)
        if number in NOT_APPLICABLE:
            outcomes += [Outcome(name, "NOT APPLICABLE", NOT_APPLICABLE[number]) for name in names]
            continue
        output = run_number(runner, bootstrap, number, scenario, workdir, log, client)
        for name in names:
            outcome = outcome_of(name, output)
            print(f"{outcome.test}: {outcome.state} {outcome.note}", file=sys.stderr, flush=True)
            outcomes.append(outcome)
        between()
    return outcomes


def outcomes_from_log(log: Path, tests: dict[str, str]) -> list[Outcome]:
    """The outcomes of ``tests`` (name -> scenario) read again from the kept output of one
    run or several (``--from-log``; where a number ran more than once in a scenario, the
    last run counts)."""
    segments = {}
    for segment in log.read_text(errors="replace").split("Tests to run     : ")[1:]:
        scenario = _SCENARIO_RUN.search(segment)
        segments[segment.split(None, 1)[0], scenario.group(1) if scenario else "default"] = segment
    return [
        Outcome(t, "NOT APPLICABLE", NOT_APPLICABLE[t[:4]])
        if t[:4] in NOT_APPLICABLE
        else outcome_of(t, segments.get((t[:4], s)) or segments[t, s])
        for t, s in tests.items()
        if (t[:4], s) in segments or (t, s) in segments or t[:4] in NOT_APPLICABLE
    ]


def _kafka_tools(workdir: Path) -> Path:
    """A directory standing in for a Kafka distribution's (KAFKA_PATH) whose
    ``bin/kafka-topics.sh`` and ``bin/kafka-acls.sh`` are :func:`kafka_topics` and
    :func:`kafka_acls`."""
    home = workdir / "kafka"
    for tool in TOOLS:
        script = home / "bin" / f"{tool}.sh"
        if not script.exists():
            script.parent.mkdir(parents=True, exist_ok=True)
            script.write_text(
                f'#!/bin/sh\nPYTHONPATH="{ROOT}" exec "{sys.executable}" '
                f'-m raylog.benchmarks.librdkafka_suite {tool} "$@"\n'
            )
            script.chmod(0o755)
    return home


def kafka_topics(argv: list[str]) -> int:
    """What the suite's tests ask of Kafka's ``kafka-topics.sh`` (``--create`` with
    partitions, replication factor and configs, ``--alter --partitions``, ``--delete``),
    done as that tool does, by CreateTopics, CreatePartitions and DeleteTopics requests,
    here through confluent-kafka's AdminClient; the exit status is the tool's (1 on an
    error, printed)."""
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    parser = argparse.ArgumentParser(prog="kafka-topics.sh")
    parser.add_argument("--bootstrap-server", required=True)
    action = parser.add_mutually_exclusive_group(required=True)
    for name in ("--create", "--alter", "--delete"):
        action.add_argument(name, action="store_true")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, default=-1)
    parser.add_argument("--replication-factor", type=int, default=-1)
    parser.add_argument("--config", action="append", default=[])
    args = parser.parse_args(argv)
    admin = AdminClient({"bootstrap.servers": args.bootstrap_server})
    if args.create:
        config = dict(item.split("=", 1) for item in args.config)
        futures = admin.create_topics([NewTopic(args.topic, args.partitions, args.replication_factor, config=config)])
    elif args.alter:
        futures = admin.create_partitions([NewPartitions(args.topic, args.partitions)])
    else:
        futures = admin.delete_topics([args.topic])
    try:
        for future in futures.values():
            future.result(timeout=60)
    except Exception as exc:  # noqa: BLE001 — the tool prints the error and exits 1
        print(f"Error while executing topic command : {exc}", file=sys.stderr)
        return 1
    return 0


def kafka_acls(argv: list[str]) -> int:
    """What the suite's tests ask of Kafka's ``kafka-acls.sh`` (``--add``, ``--remove --force``
    and ``--list`` of allow or deny ACLs, read as ``raylog acls`` reads them:
    :func:`raylog.cli.acls.acls_named`), done as that tool does, by CreateAcls, DeleteAcls and
    DescribeAcls requests, here through confluent-kafka's AdminClient; the exit status is the
    tool's (1 on an error, printed)."""
    from confluent_kafka.admin import AclBinding, AclBindingFilter, AdminClient

    from raylog.cli.acls import acls_named

    parser = argparse.ArgumentParser(prog="kafka-acls.sh")
    parser.add_argument("--bootstrap-server", required=True)
    action = parser.add_mutually_exclusive_group(required=True)
    for name in ("--add", "--remove", "--list"):
        action.add_argument(name, action="store_true")
    parser.add_argument("--force", action="store_true")
    for name in ("--allow-principal", "--deny-principal", "--allow-host", "--deny-host", "--operation"):
        parser.add_argument(name, action="append", default=[])
    for name in ("--topic", "--group", "--transactional-id"):
        parser.add_argument(name, action="append", default=[])
    parser.add_argument("--cluster", action="store_true")
    parser.add_argument("--resource-pattern-type", default="literal")
    args = parser.parse_args(argv)
    # Kafka's codes, which confluent-kafka's types take as they are.
    specs = [
        (int(a.pattern.resource_type), a.pattern.name, int(a.pattern.pattern_type), a.principal, a.host)
        + (int(a.operation), int(a.permission_type))
        for a in acls_named(args)
    ]
    admin = AdminClient({"bootstrap.servers": args.bootstrap_server})
    try:
        if args.add:
            futures = list(admin.create_acls([AclBinding(*spec) for spec in specs]).values())
        elif args.remove:
            futures = list(admin.delete_acls([AclBindingFilter(*spec) for spec in specs]).values())
        else:
            every = AclBindingFilter(1, None, 1, None, None, 1, 1)  # ANY of each
            futures = [admin.describe_acls(every)]
        for future in futures:
            for acl in future.result(timeout=60) or ():
                print(acl)
    except Exception as exc:  # noqa: BLE001 — the tool prints the error and exits 1
        print(f"Error while executing ACL command: {exc}", file=sys.stderr)
        return 1
    return 0


#: Kafka's command-line tools the suite's tests run, and their stand-ins.
TOOLS = {"kafka-topics": kafka_topics, "kafka-acls": kafka_acls}


def delete_topics(cluster: raylog.RaylogCluster) -> None:
    """Delete every topic but the internal ones (what the last test made)."""
    admin = raylog.Admin(cluster)
    names = admin.list_topics()
    if names:
        admin.delete_topics(names)


def table(outcomes: list[Outcome], version: str) -> str:
    """The outcomes as the Markdown table docs/kafka.md carries."""
    passed = sum(o.state == "PASSED" for o in outcomes)
    applicable = sum(o.state not in ("NOT APPLICABLE", "SKIPPED") for o in outcomes)
    lines = [
        f"librdkafka {version}'s broker tests against raylog (`raylog bench librdkafka`): "
        f"**{passed} of {applicable} applicable tests pass**.",
        "",
        "| test | outcome | note |",
        "|---|---|---|",
    ]
    lines += [f"| {o.test} | {o.state} | {o.note.replace('|', '/')} |" for o in outcomes]
    return "\n".join(lines)


def write_docs(text: str, docs: Path = DOCS) -> None:
    """Put ``text`` between the suite's markers in ``docs`` (appended with them if absent)."""
    current = docs.read_text()
    block = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in current and END in current:
        before, rest = current.split(BEGIN, 1)
        _, after = rest.split(END, 1)
        docs.write_text(before + block + after)
    else:
        docs.write_text(current.rstrip("\n") + "\n\n" + block + "\n")


def version_of(tree: Path) -> str:
    for line in (tree / "src" / "rdkafka.h").read_text().splitlines():
        if line.startswith("#define RD_KAFKA_VERSION "):
            number = int(line.split()[2], 16)
            return f"v{number >> 24}.{(number >> 16) & 0xFF}.{(number >> 8) & 0xFF}"
    return "(unknown version)"


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] and argv[0] in TOOLS:
        return TOOLS[argv[0]](argv[1:])
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", required=True, help="a librdkafka source tree or release tarball")
    parser.add_argument("--build-dir", help="where the build is kept (default: a directory under the system temp)")
    parser.add_argument("--tests", help="comma-separated test names or numbers (default: every broker test)")
    parser.add_argument("--docs", action="store_true", help="write the table into docs/kafka.md")
    parser.add_argument("--log", help="where the test-runner's output is kept (default: in the build directory)")
    parser.add_argument("--from-log", action="store_true", help="read the outcomes from a run's kept output")
    args = parser.parse_args(argv)
    common.require("confluent_kafka")
    build_dir = Path(args.build_dir or Path(tempfile.gettempdir()) / "raylog-librdkafka")
    build_dir.mkdir(parents=True, exist_ok=True)
    log = Path(args.log) if args.log else build_dir / "test-runner.log"
    try:
        tree = source_tree(args.source, build_dir)
        runner = build(tree)
        every = broker_tests(runner.parent)
        wanted = [t.strip() for t in args.tests.split(",")] if args.tests else []
        tests = {t: s for t, s in every.items() if not wanted or any(t.startswith(w) for w in wanted)}
        if args.from_log:
            outcomes = outcomes_from_log(log, tests)
        else:
            outcomes = run_embedded(runner, tests, log)
    except SuiteError as exc:
        print(f"librdkafka suite: {exc}", file=sys.stderr)
        return 2
    text = table(outcomes, version_of(tree))
    print(text)
    if args.docs:
        write_docs(text)
    return 0 if all(o.state in ("PASSED", "SKIPPED", "NOT APPLICABLE") for o in outcomes) else 1


def run_embedded(runner: Path, tests: dict[str, str], log: Path) -> list[Outcome]:
    """``tests`` (name -> scenario) against embedded raylog clusters, a new one for each
    scenario, and one with a SASL listener for :data:`SASL_TESTS` (see the module
    docstring), in the suite's order."""
    log.write_text("")
    outcomes: dict[str, Outcome] = {}
    passes = [(scenario, False) for scenario in dict.fromkeys(tests.values())]
    passes += [(s, True) for s in dict.fromkeys(s for t, s in tests.items() if t[:4] in SASL_TESTS)]
    with contextlib.ExitStack() as stack:
        workdir = Path(common.temp_workdir(stack, "raylog-librdkafka-run-", None))
        common.start_local_ray(stack)
        for scenario, with_sasl in passes:
            names = [t for t, s in tests.items() if s == scenario and (t[:4] in SASL_TESTS) == with_sasl]
            if not names:
                continue
            if scenario not in SCENARIOS:
                outcomes.update(
                    {t: Outcome(t, "NOT APPLICABLE", f"scenario {scenario} is not set up here") for t in names}
                )
                continue
            cluster = raylog.connect(
                data_dir=str(workdir / f"{scenario}{'-sasl' if with_sasl else ''}"),
                num_brokers=3,
                cluster_name=f"rdk{uuid.uuid4().hex[:8]}",
                config={**CLUSTER_CONFIG, **SCENARIOS[scenario], **(SASL_CONFIG if with_sasl else {})},
                **SASL_CREATOR,  # the suite's user, a super user, is made with the cluster
            )
            try:
                found = run_suite(
                    runner,
                    cluster.bootstrap_servers(),
                    names,
                    scenario,
                    workdir,
                    log,
                    functools.partial(delete_topics, cluster),
                    SASL_CLIENT if with_sasl else None,
                )
            finally:
                cluster.shutdown()
            outcomes.update({o.test: o for o in found})
    print(f"the test-runner's output: {log}", file=sys.stderr)
    return [outcomes[t] for t in tests]


if __name__ == "__main__":
    common.run_script(main)
