#!/usr/bin/env python3
"""Structural checks behind scripts/k8s-check.sh: what the Kubernetes schemas cannot say.

Subcommands (each prints one line per failure and exits 1 if there was any):

  dockerfile                 the Dockerfile's shape (multi-stage, non-root, entrypoint, ...) and
                             a build context (.dockerignore) that keeps what cargo needs
  split RENDERED OUTDIR      one file per document of a rendered multi-document YAML
  overlay RENDERED           the rendered overlay, for each relay instance (Deployment): kinds,
                             cross-references, the pod's security context, probes, rollout,
                             secrets as files of the instance's Secret, no secret value in any
                             env `value:`, the migrate init container reading the relay
                             container's configuration (--config, setting env, ConfigMap and
                             Secret mounts), and its config.toml (written to
                             RENDERED.<deployment>.config.toml for the binary check); with
                             several instances, that they stay apart (instance labels, selectors,
                             Secrets, ConfigMaps, ServiceMonitors); no pod both annotated for
                             scraping and under a ServiceMonitor; one set of selection labels;
                             no PrometheusRule or dashboard (they are once per cluster)
  observability RENDERED OUTDIR
                             RENDERED is k8s/observability (once per cluster: PrometheusRule,
                             dashboard); k8s/observability/scrape (per namespace: the
                             ServiceMonitor) is rendered here. ServiceMonitor fields, selector,
                             job label and relay_instance, the same selection labels on it and
                             the PrometheusRule, the PrometheusRule's annotations, runbook base
                             and anchors, per-instance grouping and no namespace matcher,
                             metric names against src/telemetry/mod.rs, the Grafana
                             JSON; writes OUTDIR/rules.yaml, OUTDIR/rules-for-tests.yaml and
                             OUTDIR/dashboard-queries.yaml for promtool
  links FILE...              every relative link of these Markdown files resolves (file and anchor)

Needs PyYAML (a dependency of kubernetes-validate) and Python 3.11+ (tomllib).
"""

import fnmatch
import json
import os
import re
import subprocess
import sys
import tomllib

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAILURES = []


def fail(message):
    FAILURES.append(message)
    print(f"k8s-check: FAIL: {message}", file=sys.stderr)


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def by_kind(docs):
    out = {}
    for d in docs:
        out.setdefault(d["kind"], []).append(d)
    return out


def labels_match(selector, labels):
    """A matchLabels selector (the only form these manifests use) against a label set."""
    if set(selector) - {"matchLabels"}:
        return False
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


# ---------------------------------------------------------------------------- Dockerfile


def dockerfile():
    path = os.path.join(ROOT, "Dockerfile")
    text = open(path).read()
    # Join continuation lines, drop comments and the parser directive.
    logical, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        logical.append(current + stripped)
        current = ""
    stages = []
    for line in logical:
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "FROM":
            stages.append({"from": rest.strip(), "ops": []})
        elif stages:
            stages[-1]["ops"].append((word, rest.strip()))
        elif word != "ARG":
            fail(f"Dockerfile: {word} before the first FROM")
    if len(stages) < 2:
        fail("Dockerfile: not multi-stage (a build stage and a runtime stage)")
        return
    build, final = stages[0], stages[-1]
    if not re.match(r"rust:\S*bookworm\S*\s+AS\s+\w+", build["from"], re.I):
        fail(f"Dockerfile: the build stage should be a rust image on bookworm, not {build['from']!r}")
    if not re.match(r"gcr\.io/distroless/cc-debian12(:nonroot)?(@sha256:[0-9a-f]{64})?$", final["from"].split()[0]):
        fail(f"Dockerfile: the runtime stage should be distroless cc-debian12 (bookworm, like the build), not {final['from']!r}")
    builds = [rest for word, rest in build["ops"] if word == "RUN" and "cargo build" in rest]
    if not any("--release" in r and "--locked" in r for r in builds):
        fail("Dockerfile: no `cargo build --release --locked` in the build stage")
    final_ops = dict((w, r) for w, r in final["ops"])
    for word, _ in final["ops"]:
        if word in ("RUN", "SHELL", "HEALTHCHECK"):
            fail(f"Dockerfile: {word} in the runtime stage (distroless has no shell)")
    user = final_ops.get("USER", "")
    uid = user.split(":")[0]
    if not uid.isdigit() or int(uid) == 0:
        fail(f"Dockerfile: the runtime stage needs a numeric non-root USER (65532), has {user!r}")
    try:
        entrypoint = json.loads(final_ops.get("ENTRYPOINT", "null"))
    except json.JSONDecodeError:
        entrypoint = None
    if not (isinstance(entrypoint, list) and len(entrypoint) == 1 and os.path.basename(entrypoint[0]) == "outbox-relay"):
        fail(f"Dockerfile: ENTRYPOINT must be the exec form [\".../outbox-relay\"], has {final_ops.get('ENTRYPOINT')!r}")
    try:
        cmd = json.loads(final_ops.get("CMD", "null"))
    except json.JSONDecodeError:
        cmd = None
    if cmd != ["run"]:
        fail(f"Dockerfile: CMD must be [\"run\"], has {final_ops.get('CMD')!r}")
    if "8080" not in final_ops.get("EXPOSE", "").split():
        fail("Dockerfile: EXPOSE 8080 missing in the runtime stage")
    copies = [r for w, r in final["ops"] if w == "COPY"]
    if not any("--from=" in c and entrypoint and c.split()[-1] == entrypoint[0] for c in copies):
        fail("Dockerfile: the runtime stage does not COPY the binary to the ENTRYPOINT's path")
    build_context()


def build_context():
    """What `cargo build` reads must not be in .dockerignore, and the stub step must fit."""
    patterns = []
    for line in open(os.path.join(ROOT, ".dockerignore")):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("!"):
            fail(".dockerignore: exceptions (!) are not understood by this check; keep it a plain list")
            continue
        patterns.append(line.strip("/"))

    def ignored(rel):
        parts = rel.split("/")
        return any(fnmatch.fnmatch("/".join(parts[:i]), p) for p in patterns for i in range(1, len(parts) + 1))

    manifest = tomllib.load(open(os.path.join(ROOT, "Cargo.toml"), "rb"))
    members = [m for m in manifest.get("workspace", {}).get("members", []) if m != "."]
    needed = ["Cargo.toml", "Cargo.lock", "build.rs", "src/main.rs", "src/lib.rs", "migrations"]
    needed += [f"{m}/Cargo.toml" for m in members] + [f"{m}/src/lib.rs" for m in members]
    for dirpath, _, files in [w for top in ["src"] + [f"{m}/src" for m in members]
                              for w in os.walk(os.path.join(ROOT, top))]:
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(dirpath, name)
            for m in re.finditer(r'(include_str|include_bytes)!\(\s*"([^"]+)"', open(path).read()):
                needed.append(os.path.relpath(os.path.normpath(os.path.join(dirpath, m.group(2))), ROOT))
            for m in re.finditer(r'embed_migrations!\(\s*"([^"]+)"', open(path).read()):
                needed.append(m.group(1))
    for rel in dict.fromkeys(needed):
        if not os.path.exists(os.path.join(ROOT, rel)):
            fail(f"build context: {rel} is read by the build but does not exist")
        elif ignored(rel):
            fail(f".dockerignore excludes {rel}, which the build reads")
    # The Dockerfile builds the dependencies against stubs of src/main.rs and src/lib.rs with
    # only the manifests and Cargo.lock copied: workspace members and path dependencies need
    # their manifest copied and their lib stubbed there too.
    dockerfile_text = open(os.path.join(ROOT, "Dockerfile")).read()
    local = set(members)
    for section in ("dependencies", "build-dependencies"):
        for name, spec in manifest.get(section, {}).items():
            if isinstance(spec, dict) and "path" in spec:
                local.add(spec["path"].strip("/"))
    for crate in sorted(local):
        if not re.search(rf"COPY\s+{re.escape(crate)}/Cargo\.toml\s", dockerfile_text):
            fail(f"Cargo.toml: {crate} is a workspace member or path dependency: the Dockerfile's dependency step must COPY {crate}/Cargo.toml")
        if f"{crate}/src/lib.rs" not in dockerfile_text:
            fail(f"Cargo.toml: {crate} needs a stub {crate}/src/lib.rs in the Dockerfile's dependency step")
    for kind in ("bin", "example", "test", "bench"):
        for target in manifest.get(kind, []):
            path = target.get("path")
            if kind == "bin" and path not in (None, "src/main.rs"):
                fail(f"Cargo.toml: [[bin]] at {path}: stub it in the Dockerfile's dependency step")
            if path and ignored(path):
                fail(f"Cargo.toml declares [[{kind}]] at {path}, which .dockerignore excludes: cargo would not load the manifest")


# ---------------------------------------------------------------------------- rendered output


def split(rendered, outdir):
    os.makedirs(outdir, exist_ok=True)
    for i, doc in enumerate(load_all(rendered)):
        name = f"{i:02d}-{doc['kind'].lower()}-{doc['metadata']['name']}.yaml"
        with open(os.path.join(outdir, name), "w") as f:
            yaml.safe_dump(doc, f, sort_keys=False)
        print(os.path.join(outdir, name))


EXPECTED_OVERLAY_KINDS = {
    "ConfigMap", "Service", "Deployment", "PodDisruptionBudget",
    "HorizontalPodAutoscaler", "NetworkPolicy",
    # An overlay that renders its instances' ServiceMonitors (k8s/overlays/two-instances). Not
    # the PrometheusRule or the dashboard: those are once per cluster (k8s/observability).
    "ServiceMonitor",
}
# The relay's settings that hold a secret, by the environment variables that would carry the
# value itself (src/config/secrets.rs): only their *_FILE twins may appear in a pod's env.
SECRET_ENV = {
    "DATABASE_URL", "OUTBOX__DATABASE__URL", "REDIS_URL", "OUTBOX__REDIS__URL",
    "OUTBOX__REDIS__SENTINEL_PASSWORD", "OUTBOX__ADMIN__TOKEN", "OUTBOX__ADMIN__READ_ONLY_TOKEN",
}
# Names that say "secret" whoever reads them (OTEL_EXPORTER_OTLP_HEADERS carries API keys).
SECRETISH_ENV = re.compile(r"TOKEN|PASSWORD|PASSWD|SECRET|CREDENTIAL|API_?KEY|PRIVATE_KEY|OTLP(_TRACES)?_HEADERS", re.I)
# scheme://user:password@host: a URL with its password in it.
URL_WITH_PASSWORD = re.compile(r"[a-z][a-z0-9+.-]*://[^/@\s:]*:[^/@\s]+@", re.I)
# The relay's secrets as files: (setting's variable, key of the instance's Secret).
SECRET_FILES = (
    ("DATABASE_URL", "database-url"), ("REDIS_URL", "redis-url"),
    ("OUTBOX__ADMIN__TOKEN", "admin-token"), ("OUTBOX__ADMIN__READ_ONLY_TOKEN", "read-only-token"),
)
INSTANCE_LABEL = "app.kubernetes.io/instance"


def check_pod(where, pod, image_user=65532):
    """What every pod of the relay must have: non-root, read-only, no privileges."""
    psc = pod.get("securityContext", {})
    if psc.get("runAsNonRoot") is not True or psc.get("runAsUser") != image_user:
        fail(f"{where}: pod securityContext needs runAsNonRoot: true and runAsUser: {image_user}")
    if psc.get("seccompProfile", {}).get("type") != "RuntimeDefault":
        fail(f"{where}: pod securityContext needs seccompProfile RuntimeDefault")
    if pod.get("automountServiceAccountToken") is not False:
        fail(f"{where}: automountServiceAccountToken should be false (the relay never calls the API)")
    for c in pod["containers"] + pod.get("initContainers", []):
        sc = c.get("securityContext", {})
        if sc.get("readOnlyRootFilesystem") is not True:
            fail(f"{where}/{c['name']}: readOnlyRootFilesystem must be true")
        if sc.get("allowPrivilegeEscalation") is not False:
            fail(f"{where}/{c['name']}: allowPrivilegeEscalation must be false")
        if sc.get("capabilities", {}).get("drop") != ["ALL"]:
            fail(f"{where}/{c['name']}: capabilities must drop ALL")
        if "command" in c:
            fail(f"{where}/{c['name']}: use args, not command: the image's entrypoint is outbox-relay")
        if "memory" not in c.get("resources", {}).get("limits", {}):
            fail(f"{where}/{c['name']}: no memory limit")


def check_env_secrets(where, container):
    """No secret value written into the rendered environment: a secret setting or a variable
    named like a secret comes from a file (*_FILE, a path) or a secretKeyRef, never `value:`,
    and no literal value is a URL with a password in it."""
    for e in container.get("env", []):
        name = e["name"]
        source = e.get("valueFrom", {})
        if "value" not in e:
            if (name in SECRET_ENV or SECRETISH_ENV.search(name)) and "configMapKeyRef" in source:
                fail(f"{where}/{container['name']}: {name} comes from a ConfigMap; a secret belongs in a Secret")
            continue
        value = str(e["value"])
        if name.endswith("_FILE"):
            if not value.startswith("/"):
                fail(f"{where}/{container['name']}: {name} must name a file (an absolute path), has {value!r}")
        elif name in SECRET_ENV:
            fail(f"{where}/{container['name']}: {name} has a value in the manifest; "
                 f"read it from a file of the Secret ({name}_FILE)")
        elif SECRETISH_ENV.search(name):
            fail(f"{where}/{container['name']}: {name} has a value in the manifest; take it from a Secret (secretKeyRef)")
        elif URL_WITH_PASSWORD.search(value):
            fail(f"{where}/{container['name']}: {name} holds a URL with a password; read it from a Secret")


def check_secret_file(where, pod, container, name, key, secret_name):
    """`container` reads setting `name` from the file `{name}_FILE` names, and that file is
    key `key` (None: any key) of the Secret `secret_name`, mounted from a secret volume; never
    the value itself in the environment."""
    env = {e["name"]: e for e in container.get("env", [])}
    if name in env:
        fail(f"{where}: {name} is in the environment; it must be read from a file ({name}_FILE)")
    path = env.get(f"{name}_FILE", {}).get("value")
    if not path:
        fail(f"{where}: no {name}_FILE naming the Secret's {key} file")
        return
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        base = mount["mountPath"].rstrip("/") + "/"
        if not path.startswith(base):
            continue
        secret = volumes.get(mount["name"], {}).get("secret", {})
        if secret.get("secretName") != secret_name:
            fail(f"{where}: {name}_FILE {path} is not on a volume of the Secret {secret_name} "
                 f"(has {secret.get('secretName')!r}; an instance's Secret is named like its Deployment)")
            return
        relative = path[len(base):]
        items = secret.get("items")
        if key is None:
            listed = items is None or relative in [i.get("path") for i in items]
        else:
            listed = relative == key if items is None else {"key": key, "path": relative} in [
                {"key": i.get("key"), "path": i.get("path")} for i in items]
        if not listed:
            fail(f"{where}: {name}_FILE {path} is not the Secret's key {key}")
        if secret.get("optional"):
            fail(f"{where}: the Secret volume behind {name}_FILE is optional: a missing key would start a relay that exits 2")
        return
    fail(f"{where}: {name}_FILE {path} is on no mounted volume")


def pod_labels_of(dep):
    return dep["spec"]["template"]["metadata"].get("labels", {})


def service_selects(svc, labels):
    selector = svc["spec"].get("selector") or {}
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def overlay(rendered):
    docs = load_all(rendered)
    kinds = by_kind(docs)
    for kind in kinds:
        if kind == "PrometheusRule":
            fail(f"{rendered}: renders a PrometheusRule: the alerts are once per cluster (k8s/observability); "
                 f"a copy per namespace evaluates every alert once more")
        elif kind not in EXPECTED_OVERLAY_KINDS:
            fail(f"{rendered}: unexpected kind {kind} (a typo, or add it to EXPECTED_OVERLAY_KINDS)")
    if "Secret" in kinds:
        fail(f"{rendered}: renders a Secret: the example must stay out of kustomization.yaml")
    for kind, items in kinds.items():
        names = [d["metadata"]["name"] for d in items]
        for name in sorted({n for n in names if names.count(n) > 1}):
            fail(f"{rendered}: two {kind} objects named {name}")
    deployments = kinds.get("Deployment", [])
    if not deployments:
        fail(f"{rendered}: no Deployment")
        return
    for dep in deployments:
        for c in dep["spec"]["template"]["spec"]["containers"] + dep["spec"]["template"]["spec"].get("initContainers", []):
            check_env_secrets(f"{rendered}: Deployment {dep['metadata']['name']}", c)
        check_instance(rendered, kinds, dep)
    instances_apart(rendered, kinds, deployments)
    # One way to be scraped: a ServiceMonitor and prometheus.io annotations on the same pods
    # would have a Prometheus that honours both scrape every replica twice.
    if kinds.get("ServiceMonitor"):
        for dep in deployments:
            notes = dep["spec"]["template"]["metadata"].get("annotations", {})
            if str(notes.get("prometheus.io/scrape", "")).lower() == "true":
                fail(f"{rendered}: Deployment {dep['metadata']['name']} has prometheus.io/scrape and a "
                     f"ServiceMonitor scrapes it too: each replica would be scraped twice")
        check_selection_labels(rendered, kinds)


def check_instance(rendered, kinds, dep):
    """One relay instance: its Deployment and what belongs to it (the Service, PDB, HPA and
    NetworkPolicy that select or scale it, its ConfigMap and Secret)."""
    name = dep["metadata"]["name"]
    spec = dep["spec"]
    pod = spec["template"]["spec"]
    pod_labels = pod_labels_of(dep)
    where = f"{rendered}: Deployment {name}"
    if not labels_match(spec["selector"], pod_labels):
        fail(f"{where}: selector does not match the pod template's labels")
    ru = spec.get("strategy", {}).get("rollingUpdate", {})
    if ru.get("maxUnavailable") != 0 or ru.get("maxSurge") != 1:
        fail(f"{where}: rolling update must be maxUnavailable 0, maxSurge 1")
    grace = pod.get("terminationGracePeriodSeconds", 30)
    if grace < 10:
        fail(f"{where}: terminationGracePeriodSeconds {grace} is shorter than the shutdown (5 s drain + 2 s heartbeat + 2 s admin)")
    check_pod(where, pod)
    relay = [c for c in pod["containers"] if c["name"] == "outbox-relay"]
    if len(relay) != 1:
        fail(f"{where}: no container outbox-relay")
        return
    c = relay[0]
    args = c.get("args", [])
    if not args or args[0] != "run":
        fail(f"{where}: args must start with run, has {args}")
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    if ports.get("admin") != 8080:
        fail(f"{where}: container port admin must be 8080")
    for probe, path in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        p = c.get(probe)
        if not p:
            fail(f"{where}: no {probe}")
            continue
        get = p.get("httpGet", {})
        if get.get("path") != path or get.get("port") not in ("admin", 8080):
            fail(f"{where}: {probe} must GET {path} on the admin port")
        if not 1 <= p.get("timeoutSeconds", 1) <= 2:
            fail(f"{where}: {probe} timeoutSeconds should be 1-2 s (the endpoints answer from memory)")
    # Each instance reads its own Secret, named like its Deployment (outbox-relay for the
    # dev and prod overlays, outbox-relay-orders for an instance named orders).
    for setting, key in SECRET_FILES:
        check_secret_file(where, pod, c, setting, key, name)
    # The config file: --config path, its volume, and the ConfigMap behind it.
    config_path = args[args.index("--config") + 1] if "--config" in args else None
    if not config_path:
        fail(f"{where}: no --config FILE in args")
        return
    mounts = {m["name"]: m for m in c.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mount = next((m for m in mounts.values() if config_path.startswith(m["mountPath"].rstrip("/") + "/")), None)
    if not mount:
        fail(f"{where}: no volume mounted where --config {config_path} points")
        return
    cm_name = volumes.get(mount["name"], {}).get("configMap", {}).get("name")
    cms = {d["metadata"]["name"]: d for d in kinds.get("ConfigMap", [])}
    if cm_name not in cms:
        fail(f"{where}: the config volume refers to ConfigMap {cm_name}, which the overlay does not render")
        return
    key = os.path.basename(config_path)
    text = cms[cm_name].get("data", {}).get(key)
    if text is None:
        fail(f"{rendered}: ConfigMap {cm_name} has no key {key}")
        return
    try:
        config = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        fail(f"{rendered}: {key} in ConfigMap {cm_name} is not TOML: {e}")
        return
    # One file per instance, for the binary's check in k8s-check.sh.
    with open(f"{rendered}.{name}.config.toml", "w") as f:
        f.write(text)
    addr = config.get("admin", {}).get("addr", "")
    if not addr.endswith(":8080") or addr.startswith("127."):
        fail(f"{rendered}: config admin.addr must listen on the pod IP at port 8080 (0.0.0.0:8080), has {addr!r}")
    for secret_key in (("database", "url"), ("redis", "url"), ("redis", "sentinel_password"),
                       ("admin", "token"), ("admin", "read_only_token")):
        if secret_key[1] in config.get(secret_key[0], {}):
            fail(f"{rendered}: {'.'.join(secret_key)} belongs in the Secret, not the ConfigMap")
    # What selects the relay's pods: a Service (on the admin port), a PDB, a NetworkPolicy.
    services = [s for s in kinds.get("Service", []) if service_selects(s, pod_labels)]
    if len(services) != 1:
        fail(f"{where}: {len(services)} Services select its pods, expected its own one")
    for svc in services:
        if not any(p.get("targetPort") in ("admin", 8080) for p in svc["spec"]["ports"]):
            fail(f"{rendered}: Service {svc['metadata']['name']} does not target the admin port")
    pdbs = [p for p in kinds.get("PodDisruptionBudget", []) if labels_match(p["spec"]["selector"], pod_labels)]
    if len(pdbs) != 1:
        fail(f"{where}: {len(pdbs)} PodDisruptionBudgets select its pods, expected its own one")
    hpas = [h for h in kinds.get("HorizontalPodAutoscaler", [])
            if h["spec"]["scaleTargetRef"].get("kind") == "Deployment" and h["spec"]["scaleTargetRef"].get("name") == name]
    if len(hpas) > 1:
        fail(f"{where}: {len(hpas)} HPAs scale it")
    for hpa in hpas:
        lo, hi = hpa["spec"].get("minReplicas", 1), hpa["spec"]["maxReplicas"]
        if not lo <= spec.get("replicas", 1) <= hi:
            fail(f"{where}: replicas {spec.get('replicas')} outside the HPA's bounds {lo}..{hi}")
        if not any(m.get("resource", {}).get("name") == "cpu" for m in hpa["spec"].get("metrics", [])):
            fail(f"{rendered}: HPA {hpa['metadata']['name']} does not scale on CPU")
        if "cpu" not in c.get("resources", {}).get("requests", {}):
            fail(f"{where}: an HPA on CPU utilization needs a CPU request")
    netpols = [n for n in kinds.get("NetworkPolicy", []) if labels_match(n["spec"]["podSelector"], pod_labels)]
    if not netpols:
        fail(f"{where}: no NetworkPolicy selects its pods")
    for n in netpols:
        egress_ports = {p.get("port") for rule in n["spec"].get("egress", []) for p in rule.get("ports", [])}
        if 53 not in egress_ports:
            fail(f"{rendered}: NetworkPolicy {n['metadata']['name']} allows no DNS egress")
    # Migrations in each pod before the relay: `kubectl apply` with a new tag migrates
    # before a new pod serves, and nothing immutable (a Job) stands in the way of applying
    # again.
    inits = pod.get("initContainers", [])
    migrate = [i for i in inits if i.get("args", [])[:1] == ["migrate"]]
    if len(migrate) != 1:
        fail(f"{where}: needs one init container running args [migrate, ...] before the relay")
    else:
        m = migrate[0]
        if m["image"] != c["image"]:
            fail(f"{where}: the migrate init container runs {m['image']}, the relay {c['image']}: one image")
        same_configuration(f"{where}: init container {m['name']}", pod, m, c, name)
    # Its ServiceMonitor, when the overlay renders monitoring: exactly one scrapes its Service.
    if kinds.get("ServiceMonitor") and services:
        svc_labels = services[0]["metadata"].get("labels", {})
        monitors = [sm for sm in kinds["ServiceMonitor"] if labels_match(sm["spec"].get("selector", {}), svc_labels)]
        if len(monitors) != 1:
            fail(f"{where}: {len(monitors)} ServiceMonitors select its Service {services[0]['metadata']['name']}, expected one")


# The command-line flags that are settings (src/cli.rs, CommonArgs): a --config FILE and the
# overrides every command takes.
SETTING_FLAGS = ("--config", "--database-url", "--redis-url", "--admin-addr", "--instance-id")
# Environment variables the settings are read from besides OUTBOX* (src/config/layers.rs,
# src/config/secrets.rs); OUTBOX_CONFIG names the file, OUTBOX__* are the settings.
SETTING_ENV = {"DATABASE_URL", "DATABASE_URL_FILE", "REDIS_URL", "REDIS_URL_FILE"}
# Differences the migrate init container may have (docs/operations.md, "A migration role and a
# runtime role"): the owner's database URL from another key of the instance's Secret, and the
# role to grant, which only `migrate` reads.
MIGRATE_MAY_DIFFER = {"DATABASE_URL_FILE"}
MIGRATE_ONLY = {"OUTBOX__DATABASE__RUNTIME_ROLE"}


def setting_flags(args):
    """{flag: value} of the setting flags in a container's args (`--f v` or `--f=v`)."""
    out = {}
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag in SETTING_FLAGS:
            out[flag] = value if eq else (args[i + 1] if i + 1 < len(args) else None)
    return out


def setting_env(container):
    """{name: env entry} of the variables the relay's settings are read from."""
    return {e["name"]: {k: v for k, v in e.items() if k != "name"} for e in container.get("env", [])
            if e["name"].startswith("OUTBOX") or e["name"] in SETTING_ENV}


def volume_sources(pod, container):
    """The mounts that can carry what settings read (a ConfigMap, a Secret, a projected or CSI
    volume: the --config file, *_FILE secrets, CA files), as comparable tuples."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    out = set()
    for m in container.get("volumeMounts", []):
        volume = volumes.get(m["name"], {})
        if volume.keys() & {"configMap", "secret", "projected", "csi"}:
            out.add((m["name"], m["mountPath"].rstrip("/"), m.get("subPath", ""), bool(m.get("readOnly"))))
    return out


def same_configuration(where, pod, init, relay, secret_name):
    """The migrate init container reads the configuration the relay container reads: the same
    --config file and setting flags, the same settings in its environment (envFrom included),
    and the same ConfigMap and Secret mounts behind them. A migrate with less would not prepare
    what `run` then needs ([[tables]], database.runtime_role)."""
    init_flags, relay_flags = setting_flags(init.get("args", [])), setting_flags(relay.get("args", []))
    if init_flags != relay_flags:
        fail(f"{where}: setting flags {init_flags}, the relay's {relay_flags}: "
             f"migrate must read the relay's configuration (the same --config)")
    if init.get("envFrom", []) != relay.get("envFrom", []):
        fail(f"{where}: envFrom {init.get('envFrom', [])}, the relay's {relay.get('envFrom', [])}: the same")
    init_env, relay_env = setting_env(init), setting_env(relay)
    for name in sorted(init_env.keys() | relay_env.keys()):
        if name in MIGRATE_ONLY and name not in relay_env:
            continue
        if name in MIGRATE_MAY_DIFFER and name in init_env and name in relay_env:
            continue
        if name not in init_env:
            fail(f"{where}: lacks the relay's setting {name} in its env: migrate must read the relay's configuration")
        elif name not in relay_env:
            fail(f"{where}: sets {name}, which the relay container does not: the same configuration in both")
        elif init_env[name] != relay_env[name]:
            fail(f"{where}: {name} is {init_env[name]}, in the relay container {relay_env[name]}: the same in both")
    missing = volume_sources(pod, relay) - volume_sources(pod, init)
    for name, path, sub, _ in sorted(missing):
        fail(f"{where}: lacks the relay's mount of volume {name} at {path}{'/' + sub if sub else ''} "
             f"(its settings read files there)")
    # The owner's URL may be another key, but of this instance's Secret, as a file.
    key = "database-url" if init_env.get("DATABASE_URL_FILE") == relay_env.get("DATABASE_URL_FILE") else None
    check_secret_file(where, pod, init, "DATABASE_URL", key, secret_name)


def instances_apart(rendered, kinds, deployments):
    """Every Service, PDB, NetworkPolicy and ServiceMonitor belongs to one instance (and
    to one at least: not a leftover); with several relays in one namespace, each instance's
    selectors pick its own pods and no other's, and its Secret and ConfigMap are its own."""
    pods = {d["metadata"]["name"]: pod_labels_of(d) for d in deployments}
    values = {}
    for name, labels in pods.items() if len(pods) > 1 else ():
        value = labels.get(INSTANCE_LABEL)
        if not value:
            fail(f"{rendered}: Deployment {name}'s pods lack the label {INSTANCE_LABEL}, which keeps instances apart")
        elif value in values:
            fail(f"{rendered}: Deployments {values[value]} and {name} share {INSTANCE_LABEL}={value}")
        else:
            values[value] = name
    for dep in deployments:
        mine = dep["metadata"]["name"]
        others = [n for n in pods if n != mine and labels_match(dep["spec"]["selector"], pods[n])]
        if others:
            fail(f"{rendered}: Deployment {mine}'s selector overlaps the pods of {', '.join(others)}")

    def selected(selector_of, items, kind):
        for item in items:
            chosen = [n for n, labels in pods.items() if selector_of(item, labels)]
            if len(chosen) > 1:
                fail(f"{rendered}: {kind} {item['metadata']['name']} selects the pods of {', '.join(chosen)}: one instance each")
            elif not chosen:
                fail(f"{rendered}: {kind} {item['metadata']['name']} selects no instance's pods (a leftover?)")

    selected(service_selects, kinds.get("Service", []), "Service")
    selected(lambda p, labels: labels_match(p["spec"]["selector"], labels),
             kinds.get("PodDisruptionBudget", []), "PodDisruptionBudget")
    selected(lambda n, labels: labels_match(n["spec"]["podSelector"], labels),
             [n for n in kinds.get("NetworkPolicy", []) if n["spec"].get("podSelector")], "NetworkPolicy")
    for sm in kinds.get("ServiceMonitor", []):
        chosen = [s["metadata"]["name"] for s in kinds.get("Service", [])
                  if labels_match(sm["spec"].get("selector", {}), s["metadata"].get("labels", {}))]
        if len(chosen) != 1:
            fail(f"{rendered}: ServiceMonitor {sm['metadata']['name']} selects the Services {chosen}: exactly its own instance's")
    for what, key in (("Secret", lambda p: sorted({v["secret"]["secretName"] for v in p["volumes"] if "secret" in v})),
                      ("ConfigMap", lambda p: sorted({v["configMap"]["name"] for v in p["volumes"] if "configMap" in v}))):
        seen = {}
        for dep in deployments:
            for used in key(dep["spec"]["template"]["spec"]):
                if used in seen:
                    fail(f"{rendered}: Deployments {seen[used]} and {dep['metadata']['name']} share the {what} {used}")
                seen[used] = dep["metadata"]["name"]
    if any(cm["metadata"]["name"].startswith(DASHBOARD_CONFIGMAP) for cm in kinds.get("ConfigMap", [])):
        fail(f"{rendered}: renders the Grafana dashboard: it is once per cluster (k8s/observability), "
             f"a copy per namespace gives Grafana's sidecar two dashboards with one uid")


def check_selection_labels(rendered, kinds):
    """The ServiceMonitors and the PrometheusRule carry the same selection labels (those that
    are not app.kubernetes.io/*: what a Prometheus selects them by), from one place
    (k8s/observability/site): a Prometheus then scrapes the relay and loads its rules, or does
    neither, never the rules alone (OutboxRelayAbsent paging for a relay nobody scrapes)."""
    def selection(obj):
        return {k: v for k, v in obj["metadata"].get("labels", {}).items() if not k.startswith("app.kubernetes.io/")}
    objects = kinds.get("ServiceMonitor", []) + kinds.get("PrometheusRule", [])
    if not objects:
        return
    first = selection(objects[0])
    if not first:
        fail(f"{rendered}: {objects[0]['kind']} {objects[0]['metadata']['name']} has no selection label "
             f"(release: ...); include the component k8s/observability/site")
    for obj in objects[1:]:
        if selection(obj) != first:
            fail(f"{rendered}: {obj['kind']} {obj['metadata']['name']} has selection labels {selection(obj)}, "
                 f"{objects[0]['kind']} {objects[0]['metadata']['name']} {first}: the same, from k8s/observability/site")


# ---------------------------------------------------------------------------- observability

SERVICE_MONITOR_SPEC = {
    "endpoints", "selector", "namespaceSelector", "jobLabel", "targetLabels", "podTargetLabels",
    "sampleLimit", "targetLimit", "labelLimit", "labelNameLengthLimit", "labelValueLengthLimit",
    "attachMetadata", "scrapeProtocols", "keepDroppedTargets", "scrapeClass", "bodySizeLimit",
}
SERVICE_MONITOR_ENDPOINT = {
    "port", "targetPort", "path", "scheme", "params", "interval", "scrapeTimeout", "tlsConfig",
    "bearerTokenFile", "bearerTokenSecret", "authorization", "honorLabels", "honorTimestamps",
    "trackTimestampsStaleness", "basicAuth", "oauth2", "metricRelabelings", "relabelings",
    "proxyUrl", "followRedirects", "enableHttp2", "filterRunning", "noProxy",
    "proxyFromEnvironment", "proxyConnectHeader",
}
DURATION = re.compile(r"^(0|(\d+(ms|s|m|h|d|w|y))+)$")
# Metrics the alerts and the dashboard may use that the relay does not export.
FOREIGN_METRICS = {"up", "kube_deployment_status_replicas_available", "kube_deployment_spec_replicas",
                   "kube_pod_container_status_restarts_total"}
# What the alerts and the dashboard group the relay's series by: the ServiceMonitor puts the
# Service's app.kubernetes.io/instance on them as this label.
INSTANCE_SERIES_LABEL = "relay_instance"
DASHBOARD = "k8s/observability/shared/grafana-dashboard.json"
DASHBOARD_CONFIGMAP = "outbox-relay-grafana-dashboard"
# The per-namespace part of the monitoring kit: the ServiceMonitor of a namespace's relay.
SCRAPE = "k8s/observability/scrape"


def github_anchors(markdown_path):
    anchors, seen = set(), {}
    in_code = False
    for line in open(markdown_path):
        if line.startswith("```"):
            in_code = not in_code
        if in_code:
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def exported_metrics():
    text = open(os.path.join(ROOT, "src", "telemetry", "mod.rs")).read()
    return set(re.findall(r'"(outbox_[a-z0-9_]+)"', text))


def metric_names(expr):
    """The metric names in a PromQL expression: the relay's, kube-state-metrics', redis_exporter's
    and `up` (label names and functions never start with these prefixes here)."""
    names = set(re.findall(r"\b((?:outbox|kube|redis)_[a-z0-9_]+)\b", expr))
    return names | set(re.findall(r"\b(up)\s*\{", expr))


def check_metric_names(where, expr, exported):
    for name in metric_names(expr):
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        if name.startswith("outbox_"):
            if name not in exported and base not in exported:
                fail(f"{where}: metric {name} is not exported by src/telemetry/mod.rs")
        elif name not in FOREIGN_METRICS:
            fail(f"{where}: metric {name} is neither the relay's nor a known foreign one")


def observability(rendered, outdir):
    """RENDERED is k8s/observability, the once-per-cluster part (the PrometheusRule and the
    dashboard); k8s/observability/scrape, the per-namespace part (the ServiceMonitor), is
    rendered here and checked with it."""
    cluster_kinds = by_kind(load_all(rendered))
    scrape = os.path.join(os.path.dirname(rendered), "observability-scrape.yaml")
    result = subprocess.run(["kubectl", "kustomize", os.path.join(ROOT, SCRAPE)], capture_output=True, text=True)
    if result.returncode != 0:
        fail(f"kubectl kustomize {SCRAPE}: {result.stderr.strip()}")
        return
    with open(scrape, "w") as f:
        f.write(result.stdout)
    scrape_kinds = by_kind(load_all(scrape))
    # Once per cluster, or per namespace: never both in one kustomization.
    if cluster_kinds.get("ServiceMonitor"):
        fail(f"{rendered}: k8s/observability renders a ServiceMonitor: it is applied once per cluster, "
             f"the ServiceMonitor per relay namespace ({SCRAPE})")
    for kind in set(scrape_kinds) - {"ServiceMonitor"}:
        fail(f"{SCRAPE} renders a {kind}: it is applied per relay namespace, and holds the ServiceMonitor only")
    kinds = {k: cluster_kinds.get(k, []) + scrape_kinds.get(k, []) for k in set(cluster_kinds) | set(scrape_kinds)}
    exported = exported_metrics()
    # Every metric the relay exports is in the Metrics table an on-call engineer reads.
    operations = open(os.path.join(ROOT, "docs", "operations.md")).read()
    for name in sorted(exported):
        if not re.search(r"`" + re.escape(name) + r"[`{]", operations):
            fail(f"docs/operations.md: metric {name} (src/telemetry/mod.rs) is not documented")
    base_service = next(d for d in load_all(os.path.join(ROOT, "k8s/base/service.yaml")) if d["kind"] == "Service")
    for kind in kinds:
        if kind not in ("ServiceMonitor", "PrometheusRule", "ConfigMap"):
            fail(f"{rendered}: unexpected kind {kind}")
    # ServiceMonitor: known fields, a selector that matches the Service, its port.
    for sm in kinds.get("ServiceMonitor", []):
        where = f"ServiceMonitor {sm['metadata']['name']}"
        if sm.get("apiVersion") != "monitoring.coreos.com/v1":
            fail(f"{where}: apiVersion must be monitoring.coreos.com/v1")
        spec = sm.get("spec", {})
        for key in set(spec) - SERVICE_MONITOR_SPEC:
            fail(f"{where}: unknown field spec.{key}")
        if not labels_match(spec.get("selector", {}), base_service["metadata"]["labels"]):
            fail(f"{where}: selector does not match the Service outbox-relay's labels")
        # job="outbox-relay" for every instance (the dashboard counts up{job="outbox-relay"}),
        # and relay_instance on every series (the alerts group by it).
        if spec.get("jobLabel") != "app.kubernetes.io/name":
            fail(f"{where}: jobLabel must be app.kubernetes.io/name (job=\"outbox-relay\" for every instance)")
        for ep in spec.get("endpoints", []):
            if not any(r.get("targetLabel") == INSTANCE_SERIES_LABEL and r.get("sourceLabels") ==
                       ["__meta_kubernetes_service_label_app_kubernetes_io_instance"]
                       for r in ep.get("relabelings", [])):
                fail(f"{where}: endpoint {ep.get('port')!r} does not set {INSTANCE_SERIES_LABEL} from the "
                     f"Service's app.kubernetes.io/instance")
        port_names = {p["name"] for p in base_service["spec"]["ports"]}
        if not spec.get("endpoints"):
            fail(f"{where}: no endpoints")
        for ep in spec.get("endpoints", []):
            for key in set(ep) - SERVICE_MONITOR_ENDPOINT:
                fail(f"{where}: unknown field endpoints[].{key}")
            if ep.get("port") not in port_names:
                fail(f"{where}: endpoint port {ep.get('port')!r} is not a port name of the Service ({sorted(port_names)})")
            for key in ("interval", "scrapeTimeout"):
                if key in ep and not DURATION.match(str(ep[key])):
                    fail(f"{where}: {key} {ep[key]!r} is not a Prometheus duration")
    if not kinds.get("ServiceMonitor"):
        fail(f"{SCRAPE}: no ServiceMonitor")
    check_selection_labels(f"{rendered} and {SCRAPE}", kinds)
    # PrometheusRule: apiVersion, annotations, runbook anchors, metric names; files for promtool.
    rules = kinds.get("PrometheusRule", [])
    if len(rules) != 1:
        fail(f"{rendered}: needs exactly one PrometheusRule")
        return
    pr = rules[0]
    if pr.get("apiVersion") != "monitoring.coreos.com/v1" or set(pr.get("spec", {})) != {"groups"}:
        fail("PrometheusRule: apiVersion monitoring.coreos.com/v1 and a spec of groups only")
    anchors = github_anchors(os.path.join(ROOT, "docs/operations.md"))
    base = runbook_base(pr)
    stripped = json.loads(json.dumps(pr["spec"]))
    for group in stripped["groups"]:
        for rule in group["rules"]:
            name = rule.get("alert") or rule.get("record")
            where = f"PrometheusRule {name}"
            check_metric_names(where, rule["expr"], exported)
            if "alert" not in rule:
                continue
            notes = rule.get("annotations", {})
            for key in ("summary", "description", "runbook_url"):
                if not notes.get(key):
                    fail(f"{where}: no {key} annotation")
            if rule.get("labels", {}).get("severity") not in ("info", "warning", "critical"):
                fail(f"{where}: severity label must be info, warning or critical")
            url = notes.get("runbook_url", "")
            m = re.match(r"^https://\S+/docs/operations\.md#([\w-]+)$", url)
            if not m:
                fail(f"{where}: runbook_url must point into docs/operations.md, has {url!r}")
            elif m.group(1) not in anchors:
                fail(f"{where}: runbook_url anchor #{m.group(1)} is not a heading of docs/operations.md")
            elif base and not url.startswith(base + "#"):
                fail(f"{where}: runbook_url {url!r} is not under the runbook base {base!r} (k8s/observability/site)")
            # One copy per cluster (k8s/observability): a namespace matcher would leave the
            # other namespaces' relays unwatched.
            if re.search(r"\bnamespace\s*(=|!=|=~|!~)\s*\"", rule["expr"]):
                fail(f"{where}: selects by namespace; the rules are once per cluster and group by namespace")
            # Each alert of a relay's series says which relay: by namespace and relay_instance.
            if re.search(r"\boutbox_", rule["expr"]) and not re.search(rf"\b({INSTANCE_SERIES_LABEL}|deployment)\b", rule["expr"]):
                fail(f"{where}: groups the relay's series by neither {INSTANCE_SERIES_LABEL} nor deployment: "
                     f"two relays in a namespace would alert as one")
            rule.pop("annotations", None)
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "rules.yaml"), "w") as f:
        yaml.safe_dump(pr["spec"], f, sort_keys=False)
    with open(os.path.join(outdir, "rules-for-tests.yaml"), "w") as f:
        yaml.safe_dump(stripped, f, sort_keys=False)
    # Grafana: the JSON parses, every query parses as PromQL (as recording rules for promtool)
    # and uses exported metrics; the rendered ConfigMap carries the same JSON.
    path = os.path.join(ROOT, DASHBOARD)
    try:
        dashboard = json.load(open(path))
    except json.JSONDecodeError as e:
        fail(f"{path}: not JSON: {e}")
        return
    for key in ("title", "uid", "panels"):
        if key not in dashboard:
            fail(f"{path}: no {key}")
    queries = []
    for panel in dashboard.get("panels", []):
        if not panel.get("targets"):
            fail(f"{path}: panel {panel.get('title')!r} has no query")
        for t in panel.get("targets", []):
            expr = t["expr"]
            check_metric_names(f"dashboard panel {panel.get('title')!r}", expr, exported)
            if f'{INSTANCE_SERIES_LABEL}=~"${INSTANCE_SERIES_LABEL}"' not in expr:
                fail(f"dashboard panel {panel.get('title')!r}: {expr!r} does not select ${INSTANCE_SERIES_LABEL}")
            # `up` is every target's: only the relay's job may be counted.
            if re.search(r"\bup\s*\{", expr) and 'job="outbox-relay"' not in expr:
                fail(f"dashboard panel {panel.get('title')!r}: up without job=\"outbox-relay\" counts every target")
            expr = (expr.replace("$__rate_interval", "5m").replace("$__range", "1h")
                    .replace("$namespace", ".*").replace(f"${INSTANCE_SERIES_LABEL}", ".*"))
            if "$" in expr.replace("$1", ""):
                fail(f"dashboard panel {panel.get('title')!r}: unknown variable in {t['expr']!r}")
            queries.append({"record": f"dashboard:query_{len(queries)}", "expr": expr})
    with open(os.path.join(outdir, "dashboard-queries.yaml"), "w") as f:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": queries}]}, f, sort_keys=False)
    cms = [d for d in kinds.get("ConfigMap", []) if d["metadata"]["name"] == DASHBOARD_CONFIGMAP]
    if len(cms) != 1 or json.loads(next(iter(cms[0]["data"].values()))) != dashboard:
        fail(f"{rendered}: the dashboard ConfigMap does not carry grafana-dashboard.json")
    elif cms[0]["metadata"].get("labels", {}).get("grafana_dashboard") != "1":
        fail(f"{rendered}: the dashboard ConfigMap lacks the label grafana_dashboard: \"1\"")


def runbook_base(pr):
    """The runbooks' address that k8s/observability/site sets (the PrometheusRule's annotation
    runbook-base): a real one. On docs.rs it is the docs published with this very crate and
    version (Cargo.toml), so the runbook read is the one of the rules deployed."""
    base = pr["metadata"].get("annotations", {}).get("runbook-base", "")
    if not re.match(r"^https://\S+/docs/operations\.md$", base):
        fail(f"PrometheusRule: annotation runbook-base (k8s/observability/site) must be the https URL of "
             f"docs/operations.md, has {base!r}")
        return ""
    if re.search(r"example\.(com|org)|your-org|CHANGE-ME|placeholder", base, re.I):
        fail(f"PrometheusRule: runbook-base {base!r} is a placeholder")
    m = re.match(r"^https://docs\.rs/crate/([^/]+)/([^/]+)/source/docs/operations\.md$", base)
    if m:
        package = tomllib.load(open(os.path.join(ROOT, "Cargo.toml"), "rb"))["package"]
        if (m.group(1), m.group(2)) != (package["name"], package["version"]):
            fail(f"PrometheusRule: runbook-base {base!r} is not the docs of {package['name']} "
                 f"{package['version']} (Cargo.toml)")
    return base


# ---------------------------------------------------------------------------- Markdown links


def links(files):
    for md in files:
        text = open(md).read()
        text = re.sub(r"```.*?```", "", text, flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
            if not os.path.exists(resolved):
                fail(f"{md}: link {target} does not resolve ({resolved} missing)")
                continue
            if anchor and resolved.endswith(".md") and anchor not in github_anchors(resolved):
                fail(f"{md}: link {target}: no heading #{anchor} in {resolved}")


def main(argv):
    command, args = argv[1], argv[2:]
    {"dockerfile": dockerfile, "split": split, "overlay": overlay,
     "observability": observability, "links": lambda *files: links(files)}[command](*args)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
