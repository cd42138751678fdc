"""The docs say what the code does (issue 35): every ``metashift ...`` command the README and
``docs/`` show (code blocks, and inline code that starts with ``metashift ``) exists, with every
flag it is shown with, as ``metashift COMMAND --help`` says; every flag in a section about one
command is that command's; the reference's table of agent settings names exactly the keys the
agent reads (``metashift.agent.config.SCHEMA``), every dotted setting and ``METASHIFT_*`` variable
the docs name is one the code reads, and every TOML sample is a configuration the agent accepts;
every link between the docs resolves (file and heading)."""

from __future__ import annotations

import functools
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from metashift.agent import config as agent_config

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
REFERENCE = ROOT / "docs" / "reference.md"
CONFIG_MARK = "<!-- config-keys:"
#: The README is the front page: a few hundred lines at most.
README_MAX_LINES = 300
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
INLINE = re.compile(r"`([^`\n]+)`")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
SHELL_BREAKS = {"|", "||", "&&", ";", "&"}
STARTERS = r"[A-Z_]+=\S*|\S*/?(sudo|exec|time)"
#: File names that look like a dotted setting (``session.py``).
NOT_SETTINGS = r"py|pyi|md|toml|ya?ml|json|proto|conf|service|tpl"
#: The sections of the agent's settings (a dotted name in one of them is a setting).
SECTIONS = {key.split(".", 1)[0] for key in agent_config.SCHEMA if "." in key}
#: Where the code that reads METASHIFT_* variables lives.
CODE_DIRS = ("metashift", "agent", "coordinator", "spark", "proto", "lab/metashift_lab")


@dataclass(frozen=True)
class Block:
    """A fenced code block: the file, its first line's number, its language, its text."""

    path: Path
    line: int
    lang: str
    text: str


@dataclass(frozen=True)
class Shown:
    """A ``metashift`` command a doc shows: where, the command path, the flags given."""

    where: str
    path: tuple[str, ...]
    flags: tuple[str, ...]
    unknown: str | None = None
    """A word where a subcommand goes that is none (placeholders in capitals, such as COMMAND, aside)."""


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _blocks(path: Path) -> list[Block]:
    blocks, lines = [], path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m:
            start, lang, body = i + 1, m.group(2), []
            i += 1
            while i < len(lines) and not FENCE.match(lines[i]):
                body.append(lines[i])
                i += 1
            blocks.append(Block(path, start, lang, "\n".join(body)))
        i += 1
    return blocks


def _prose(path: Path) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, numbered."""
    out, inside = [], False
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(line):
            inside = not inside
        elif not inside:
            out.append((n, line))
    return out


# ---- what metashift's CLI has ----------------------------------------------------------------------


@functools.cache
def _help(path: tuple[str, ...]) -> str | None:
    """``metashift PATH --help``, or None when there is no such command."""
    done = subprocess.run([sys.executable, "-m", "metashift.cli", *path, "--help"], capture_output=True, text=True,
                          timeout=120)
    return done.stdout if done.returncode == 0 else None


@functools.cache
def _subcommands(path: tuple[str, ...]) -> tuple[str, ...]:
    """The subcommands ``metashift PATH --help`` lists (its positional choices)."""
    text = _help(path) or ""
    m = re.search(r"\{([a-z0-9,-]+)\}", text.split("\n\n", 1)[0].replace("\n", " "))
    if m:
        return tuple(m.group(1).split(","))
    m = re.search(r"positional arguments:\n\s+[A-Z]+\n((?:\s{4,}\S.*\n?)+)", text)
    return tuple(re.findall(r"^\s{4}([a-z][a-z0-9-]*)\b", m.group(1), re.M)) if m else ()


def _flags_of(path: tuple[str, ...]) -> set[str]:
    return set(FLAG.findall(_help(path) or "")) | {"--help"}


# ---- reading commands out of the docs ------------------------------------------------------------


def _commands_in(text: str, where: str) -> list[Shown]:
    """Every ``metashift`` command line in shell text (continuations joined, comments dropped)."""
    shown = []
    for line in re.sub(r"\\\n", " ", text).splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            words = line.split()
        for i, word in enumerate(words):
            # a command begins the line, or follows a pipe, a variable's assignment, sudo, exec, time
            starts = i == 0 or words[i - 1] in SHELL_BREAKS or re.fullmatch(STARTERS, words[i - 1])
            if Path(word).name != "metashift" or not starts:
                continue
            rest = []
            for w in words[i + 1:]:
                if w in SHELL_BREAKS:
                    break
                rest.append(w.strip("[]"))
            shown.append(_shown(rest, where))
    return shown


def _shown(words: list[str], where: str) -> Shown:
    path: list[str] = []
    unknown = None
    for w in words:
        if w.startswith("-"):
            break
        if w in _subcommands(tuple(path)):
            path.append(w)
        else:
            if _subcommands(tuple(path)) and not re.fullmatch(r"[A-Z][A-Z_.]*", w):
                unknown = w
            break
    flags = tuple(sorted({w.split("=", 1)[0] for w in words if w.startswith("-") and len(w) > 1}))
    return Shown(where, tuple(path), flags, unknown)


def _all_shown() -> list[Shown]:
    shown: list[Shown] = []
    for doc in DOCS:
        for block in _blocks(doc):
            if block.lang in ("sh", "bash", "console", "shell", ""):
                shown += _commands_in(block.text, f"{_rel(doc)}:{block.line}")
        for n, line in _prose(doc):
            for span in INLINE.findall(line):
                if span.startswith("metashift "):
                    shown += _commands_in(span, f"{_rel(doc)}:{n}")
    return shown


def test_the_docs_show_commands() -> None:
    shown = _all_shown()
    paths = {s.path for s in shown}
    # the operator's commands, at least, are all shown somewhere
    assert {("agent",), ("migrate", "check"), ("migrate", "start"), ("migrate", "status"), ("migrate", "abort"),
            ("copy",), ("verify",)} <= paths, sorted(paths)


def test_every_command_and_flag_the_docs_show_exists() -> None:
    wrong = []
    for s in _all_shown():
        if s.unknown is not None:
            wrong.append(f"{s.where}: no command `metashift {' '.join((*s.path, s.unknown))}`")
            continue
        if _help(s.path) is None:
            wrong.append(f"{s.where}: no command `metashift {' '.join(s.path)}`")
            continue
        if s.path and _subcommands(s.path) and not s.flags:
            continue  # a group named on its own (`metashift migrate`)
        missing = set(s.flags) - _flags_of(s.path) - {"-v", "--verbose"}
        if missing:
            wrong.append(f"{s.where}: `metashift {' '.join(s.path)}` has no {', '.join(sorted(missing))}")
    assert not wrong, "\n".join(wrong)


def _sections(path: Path) -> list[tuple[str, int, list[tuple[int, str]]]]:
    """(heading, level, the prose lines under it up to the next heading)."""
    out: list[tuple[str, int, list[tuple[int, str]]]] = []
    for n, line in _prose(path):
        m = re.match(r"^(#{1,6})\s+(.*)$", line)
        if m:
            out.append((m.group(2), len(m.group(1)), []))
        elif out:
            out[-1][2].append((n, line))
    return out


def test_every_flag_in_a_section_about_a_command_is_that_commands() -> None:
    wrong = []
    for doc in DOCS:
        for heading, _level, lines in _sections(doc):
            commands = [_shown(shlex.split(span)[1:], "") for span in INLINE.findall(heading)
                        if span.startswith("metashift ")]
            if not commands:
                continue
            known: set[str] = set()
            for c in commands:
                known |= _flags_of(c.path)
                for sub in _subcommands(c.path):
                    known |= _flags_of((*c.path, sub))
            for n, line in lines:
                for span in INLINE.findall(line):
                    for flag in FLAG.findall(span) if span.startswith("-") else ():
                        if flag not in known:
                            wrong.append(f"{_rel(doc)}:{n}: {flag} under {heading!r}")
    assert not wrong, "\n".join(wrong)


# ---- settings ------------------------------------------------------------------------------------


def _reference_keys() -> list[str]:
    text = REFERENCE.read_text()
    assert CONFIG_MARK in text, f"{_rel(REFERENCE)} lost its {CONFIG_MARK} marker"
    rows = text.split(CONFIG_MARK, 1)[1].split("-->", 1)[1].lstrip("\n").split("\n\n", 1)[0].splitlines()
    assert rows[0].startswith("| key"), rows[0]
    return [re.findall(r"`([^`]+)`", row.split("|")[1])[0] for row in rows[2:]]


def test_the_references_settings_are_exactly_the_keys_the_agent_reads() -> None:
    keys = _reference_keys()
    assert len(keys) == len(set(keys)), keys
    assert set(keys) == set(agent_config.SCHEMA), (
        f"in the reference, not read by the agent: {sorted(set(keys) - set(agent_config.SCHEMA))}; "
        f"read by the agent, not in the reference: {sorted(set(agent_config.SCHEMA) - set(keys))}")


def test_every_setting_and_variable_the_docs_name_is_read_by_the_code() -> None:
    code = "\n".join(p.read_text() for d in CODE_DIRS for p in (ROOT / d).rglob("*.py")) \
        + (ROOT / "Makefile").read_text()
    variables = {agent_config.env_name(k) for k in agent_config.SCHEMA}
    wrong = []
    for doc in DOCS:
        text = doc.read_text()
        for name in sorted(set(re.findall(r"\bMETASHIFT_[A-Z_]+[A-Z]\b", text))):
            if name not in variables and name not in code:
                wrong.append(f"{_rel(doc)}: {name} is read by nothing")
        for span in set(INLINE.findall(text)):
            m = re.fullmatch(r"([a-z]+)\.([a-z_]+)(?: = .*)?", span)
            if not m or re.fullmatch(NOT_SETTINGS, m.group(2)) or m.group(1) not in SECTIONS:
                continue
            if f"{m.group(1)}.{m.group(2)}" not in agent_config.SCHEMA:
                wrong.append(f"{_rel(doc)}: `{span}` is not a setting of the agent")
    assert not wrong, "\n".join(wrong)


def test_every_toml_sample_is_a_configuration_the_agent_accepts(tmp_path: Path) -> None:
    samples = [b for doc in DOCS for b in _blocks(doc) if b.lang == "toml"]
    assert samples
    for block in samples:
        path = tmp_path / "agent.toml"
        # a fragment (one section of a file) gets the one required key
        fragment = "source" not in tomllib.loads(block.text)
        text = _with_files(block.text, tmp_path)
        path.write_text(text + ('\n[source]\nurl = "zk://127.0.0.1:2181"\n' if fragment else ""))
        try:
            agent_config.load(path, env={})
        except agent_config.ConfigError as e:
            pytest.fail(f"{_rel(block.path)}:{block.line}: the agent refuses this sample: {e}")


def _with_files(text: str, directory: Path) -> str:
    """``text`` with every file it names under ``/etc/`` made in ``directory`` (mode 0600; a SASL
    users file holds a user), as the operator would have them: the sample's files, not its form."""

    def made(m: re.Match[str]) -> str:
        name = m.group(0)
        stand_in = directory / name.strip("/").replace("/", "_")
        stand_in.write_text("pulsar:secret\n" if "users" in name else "x\n")
        stand_in.chmod(0o600)
        return str(stand_in)

    return re.sub(r"/etc/[\w./-]+", made, text)


# ---- links ---------------------------------------------------------------------------------------


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"`|\*\*|\*", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@functools.cache
def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for heading, _level, _lines in _sections(path):
        slug = _slug(heading)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def test_every_link_resolves() -> None:
    wrong = []
    for doc in DOCS:
        for n, line in _prose(doc):
            for target in re.findall(r"\]\(([^)\s]+)\)", line):
                if re.match(r"[a-z]+://", target) or target.startswith("mailto:"):
                    continue
                file, _, anchor = target.partition("#")
                where = (doc.parent / file).resolve() if file else doc
                if not where.exists():
                    wrong.append(f"{_rel(doc)}:{n}: {target}: no such file")
                elif anchor and (where.suffix != ".md" or anchor not in _anchors(where)):
                    wrong.append(f"{_rel(doc)}:{n}: {target}: no such heading")
    assert not wrong, "\n".join(wrong)


def test_the_readme_is_a_front_page_linking_every_doc() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    for doc in DOCS[1:]:
        assert f"(docs/{doc.name})" in readme, f"the README does not link docs/{doc.name}"
    assert "make demo" in readme and "make test" in readme
