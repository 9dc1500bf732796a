"""The documentation site cannot rot: every tutorial program runs as shown, in
one process and under ``aiopdbp launch -n 2`` (same lines printed); every
public name has a place in the API reference; every public coroutine says what
a cancellation leaves behind.  (``tools/dev.py docs`` builds the site with
warnings as errors; ``.ci/run`` runs it.)"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import aiopdbp

from tests.mpirun import REPO_ROOT, requires_mpi, unprefixed

DOCS = REPO_ROOT / "docs"
TUTORIAL = sorted((DOCS / "tutorial").glob("*.py"))
#: programs that need a module (skipped without it)
NEEDS = {"gpu_torch": "torch"}


def _progs() -> list[object]:
    return [pytest.param(p, id=p.stem, marks=[pytest.mark.skipif(
        importlib.util.find_spec(NEEDS[p.stem]) is None, reason=f"needs {NEEDS[p.stem]}")] if p.stem in NEEDS else [])
            for p in TUTORIAL]
_LAUNCHER_VARS = ("PMI_FD", "PMI_RANK", "PMI_SIZE", "PMI_PORT", "MPI_LOCALNRANKS", "MPI_LOCALRANKID")


def _run(cmd: list[str], cwd: Path) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARS}
    env["PYTHONPATH"] = str(REPO_ROOT)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=100, env=env, cwd=cwd)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert not proc.stderr.strip(), f"{cmd} wrote to stderr:\n{proc.stderr}"
    return sorted(unprefixed(proc.stdout).splitlines())


@pytest.fixture(scope="module")
def docs_one_process(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``lines(prog)``: what ``prog`` prints in one process, run once per module
    (the one-process test and the two-rank comparison read the same run)."""
    printed: dict[Path, list[str]] = {}

    def lines(prog: Path) -> list[str]:
        if prog not in printed:
            printed[prog] = _run([sys.executable, str(prog)], tmp_path_factory.mktemp(prog.stem))
        return printed[prog]

    return lines


def test_every_tutorial_program_is_shown_on_a_page() -> None:
    pages = "".join(p.read_text() for p in (DOCS / "tutorial").glob("*.md"))
    assert TUTORIAL
    for prog in TUTORIAL:
        assert f"literalinclude}} {prog.name}" in pages, f"{prog.name} is on no tutorial page"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("prog", _progs())
def test_tutorial_program_runs_in_one_process(prog: Path, docs_one_process: Any) -> None:
    assert docs_one_process(prog), "the program printed nothing"


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(240)
@pytest.mark.parametrize("prog", _progs())
def test_tutorial_program_prints_the_same_on_two_ranks(prog: Path, tmp_path: Path,
                                                      docs_one_process: Any) -> None:
    one = docs_one_process(prog)
    two = _run([sys.executable, "-m", "aiopdbp", "launch", "-n", "2", str(prog)], tmp_path)
    assert two == one


#: the pages that hold the API reference: the reference, and the model page
#: for the model's own objects (pipes, tables, frames)
API_PAGES = ("reference.md", "model.md")


def _api_entries() -> set[str]:
    """Every object the API pages document: ``"GP"``, and ``"GP.send"`` for a
    member, whether its directive is nested under its class's (a short name)
    or stands alone (a dotted one)."""
    entries: set[str] = set()
    for page in API_PAGES:
        cls = ""
        for line in (DOCS / page).read_text().splitlines():
            if m := re.match(r"\.\. auto\w+:: aiopdbp\.([\w.]+)$", line):
                entries.add(m[1])
                cls = m[1]
            elif (m := re.match(r" +\.\. auto\w+:: (?:aiopdbp\.)?([\w.]+)$", line)) and cls:
                entries.add(m[1] if "." in m[1] else f"{cls}.{m[1]}")
    return entries


def test_api_reference_documents_every_public_name() -> None:
    documented = {e for e in _api_entries() if "." not in e}
    public = {n for n in aiopdbp.__all__ if not n.startswith("__")}
    assert public - documented == set(), f"missing from docs/{API_PAGES}"
    assert documented - public <= set(), "documented but not exported"


def test_every_public_method_of_a_documented_class_has_a_place() -> None:
    """The reference lists a class's members one by one (the public ones
    first, the internal ones under "Internals"): a method added to a class
    must be placed in one of the two, not silently left off."""
    entries = _api_entries()
    classes = {e.split(".")[0] for e in entries if "." in e}
    assert {"Node", "GP", "IncomingStream"} <= classes
    missing = []
    for name in sorted(classes):
        cls = getattr(aiopdbp, name)
        for klass in cls.__mro__:
            if klass.__module__.startswith("aiopdbp"):
                missing += [f"{name}.{attr}" for attr, value in vars(klass).items()
                            if not attr.startswith("_")
                            and not any(f"{k.__name__}.{attr}" in entries for k in cls.__mro__)
                            and (inspect.isfunction(value) or isinstance(value, property))
                            and attr not in getattr(klass, "__abstractmethods__", ())]
    assert sorted(set(missing)) == [], f"methods on no API page (public, or under Internals): {sorted(set(missing))}"


_DOTTED = re.compile(r"\baiopdbp(?:\.[A-Za-z_]\w*)+")


def test_every_dotted_path_the_docs_show_resolves() -> None:
    """A module, class or function named `aiopdbp.x.y` in README.md or docs/
    can be imported (the layout may move; what the docs show must not rot)."""
    pages = [REPO_ROOT / "README.md", *DOCS.rglob("*.md")]
    broken = []
    for page in pages:
        if "_build" in page.parts:
            continue
        for path in sorted(set(_DOTTED.findall(page.read_text()))):
            parts = path.split(".")
            for cut in range(len(parts), 0, -1):  # the longest importable module, then attributes
                try:
                    obj: object = importlib.import_module(".".join(parts[:cut]))
                except ImportError:
                    continue
                try:
                    for attr in parts[cut:]:
                        obj = getattr(obj, attr)
                except AttributeError:
                    broken.append(f"{page.relative_to(REPO_ROOT)}: {path}")
                break
            else:
                broken.append(f"{page.relative_to(REPO_ROOT)}: {path}")
    assert not broken, "paths the docs show that do not resolve:\n" + "\n".join(broken)


def test_every_source_file_the_docs_name_exists() -> None:
    pages = [REPO_ROOT / "README.md", *DOCS.rglob("*.md")]
    missing = sorted({f"{page.relative_to(REPO_ROOT)}: {f}" for page in pages if "_build" not in page.parts
                      for f in re.findall(r"\b(?:aiopdbp|tests|benchmarks|tools)/[\w/]+\.(?:py|sh)\b", page.read_text())
                      if not (REPO_ROOT / f).exists()})
    assert not missing, "files the docs name that do not exist:\n" + "\n".join(missing)


def test_module_map_names_every_module() -> None:
    """docs/development.md's module map describes the code as it is: every
    module of the package has its row (and, by the test above, every row a file)."""
    text = (DOCS / "development.md").read_text()
    modules = sorted(str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "aiopdbp").rglob("*.py")
                     if p.name not in ("__init__.py", "__main__.py"))
    missing = [m for m in modules if f"`{m}`" not in text]
    assert not missing, "modules missing from the module map in docs/development.md:\n" + "\n".join(missing)


def _public_coroutines() -> list[tuple[str, object]]:
    found: list[tuple[str, object]] = []
    for name in aiopdbp.__all__:
        obj = getattr(aiopdbp, name)
        if inspect.iscoroutinefunction(obj):
            found.append((name, obj))
        elif inspect.isclass(obj):
            for attr, fn in inspect.getmembers(obj):
                if not attr.startswith("_") and (inspect.iscoroutinefunction(fn)
                                                 or inspect.isasyncgenfunction(fn)):
                    found.append((f"{name}.{attr}", fn))
    return found


def test_every_public_coroutine_has_a_cancellation_paragraph() -> None:
    found = _public_coroutines()
    assert len(found) > 20
    missing = [n for n, fn in found if "Cancellation:" not in (inspect.getdoc(fn) or "")]
    assert missing == []


#: the paper's and the patent's names: the model page maps them onto the
#: API; everywhere else a user reads messages, streams, segments and pipes
PAPER_WORDS = re.compile(r"\b(INFO|SINFO|CDUs?|prcs\w+|PPS|CPS|NTA|PTA|MTA|DDBP|UMB|SBP|RBP|MNode|CNode"
                         r"|NGPs?|HInfo\w*|MBInfo\w*|MESP|recvData|sendData|Ntype|Ptype|PipeA|PipeB)\b")
#: pages written in the model's words: the model itself, and the
#: contributors' module map
MODEL_PAGES = ("model.md", "development.md")


def _docstring(entry: str) -> str:
    first, *rest = entry.split(".")
    obj: object = getattr(aiopdbp, first)
    for part in rest:
        obj = inspect.getattr_static(obj, part, None)
        if obj is None:  # an instance attribute: documented by a comment next to it
            return ""
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    return inspect.getdoc(obj) or ""


def test_the_papers_words_are_on_the_model_page_only() -> None:
    entries = {e for e in _api_entries() if e.split(".")[0] not in _model_objects()}
    found = [f"{e}: {m}" for e in sorted(entries) for m in sorted(set(PAPER_WORDS.findall(_docstring(e))))]
    pages = sorted(DOCS.rglob("*.md")) + sorted((DOCS / "tutorial").glob("*.py"))
    found += [f"{page.relative_to(DOCS)}: {m}" for page in pages
              if "_build" not in page.parts and page.name not in MODEL_PAGES
              for m in sorted(set(PAPER_WORDS.findall(page.read_text()))) if m]
    assert found == [], "the paper's words outside the model page:\n" + "\n".join(found)


#: a pointer to a module's docstring, which the site does not show
MODULE_DOC = re.compile(r"(see|in) (the )?module\s+doc(string)?\b")


def test_no_docstring_on_the_site_points_to_a_module_docstring() -> None:
    found = [e for e in sorted(_api_entries()) if MODULE_DOC.search(_docstring(e))]
    assert found == [], "docstrings on the site that point to a page it does not have:\n" + "\n".join(found)


def _model_objects() -> set[str]:
    text = (DOCS / "model.md").read_text()
    return set(re.findall(r"^\.\. auto\w+:: aiopdbp\.(\w+)$", text, re.M))


#: the longest code line the docs show: what a page (or a phone) displays
#: without a scroll bar, and the width the tutorial programs are written to
CODE_WIDTH = 88
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*(.*)$")


def _code_lines() -> list[tuple[str, str]]:
    """``(where, line)`` for every line of a code block on a page of docs/
    (fenced blocks; directives such as ``{eval-rst}`` or ``{toctree}`` are
    not code) and of every file a page ``literalinclude``s."""
    lines: list[tuple[str, str]] = []
    included: set[Path] = set()
    for page in sorted(DOCS.rglob("*.md")) + sorted(DOCS.rglob("*.rst")):
        if "_build" in page.parts:
            continue
        fence: tuple[str, str] | None = None
        for n, line in enumerate(page.read_text().splitlines(), 1):
            m = _FENCE.match(line)
            if fence is None:
                if m:
                    fence = (m[1], m[2].strip())
                    for inc in re.findall(r"\{literalinclude\}\s+(\S+)", m[2]):
                        included.add((page.parent / inc).resolve())
            elif m and m[1][0] == fence[0][0] and len(m[1]) >= len(fence[0]) and not m[2]:
                fence = None
            elif not fence[1].startswith("{") or fence[1].startswith("{code"):
                lines.append((f"{page.relative_to(DOCS)}:{n}", line))
        for inc in re.findall(r"^\.\. literalinclude:: (\S+)", page.read_text(), re.M):
            included.add((page.parent / inc).resolve())
    for path in sorted(included):
        lines += [(f"{path.relative_to(REPO_ROOT)}:{n}", line)
                  for n, line in enumerate(path.read_text().splitlines(), 1)]
    return lines


def test_code_lines_in_the_docs_fit_88_columns() -> None:
    lines = _code_lines()
    assert any("tutorial/first.py" in where for where, _ in lines), "the tutorial programs are scanned"
    assert any("model.md" in where for where, _ in lines), "the pages' code blocks are scanned"
    wide = [f"{where}: {len(line)} columns" for where, line in lines if len(line) > CODE_WIDTH]
    assert wide == [], f"code lines wider than {CODE_WIDTH} columns:\n" + "\n".join(wide)


@pytest.mark.timeout(120)
def test_the_home_page_shows_install_and_the_first_program_with_its_output(docs_one_process: Any) -> None:
    """A newcomer's first page: how to install, the first program, how to
    run it, and what it prints (the program's real output)."""
    home = (DOCS / "index.md").read_text()
    assert "python3 tools/dev.py" in home and "pip install" in home
    assert "```{literalinclude} tutorial/first.py" in home
    assert "aiopdbp launch -n 2 first.py" in home
    shown = re.search(r"```text\n(.*?)```", home, re.S)
    assert shown, "the home page shows no output"
    printed = docs_one_process(DOCS / "tutorial" / "first.py")
    assert sorted(shown[1].splitlines()) == printed


def _bench_parser(sub: str) -> Any:
    if sub == "pingpong":
        from aiopdbp.bench.pingpong import build_parser
    elif sub == "streams":
        from aiopdbp.bench.streams import build_parser
    else:
        from aiopdbp.bench.cli import build_parser
    return build_parser()


def test_the_readmes_measured_figures_name_commands_that_parse() -> None:
    """The README gives ratios and the command that reproduces each: every
    ``bench ...`` it names is one ``aiopdbp bench`` accepts (parsed, not run)."""
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme[readme.index("**Measured.**"):readme.index("## Quick start")]
    commands = re.findall(r"^aiopdbp (bench .+)$", section, re.M) + re.findall(r"`(bench [^`]+)`", section)
    assert any(c.startswith("bench pingpong") for c in commands), "no pingpong command"
    bad = []
    for command in commands:
        args = command.split()[1:]
        sub = args[0] if args[0] in ("pingpong", "streams") else ""
        try:
            _bench_parser(sub).parse_args(args[1:] if sub else args)
        except SystemExit:
            bad.append(command)
    assert bad == [], f"commands aiopdbp bench refuses: {bad}"
