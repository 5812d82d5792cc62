#!/usr/bin/env bash
# The consumer clients in other languages as their registries would take them (`make package`,
# issue 44 part 2), each built, checked and installed from its package alone:
#
#   Python (clients/python, outbox-consumer): a wheel and an sdist with `python -m build`
#     (build pinned, in target/tools/package-venv/, never the system's Python) into
#     target/packages/python/; the wheel and the sdist must hold py.typed and every protocol
#     file of the client (.lua scripts, golden JSON, inbox SQL) with the repository's bytes;
#     then each is installed in a fresh virtualenv of its own (under target/tmp/), and the
#     installed `outbox-inbox-example --help` must exit 0 and list the example's flags.
#   TypeScript (clients/typescript, @outbox-relay/consumer): `npm ci`, `npm run build`,
#     `npm pack` into target/packages/typescript/; the tarball must hold protocol/ (every
#     .lua script, golden JSON and SQL file, the repository's bytes) and the type declarations;
#     then a fresh folder (under target/tmp/, `npm init -y`) installs the tarball, and both
#     `node node_modules/@outbox-relay/consumer/dist/examples/inbox.js --help` and the package's
#     bin `outbox-inbox-example --help` must exit 0 and list the same flags.
#
# Neither needs Redis or Postgres: the examples only print their usage. The fresh folders are
# removed at the end; nothing is written outside target/ (besides pip's and npm's caches).
# Exits non-zero naming the step that failed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
started=$SECONDS

build_pin="build==1.6.1"
build_venv=target/tools/package-venv
py_out=target/packages/python
ts_out=target/packages/typescript
flags=(--topic --group --consumer --claim-idle --max-deliveries --park-keys --stream-prefix --batch-size --retry-base)

step="start"
trap 'echo "package-clients: FAILED: $step" >&2' ERR
fail() {
  echo "package-clients: FAILED: $step: $*" >&2
  exit 1
}
say() { echo "package-clients: $*"; }

mkdir -p target/tmp
scratch=$(mktemp -d "$root/target/tmp/package-clients.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

# Runs an example's --help in a folder ($1; $2 names the example, the rest is the command) and
# checks that it exits 0 and lists every flag of the example.
check_help() {
  local dir=$1 what=$2 out missing=()
  shift 2
  step="$what --help"
  if ! out=$(cd "$dir" && "$@" --help 2>&1); then
    printf '%s\n' "$out" >&2
    fail "exited non-zero"
  fi
  for flag in "${flags[@]}"; do
    grep -qe "$flag\b" <<<"$out" || missing+=("$flag")
  done
  if ((${#missing[@]})); then
    printf '%s\n' "$out" >&2
    fail "its usage does not list ${missing[*]}"
  fi
  say "$what --help: exit 0, lists ${flags[*]}"
}

# The shipped copies must be the repository's bytes before they are packaged.
step="scripts/sync_protocol.sh --check"
bash scripts/sync_protocol.sh --check || fail "the clients' protocol copies differ from the repository's"

# ---- Python ----------------------------------------------------------------------------
step="python: the build virtualenv ($build_venv)"
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  fail "python3 is $(python3 --version 2>&1): 3.10 or newer is needed"
fi
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  say "installing python3-venv with apt" >&2
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd=sudo
  $sudo_cmd apt-get install -y -qq python3-venv >/dev/null
fi
if [[ "$(cat "$build_venv/.pins" 2>/dev/null)" != "$build_pin" || ! -x $build_venv/bin/python ]]; then
  rm -rf "$build_venv"
  python3 -m venv "$build_venv"
  "$build_venv/bin/pip" install --quiet --disable-pip-version-check "$build_pin"
  echo "$build_pin" >"$build_venv/.pins"
fi

step="python: python -m build --sdist --wheel clients/python"
rm -rf "$py_out"
"$build_venv/bin/python" -m build --sdist --wheel clients/python --outdir "$py_out" >"$scratch/build.log" 2>&1 \
  || { tail -30 "$scratch/build.log" >&2; fail "see the log above"; }
shopt -s nullglob
wheels=("$py_out"/outbox_consumer-*.whl)
sdists=("$py_out"/outbox_consumer-*.tar.gz)
shopt -u nullglob
((${#wheels[@]} == 1)) || fail "expected one wheel in $py_out, found ${#wheels[@]}"
((${#sdists[@]} == 1)) || fail "expected one sdist in $py_out, found ${#sdists[@]}"
wheel=${wheels[0]}
sdist=${sdists[0]}
say "built $wheel ($(du -k "$wheel" | cut -f1) KiB), $sdist ($(du -k "$sdist" | cut -f1) KiB)"

# Every file of the client's protocol/ folder and py.typed, byte for byte, in an archive.
# $1: the archive; $2: the folder those files sit under in it; $3: the client's folder they
# come from; $4...: the files, as paths relative to $3. Prints how many of each kind it checked.
check_archive() {
  python3 - "$@" <<'EOF'
import sys, tarfile, zipfile
archive, inside, source = sys.argv[1], sys.argv[2], sys.argv[3]
wanted = sys.argv[4:]
if archive.endswith(".whl"):
    with zipfile.ZipFile(archive) as z:
        names = {n: z.read(n) for n in z.namelist() if not n.endswith("/")}
else:
    with tarfile.open(archive) as t:
        names = {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}
bad = []
for rel in wanted:
    name = f"{inside}/{rel}"
    with open(f"{source}/{rel}", "rb") as f:
        original = f.read()
    if name not in names:
        bad.append(f"{name} is missing")
    elif names[name] != original:
        bad.append(f"{name} differs from {source}/{rel}")
if bad:
    print(f"{archive}: " + "; ".join(bad), file=sys.stderr)
    sys.exit(1)
kinds = {}
for rel in wanted:
    ext = rel.rsplit(".", 1)[-1] if "." in rel else rel
    kinds[ext] = kinds.get(ext, 0) + 1
print(", ".join(f"{n} {k}" for k, n in sorted(kinds.items())))
EOF
}

py_pkg=clients/python/src/outbox_consumer
mapfile -t py_files < <(cd "$py_pkg" && find protocol -type f \( -name '*.lua' -o -name '*.json' -o -name '*.sql' \) | sort; echo py.typed)
for kind in lua json sql; do
  printf '%s\n' "${py_files[@]}" | grep -q "\.$kind\$" || fail "$py_pkg/protocol has no .$kind file (run scripts/sync_protocol.sh)"
done
step="python: the wheel's contents"
got=$(check_archive "$wheel" outbox_consumer "$py_pkg" "${py_files[@]}") || fail "files missing or different (above)"
say "wheel holds $got (outbox_consumer/protocol/, py.typed), the repository's bytes"
step="python: the sdist's contents"
sdist_root=$(basename "$sdist" .tar.gz)
got=$(check_archive "$sdist" "$sdist_root/src/outbox_consumer" "$py_pkg" "${py_files[@]}") || fail "files missing or different (above)"
say "sdist holds $got, the repository's bytes"

# Each package in a virtualenv of its own, run from the scratch folder (not the checkout).
for kind in wheel sdist; do
  artifact=$wheel
  [[ $kind == sdist ]] && artifact=$sdist
  venv="$scratch/venv-$kind"
  step="python: install the $kind in a fresh virtualenv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$root/$artifact" >"$scratch/pip-$kind.log" 2>&1 \
    || { tail -30 "$scratch/pip-$kind.log" >&2; fail "pip install $artifact"; }
  step="python: the $kind's installed package"
  where=$(cd "$scratch" && "$venv/bin/python" -c 'import outbox_consumer, os; print(os.path.dirname(outbox_consumer.__file__))')
  [[ $where == "$venv"/* ]] || fail "outbox_consumer imports from $where, not from the fresh virtualenv"
  [[ -f $where/py.typed ]] || fail "no py.typed in $where"
  (cd "$scratch" && "$venv/bin/python" -c 'from outbox_consumer import scripts' ) \
    || fail "outbox_consumer.scripts does not import from the installed package"
  say "$kind installed in a fresh virtualenv: outbox_consumer from its site-packages"
  check_help "$scratch" "python ($kind): outbox-inbox-example" "$venv/bin/outbox-inbox-example"
done

# ---- TypeScript --------------------------------------------------------------------------
step="typescript: node and npm"
command -v node >/dev/null && command -v npm >/dev/null || fail "node and npm are required (Node 20 or newer)"
major=$(node -p 'process.versions.node.split(".")[0]')
((major >= 20)) || fail "Node $(node --version) is too old: 20 or newer"

step="typescript: npm ci && npm run build (clients/typescript)"
(cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build)
step="typescript: npm pack"
rm -rf "$ts_out"
mkdir -p "$ts_out"
tarball=$(cd clients/typescript && npm pack --silent --pack-destination "$root/$ts_out" | tail -1)
tarball="$ts_out/$tarball"
[[ -f $tarball ]] || fail "npm pack left no $tarball"
say "built $tarball ($(du -k "$tarball" | cut -f1) KiB)"

step="typescript: the tarball's contents"
ts_pkg=clients/typescript
mapfile -t ts_files < <(cd "$ts_pkg" && find protocol -type f | sort)
printf '%s\n' "${ts_files[@]}" | grep -q '^protocol/scripts/.*\.lua$' || fail "$ts_pkg/protocol/scripts has no .lua file (run scripts/sync_protocol.sh)"
got=$(check_archive "$tarball" package "$ts_pkg" "${ts_files[@]}") || fail "files missing or different (above)"
listing=$(tar -tzf "$tarball")
for want in package/dist/src/index.js package/dist/src/index.d.ts package/dist/examples/inbox.js package/package.json; do
  grep -qxF "$want" <<<"$listing" || fail "$want is missing"
done
dts=$(grep -c '^package/dist/src/.*\.d\.ts$' <<<"$listing")
say "tarball holds $got (protocol/, the repository's bytes), $dts type declarations (dist/src/*.d.ts), dist/examples/inbox.js"

step="typescript: install the tarball in a fresh folder"
fresh="$scratch/npm-fresh"
mkdir -p "$fresh"
(cd "$fresh" && npm init -y >/dev/null && npm install --no-audit --no-fund --loglevel=error "$root/$tarball" >"$scratch/npm-install.log" 2>&1) \
  || { tail -30 "$scratch/npm-install.log" >&2; fail "npm install $tarball"; }
installed="$fresh/node_modules/@outbox-relay/consumer"
[[ -f $installed/dist/src/index.d.ts ]] || fail "the installed package has no dist/src/index.d.ts"
step="typescript: import the installed package"
(cd "$fresh" && node --input-type=module -e 'import("@outbox-relay/consumer").then(m => { if (!m.Consumer) throw new Error("no Consumer export"); })') \
  || fail "import(\"@outbox-relay/consumer\") from the fresh folder"
say "tarball installed in a fresh folder: import(\"@outbox-relay/consumer\") works"
check_help "$fresh" "typescript: node node_modules/@outbox-relay/consumer/dist/examples/inbox.js" \
  node node_modules/@outbox-relay/consumer/dist/examples/inbox.js
check_help "$fresh" "typescript: the package's bin outbox-inbox-example" node_modules/.bin/outbox-inbox-example

step="done"
say "wheel, sdist and npm tarball built, checked and run from fresh installs in $((SECONDS - started))s: $py_out/, $ts_out/"
