#!/usr/bin/env python3
"""Docs drift: what the docs and the code comments name must exist. Run by `make test`
(target docs-check); no build, no network, Python 3.11 standard library only.

Checks (each failure is one line on stderr, naming the file and line that names the thing):

  paths     Every repository path named in the current docs and in the comments of every .rs
            file exists: a token starting with one of ROOTS (src/, core/, consumer/, testkit/,
            bench/, tests/, migrations/, k8s/, scripts/, examples/, docs/, .ci/) that has a file
            extension or a trailing slash (a directory), e.g. `src/relay/cycle.rs`,
            `consumer/src/fleet/`, or is a whole code span (`k8s/overlays/prod`; a name without
            extension may be a Rust module or target: `examples/inbox_consumer` is its .rs).
            The bare names a doc lists after a directory are paths in it: `consumer/src/fleet/`
            (`mod.rs`, `beat.rs`). A Markdown file's relative links must resolve. `*`,
            `<placeholder>` and `{a,b}` are globs and must match something. In a crate's own
            files (consumer/, core/, bench/, testkit/), a path is also looked up from that
            crate's root (`src/lib.rs` in consumer/README.md).
            Scanned: README.md, docs/*.md, consumer/README.md, k8s/**/README.md, and the
            `//!`, `///` and `//` comments of every .rs file.
            Not scanned, because they are history and name what existed when they were written:
            CHANGELOG.md, docs/perf-journal.md, and the ADRs (docs/adr/*.md: a decision record is
            not edited after it is accepted; a later ADR supersedes it). `--history` lists their
            missing paths too, without failing.
  maps      A module whose `//!` doc maps its modules (a "map of the crate", or a table whose
            header's first column is "module" or "suite") names every `mod` it declares, and
            the table names no module it does not declare (src/lib.rs, consumer/src/lib.rs,
            bench/src/lib.rs, core/src/lib.rs, tests/e2e/main.rs); docs/development.md's suite
            table names every module of tests/e2e/main.rs (DOC_TABLES).
  settings  A code span `section.key` (`relay.workers`, `redis.wait_fsync = true`) in the
            current docs and the comments of the relay's .rs files (not the other crates':
            the consumer's settings are its own) names a field of that section's struct, found
            from `Settings` under src/config.
  path      docs/architecture.md's "One event's path": every file named in its tables exists
            (a bare name, `cycle.rs`, is looked up in the directory of the path before it in
            the same cell; one with none before it fails), the step table's files number as
            many as the text after it says ("That is 15 files"), and each row of the count
            table ("consumer (13)") names as many files as its count, the rows adding up to
            the total the text gives ("57 Rust files, plus the 2").
  impls     Docs that list the implementations of a trait name each of them (IMPL_LISTS:
            every `impl Job for X` is named in src/relay/periodic.rs's doc), and every file of
            src/relay/ that implements `Actor` or `Job` is in docs/architecture.md's actors table.

Usage: python3 scripts/docs_check.py [--history]
Exit status 0 when every check passed, 1 otherwise.
"""

import functools
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ROOTS = ("src", "core", "consumer", "testkit", "bench", "tests", "migrations", "k8s",
         "scripts", "examples", "docs", ".ci")
# The workspace's crates: a path in one of their files may be relative to the crate's root.
CRATES = ("consumer", "core", "bench", "testkit")
# History: what existed then. Not checked (see the module doc); --history lists them.
HISTORY = ("CHANGELOG.md", "docs/perf-journal.md", "docs/adr/*.md")
SKIP_DIRS = {"target", ".git", "node_modules"}

# A path token: one of ROOTS, then path characters. Not preceded by a path or word character,
# so `https://host/src/x.rs`, `../src/x.rs` (a relative link, checked by its own rules) and
# `target/release/src/...` are not taken for repository paths.
PATH_RE = re.compile(
    r"(?<![\w./~\-$])(?:" + "|".join(re.escape(r) for r in ROOTS) + r")/[\w./*<>{},\-]*"
)
EXT_RE = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,6}$")

FAILURES = []


def fail(message):
    FAILURES.append(message)
    print(f"docs-check: FAIL: {message}", file=sys.stderr)


def rel(path):
    return os.path.relpath(path, ROOT)


@functools.cache
def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


# ---------------------------------------------------------------------------------- sources


def doc_files():
    """The current docs, as repository-relative paths."""
    files = ["README.md", "consumer/README.md"]
    files += sorted(rel(p) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
    files += sorted(rel(p) for p in glob.glob(os.path.join(ROOT, "k8s", "**", "README.md"),
                                              recursive=True))
    history = history_files()
    return [f for f in files if os.path.isfile(os.path.join(ROOT, f)) and f not in history]


def history_files():
    out = set()
    for pattern in HISTORY:
        out.update(rel(p) for p in glob.glob(os.path.join(ROOT, pattern)))
    return out


@functools.cache
def rust_files():
    out = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            if name.endswith(".rs"):
                out.append(rel(os.path.join(dirpath, name)))
    return tuple(out)


def rust_comments(text):
    """(line number, comment text) of each line's `//` comment, outside string literals."""
    out = []
    in_raw = None  # the closing delimiter of a raw string spanning lines
    in_str = False  # a normal string spanning lines
    for number, line in enumerate(text.splitlines(), 1):
        i = 0
        n = len(line)
        while i < n:
            if in_raw:
                end = line.find(in_raw, i)
                if end < 0:
                    i = n
                    break
                i = end + len(in_raw)
                in_raw = None
                continue
            if in_str:
                c = line[i]
                if c == "\\":
                    i += 2
                    continue
                if c == '"':
                    in_str = False
                i += 1
                continue
            c = line[i]
            if line.startswith("//", i):
                out.append((number, line[i:]))
                break
            m = re.match(r'b?r(#*)"', line[i:])
            if m and (i == 0 or not (line[i - 1].isalnum() or line[i - 1] == "_")):
                in_raw = '"' + m.group(1)
                i += m.end()
                continue
            if c == '"':
                in_str = True
                i += 1
                continue
            if c == "'":
                # A char literal ('"', '\'', 'x'); a lifetime has no closing quote close by.
                m = re.match(r"'(\\.|[^\\'])'", line[i:]) or re.match(r"'\\u\{[0-9a-fA-F]+\}'",
                                                                     line[i:])
                i += m.end() if m else 1
                continue
            i += 1
    return out


# ------------------------------------------------------------------------------------ paths


def expand_braces(token):
    m = re.search(r"\{([^{}]*)\}", token)
    if not m:
        return [token]
    out = []
    for part in m.group(1).split(","):
        out += expand_braces(token[:m.start()] + part + token[m.end():])
    return out


def clean(token):
    token = token.rstrip(".,:;)}>")
    # A balanced `{...}` or `<...>` at the end was stripped above only if it was unbalanced.
    while token.count("{") > token.count("}") and token.endswith(tuple(".,:;")):
        token = token[:-1]
    return token


def checkable(token):
    if token.endswith("/"):
        return True
    last = token.rstrip("/").rsplit("/", 1)[-1]
    return bool(EXT_RE.search(last)) or "*" in last


def exists(token, bases):
    for base in bases:
        for variant in expand_braces(token):
            pattern = re.sub(r"<[^<>/]*>", "*", variant)
            full = os.path.join(ROOT, base, pattern)
            if any(ch in pattern for ch in "*?["):
                if glob.glob(full):
                    return True
            elif os.path.exists(full) or (not checkable(pattern) and os.path.exists(full + ".rs")):
                return True
    return False


def bases_for(source):
    bases = [""]
    top = source.split("/", 1)[0]
    if top in CRATES:
        bases.append(top)
    return bases


def paths_in(source, lines):
    """(token, line) of the checkable repository paths in (line number, text) pairs."""
    for number, text in lines:
        for m in PATH_RE.finditer(text):
            token = clean(m.group(0))
            if "/" not in token:
                continue
            # A whole code span without an extension is checked too: `k8s/overlays/prod`,
            # `examples/inbox_consumer` (a target: its .rs file).
            after = text[m.start() + len(token):][:1]
            quoted = text[m.start() - 1:m.start()] == "`" and after == "`"
            if checkable(token) or quoted:
                yield token, number


# `[text](target)`: a relative link of a Markdown file.
LINK_RE = re.compile(r"\[([^\[\]]*)\]\(([^()\s]+)\)")
# A directory, then in parentheses (within a few words, maybe across a line break) the files
# of it a doc names bare: `consumer/src/fleet/` (`mod.rs`, `beat.rs`).
DIR_LIST_RE = re.compile(r"`((?:" + "|".join(re.escape(r) for r in ROOTS)
                         + r")/[\w./-]*/)`([^`()]{0,40})\(([^()]*)\)")


def link_target(doc, target):
    """The repository-relative path a relative Markdown link points at, or None."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
        return None
    path = target.split("#", 1)[0]
    if not path:
        return None
    return os.path.normpath(os.path.join(os.path.dirname(doc), path))


def check_markdown_links(doc, text, missing):
    """Relative link targets exist; a path as a link's text names that target (or a file in
    it), which stands for the link text's own check. Returns the link texts' spans."""
    spans = []
    for number, line in enumerate(text.splitlines(), 1):
        for m in LINK_RE.finditer(line):
            target = link_target(doc, m.group(2))
            if target is None:
                continue
            if not os.path.exists(os.path.join(ROOT, target)):
                missing.append((doc, number, f"{m.group(2)} (a link, to {target})"))
                continue
            spans.append((number, m.group(1), target))
    return spans


def bare_names_in_dirs(doc, text):
    """(path, line) of the bare file names a doc lists after their directory."""
    for m in DIR_LIST_RE.finditer(text):
        number = text.count("\n", 0, m.start()) + 1
        for name in re.findall(r"`([\w.-]+/?)`", m.group(3)):
            if checkable(name):
                yield m.group(1) + name, number


def check_paths(history):
    found = 0
    missing = []
    sources = []
    linked = {}
    for f in doc_files():
        text = read(os.path.join(ROOT, f))
        for number, link_text, target in check_markdown_links(f, text, missing):
            linked.setdefault((f, number), []).append((link_text, target))
        lines = list(enumerate(text.splitlines(), 1))
        lines += [(number, path) for path, number in bare_names_in_dirs(f, text)]
        sources.append((f, lines))
    for f in rust_files():
        sources.append((f, rust_comments(read(os.path.join(ROOT, f)))))
    for source, lines in sources:
        bases = bases_for(source)
        for token, number in paths_in(source, lines):
            found += 1
            if exists(token, bases):
                continue
            # A link's text may name its target as seen from elsewhere:
            # [tests/alerts.test.yaml](../k8s/observability/tests/alerts.test.yaml).
            if any(token in link_text and (target == token or target.endswith("/" + token))
                   for link_text, target in linked.get((source, number), [])):
                continue
            missing.append((source, number, token))
    for source, number, token in missing:
        fail(f"{source}:{number}: names `{token}`, which does not exist")
    if history:
        for source in sorted(history_files()):
            lines = list(enumerate(read(os.path.join(ROOT, source)).splitlines(), 1))
            for token, number in paths_in(source, lines):
                if not exists(token, bases_for(source)):
                    print(f"docs-check: history (not a failure): {source}:{number}: "
                          f"names `{token}`, which no longer exists")
    return found


# ------------------------------------------------------------------------------------- maps


MOD_RE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;", re.M)


def module_doc(text):
    """The `//!` lines of a file, with their line numbers."""
    return [(n, line.strip()[3:]) for n, line in enumerate(text.splitlines(), 1)
            if line.strip().startswith("//!")]


def table_first_column(doc):
    """The names in the first column of the doc's module table, if it has one."""
    names = []
    in_table = False
    for _, line in doc:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.strip().startswith("|"):
            in_table = False
            continue
        if not in_table:
            in_table = cells[0].lower() in ("module", "suite")
            continue
        if set(cells[0]) <= set("-: "):
            continue
        m = re.match(r"\[?`([a-z_][a-z0-9_]*)`\]?", cells[0])
        if m:
            names.append(m.group(1))
    return names


def check_maps():
    checked = []
    for f in rust_files():
        text = read(os.path.join(ROOT, f))
        declared = MOD_RE.findall(text)
        if not declared:
            continue
        doc = module_doc(text)
        doc_text = "\n".join(line for _, line in doc)
        table = table_first_column(doc)
        if not table and "map of the crate" not in doc_text.lower():
            continue
        checked.append(f)
        for name in declared:
            if not re.search(r"`" + re.escape(name) + r"`", doc_text):
                fail(f"{f}: declares `mod {name}`, which its module map (the `//!` doc) "
                     f"does not name")
        for name in table:
            if name not in declared:
                fail(f"{f}: its module table names `{name}`, which it does not declare")
    return checked


# Tables of a Markdown doc that list a module's submodules: (doc, first column's header,
# the module file, submodules that are not listed).
DOC_TABLES = [("docs/development.md", "suite", "tests/e2e/main.rs", {"support"})]


def check_doc_tables():
    for doc, header, module, unlisted in DOC_TABLES:
        lines = [(n, line) for n, line in enumerate(read(os.path.join(ROOT, doc)).splitlines(), 1)]
        names = []
        in_table = False
        for _, line in lines:
            if not line.startswith("|"):
                in_table = False
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not in_table:
                in_table = cells[0].lower() == header
                continue
            m = re.match(r"`([a-z_][a-z0-9_]*)`", cells[0])
            if m:
                names.append(m.group(1))
        declared = MOD_RE.findall(read(os.path.join(ROOT, module)))
        for name in declared:
            if name not in names and name not in unlisted:
                fail(f"{doc}: its `{header}` table does not name `{name}`, a module of {module}")
        for name in names:
            if name not in declared:
                fail(f"{doc}: its `{header}` table names `{name}`, not a module of {module}")


# ---------------------------------------------------------------------------------- settings


# Code spans that look like a setting and are not one (Lua's calls in the publish script).
NOT_SETTINGS = {"redis.call", "redis.pcall"}


def settings_sections():
    """{section: its fields}, from the `Settings` struct and the structs of its fields, wherever
    under src/config they are defined."""
    texts = [read(os.path.join(ROOT, f)) for f in rust_files()
             if f == "src/config.rs" or f.startswith("src/config/")]
    structs = {}
    for text in texts:
        for m in re.finditer(r"pub struct (\w+)\s*\{(.*?)\n\}", text, re.S):
            structs[m.group(1)] = dict(re.findall(r"pub (\w+):\s*([\w<>]+)", m.group(2)))
    if "Settings" not in structs:
        fail("src/config: no `pub struct Settings`: update settings_sections in docs_check.py")
        return {}
    return {name: set(structs[kind]) for name, kind in structs["Settings"].items()
            if kind in structs}


def check_settings():
    """A code span `section.key` names a setting that exists."""
    sections = settings_sections()
    if not sections:
        return 0
    span = re.compile(r"`(" + "|".join(sorted(sections)) + r")\.([a-z_]+)(?=[`\s=])")
    sources = [(f, list(enumerate(read(os.path.join(ROOT, f)).splitlines(), 1)))
               for f in doc_files()]
    sources += [(f, rust_comments(read(os.path.join(ROOT, f)))) for f in rust_files()
                if not f.startswith(CRATES)]
    count = 0
    for source, lines in sources:
        for number, text in lines:
            for m in span.finditer(text):
                section, key = m.groups()
                if f"{section}.{key}" in NOT_SETTINGS or key in ("rs", "md"):
                    continue
                count += 1
                if key not in sections[section]:
                    fail(f"{source}:{number}: names the setting `{section}.{key}`, which "
                         f"[{section}] does not have")
    return count


# ------------------------------------------------------------------------------------ impls


# (the file whose `//!` doc lists the implementations, the trait, where they are)
IMPL_LISTS = [("src/relay/periodic.rs", "Job", "src")]
# Files implementing these in src/relay/ are actors; each must be in architecture.md's table.
ACTOR_TRAITS = ("Actor", "Job")
ACTORS_DOC = "docs/architecture.md"


def impls_of(trait, under):
    """(type, file) for each `impl ... Trait for Type` in the .rs files under `under`."""
    pattern = re.compile(r"^\s*impl(?:<[^>]*>)?\s+(?:[\w:]+::)?" + re.escape(trait)
                         + r"\s+for\s+([A-Za-z_]\w*)", re.M)
    out = []
    for f in rust_files():
        if not f.startswith(under + "/"):
            continue
        for m in pattern.finditer(read(os.path.join(ROOT, f))):
            out.append((m.group(1), f))
    return out


def check_impls():
    for doc_file, trait, under in IMPL_LISTS:
        doc_text = "\n".join(line for _, line in module_doc(read(os.path.join(ROOT, doc_file))))
        for type_name, f in impls_of(trait, under):
            if type_name == "Periodic" or f == doc_file:
                continue
            if not re.search(r"\b" + re.escape(type_name) + r"\b", doc_text):
                fail(f"{doc_file}: its doc does not name `{type_name}` ({f}), an "
                     f"implementation of `{trait}`")
    table = actors_table()
    for trait in ACTOR_TRAITS:
        for type_name, f in impls_of(trait, "src/relay"):
            if f == "src/relay/periodic.rs":
                continue
            if f not in table:
                fail(f"{ACTORS_DOC}: its actors table does not name `{f}` "
                     f"(`{type_name}` implements `{trait}`)")


def actors_table():
    """The files named in the table under architecture.md's `## Actors`."""
    text = read(os.path.join(ROOT, ACTORS_DOC))
    m = re.search(r"^## Actors\n(.*?)(?=^## )", text, re.M | re.S)
    if not m:
        fail(f"{ACTORS_DOC}: no `## Actors` section")
        return set()
    return set(re.findall(r"`(src/[\w/.]+)`", m.group(1)))


# ------------------------------------------------------------------------------ event's path


PATH_DOC = "docs/architecture.md"
PATH_SECTION = "## One event's path"


def path_tables(text):
    """The tables of the section: for each, its rows as (line number, cells)."""
    start = text.find("\n" + PATH_SECTION)
    if start < 0:
        return None, ""
    end = text.find("\n## ", start + 1)
    section = text[start:end if end > 0 else len(text)]
    first = text.count("\n", 0, start) + 2
    tables, current = [], []
    for offset, line in enumerate(section.splitlines()[1:]):
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= set("-: ") for c in cells):
                current.append((first + offset, cells))
        elif current:
            tables.append(current[1:])  # without the header
            current = []
    if current:
        tables.append(current[1:])
    return tables, section


def files_in_cell(number, cell):
    """The files a table cell names: full paths, and bare names in the directory of the path
    before them."""
    out, directory = [], None
    for token in re.findall(r"`([^`]+)`", cell):
        if "/" in token:
            directory = os.path.dirname(token)
            out.append(token)
        elif EXT_RE.search(token):
            if directory is None:
                fail(f"{PATH_DOC}:{number}: names `{token}` with no path before it in its cell")
                continue
            out.append(os.path.join(directory, token))
    return out


def check_event_path():
    text = read(os.path.join(ROOT, PATH_DOC))
    tables, section = path_tables(text)
    if tables is None:
        fail(f"{PATH_DOC}: no `{PATH_SECTION}` section")
        return 0
    if len(tables) < 2:
        fail(f"{PATH_DOC}: `{PATH_SECTION}` needs its step table and its count table, has {len(tables)} table(s)")
        return 0
    named = 0
    per_table = []
    for rows in tables:
        files = []
        for number, cells in rows:
            row_files = files_in_cell(number, cells[-1])
            for f in row_files:
                named += 1
                if not os.path.isfile(os.path.join(ROOT, f)):
                    fail(f"{PATH_DOC}:{number}: the event's path names `{f}`, which does not exist")
            files.append((number, cells, row_files))
        per_table.append(files)
    steps = {f for _, _, fs in per_table[0] for f in fs}
    m = re.search(r"That is (\d+) files", section)
    if not m:
        fail(f"{PATH_DOC}: `{PATH_SECTION}` does not say how many files its step table names (\"That is N files\")")
    elif int(m.group(1)) != len(steps):
        fail(f"{PATH_DOC}: `{PATH_SECTION}` says {m.group(1)} files; its step table names {len(steps)}")
    total = 0
    for number, cells, fs in per_table[1]:
        c = re.search(r"\((\d+)", cells[0])
        if not c:
            fail(f"{PATH_DOC}:{number}: the count table's row `{cells[0]}` gives no count, `(N)`")
            continue
        total += int(c.group(1))
        if int(c.group(1)) != len(set(fs)):
            fail(f"{PATH_DOC}:{number}: the row `{cells[0]}` names {len(set(fs))} files")
    m = re.search(r"(\d+) Rust files, plus the (\d+)", section)
    if not m:
        fail(f"{PATH_DOC}: `{PATH_SECTION}` does not give the total of its count table (\"N Rust files, plus the M\")")
    elif int(m.group(1)) + int(m.group(2)) != total:
        fail(f"{PATH_DOC}: `{PATH_SECTION}` says {m.group(1)} + {m.group(2)} files; its count table's rows add up to {total}")
    return named


def main(argv):
    history = "--history" in argv[1:]
    found = check_paths(history)
    maps = check_maps()
    check_doc_tables()
    settings = check_settings()
    event_path = check_event_path()
    check_impls()
    if FAILURES:
        print(f"docs-check: {len(FAILURES)} failure(s)", file=sys.stderr)
        return 1
    print(f"docs-check: ok ({found} path mentions, module maps of {', '.join(maps)}, "
          f"development.md's suites, {settings} settings named, {event_path} files of the event's path, "
          f"the Job list and the actors table)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
