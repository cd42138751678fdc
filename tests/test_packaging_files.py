"""What ``packaging/`` ships runs as shipped (issue 35): every file there is parsed by its own kind's
parser (TOML, YAML, JSON, systemd's), and whatever a file passes to ``metashift agent`` (flags,
environment, config file) is accepted by ``metashift agent --check-config`` with the same flags and
environment: exit 0. A bad key is exit 2 with one line naming it. The systemd unit (and its drop-in
for coordinator candidates) passes ``systemd-analyze verify``. No container runtime here: the
Containerfile is read, and what it copies, installs and runs must exist (the checkout's folders,
the extra that brings PySpark, a Java runtime for the copy, the console script, the agent's
flags). The Kubernetes values are the apache/pulsar-helm-chart's: the agent a native sidecar of the
broker and bookkeeper pods, and their metadata URLs pointed at its ZooKeeper front."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness import require_part

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
UNIT = PACKAGING / "metashift-agent.service"
DROP_IN = PACKAGING / "metashift-agent.service.d" / "coordinator.conf"
CONTAINERFILE = PACKAGING / "Containerfile"
SIDECAR = PACKAGING / "kubernetes-sidecar.yaml"
AGENT_TOML = PACKAGING / "agent.toml"
#: Where the unit and the image install metashift, and where they read its config.
PREFIX = "/opt/metashift"
ETC_CONFIG = "/etc/metashift/agent.toml"
#: Not shipped to operators: the POMs that fetch Pulsar for the tests, and make lint's helper.
NOT_SHIPPED = {"pulsar", "source_view.py", "__pycache__"}
#: The apache/pulsar-helm-chart's values (4.x) that pass through to the broker and bookkeeper
#: StatefulSets and their ConfigMaps (charts/pulsar/values.yaml, templates/*-statefulset.yaml).
CHART_KEYS = {"configData", "initContainers", "extraVolumes", "extraVolumeMounts", "extraEnvs", "waitBookkeeperTimeout"}
POST_RENDER = PACKAGING / "helm-post-render" / "post-render.sh"
#: What the chart (4.7.0, release "pulsar", default components) renders that the post-renderer
#: changes: the members' ConfigMaps (their metadata URLs, from its ZooKeeper) and the bookie's
#: init container that checks the cluster before any sidecar runs (charts/pulsar/templates/).
CHART_DIRECT = "zk+hierarchical://pulsar-zookeeper:2181/ledgers"
CHART_CONFIGMAPS = {
    "pulsar-broker": {"metadataStoreUrl": "zk:pulsar-zookeeper:2181", "bookkeeperMetadataServiceUri": CHART_DIRECT,
                      "clusterName": "pulsar"},
    "pulsar-bookie": {"metadataServiceUri": CHART_DIRECT, "zkServers": "", "useHostNameAsBookieID": "true"},
    "pulsar-recovery": {"metadataServiceUri": CHART_DIRECT, "zkServers": ""},
}
#: The chart's component of each values section, and its StatefulSet's own init containers.
COMPONENTS = {"broker": ("pulsar-broker", ["wait-zookeeper-ready", "wait-bookkeeper-ready"]),
              "bookkeeper": ("pulsar-bookie", ["pulsar-bookkeeper-verify-clusterid"]),
              "autorecovery": ("pulsar-recovery", ["pulsar-bookkeeper-verify-clusterid"])}


def _shipped() -> list[Path]:
    return sorted(p for p in PACKAGING.rglob("*")
                  if p.is_file() and not NOT_SHIPPED & set(p.relative_to(PACKAGING).parts))


def _metashift() -> str:
    found = Path(sys.executable).parent / "metashift"
    assert found.exists(), f"no metashift console script beside {sys.executable}"
    return str(found)


def _check_config(args: Sequence[str], env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``metashift ARGS --check-config`` (ARGS: ``agent ...``) with only ``env``'s METASHIFT_* variables."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("METASHIFT_")}
    environ.update(env or {})
    argv = [_metashift(), *args]
    if "--check-config" not in argv:
        argv.append("--check-config")
    return subprocess.run(argv, capture_output=True, text=True, env=environ, timeout=120, cwd="/")


def _accepted(args: Sequence[str], env: Mapping[str, str] | None = None, *, what: str) -> str:
    done = _check_config(args, env)
    assert done.returncode == 0, f"{what}: metashift {' '.join(args)} --check-config exit {done.returncode}:\n" \
                                 f"{done.stdout}{done.stderr}"
    assert done.stdout.startswith("configuration ok"), done.stdout
    return done.stdout


def _config_path(arg: str) -> str:
    """The shipped config in place of where it is installed."""
    return str(AGENT_TOML) if arg == ETC_CONFIG else arg


# ---- every file ---------------------------------------------------------------------------------


def test_every_shipped_file_parses() -> None:
    seen = []
    for path in _shipped():
        name = path.name
        text = path.read_text()
        if name.endswith(".toml"):
            tomllib.loads(text)
        elif name.endswith((".yaml", ".yml")):
            docs = [d for d in yaml.safe_load_all(text) if d is not None]
            assert docs, path
        elif name.endswith(".json"):
            json.loads(text)
        elif name.endswith(".service") or path.parent.name.endswith(".service.d"):
            _unit_sections(text)
        elif name == "Containerfile":
            assert _stages(text), path
        elif name.endswith(".sh"):
            assert os.access(path, os.X_OK), f"{path} is not executable"
            done = subprocess.run(["sh", "-n", str(path)], capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
        else:
            pytest.fail(f"packaging/{path.relative_to(PACKAGING)}: this test does not know how to check it")
        seen.append(path.relative_to(PACKAGING).as_posix())
    assert {"agent.toml", "metashift-agent.service", "metashift-agent.service.d/coordinator.conf", "Containerfile",
            "kubernetes-sidecar.yaml", "grafana/metashift-dashboard.json",
            "prometheus/metashift-alerts.yml", "helm-post-render/post-render.sh",
            "helm-post-render/kustomization.yaml"} <= set(seen), seen


# ---- the sample config --------------------------------------------------------------------------


def test_the_sample_config_is_accepted_and_a_bad_key_is_named() -> None:
    _accepted(["agent", "--config", str(AGENT_TOML)], what="packaging/agent.toml")


def test_a_bad_key_in_file_or_environment_is_exit_2_with_one_line_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "agent.toml"
    bad.write_text(AGENT_TOML.read_text().replace("[gate]\n", "[gate]\nhold_timeuot = 30\n", 1))
    done = _check_config(["agent", "--config", str(bad)])
    assert done.returncode == 2, done
    assert done.stdout == "" and done.stderr.count("\n") == 1, done
    assert "gate.hold_timeuot" in done.stderr, done.stderr
    done = _check_config(["agent", "--config", str(AGENT_TOML)], {"METASHIFT_GATE_HOLD_TIMEOUT": "soon"})
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "gate.hold_timeout" in done.stderr, done


# ---- systemd ------------------------------------------------------------------------------------


def _unit_sections(text: str) -> dict[str, list[tuple[str, str]]]:
    """A unit file's sections: (key, value) in order, continuation lines joined."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            assert line.endswith("]"), line
            current = line[1:-1]
            sections.setdefault(current, [])
            continue
        assert current is not None and "=" in line, f"not a unit line: {line!r}"
        key, value = line.split("=", 1)
        sections[current].append((key.strip(), value.strip()))
    return sections


def _unit_env(*texts: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for text in texts:
        for key, value in _unit_sections(text).get("Service", []):
            if key == "Environment":
                for item in shlex.split(value):
                    name, _, val = item.partition("=")
                    env[name] = val.replace("%H", socket.gethostname())
    return env


def _exec_args(value: str) -> list[str]:
    argv = shlex.split(value.lstrip("-@:+!"))
    assert argv[0] == f"{PREFIX}/bin/metashift", argv
    return [_config_path(a) for a in argv[1:]]


def test_the_unit_runs_the_agent_with_what_check_config_accepts() -> None:
    unit, drop_in = UNIT.read_text(), DROP_IN.read_text()
    service = _unit_sections(unit)["Service"]
    execs = [(k, v) for k, v in service if k in ("ExecStart", "ExecStartPre")]
    assert [k for k, _ in execs] == ["ExecStartPre", "ExecStart"], execs
    assert "--check-config" in execs[0][1] and "--check-config" not in execs[1][1], execs
    for env in (_unit_env(unit), _unit_env(unit, drop_in)):
        for _key, value in execs:
            args = _exec_args(value)
            assert args[0] == "agent", args
            _accepted(args, env, what=f"{UNIT.name}: {value}")
    # memory sized for what runs: an agent alone (about 35 MB) under 128M; a candidate's copy more
    memory = dict(service)
    assert _bytes(memory["MemoryMax"]) <= 256 << 20, memory["MemoryMax"]
    candidate = dict(_unit_sections(drop_in)["Service"])
    assert _bytes(candidate["MemoryMax"]) >= 1 << 30, candidate
    assert "install" in unit and "[coordinator]" in unit and "pip install metashift\n" not in unit, \
        "the unit must say how to install from the repository or its wheel"


def _bytes(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
    m = re.fullmatch(r"(\d+)([KMG]i?)?", text.strip())
    assert m, text
    return int(m.group(1)) * units.get(m.group(2) or "", 1)


def test_the_unit_and_its_drop_in_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        require_part("no systemd-analyze: make setup installs Debian's systemd package")
    # installed as the guide says, with /opt/metashift being this checkout's virtualenv
    prefix = str(Path(sys.executable).parent.parent)
    (tmp_path / UNIT.name).write_text(UNIT.read_text().replace(PREFIX, prefix))
    for with_drop_in in (False, True):
        if with_drop_in:
            (tmp_path / DROP_IN.parent.name).mkdir()
            shutil.copy(DROP_IN, tmp_path / DROP_IN.parent.name / DROP_IN.name)
        env = {**os.environ, "SYSTEMD_UNIT_PATH": f"{tmp_path}:", "SYSTEMD_LOG_COLOR": "0"}
        done = subprocess.run([analyze, "verify", UNIT.name], capture_output=True, text=True, env=env, timeout=120)
        # systemd-analyze exits 0 on an unknown key but says so: any word about our files fails
        said = [line for line in (done.stdout + done.stderr).splitlines() if "metashift" in line]
        assert done.returncode == 0 and not said, (with_drop_in, done.stdout + done.stderr)


# ---- the container image ------------------------------------------------------------------------


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, op: str) -> list[str]:
        return [arg for o, arg in self.instructions if o == op]


def _stages(text: str) -> list[Stage]:
    stages: list[Stage] = []
    logical = re.sub(r"\\\n", " ", text)
    for line in logical.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        op, _, arg = line.partition(" ")
        op = op.upper()
        if op == "FROM":
            parts = arg.split()
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(parts[0], name))
        else:
            assert stages, f"{op} before FROM"
            stages[-1].instructions.append((op, arg.strip()))
    return stages


def _exec_form(arg: str) -> list[str]:
    value = json.loads(arg)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), arg
    return value


def test_the_containerfile_builds_the_wheel_and_installs_it_with_java_and_pyspark() -> None:
    stages = _stages(CONTAINERFILE.read_text())
    assert len(stages) >= 2, "multi-stage: build the wheel, then install it"
    build, final = stages[0], stages[-1]
    # the build stage copies the checkout's project files and builds the wheel from them
    copied = [a.split()[0] for a in build.all("COPY")] + [s for a in build.all("COPY") for s in a.split()[1:-1]]
    for source in copied:
        assert (ROOT / source).exists(), f"the Containerfile copies {source}, which the checkout lacks"
    folders = set(PYPROJECT["tool"]["setuptools"]["package-dir"].values())
    assert folders <= set(copied), f"the wheel's folders not copied: {folders - set(copied)}"
    assert any("pip wheel" in r for r in build.all("RUN")), build.all("RUN")
    # the final stage installs that wheel (copied from the build stage) with the coordinator extra
    assert any(f"--from={build.name}" in c for c in final.all("COPY")), final.all("COPY")
    runs = " ".join(final.all("RUN"))
    installs = re.findall(r"metashift-\*\.whl\)?\[([a-z,_-]+)\]", runs)
    assert installs and all("coordinator" in x.split(",") for x in installs), runs
    extras = PYPROJECT["project"].get("optional-dependencies", {})
    if "coordinator" in extras:
        assert any(d.startswith("pyspark") for d in extras["coordinator"]), extras["coordinator"]
    else:  # before PySpark became the extra, it was a dependency of every install
        assert any(d.startswith("pyspark") for d in PYPROJECT["project"]["dependencies"]), "the image has no PySpark"
    assert re.search(r"\bopenjdk-\d+-jre(-headless)?\b|default-jre", runs), "no Java runtime for the Spark copy"
    # ENTRYPOINT is the console script; CMD runs the agent with a config the image holds
    entry, cmd = _exec_form(final.all("ENTRYPOINT")[-1]), _exec_form(final.all("CMD")[-1])
    assert entry == list(PYPROJECT["project"]["scripts"]), entry
    assert any(c.split()[-1] == ETC_CONFIG and c.split()[0] == "packaging/agent.toml" for c in final.all("COPY"))
    env = dict(shlex.split(kv)[0].split("=", 1) for e in final.all("ENV") for kv in re.findall(r"\S+=\S+", e))
    assert cmd[0] == "agent", cmd
    own = {k: v for k, v in env.items() if k.startswith("METASHIFT")}
    _accepted(["agent", *[_config_path(a) for a in cmd[1:]]], own, what="Containerfile CMD")


# ---- Kubernetes: the apache/pulsar-helm-chart's values ------------------------------------------


def _sidecar_env(container: dict[str, Any]) -> dict[str, str]:
    """The container's environment as the pod has it: a field reference by a pod's name, an optional
    secret left out (it may not exist)."""
    env: dict[str, str] = {}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
        elif "fieldRef" in item.get("valueFrom", {}):
            assert item["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name", item
            env[item["name"]] = "pulsar-broker-0"
        else:
            assert item["valueFrom"]["secretKeyRef"].get("optional") is True, item
    return env


def test_the_kubernetes_values_run_the_agent_as_a_native_sidecar_in_front_of_every_member() -> None:
    values = yaml.safe_load(SIDECAR.read_text())
    assert set(values) == set(COMPONENTS), set(values)
    for component, settings in values.items():
        assert set(settings) <= CHART_KEYS, (component, set(settings) - CHART_KEYS)
        sidecars = [c for c in settings["initContainers"] if c.get("restartPolicy") == "Always"]
        assert len(sidecars) == 1, f"{component}: one native sidecar (restartPolicy: Always)"
        agent = sidecars[0]
        env = _sidecar_env(agent)
        out = _accepted(agent["args"], env, what=f"{component}'s sidecar")
        assert agent["args"][0] == "agent"
        front = env.get("METASHIFT_ZOOKEEPER_LISTEN", "")
        assert front.startswith("127.0.0.1:") and f"ZooKeeper's protocol on {front}" in out, (front, out)
        # the chart's waits for BookKeeper in these pods read the bookie's URL before the sidecar runs
        if component != "bookkeeper":
            assert settings.get("waitBookkeeperTimeout") == 0, component
        # every volume the sidecar mounts is one the values add to the pod
        volumes = {v["name"] for v in settings.get("extraVolumes", [])}
        assert {m["name"] for m in agent.get("volumeMounts", [])} <= volumes, component
        # resources that fit: a coordinator candidate has room for the Spark copy, others are small
        candidate = env.get("METASHIFT_COORDINATOR_ENABLED", "true") == "true"
        limit = _bytes(agent["resources"]["limits"]["memory"])
        assert ("a candidate" in out) == candidate, out
        if candidate:
            assert limit >= 1 << 30, (component, limit)
            assert any(m["mountPath"] == "/tmp" for m in agent["volumeMounts"]), "Spark's scratch space"
        else:
            assert 64 << 20 <= limit <= 256 << 20, (component, limit)
        assert _bytes(agent["resources"]["requests"]["memory"]) <= limit
        probe = agent["startupProbe"]["exec"]["command"]
        assert front.split(":")[1] in " ".join(probe), probe
    assert any(e.get("METASHIFT_COORDINATOR_ENABLED", "true") == "true"
               for e in (_sidecar_env(c) for v in values.values() for c in v["initContainers"])), \
        "no coordinator candidate: a migration would have no leader"


def _rendered(values: dict[str, Any]) -> list[dict[str, Any]]:
    """The part of the chart's rendering the post-renderer changes, with the values' sidecars."""
    docs: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                                   "data": dict(data)} for name, data in CHART_CONFIGMAPS.items()]
    for component, (name, own) in COMPONENTS.items():
        inits = [{"name": n, "image": "apachepulsar/pulsar:4.0.7", "envFrom": [{"configMapRef": {"name": name}}]}
                 for n in own]
        docs.append({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
                     "spec": {"template": {"spec": {
                         "initContainers": inits + values[component]["initContainers"],
                         "containers": [{"name": name, "image": "apachepulsar/pulsar:4.0.7",
                                         "envFrom": [{"configMapRef": {"name": name}}]}]}}}})
    return docs


def test_the_helm_post_renderer_points_every_member_at_its_agent() -> None:
    if shutil.which("kubectl") is None:
        require_part("no kubectl: the Helm post-renderer runs kubectl kustomize")
    values = yaml.safe_load(SIDECAR.read_text())
    rendered = _rendered(values)
    done = subprocess.run([str(POST_RENDER)], input=yaml.safe_dump_all(rendered), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    out = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(done.stdout)}
    assert set(out) == {(d["kind"], d["metadata"]["name"]) for d in rendered}
    for component, (name, _own) in COMPONENTS.items():
        agent = next(c for c in values[component]["initContainers"] if c.get("restartPolicy") == "Always")
        front = _sidecar_env(agent)["METASHIFT_ZOOKEEPER_LISTEN"]
        data = out["ConfigMap", name]["data"]
        # every metadata URL of the member through its agent's front, in forms the guide shows
        through = f"zk+hierarchical://{front}/ledgers"
        if component == "broker":
            assert data["metadataStoreUrl"] == data["configurationMetadataStoreUrl"] == f"zk:{front}", data
            assert data["bookkeeperMetadataServiceUri"] == through, data
        else:
            assert data["metadataServiceUri"] == through, data
        # nothing else of the chart's ConfigMap changed
        assert {k: v for k, v in data.items() if k in CHART_CONFIGMAPS[name] and "etadata" not in k} == \
            {k: v for k, v in CHART_CONFIGMAPS[name].items() if "etadata" not in k}, data
        spec = out["StatefulSet", name]["spec"]["template"]["spec"]
        inits = {c["name"]: c for c in spec["initContainers"]}
        assert inits["metashift-agent"] == agent, "the sidecar as the values give it"
        # the chart's init containers run before the sidecar: the bookie's keeps the direct URL
        if component == "bookkeeper":
            env = {e["name"]: e["value"] for e in inits["pulsar-bookkeeper-verify-clusterid"].get("env", [])}
            assert env == {"metadataServiceUri": CHART_DIRECT}, env
    guide = (ROOT / "docs" / "operator-guide.md").read_text()
    assert "`zk:127.0.0.1:2181` ✓" in guide and "`zk+hierarchical://127.0.0.1:2181/ledgers` ✓" in guide
