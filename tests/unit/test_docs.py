"""The docs stay true to the code and to the repository: the configuration reference is what
the generator makes of the code now, every documented range is the one enforced, and nothing
tracked points at a file outside the repository or at one that does not exist."""

from __future__ import annotations

import dataclasses
import math
import os
import re
import subprocess

import pytest

from raylog import docs_gen
from raylog.config import ControllerConfig, LogConfig, TopicConfig
from raylog.errors import InvalidConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = (LogConfig, TopicConfig, ControllerConfig)


# --- the generated configuration reference ----------------------------------------------


def test_the_configuration_reference_is_up_to_date():
    """docs/configuration.md is exactly what the generator writes from the code today."""
    with open(os.path.join(ROOT, docs_gen.OUTPUT), encoding="utf-8") as f:
        checked_in = f.read()
    assert checked_in == docs_gen.render(), (
        f"{docs_gen.OUTPUT} is out of date: run `python -m raylog.docs_gen` to update it"
    )


def test_the_generator_writes_then_reports_the_file_up_to_date(tmp_path, capsys):
    """`--check` fails on a missing file, the generator writes it, and `--check` then passes."""
    with pytest.raises(SystemExit) as exited:
        docs_gen.main(["--check", "--root", str(tmp_path)])
    assert exited.value.code == 1
    assert "run `python -m raylog.docs_gen`" in capsys.readouterr().err
    assert docs_gen.main(["--root", str(tmp_path)]) == 0
    assert (tmp_path / docs_gen.OUTPUT).read_text(encoding="utf-8") == docs_gen.render()
    assert docs_gen.main(["--check", "--root", str(tmp_path)]) == 0


def test_every_setting_and_client_keyword_is_in_the_reference():
    """Each config field appears under its Kafka name, and each keyword of the clients."""
    text = docs_gen.render()
    for cls in (TopicConfig, ControllerConfig):
        for f in dataclasses.fields(cls):
            assert f"| `{cls.property_name(f.name)}` | `{f.name}` |" in text
    for title, api in docs_gen._client_apis():
        assert f"### `{title}`" in text
        for row in docs_gen.keyword_rows(api):
            assert "| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" in text


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda c: c.__name__)
def test_every_config_field_has_a_description(cls):
    """Every field is declared with config.setting(), with sentences saying what it does."""
    for f in dataclasses.fields(cls):
        assert len(f.metadata.get("doc", "")) > 20, f"{cls.__name__}.{f.name}"


def _boundary_cases(cls):
    """``(field, value, accepted)``: each documented bound, at it and just past it."""
    for f in dataclasses.fields(cls):
        valid = f.metadata["valid"]
        step = 1 if isinstance(f.default, int) else 1e-9
        if valid.minimum is not None:
            yield f.name, valid.minimum, True
            yield f.name, valid.minimum - step, False
        if valid.maximum is not None:
            yield f.name, valid.maximum, True
            yield f.name, valid.maximum + step, False
        if valid.above is not None:
            yield f.name, valid.above, False
            yield f.name, valid.above + step, True
        for choice in valid.choices or valid.list_of or ():
            yield f.name, choice, True
        if valid.choices or valid.list_of:
            yield f.name, "none-of-these", False
        if valid.list_of:
            yield f.name, ",".join(valid.list_of), True
            yield f.name, f"{valid.list_of[0]},{valid.list_of[0]}", False


def _build(cls, name, value):
    """``cls`` with ``name=value`` and the fields bounded by ``name`` moved out of its way."""
    values = {name: value}
    if not isinstance(value, (int, float)):
        return cls(**values)
    by_name = {f.name: f.metadata["valid"] for f in dataclasses.fields(cls)}
    for other, valid in by_name.items():
        if name in (valid.below, valid.at_most):
            values[other] = valid.minimum  # the lowest it may be, so only ``name`` is tested
    for held in list(values):  # a field held at least to another: that one as low as it may be
        if by_name[held].at_least is not None:
            values.setdefault(by_name[held].at_least, by_name[by_name[held].at_least].minimum)
    return cls(**values)


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda c: c.__name__)
def test_documented_bounds_are_the_enforced_ones(cls):
    """A value at each documented bound is accepted and one just past it is refused with
    InvalidConfigError naming the property; bounds on another field hold both ways."""
    cases = list(_boundary_cases(cls))
    assert cases
    for name, value, accepted in cases:
        if isinstance(value, float) and math.isinf(value):
            continue
        if accepted:
            assert getattr(_build(cls, name, value), name) == value
        else:
            with pytest.raises(InvalidConfigError, match=re.escape(cls.property_name(name))):
                _build(cls, name, value)
    with pytest.raises(InvalidConfigError, match=r"below replica\.lag\.time\.max\.ms \(100\)"):
        TopicConfig(replica_lag_time_max_ms=100, replica_fetch_wait_max_ms=100)
    with pytest.raises(InvalidConfigError, match=r"at most max\.compaction\.lag\.ms \(5\)"):
        LogConfig(min_compaction_lag_ms=6, max_compaction_lag_ms=5)
    with pytest.raises(InvalidConfigError, match=r"at least group\.consumer\.min\.heartbeat\.interval\.ms \(5000\)"):
        ControllerConfig(group_consumer_heartbeat_interval_ms=4999)


def test_special_values_are_named_in_errors_and_in_the_reference():
    """-1 for retention means forever: the refusal of -2 says so, and so does the reference."""
    with pytest.raises(InvalidConfigError, match=r"retention\.ms must be >= -1 \(-1: keep forever\), got -2"):
        LogConfig(retention_ms=-2)
    assert "| >= -1 (-1: keep forever) |" in docs_gen.render()


def test_args_sections_parse_shared_continued_and_variadic_entries():
    """Google-style Args: shared names, continuation lines, ``*args``, and the end of the section."""

    def api(cluster, *topics, a=1, b=2, c=None):
        """Do things.

        Args:
            cluster: the cluster.
            topics: topics to read.
            a, b: two numbers
                that go together.
            c: ``c`` as in :class:`~raylog.config.LogConfig` and :meth:`Admin.create_topics`.

        Returns:
            nothing: not an argument.
        """

    parsed = docs_gen.args_section(api.__doc__)
    assert parsed["a"] == "With ``b``: two numbers that go together."
    assert parsed["b"] == "With ``a``: two numbers that go together."
    assert "nothing" not in parsed
    rows = docs_gen.keyword_rows(api)
    assert [row[0] for row in rows] == ["`*topics`", "`a`", "`b`", "`c`"]
    assert rows[-1] == ("`c`", "", "`None`", "`c` as in `LogConfig` and `Admin.create_topics`.")


def test_a_keyword_without_a_description_is_refused():
    """The reference never shows a keyword its docstring does not describe."""

    def api(cluster, *, documented=1, alias=1, forgotten=2):
        """Do a thing.

        Args:
            documented: yes; ``alias`` is its other name.
        """

    with pytest.raises(docs_gen.UndocumentedError, match="forgotten"):
        docs_gen.keyword_rows(api)

    def api_with_alias(cluster, *, documented=1, alias=1):
        """Do a thing.

        Args:
            documented: yes; ``alias`` is its other name.
        """

    rows = docs_gen.keyword_rows(api_with_alias)
    assert rows[1][3] == "See `documented`: yes; `alias` is its other name."


def test_a_constant_takes_the_comment_above_it_or_above_its_run():
    """``#:`` comments describe the constant below them and those right after it."""
    source = "#: Bounds on x.\nMIN_X = 1\nMAX_X = 9\n\nY = 2\n#: Z's own.\nZ: int = 3\n"
    assert docs_gen.constant_comment(source, "MAX_X") == "Bounds on x."
    assert docs_gen.constant_comment(source, "Z") == "Z's own."
    assert docs_gen.constant_comment(source, "Y") is None


# --- nothing points outside the repository ------------------------------------------------

#: Paths that only exist on the machine this repository was written on (built from parts so
#: that this file does not name them itself).
OUTSIDE = ("/" + "work" + "/", ".." + "/shared")
#: A Markdown link or image target: [text](target "title").
MD_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
MD_REFERENCE = re.compile(r"(?m)^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
FENCE = re.compile(r"(?ms)^(```|~~~).*?^\1")


def _tracked_text_files() -> dict[str, str]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60)
    files = {}
    for path in listed.stdout.decode().split("\0"):
        full = os.path.join(ROOT, path)
        if not path or not os.path.isfile(full):
            continue
        try:
            with open(full, encoding="utf-8") as f:
                files[path] = f.read()
        except UnicodeDecodeError:
            continue  # images and other binary files
    return files


@pytest.fixture(scope="module")
def tracked():
    files = _tracked_text_files()
    assert "README.md" in files and "docs/README.md" in files
    return files


def _exists(path: str, relative_to: str) -> bool:
    """Whether ``path`` names a file or directory inside the repository, from the repository
    root or from the directory ``relative_to``."""
    for base in (ROOT, os.path.join(ROOT, relative_to)):
        full = os.path.normpath(os.path.join(base, path))
        if os.path.commonpath([full, ROOT]) == ROOT and os.path.exists(full):
            return True
    return False


def test_no_tracked_file_names_a_path_outside_the_repository(tracked):
    """No tracked file mentions a path of the machine the code was written on."""
    found = [f"{path}: {marker}" for path, text in tracked.items() for marker in OUTSIDE if marker in text]
    assert not found, found


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[`*_~]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(markdown: str) -> set[str]:
    anchors, seen = set(), {}
    for heading in re.findall(r"(?m)^#{1,6}\s+(.+?)\s*#*\s*$", FENCE.sub("", markdown)):
        slug = _slug(heading)
        anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def test_markdown_links_resolve_inside_the_repository(tracked):
    """Every relative link of every tracked Markdown file names an existing file of the
    repository (resolved from the linking file's directory), and its #anchor a heading there."""
    broken = []
    for path, text in tracked.items():
        if not path.endswith(".md"):
            continue
        prose = FENCE.sub("", text)
        for target in MD_LINK.findall(prose) + MD_REFERENCE.findall(prose):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            here = os.path.dirname(path)
            linked = os.path.normpath(os.path.join(here, file_part)) if file_part else path
            full = os.path.join(ROOT, linked)
            if os.path.commonpath([os.path.abspath(full), ROOT]) != ROOT or not os.path.exists(full):
                broken.append(f"{path}: {target} (no such file in the repository)")
            elif anchor and linked.endswith(".md") and anchor not in _anchors(tracked.get(linked, "")):
                broken.append(f"{path}: {target} (no heading with that anchor)")
    assert not broken, "\n".join(broken)


def test_paths_named_in_tracked_files_exist(tracked):
    """A repository path written out in any tracked file (a page under docs, a test named as
    file::function, a top-level Markdown file) names a file or directory that exists, and a
    ``::name`` a function or class defined in that file."""
    tops = sorted({p.split("/")[0] for p in tracked if "/" in p} | {"docs"})
    alternatives = "|".join(map(re.escape, tops))
    repo_path = re.compile(rf"(?<![\w./~$-])((?:{alternatives})/[\w./-]*\w)(?:::(\w+))?")
    top_doc = re.compile(r"(?<![\w./~$-])([A-Z][A-Z0-9_]*\.md)\b")
    missing = []
    for path, text in tracked.items():
        if os.path.basename(path) == ".gitignore":
            continue  # patterns of files to ignore, not references
        here = os.path.dirname(path)
        for named, member in repo_path.findall(text):
            named = named.rstrip(".")
            if not _exists(named, here):
                missing.append(f"{path}: {named}")
            elif member and not re.search(rf"(?m)^\s*(?:async\s+)?(?:def|class)\s+{member}\b", tracked.get(named, "")):
                missing.append(f"{path}: {named}::{member}")
        for named in top_doc.findall(text):
            if not _exists(named, here):
                missing.append(f"{path}: {named}")
    assert not missing, "no such file in the repository:\n" + "\n".join(sorted(set(missing)))


def test_the_kafka_api_table_is_what_the_listener_serves():
    """docs/kafka.md's table of APIs and versions equals raylog.kafka.codec.SUPPORTED."""
    from raylog.kafka import codec

    with open(os.path.join(ROOT, "docs", "kafka.md"), encoding="utf-8") as f:
        text = f.read()
    table = text.split("<!-- kafka-apis:begin -->")[1].split("<!-- kafka-apis:end -->")[0]
    documented = {}
    for row in table.strip().splitlines()[2:]:
        _, key, versions, _ = [cell.strip() for cell in row.strip("|").split("|")]
        low, high = versions.split("-")
        documented[int(key)] = (int(low), int(high))
    assert documented == {int(k): v for k, v in codec.SUPPORTED.items()}


# --- the tutorials run, and every page is on the map ------------------------------------

#: A test's run of a tutorial: ``tutorials.run("<page>.md", ...)`` (tests/tutorials.py).
TUTORIAL_RUN = re.compile(r"""tutorials\.run\(\s*["']([\w.-]+\.md)["']""")


def test_every_tutorial_has_a_test_that_runs_it(tracked):
    """Each page of docs/tutorials is run by a test (its code blocks as one program, its
    output checked), so a tutorial cannot be added, or go wrong, untested."""
    from tests import tutorials

    pages = sorted(os.path.basename(p) for p in tracked if re.fullmatch(r"docs/tutorials/[^/]+\.md", p))
    assert pages, "docs/tutorials has no pages"
    run = {
        name
        for path, text in tracked.items()
        if re.fullmatch(r"tests/.*test_tutorials\.py", path)
        for name in TUTORIAL_RUN.findall(text)
    }
    assert not set(pages) - run, f"tutorials no test runs (add a tutorials.run call): {sorted(set(pages) - run)}"
    assert not run - set(pages), f"tests run tutorials that do not exist: {sorted(run - set(pages))}"
    for page in pages:
        compile(tutorials.program(page), f"docs/tutorials/{page}", "exec")  # a SyntaxError names the line
        assert tutorials.expected_output(page), f"docs/tutorials/{page} shows no output (```text blocks)"


def test_every_page_under_docs_is_on_the_map(tracked):
    """docs/README.md links every page of docs/ and its folders (tutorials, how-tos): the
    table is the map of the documentation."""
    with open(os.path.join(ROOT, "docs", "README.md"), encoding="utf-8") as f:
        linked = {os.path.normpath(os.path.join("docs", t.partition("#")[0])) for t in MD_LINK.findall(f.read())}
    pages = {p for p in tracked if p.startswith("docs/") and p.endswith(".md") and p != "docs/README.md"}
    assert not pages - linked, f"pages docs/README.md does not link: {sorted(pages - linked)}"


SHELL_BLOCK = re.compile(r"(?ms)^```(?:bash|sh|shell|console)\n(.*?)^```")


def _raylog_commands(markdown: str) -> list[str]:
    """The ``raylog ...`` command lines of a page's shell blocks (continuation lines joined)
    and its inline ``raylog ...`` spans that give options, but for synopses (those with
    ``<seed>``, ``[--all]``, ``(a | b)`` or ``...`` in them) and spans that only name a
    command, such as `raylog topics create`."""
    commands = []
    for block in SHELL_BLOCK.findall(markdown):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            if line.startswith("raylog "):
                commands.append(line)
    for span in re.findall(r"`(raylog [a-z][^`]*)`", FENCE.sub("", markdown)):
        if " --" in span and "--help" not in span and not re.search(r"\.\.\.|[<\[(|]", span):
            commands.append(span.replace("\n", " "))
    return commands


def test_every_raylog_command_in_the_docs_parses(tracked):
    """Each ``raylog`` command line a page tells its reader to run is one the CLI accepts:
    its command, subcommand and options exist and their values have the right types."""
    import shlex

    from raylog import cli

    refused, seen = [], 0
    for path, text in tracked.items():
        if not path.endswith(".md"):
            continue
        for command in _raylog_commands(text):
            seen += 1
            try:
                cli._parser().parse_args(shlex.split(command, comments=True)[1:])
            except SystemExit:
                refused.append(f"{path}: {command}")
    assert seen >= 40, f"only {seen} raylog commands found: the pattern no longer finds them"
    assert not refused, "\n".join(refused)
