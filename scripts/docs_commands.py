#!/usr/bin/env python3
"""The commands the docs give work as written.

Reads README.md, consumer/README.md, k8s/README.md and docs/*.md, takes every command from
their shell code blocks (```sh, ```bash, ```console; in a block without a language only the
lines that start with `$ `) and from their code spans (`...`), and checks each one whose program
it knows:

  cargo run|build|test ...   compiled with `cargo check` and the same packages, features and
                             targets (`--release` dropped: the feature gates are the same, and
                             CI is spared a release build); `cargo run` of the relay's or the
                             bench's binary also has its arguments checked as below; a test
                             filter `--test T MOD::...` names a module of tests/T/
  make TARGET [VAR=...]      the target is in the Makefile, the variable is one it sets;
                             BENCH_ARGS is checked as outbox-bench's arguments
  outbox-relay CMD --flag    CMD is a subcommand and each flag one of its own, with a listed
                             value when the flag has `possible values`, against
                             `target/debug/outbox-relay CMD --help` (OUTBOX_RELAY_BIN names
                             another binary); ./target/*/outbox-relay the same
  outbox-bench --flag        the same against target/debug/outbox-bench (OUTBOX_BENCH_BIN), and
                             each scenario of `--only` is one it has
  kubectl kustomize PATH,    PATH renders (`kubectl kustomize`) with the pinned kubectl of
  kubectl apply -k PATH      target/tools/k8s-venv (scripts/k8s-tools.sh; KUBECTL names another)
  kubectl OTHER ...          the subcommand exists and each flag is one of its own or a global
                             one (they need a cluster, so they are not run)
  bash|python3 scripts/X     the script exists
  cargo package|publish      a Makefile recipe (`make package`, which CI runs) runs it

Other programs (curl, redis-cli, psql, docker, helm, openssl, export, ...) are not checked.
A command with a placeholder (`<pod>`, `...`) where its check needs a real value fails unless
it is in ALLOWED below, with the reason; an ALLOWED entry that matches no command fails too.

`--list` prints the commands found and checks nothing.

Needs the relay and bench binaries built (`make test` builds them first) and the pinned kubectl
(`make k8s-tools`). Exit status 0 when every command passed, 1 otherwise (one line per failure).
Python 3.11 standard library only.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SOURCES = ["README.md", "consumer/README.md", "k8s/README.md"] + sorted(
    os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))
)

# (file, the command as extracted: its words joined by single spaces) -> why it is not checked.
# Keep each reason true: an entry that matches nothing is reported.
ALLOWED: dict[tuple[str, str], str] = {
    ("docs/operations.md", "kubectl apply -k <overlay>"): (
        "any overlay of the reader's: k8s-check renders each of k8s/overlays/"
    ),
    ("docs/operations.md", "kubectl cnpg promote"): (
        "a kubectl plugin (CloudNativePG's), not part of kubectl"
    ),
    # perf-journal.md is a dated log: its entries are not updated, and before outbox-bench was
    # a binary of its own the benchmark was the relay's `bench` subcommand.
    ("docs/perf-journal.md", "outbox-relay bench"): "a dated journal entry (the old bench)",
    ("docs/perf-journal.md", "./target/release/outbox-relay bench --repeat 3"): (
        "a dated journal entry (the old bench)"
    ),
    ("docs/perf-journal.md", "outbox-relay bench --only ..."): (
        "a dated journal entry (the old bench)"
    ),
}

SHELL_LANGS = {"sh", "bash", "shell", "console"}
OPERATORS = {"&&", "||", ";", "|"}
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PLACEHOLDER = re.compile(r"<[^<>]+>|\.\.\.")


@dataclass
class Command:
    file: str
    line: int
    words: list[str]

    @property
    def text(self) -> str:
        return " ".join(self.words)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}: `{self.text}`"


class Failure(Exception):
    pass


# --- extraction -------------------------------------------------------------------------------


def split_words(text: str) -> list[str]:
    try:
        return shlex.split(text, comments=True)
    except ValueError:
        # An unbalanced quote in prose; the words are still what the reader types.
        return text.split()


def simple_commands(file: str, line: int, text: str) -> list[Command]:
    """The simple commands of one shell line: split at && || ; |, leading VAR=value and `env`
    dropped."""
    out: list[Command] = []
    current: list[str] = []
    for word in split_words(text) + [";"]:
        if word in OPERATORS or word.endswith(";"):
            tail = word[:-1] if word.endswith(";") and word != ";" else None
            if tail:
                current.append(tail)
            while current and (current[0] == "env" or ASSIGNMENT.match(current[0])):
                current.pop(0)
            if current:
                out.append(Command(file, line, current))
            current = []
        else:
            current.append(word)
    return out


def extract(file: str) -> list[Command]:
    commands: list[Command] = []
    with open(os.path.join(ROOT, file), encoding="utf-8") as f:
        lines = f.read().split("\n")
    prose: list[tuple[int, str]] = []
    fence: str | None = None
    lang = ""
    pending = ""
    pending_line = 0
    for number, raw in enumerate(lines, 1):
        stripped = raw.strip()
        opening = re.match(r"^(```+|~~~+)\s*([\w+-]*)", stripped)
        if fence is None and opening:
            fence, lang = opening.group(1), opening.group(2).lower()
            continue
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
                continue
            if lang in SHELL_LANGS:
                text = stripped[2:] if stripped.startswith("$ ") else stripped
            elif lang == "" and stripped.startswith("$ "):
                text = stripped[2:]
            else:
                continue
            if not pending:
                pending_line = number
            if text.endswith("\\"):
                pending += text[:-1] + " "
                continue
            commands += simple_commands(file, pending_line, pending + text)
            pending = ""
            continue
        prose.append((number, raw))
    # Code spans of the prose; a span may wrap onto the next line, never across a paragraph.
    text = "\n".join(raw for _, raw in prose)
    starts = [0]
    for _, raw in prose:
        starts.append(starts[-1] + len(raw) + 1)
    for match in re.finditer(r"(?<!`)`([^`]+)`(?!`)", text):
        body = match.group(1)
        if re.search(r"\n\s*\n", body):
            continue
        index = max(i for i, s in enumerate(starts[:-1]) if s <= match.start())
        number = prose[index][0]
        body = " ".join(body.split())
        if body.startswith("$ "):
            body = body[2:]
        for command in simple_commands(file, number, body):
            # A program's name alone names it; it is no command to check.
            if program_of(command.words[0]) is not None and len(command.words) > 1:
                commands.append(command)
    commands = [c for c in commands if program_of(c.words[0]) is not None]
    return sorted(commands, key=lambda c: c.line)


def program_of(word: str) -> str | None:
    name = os.path.basename(word)
    if word in ("cargo", "make", "kubectl", "bash", "python3"):
        return word
    if name in ("outbox-relay", "outbox-bench") and (word == name or "target/" in word):
        return name
    return None


# --- checks -----------------------------------------------------------------------------------


def is_placeholder(word: str) -> bool:
    return bool(PLACEHOLDER.search(word))


def run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, **kwargs)


class Clap:
    """A clap program's subcommands and flags, from its --help."""

    def __init__(self, binary: str, what: str):
        self.binary = binary
        self.what = what
        self.helps: dict[tuple[str, ...], str] = {}

    def help(self, path: tuple[str, ...]) -> str:
        if path not in self.helps:
            result = run([self.binary, *path, "--help"])
            if result.returncode != 0:
                raise Failure(f"`{self.what} {' '.join(path)} --help` exited {result.returncode}")
            self.helps[path] = result.stdout
        return self.helps[path]

    def subcommands(self, path: tuple[str, ...]) -> set[str]:
        section = re.search(r"^Commands:\n((?:  .*\n)+)", self.help(path), re.M)
        if not section:
            return set()
        return {line.split()[0] for line in section.group(1).splitlines() if line.strip()}

    def flags(self, path: tuple[str, ...]) -> dict[str, str]:
        """Each flag, long and short, with the help text that follows it."""
        out: dict[str, str] = {}
        text = self.help(path)
        entries = re.split(r"\n(?=\s{2,}-)", text)
        for entry in entries:
            head = re.match(r"\s*(-\w)?,?\s*(--[\w-]+)?", entry)
            if not head:
                continue
            for name in head.groups():
                if name:
                    out[name] = entry
        return out

    def check(self, words: list[str], command: Command) -> None:
        path: tuple[str, ...] = ()
        rest = list(words)
        if rest and not rest[0].startswith("-") and self.subcommands(()):
            sub = rest.pop(0)
            if is_placeholder(sub) or sub not in self.subcommands(()):
                raise Failure(f"{self.what} has no subcommand `{sub}` ({command.where})")
            path = (sub,)
        flags = self.flags(path)
        for i, word in enumerate(rest):
            word = word.strip("[]")
            if not word.startswith("-") or word == "-" or word == "--":
                continue
            name, _, value = word.partition("=")
            if name not in flags:
                raise Failure(
                    f"`{self.what} {' '.join(path)}` has no flag {name} ({command.where})"
                )
            if not value and i + 1 < len(rest) and not rest[i + 1].startswith(("-", "[")):
                value = rest[i + 1]
            possible = re.search(r"\[possible values: ([^\]]*)\]", flags[name])
            if possible and value and not is_placeholder(value):
                allowed = [v.strip() for v in possible.group(1).split(",")]
                if value not in allowed:
                    raise Failure(
                        f"{name} of `{self.what} {' '.join(path)}` takes one of {allowed}, "
                        f"not {value!r} ({command.where})"
                    )
            if self.what == "outbox-bench" and name == "--only" and value:
                self.check_scenarios(flags[name], value, command)

    def check_scenarios(self, help_text: str, value: str, command: Command) -> None:
        listed = re.search(r"\(([^)]*)\)", help_text)
        if not listed:
            raise Failure("outbox-bench --help lists no scenarios for --only")
        known = set(re.findall(r"[a-z]+", listed.group(1)))
        for scenario in value.split(","):
            if scenario not in known and not is_placeholder(scenario):
                raise Failure(f"outbox-bench has no scenario `{scenario}` ({command.where})")


class Kubectl:
    def __init__(self, binary: str):
        self.binary = binary
        self.helps: dict[tuple[str, ...], str] = {}
        self.rendered: dict[str, str | None] = {}

    def help(self, path: tuple[str, ...]) -> str:
        if path not in self.helps:
            result = run([self.binary, *path, "--help"])
            if result.returncode != 0:
                raise Failure(f"`kubectl {' '.join(path)} --help`: {result.stderr.strip()}")
            self.helps[path] = result.stdout
        return self.helps[path]

    def flags(self, path: tuple[str, ...]) -> set[str]:
        text = self.help(path) + run([self.binary, "options"]).stdout
        out: set[str] = set()
        for short, long in re.findall(r"(?m)^\s+(?:-(\w), )?--([\w-]+)=", text):
            out.add(f"--{long}")
            if short:
                out.add(f"-{short}")
        return out

    def subcommands(self, path: tuple[str, ...]) -> set[str]:
        # "Available Commands:", or at the top level "Basic Commands (Beginner):" and the like.
        sections = re.findall(r"(?m)^\S[^\n]*Commands[^\n]*:\n((?:  \S.*\n)+)", self.help(path))
        return {line.split()[0] for section in sections for line in section.splitlines()}

    def render(self, target: str, command: Command) -> None:
        if is_placeholder(target):
            raise Failure(f"a placeholder where kubectl needs a path ({command.where})")
        if not os.path.isdir(os.path.join(ROOT, target)):
            raise Failure(f"no directory {target} ({command.where})")
        if target not in self.rendered:
            result = run([self.binary, "kustomize", target])
            self.rendered[target] = None if result.returncode == 0 else result.stderr.strip()
        if self.rendered[target] is not None:
            raise Failure(f"kubectl kustomize {target}: {self.rendered[target]} ({command.where})")

    def check(self, words: list[str], command: Command) -> None:
        path: tuple[str, ...] = ()
        rest = list(words)
        while rest and not rest[0].startswith("-") and rest[0] in self.subcommands(path):
            path += (rest.pop(0),)
        if not path:
            raise Failure(f"kubectl has no subcommand `{words[0] if words else ''}` ({command.where})")
        flags = self.flags(path)
        for word in rest:
            if word.startswith("-") and word not in ("-", "--"):
                name = word.partition("=")[0]
                if name not in flags:
                    raise Failure(f"`kubectl {' '.join(path)}` has no flag {name} ({command.where})")
        if path == ("kustomize",):
            # Without a path the span names the subcommand.
            targets = [w for w in rest if not w.startswith("-")]
            if len(targets) > 1:
                raise Failure(f"kubectl kustomize takes one path ({command.where})")
            for target in targets:
                self.render(target, command)
        for i, word in enumerate(rest):
            if word in ("-k", "--kustomize") and i + 1 < len(rest):
                self.render(rest[i + 1], command)
            elif word.startswith("--kustomize="):
                self.render(word.partition("=")[2], command)


@dataclass
class CargoCheck:
    """One `cargo check` standing for the cargo commands of the docs that select the same."""

    argv: tuple[str, ...]
    commands: list[Command] = field(default_factory=list)


class Checker:
    def __init__(self) -> None:
        self.failures: list[str] = []
        self.cargo: dict[tuple[str, ...], CargoCheck] = {}
        self._relay: Clap | None = None
        self._bench: Clap | None = None
        self._kubectl: Kubectl | None = None
        with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as f:
            self.makefile = makefile = f.read()
        self.make_targets = set(re.findall(r"(?m)^([A-Za-z0-9_.-]+)\s*:(?!=)", makefile))
        self.make_vars = set(re.findall(r"(?m)^(?:export\s+)?([A-Z_][A-Z0-9_]*)\s*[:?+]?=", makefile))

    def binary(self, env: str, default: str) -> str:
        path = os.environ.get(env) or os.path.join(ROOT, default)
        if not os.access(path, os.X_OK):
            raise Failure(f"{path} is not built (make test builds it first; or set {env})")
        return path

    @property
    def relay(self) -> Clap:
        if self._relay is None:
            self._relay = Clap(self.binary("OUTBOX_RELAY_BIN", "target/debug/outbox-relay"), "outbox-relay")
        return self._relay

    @property
    def bench(self) -> Clap:
        if self._bench is None:
            self._bench = Clap(self.binary("OUTBOX_BENCH_BIN", "target/debug/outbox-bench"), "outbox-bench")
        return self._bench

    @property
    def kubectl(self) -> Kubectl:
        if self._kubectl is None:
            self._kubectl = Kubectl(self.binary("KUBECTL", "target/tools/k8s-venv/bin/kubectl"))
        return self._kubectl

    def check(self, command: Command) -> None:
        program = program_of(command.words[0])
        args = command.words[1:]
        if program == "cargo":
            self.check_cargo(args, command)
        elif program == "make":
            self.check_make(args, command)
        elif program == "outbox-relay":
            self.relay.check(args, command)
        elif program == "outbox-bench":
            self.bench.check(args, command)
        elif program == "kubectl":
            self.kubectl.check(args, command)
        elif program in ("bash", "python3"):
            script = next((a for a in args if not a.startswith("-")), None)
            if script is not None and script.startswith("scripts/"):
                if not os.path.isfile(os.path.join(ROOT, script)):
                    raise Failure(f"no script {script} ({command.where})")

    def check_make(self, args: list[str], command: Command) -> None:
        targets = [a for a in args if not a.startswith("-") and "=" not in a]
        if not targets:
            raise Failure(f"a make command without a target ({command.where})")
        for target in targets:
            if target not in self.make_targets:
                raise Failure(f"the Makefile has no target `{target}` ({command.where})")
        for assignment in (a for a in args if "=" in a and not a.startswith("-")):
            name, _, value = assignment.partition("=")
            if name not in self.make_vars:
                raise Failure(f"the Makefile sets no variable {name} ({command.where})")
            if name == "BENCH_ARGS":
                self.bench.check(split_words(value), command)

    def check_cargo(self, args: list[str], command: Command) -> None:
        if args and args[0] in ("package", "publish"):
            # What `make package` runs (CI runs it): the same subcommand and flags there.
            recipes = [l.split() for l in self.makefile.splitlines() if l.strip().startswith("cargo ")]
            if not any(r[1] == args[0] and set(args[1:]) <= set(r[2:]) for r in recipes):
                raise Failure(f"no Makefile recipe runs it ({command.where})")
            return
        if not args or args[0] not in ("run", "build", "test"):
            raise Failure(f"a cargo subcommand this script does not know; teach it ({command.where})")
        sub, rest = args[0], args[1:]
        after: list[str] = []
        if "--" in rest:
            at = rest.index("--")
            rest, after = rest[:at], rest[at + 1 :]
        selection: list[str] = []
        targets: list[str] = []
        packages: list[str] = []
        filters: list[str] = []
        i = 0
        with_value = {"-p", "--package", "--features", "-F", "--example", "--bin", "--test"}
        while i < len(rest):
            word = rest[i]
            name, eq, inline = word.partition("=")
            if name in with_value:
                if eq:
                    value = inline
                elif i + 1 < len(rest):
                    i += 1
                    value = rest[i]
                else:
                    raise Failure(f"{name} without a value ({command.where})")
                if is_placeholder(value):
                    raise Failure(f"a placeholder where cargo needs a value ({command.where})")
                if name in ("-p", "--package"):
                    packages.append(value)
                    selection += ["-p", value]
                elif name in ("--features", "-F"):
                    selection += ["--features", value]
                else:
                    targets += [name, value]
            elif word in ("--workspace", "--all-features", "--no-default-features", "--locked"):
                selection.append(word)
            elif word in ("--examples", "--bins", "--lib", "--tests", "--all-targets"):
                targets.append(word)
            elif word in ("--release", "--quiet", "-q", "--no-fail-fast"):
                pass  # no say in what compiles
            elif word.startswith("-"):
                raise Failure(
                    f"cargo {sub} option {word} this script does not know; teach it ({command.where})"
                )
            elif sub == "test":
                filters.append(word)
            else:
                raise Failure(f"cargo {sub}: unexpected argument {word} ({command.where})")
            i += 1
        if sub == "run":
            if not targets:
                targets = ["--bins"]
            binary = None
            if "--example" not in targets:
                bins = [targets[j + 1] for j, t in enumerate(targets) if t == "--bin"]
                if bins:
                    binary = bins[0]
                elif packages in ([], ["outbox-relay-server"]):
                    binary = "outbox-relay"
                elif packages == ["outbox-bench"]:
                    binary = "outbox-bench"
            if binary == "outbox-relay":
                self.relay.check(after, command)
            elif binary == "outbox-bench":
                self.bench.check(after, command)
        elif sub == "test":
            if not targets:
                targets = ["--tests", "--examples"]
            tests = [targets[j + 1] for j, t in enumerate(targets) if t == "--test"]
            for pattern in filters:
                module = pattern.split("::")[0]
                if "::" in pattern and module and tests:
                    base = os.path.join(ROOT, "tests", tests[0])
                    if not (os.path.isfile(os.path.join(base, module + ".rs"))
                            or os.path.isdir(os.path.join(base, module))):
                        raise Failure(f"tests/{tests[0]} has no module {module} ({command.where})")
        argv = ("cargo", "check", *selection, *targets)
        self.cargo.setdefault(argv, CargoCheck(argv)).commands.append(command)

    def run_cargo(self) -> None:
        for check in self.cargo.values():
            print(f"docs-commands: {' '.join(check.argv)}", flush=True)
            result = run(list(check.argv))
            if result.returncode != 0:
                errors = [l for l in result.stderr.splitlines() if re.match(r"error|\s*--> ", l)]
                for command in check.commands:
                    self.failures.append(
                        f"{command.where} does not compile (`{' '.join(check.argv)}`):\n  "
                        + "\n  ".join(errors[:12] or result.stderr.splitlines()[-12:])
                    )


def main() -> int:
    commands = [c for file in SOURCES for c in extract(file)]
    if sys.argv[1:] == ["--list"]:
        for command in commands:
            print(command.where)
        return 0
    if sys.argv[1:]:
        print("usage: docs_commands.py [--list]", file=sys.stderr)
        return 2
    checker = Checker()
    used: set[tuple[str, str]] = set()
    counts: dict[str, int] = {}
    for command in commands:
        key = (command.file, command.text)
        if key in ALLOWED:
            used.add(key)
            continue
        program = program_of(command.words[0]) or ""
        counts[program] = counts.get(program, 0) + 1
        try:
            checker.check(command)
        except Failure as failure:
            checker.failures.append(str(failure))
    for key in ALLOWED.keys() - used:
        checker.failures.append(f"ALLOWED names a command no doc gives any more: {key}")
    checker.run_cargo()
    summary = ", ".join(f"{n} {p}" for p, n in sorted(counts.items()))
    print(f"docs-commands: {len(commands)} commands in {len(SOURCES)} files ({summary}; "
          f"{len(used)} allowed), {len(checker.cargo)} cargo checks")
    for failure in checker.failures:
        print(f"docs-commands: FAIL: {failure}", file=sys.stderr)
    if checker.failures:
        print(f"docs-commands: {len(checker.failures)} failed", file=sys.stderr)
        return 1
    print("docs-commands: every documented command checks out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
