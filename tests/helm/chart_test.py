#!/usr/bin/python3
"""Tests of the Helm chart (helm/aside) and of the Dockerfile.

The chart is rendered by tests/helm/helmrender (Helm's engine rebuilt from
Debian's Go packages, since helm itself is not packaged) with its default
values and with variants, and the rendered objects are checked the way a
cluster and the server would see them: valid YAML, names, labels and
selectors that agree, ports that match the server's own config, a config
that aside-server --check-config accepts, a checksum that follows the
config, and a locked-down pod.

Run by ctest (tests/helm/CMakeLists.txt):
  chart_test.py --helmrender BIN --server BIN --source DIR [unittest args]
"""

import argparse
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml

ARGS = None  # set in main()

# The variants every structural check runs over: name -> values overrides.
VARIANTS = {
    "default": {},
    "groups": {
        "groups": [
            {
                "name": "payments",
                "policy": {"name": "ketama", "points_per_weight": 160},
                "health_check": {"kind": "tcp", "interval": "5s",
                                 "timeout": "1s", "rise": 2, "fall": 3},
                "backends": [
                    "10.0.0.1:8080",
                    {"address": "10.0.0.2:8080", "weight": 300,
                     "locality": {"region": "eu-west-1",
                                  "zone": "eu-west-1a"},
                     "metadata": {"version": "v2"}},
                ],
            },
            {"name": "search", "policy": "p2c",
             "health_check": {"kind": "none"},
             "backends": ["10.0.1.1:9000"]},
        ],
        "service": {"grpclbNames": ["payments", "search"]},
    },
    "persistence": {
        "replicaCount": 1,
        "persistence": {"enabled": True, "size": "5Gi",
                        "storageClass": "fast"},
    },
    "tls": {
        "tls": {"enabled": True, "existingSecret": "aside-tls",
                "clientCA": {"enabled": True}, "requireClientCert": True},
        "admin": {
            "existingSecret": "aside-admin",
            "allowedIdentities": [
                {"identity": "spiffe://cluster.local/ns/ops/sa/deployer",
                 "role": "admin"}],
        },
    },
    "servicemonitor": {
        "serviceMonitor": {"enabled": True,
                           "labels": {"release": "prometheus"}},
    },
    "netpol-hpa": {
        "sessionKey": {"existingSecret": "aside-session"},
        "networkPolicy": {
            "enabled": True,
            "clients": [{"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": "apps"}}}],
        },
        "autoscaling": {"enabled": True, "minReplicas": 2,
                        "maxReplicas": 5},
    },
    "monitoring": {
        "serviceMonitor": {"enabled": True,
                           "labels": {"release": "prometheus"}},
        "dashboards": {"enabled": True,
                       "annotations": {"grafana_folder": "Aside"}},
        "alerts": {"enabled": True, "labels": {"release": "prometheus"},
                   "ruleLabels": {"team": "payments",
                                  "severity": "overridden"}},
    },
    "no-health-port": {
        "ports": {"health": 0, "metrics": 0},
        "config": {"log_format": "text", "log_level": "debug",
                   "shutdown_grace": "1m30s"},
        "preStopDelaySeconds": 0,
    },
    "no-reload": {
        "configReload": {"enabled": False},
    },
    "etcd": {
        "replicaCount": 3,
        "store": {"etcd": {
            "endpoints": ["etcd-0.etcd.db.svc:2379", "etcd-1.etcd.db.svc:2379",
                          "10.20.0.5:2380"],
            "prefix": "/aside-prod/",
            "requestTimeout": "3s",
            "tls": {"existingSecret": "aside-etcd-tls"},
            "credentials": {"existingSecret": "aside-etcd-auth"},
        }},
        "admin": {"existingSecret": "aside-admin"},
        "loadReports": {"auth": "open", "maxReporterShare": 0.5},
        "autoscaling": {"enabled": True, "minReplicas": 3, "maxReplicas": 9},
        "networkPolicy": {
            "enabled": True,
            "egress": {
                "enabled": True,
                "etcd": {
                    "namespaceSelector": {"matchLabels": {
                        "kubernetes.io/metadata.name": "db"}},
                    "podSelector": {"matchLabels": {"app": "etcd"}},
                    "cidrs": ["10.20.0.0/24"],
                },
                "backends": [{"to": [{"namespaceSelector": {}}]}],
            },
        },
    },
    "etcd-plain": {
        "replicaCount": 4,
        "store": {"etcd": {"endpoints": ["etcd.db.svc:2379"]}},
    },
}


# values.yaml keys whose value is a Kubernetes object passed through whole.
PASSTHROUGH_BLOCKS = {"resources", "podSecurityContext", "securityContext"}


class UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses duplicate mapping keys (the API server's
    strict decoding does too)."""


def _construct_mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, "duplicate key %r" % (key,), key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep)


UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def chart_dir():
    return os.path.join(ARGS.source, "helm", "aside")


def run_render(values, extra=(), name="aside", namespace="lb", check=True):
    """Renders the chart with `values` (a dict written to a -f file)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "values.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(values, f)
        cmd = [ARGS.helmrender, "--strict", "--name", name,
               "--namespace", namespace, "-f", path, *extra, chart_dir()]
        result = subprocess.run(cmd, capture_output=True, text=True,
                                timeout=60)
    if check and result.returncode != 0:
        raise AssertionError("render failed: %s" % result.stderr)
    return result


def render(values, **kwargs):
    """Renders and parses: returns the list of objects."""
    text = run_render(values, **kwargs).stdout
    objects = []
    for doc in yaml.load_all(text, Loader=UniqueKeyLoader):
        if doc is not None:
            objects.append(doc)
    return objects, text


def find(objects, kind, name=None):
    found = [o for o in objects if o["kind"] == kind and
             (name is None or o["metadata"]["name"] == name)]
    return found


def one(objects, kind):
    found = find(objects, kind)
    if len(found) != 1:
        raise AssertionError("expected one %s, found %d" % (kind, len(found)))
    return found[0]


def workload(objects):
    found = [o for o in objects if o["kind"] in ("Deployment", "StatefulSet")]
    if len(found) != 1:
        raise AssertionError("expected one workload, found %d" % len(found))
    return found[0]


def server_config(objects):
    # The server's ConfigMap (the dashboards have their own).
    found = [o for o in find(objects, "ConfigMap")
             if "aside.yaml" in o.get("data", {})]
    if len(found) != 1:
        raise AssertionError("expected one aside.yaml ConfigMap, found %d"
                             % len(found))
    cm = found[0]
    return yaml.load(cm["data"]["aside.yaml"], Loader=UniqueKeyLoader), cm


def port_of(address):
    return int(address.rsplit(":", 1)[1])


def is_subset(small, big):
    return all(big.get(k) == v for k, v in small.items())


def container(objects):
    pod = workload(objects)["spec"]["template"]["spec"]
    containers = pod["containers"]
    assert len(containers) == 1, containers
    return containers[0], pod


def annotations(objects):
    return workload(objects)["spec"]["template"]["metadata"]["annotations"]


def checksum(objects):
    return annotations(objects)["checksum/config"]


def restart_checksum(objects):
    return annotations(objects)["checksum/config-restart"]


NO_RELOAD = {"configReload": {"enabled": False}}


def duration_seconds(text):
    total = 0.0
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    for number, unit in re.findall(r"([0-9.]+)(ns|us|ms|s|m|h)", text):
        total += float(number) * scale[unit]
    return total


class ChartLintTest(unittest.TestCase):
    """What `helm lint --strict` checks, for every variant."""

    def test_lint_every_variant(self):
        for name, values in VARIANTS.items():
            with self.subTest(variant=name):
                with tempfile.TemporaryDirectory() as tmp:
                    path = os.path.join(tmp, "values.yaml")
                    with open(path, "w") as f:
                        yaml.safe_dump(values, f)
                    result = subprocess.run(
                        [ARGS.helmrender, "--lint", "-f", path, chart_dir()],
                        capture_output=True, text=True, timeout=60)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertNotIn("[WARNING]", result.stderr)

    def test_every_value_has_a_comment(self):
        # Every key of values.yaml has a comment right above it, or is the
        # first key of a block whose parent key is documented (the parent's
        # comment covers e.g. resources.requests). Inside the Kubernetes
        # objects passed through whole (resources, security contexts), the
        # top key's comment covers the block.
        with open(os.path.join(chart_dir(), "values.yaml")) as f:
            lines = f.read().splitlines()
        documented = {}
        undocumented = []
        previous = None
        for i, line in enumerate(lines):
            stripped = line.strip()
            if not stripped:
                continue
            if re.match(r"^ *[A-Za-z][A-Za-z0-9_]*:", line):
                ok = False
                if previous is not None:
                    prev = lines[previous]
                    if prev.strip().startswith("#"):
                        ok = True
                    elif previous in documented and prev.rstrip().endswith(":") \
                            and len(prev) - len(prev.lstrip()) < \
                            len(line) - len(line.lstrip()):
                        ok = documented[previous]
                if not ok and line.startswith(" "):
                    top = max(j for j in documented
                              if not lines[j].startswith(" "))
                    if lines[top].split(":")[0] in PASSTHROUGH_BLOCKS:
                        ok = documented[top]
                documented[i] = ok
                if not ok:
                    undocumented.append(line)
            previous = i
        self.assertEqual(undocumented, [])


class ChartStructureTest(unittest.TestCase):
    """Objects, names, labels, selectors, ports, mounts and security."""

    @classmethod
    def setUpClass(cls):
        cls.rendered = {name: render(values)[0]
                        for name, values in VARIANTS.items()}

    def each(self):
        for name, objects in self.rendered.items():
            with self.subTest(variant=name):
                yield name, objects

    def test_objects_have_identity(self):
        for _, objects in self.each():
            seen = set()
            for o in objects:
                self.assertTrue(o.get("apiVersion"), o)
                self.assertTrue(o.get("kind"), o)
                name = o["metadata"]["name"]
                self.assertRegex(name, r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
                self.assertLessEqual(len(name), 63)
                self.assertEqual(o["metadata"]["namespace"], "lb")
                key = (o["kind"], name)
                self.assertNotIn(key, seen)
                seen.add(key)

    def test_no_number_in_scientific_notation(self):
        # Helm decodes values as float64; a large number printed without
        # `int` or toYaml comes out as 4.194304e+06.
        for name, values in VARIANTS.items():
            with self.subTest(variant=name):
                _, text = render(values)
                self.assertNotRegex(text, r"[0-9]e[+-][0-9]")

    def test_selectors_match_pod_labels(self):
        for _, objects in self.each():
            w = workload(objects)
            pod_labels = w["spec"]["template"]["metadata"]["labels"]
            selector = w["spec"]["selector"]["matchLabels"]
            self.assertTrue(selector)
            self.assertTrue(is_subset(selector, pod_labels))
            for svc in find(objects, "Service"):
                self.assertTrue(svc["spec"]["selector"])
                self.assertTrue(is_subset(svc["spec"]["selector"], pod_labels),
                                svc["metadata"]["name"])
            for pdb in find(objects, "PodDisruptionBudget"):
                self.assertTrue(is_subset(
                    pdb["spec"]["selector"]["matchLabels"], pod_labels))
            for np in find(objects, "NetworkPolicy"):
                self.assertTrue(is_subset(
                    np["spec"]["podSelector"]["matchLabels"], pod_labels))
            for sm in find(objects, "ServiceMonitor"):
                svc = find(objects, "Service", w["metadata"]["name"])[0]
                self.assertTrue(is_subset(sm["spec"]["selector"]["matchLabels"],
                                          svc["metadata"]["labels"]))
                port_names = {p["name"] for p in svc["spec"]["ports"]}
                for endpoint in sm["spec"]["endpoints"]:
                    self.assertIn(endpoint["port"], port_names)
                self.assertEqual(sm["metadata"]["labels"]["release"],
                                 "prometheus")

    def test_pdb_present_by_default(self):
        objects = self.rendered["default"]
        pdb = one(objects, "PodDisruptionBudget")
        self.assertEqual(pdb["apiVersion"], "policy/v1")
        self.assertEqual(pdb["spec"]["maxUnavailable"], 1)

    def test_ports_match_server_config(self):
        for name, objects in self.each():
            config, _ = server_config(objects)
            c, _ = container(objects)
            ports = {p["name"]: p["containerPort"] for p in c["ports"]}
            self.assertEqual(ports["grpclb"], port_of(config["listen"]))
            if config.get("metrics"):
                self.assertEqual(ports["metrics"], port_of(config["metrics"]))
            else:
                self.assertNotIn("metrics", ports)
            if config.get("health_listen"):
                self.assertEqual(ports["health"],
                                 port_of(config["health_listen"]))
                probe_port = ports["health"]
            else:
                self.assertNotIn("health", ports)
                self.assertNotIn("tls", config)
                probe_port = ports["grpclb"]
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                self.assertEqual(c[probe]["grpc"]["port"], probe_port, probe)
            if "tls" in config:
                # Kubelet gRPC probes cannot do TLS.
                self.assertNotEqual(probe_port, port_of(config["listen"]))
            # Every Service targets a named container port.
            for svc in find(objects, "Service"):
                for p in svc["spec"]["ports"]:
                    self.assertIn(p["targetPort"], ports)
                    self.assertEqual(p["protocol"], "TCP")
            for np in find(objects, "NetworkPolicy"):
                for rule in np["spec"]["ingress"]:
                    for p in rule["ports"]:
                        self.assertIn(p["port"], ports)

    def test_grpc_port_is_named_grpclb(self):
        # Cluster DNS derives the SRV name _grpclb._tcp.<service> from the
        # Service port's name and protocol.
        for _, objects in self.each():
            w = workload(objects)
            svc = find(objects, "Service", w["metadata"]["name"])[0]
            grpclb = [p for p in svc["spec"]["ports"] if p["name"] == "grpclb"]
            self.assertEqual(len(grpclb), 1)
            self.assertEqual(grpclb[0]["protocol"], "TCP")
        names = {s["metadata"]["name"]
                 for s in find(self.rendered["groups"], "Service")}
        self.assertLessEqual({"payments", "search"}, names)

    def test_config_and_mounts_agree(self):
        for name, objects in self.each():
            config, cm = server_config(objects)
            c, pod = container(objects)
            w = workload(objects)
            mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
            volumes = {v["name"]: v for v in pod["volumes"]}
            claims = {t["metadata"]["name"]
                      for t in w["spec"].get("volumeClaimTemplates", [])}
            for m in c["volumeMounts"]:
                self.assertTrue(m["name"] in volumes or m["name"] in claims,
                                m["name"])
            # The config file the server is told to read is the ConfigMap.
            config_path = c["args"][c["args"].index("--config") + 1]
            if config_path in mounts:
                # Without reload: the file alone.
                mount = mounts[config_path]
                self.assertEqual(mount["subPath"], "aside.yaml")
            else:
                # With reload: the whole volume, which follows updates
                # (a subPath mount never does).
                self.assertEqual(os.path.basename(config_path), "aside.yaml")
                mount = mounts[os.path.dirname(config_path)]
                self.assertNotIn("subPath", mount)
            self.assertEqual(
                volumes[mount["name"]]["configMap"]["name"],
                cm["metadata"]["name"])
            # The state directory is a writable volume.
            state = mounts[config["state_dir"]]
            self.assertFalse(state.get("readOnly", False))
            self.assertIn("/tmp", mounts)
            # Files the config names come from mounted Secrets.
            files = []
            if "tls" in config:
                files += [config["tls"]["cert_file"], config["tls"]["key_file"]]
                if "client_ca_file" in config["tls"]:
                    files.append(config["tls"]["client_ca_file"])
            if "token_file" in config.get("admin", {}):
                files.append(config["admin"]["token_file"])
            if "session_key_file" in config:
                files.append(config["session_key_file"])
            etcd = config.get("store", {}).get("etcd", {})
            files += [etcd[k] for k in ("ca_file", "cert_file", "key_file",
                                        "credentials_file") if k in etcd]
            for path in files:
                directory, base = os.path.split(path)
                self.assertIn(directory, mounts, path)
                volume = volumes[mounts[directory]["name"]]
                self.assertIn(base, [i["path"] for i in
                                     volume["secret"]["items"]], path)
            if name == "tls":
                self.assertEqual(config["tls"]["require_client_cert"], True)
                self.assertEqual(config["admin"]["allowed_identities"][0]["role"],
                                 "admin")

    def test_security_context(self):
        for _, objects in self.each():
            c, pod = container(objects)
            self.assertTrue(pod["securityContext"]["runAsNonRoot"])
            self.assertNotEqual(pod["securityContext"]["runAsUser"], 0)
            sc = c["securityContext"]
            self.assertTrue(sc["readOnlyRootFilesystem"])
            self.assertTrue(sc["runAsNonRoot"])
            self.assertFalse(sc["allowPrivilegeEscalation"])
            self.assertEqual(sc["capabilities"]["drop"], ["ALL"])
            self.assertFalse(pod["automountServiceAccountToken"])

    def test_termination_grace_exceeds_shutdown_grace(self):
        for name, objects in self.each():
            config, _ = server_config(objects)
            c, pod = container(objects)
            delay = 0
            if "lifecycle" in c:
                delay = int(c["lifecycle"]["preStop"]["exec"]["command"][1])
            needed = duration_seconds(config["shutdown_grace"]) + delay
            self.assertGreater(pod["terminationGracePeriodSeconds"], needed)
        self.assertEqual(container(self.rendered["no-health-port"])[1]
                         ["terminationGracePeriodSeconds"], 95)

    def test_deployment_without_persistence(self):
        objects = self.rendered["default"]
        w = workload(objects)
        self.assertEqual(w["kind"], "Deployment")
        self.assertEqual(w["spec"]["replicas"], 2)
        volumes = {v["name"]: v for v in w["spec"]["template"]["spec"]["volumes"]}
        self.assertIn("emptyDir", volumes["state"])
        self.assertFalse(find(objects, "PersistentVolumeClaim"))

    def test_statefulset_with_persistence(self):
        objects = self.rendered["persistence"]
        w = workload(objects)
        self.assertEqual(w["kind"], "StatefulSet")
        self.assertEqual(w["spec"]["replicas"], 1)
        headless = find(objects, "Service", w["spec"]["serviceName"])
        self.assertEqual(len(headless), 1)
        self.assertEqual(headless[0]["spec"]["clusterIP"], "None")
        (claim,) = w["spec"]["volumeClaimTemplates"]
        self.assertEqual(claim["metadata"]["name"], "state")
        self.assertEqual(claim["spec"]["resources"]["requests"]["storage"],
                         "5Gi")
        self.assertEqual(claim["spec"]["storageClassName"], "fast")
        volumes = [v["name"] for v in w["spec"]["template"]["spec"]["volumes"]]
        self.assertNotIn("state", volumes)  # it comes from the claim

    def test_hpa_targets_the_deployment(self):
        objects = self.rendered["netpol-hpa"]
        hpa = one(objects, "HorizontalPodAutoscaler")
        w = workload(objects)
        self.assertEqual(hpa["apiVersion"], "autoscaling/v2")
        self.assertEqual(hpa["spec"]["scaleTargetRef"]["kind"], w["kind"])
        self.assertEqual(hpa["spec"]["scaleTargetRef"]["name"],
                         w["metadata"]["name"])
        self.assertNotIn("replicas", w["spec"])
        np = one(objects, "NetworkPolicy")
        grpc_rule = [r for r in np["spec"]["ingress"]
                     if r["ports"][0]["port"] == "grpclb"][0]
        self.assertEqual(grpc_rule["from"],
                         VARIANTS["netpol-hpa"]["networkPolicy"]["clients"])

    def test_etcd_fleet_is_a_deployment_of_any_size(self):
        for variant, replicas in (("etcd", None), ("etcd-plain", 4)):
            with self.subTest(variant=variant):
                objects = self.rendered[variant]
                w = workload(objects)
                self.assertEqual(w["kind"], "Deployment")
                self.assertEqual(w["spec"].get("replicas"), replicas)
                self.assertFalse(w["spec"].get("volumeClaimTemplates"))
        hpa = one(self.rendered["etcd"], "HorizontalPodAutoscaler")
        self.assertEqual(hpa["spec"]["scaleTargetRef"]["kind"], "Deployment")
        # Each replica advertises its pod IP to the fleet.
        c, _ = container(self.rendered["etcd"])
        self.assertIn("--advertise-address=$(POD_IP):50051", c["args"])
        self.assertIn({"name": "POD_IP", "valueFrom": {"fieldRef": {
            "fieldPath": "status.podIP"}}}, c["env"])
        c, _ = container(self.rendered["default"])
        self.assertFalse([a for a in c["args"] if "advertise" in a])
        self.assertEqual(hpa["spec"]["maxReplicas"], 9)

    def test_etcd_store_config(self):
        config, _ = server_config(self.rendered["etcd"])
        self.assertEqual(config["store"], {"type": "etcd", "etcd": {
            "endpoints": VARIANTS["etcd"]["store"]["etcd"]["endpoints"],
            "prefix": "/aside-prod/",
            "dial_timeout": "2s",
            "request_timeout": "3s",
            "ca_file": "/etc/aside/etcd-tls/ca.crt",
            "cert_file": "/etc/aside/etcd-tls/tls.crt",
            "key_file": "/etc/aside/etcd-tls/tls.key",
            "credentials_file": "/etc/aside/etcd-credentials/credentials",
        }})
        plain, _ = server_config(self.rendered["etcd-plain"])
        self.assertEqual(plain["store"]["etcd"]["prefix"], "/aside/")
        for key in ("ca_file", "cert_file", "credentials_file"):
            self.assertNotIn(key, plain["store"]["etcd"])
        _, pod = container(self.rendered["etcd-plain"])
        self.assertFalse([v for v in pod["volumes"]
                          if v["name"].startswith("etcd")])
        # Without etcd the server keeps its default store, SQLite.
        for variant in ("default", "persistence"):
            self.assertNotIn("store", server_config(self.rendered[variant])[0])
        # A CA alone (no client certificate) mounts only the CA.
        objects, _ = render({"store": {"etcd": {
            "endpoints": ["etcd:2379"],
            "tls": {"existingSecret": "ca-only", "certKey": ""}}}})
        config, _ = server_config(objects)
        self.assertEqual(config["store"]["etcd"]["ca_file"],
                         "/etc/aside/etcd-tls/ca.crt")
        self.assertNotIn("key_file", config["store"]["etcd"])
        _, pod = container(objects)
        (volume,) = [v for v in pod["volumes"] if v["name"] == "etcd-tls"]
        self.assertEqual([i["key"] for i in volume["secret"]["items"]],
                         ["ca.crt"])

    def test_network_policy_egress_to_etcd(self):
        np = one(self.rendered["etcd"], "NetworkPolicy")
        self.assertEqual(np["spec"]["policyTypes"], ["Ingress", "Egress"])
        egress = np["spec"]["egress"]
        dns, etcd, backends = egress
        self.assertEqual({(p["port"], p["protocol"]) for p in dns["ports"]},
                         {(53, "UDP"), (53, "TCP")})
        self.assertNotIn("to", dns)
        # The ports come from the endpoints, each once.
        self.assertEqual([p["port"] for p in etcd["ports"]], [2379, 2380])
        self.assertEqual(etcd["to"], [
            {"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": "db"}},
             "podSelector": {"matchLabels": {"app": "etcd"}}},
            {"ipBlock": {"cidr": "10.20.0.0/24"}}])
        self.assertEqual(backends, {"to": [{"namespaceSelector": {}}]})
        # Egress stays unrestricted unless asked for.
        np = one(self.rendered["netpol-hpa"], "NetworkPolicy")
        self.assertEqual(np["spec"]["policyTypes"], ["Ingress"])
        self.assertNotIn("egress", np["spec"])
        # Without selectors the etcd rule allows the ports anywhere.
        objects, _ = render({"store": {"etcd": {"endpoints": ["e:2379"]}},
                             "networkPolicy": {"enabled": True, "egress": {
                                 "enabled": True, "backends": [{}]}}})
        egress = one(objects, "NetworkPolicy")["spec"]["egress"]
        self.assertEqual(egress[1], {"ports": [{"port": 2379,
                                                "protocol": "TCP"}]})
        self.assertEqual(egress[2], {})

    def test_load_reports_config(self):
        config, _ = server_config(self.rendered["default"])
        self.assertEqual(config["load_reports"],
                         {"auth": "token", "max_reporter_share": 0.25})
        config, _ = server_config(self.rendered["etcd"])
        self.assertEqual(config["load_reports"],
                         {"auth": "open", "max_reporter_share": 0.5})
        # Report tokens are lines of the token file.
        self.assertEqual(config["admin"]["token_file"],
                         "/etc/aside/admin/tokens")

    def test_optional_objects_are_off_by_default(self):
        kinds = {o["kind"] for o in self.rendered["default"]}
        self.assertEqual(
            kinds, {"ConfigMap", "Deployment", "Service", "ServiceAccount",
                    "PodDisruptionBudget"})


def rules_file():
    with open(os.path.join(chart_dir(), "alerts", "aside-rules.yaml")) as f:
        return yaml.load(f, Loader=UniqueKeyLoader)


def dashboard_file():
    with open(os.path.join(chart_dir(), "dashboards", "aside.json")) as f:
        return json.load(f)


def dashboard_panels(panels):
    for p in panels:
        yield p
        yield from dashboard_panels(p.get("panels", []))


class ChartMonitoringTest(unittest.TestCase):
    """The Grafana dashboard ConfigMap and the PrometheusRule: off by
    default, and when on, the repository's files unchanged inside them."""

    def test_off_by_default(self):
        objects, _ = render({})
        self.assertFalse(find(objects, "PrometheusRule"))
        self.assertEqual(len(find(objects, "ConfigMap")), 1)

    def test_dashboard_configmap_for_the_sidecar(self):
        objects, _ = render(VARIANTS["monitoring"])
        cms = [o for o in find(objects, "ConfigMap")
               if "aside.json" in o.get("data", {})]
        self.assertEqual(len(cms), 1)
        cm = cms[0]
        self.assertEqual(cm["metadata"]["labels"]["grafana_dashboard"], "1")
        self.assertEqual(cm["metadata"]["namespace"], "lb")
        self.assertEqual(cm["metadata"]["annotations"],
                         {"grafana_folder": "Aside"})
        self.assertEqual(cm["metadata"]["labels"]["app.kubernetes.io/name"],
                         "aside")
        self.assertEqual(json.loads(cm["data"]["aside.json"]),
                         dashboard_file())

    def test_dashboard_label_and_namespace_are_configurable(self):
        objects, _ = render({"dashboards": {
            "enabled": True, "label": "dashboards.example.com/grafana",
            "labelValue": 7, "namespace": "monitoring",
            "labels": {"team": "platform"}}})
        cm = [o for o in find(objects, "ConfigMap")
              if "aside.json" in o.get("data", {})][0]
        labels = cm["metadata"]["labels"]
        self.assertEqual(labels["dashboards.example.com/grafana"], "7")
        self.assertNotIn("grafana_dashboard", labels)
        self.assertEqual(labels["team"], "platform")
        self.assertEqual(cm["metadata"]["namespace"], "monitoring")
        self.assertNotIn("annotations", cm["metadata"])

    def test_prometheus_rule_is_the_rules_file(self):
        objects, _ = render(VARIANTS["monitoring"])
        rule = one(objects, "PrometheusRule")
        self.assertEqual(rule["apiVersion"], "monitoring.coreos.com/v1")
        self.assertEqual(rule["metadata"]["labels"]["release"], "prometheus")
        expected = rules_file()
        for group in expected["groups"]:
            for r in group["rules"]:
                # ruleLabels are added; a rule's own severity wins.
                r["labels"] = dict({"team": "payments"}, **r["labels"])
        self.assertEqual(rule["spec"], expected)
        rendered = [r for g in rule["spec"]["groups"] for r in g["rules"]]
        self.assertEqual(len(rendered), 9)
        for r in rendered:
            self.assertIn(r["labels"]["severity"], ("warning", "critical"))
            self.assertTrue(r["for"])
            self.assertTrue(r["annotations"]["summary"])
            self.assertTrue(r["annotations"]["description"])
            # Prometheus's own templates reach the rule unrendered by Helm.
            self.assertIn("{{ $labels.", r["annotations"]["summary"] +
                          r["annotations"]["description"])

    def test_rules_without_extra_labels(self):
        objects, _ = render({"alerts": {"enabled": True}})
        rule = one(objects, "PrometheusRule")
        self.assertEqual(rule["spec"], rules_file())

    def test_dashboard_shape(self):
        d = dashboard_file()
        self.assertEqual(d["uid"], "aside-overview")
        variables = {v["name"]: v for v in d["templating"]["list"]}
        self.assertEqual(variables["datasource"]["type"], "datasource")
        self.assertEqual(variables["datasource"]["query"], "prometheus")
        panels = list(dashboard_panels(d["panels"]))
        ids = [p["id"] for p in panels]
        self.assertEqual(len(ids), len(set(ids)))
        cells = set()
        for p in panels:
            g = p["gridPos"]
            self.assertLessEqual(g["x"] + g["w"], 24, p["title"])
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    self.assertNotIn((x, y), cells, p["title"])
                    cells.add((x, y))
            if p["type"] == "row":
                continue
            self.assertTrue(p["description"], p["title"])
            self.assertEqual(p["datasource"]["uid"], "${datasource}")
            self.assertTrue(p["targets"], p["title"])
            refs = [t["refId"] for t in p["targets"]]
            self.assertEqual(len(refs), len(set(refs)), p["title"])
            for t in p["targets"]:
                self.assertRegex(t["expr"], r"aside_[a-z_]+")
                self.assertEqual(t["datasource"]["uid"], "${datasource}")
        titles = " ".join(p["title"] for p in panels).lower()
        for topic in ("pick errors", "without a ready backend", "panic",
                      "probe results", "probe latency", "watch subscribers",
                      "fan-out", "load reports", "admin writes", "store"):
            self.assertIn(topic, titles)


class ChartValidationTest(unittest.TestCase):
    """Values that would deploy something broken are refused at render."""

    def assertRefused(self, values, message):
        result = run_render(values, check=False)
        self.assertNotEqual(result.returncode, 0, result.stdout)
        self.assertIn(message, result.stderr)

    def test_persistence_needs_one_replica(self):
        self.assertRefused({"persistence": {"enabled": True},
                            "replicaCount": 2}, "replicaCount: 1")

    def test_persistence_and_etcd_exclude_each_other(self):
        self.assertRefused({"persistence": {"enabled": True}, "replicaCount": 1,
                            "store": {"etcd": {"endpoints": ["e:2379"]}}},
                           "persistence.enabled cannot be combined with "
                           "store.etcd.endpoints")
        # The error for many replicas points at etcd.
        self.assertRefused({"persistence": {"enabled": True},
                            "replicaCount": 3}, "store.etcd.endpoints")

    def test_etcd_values(self):
        self.assertRefused({"store": {"etcd": {"endpoints": "e:2379"}}},
                           "store.etcd.endpoints: expected a list")
        self.assertRefused({"store": {"etcd": {"endpoints": ["etcd.db.svc"]}}},
                           'store.etcd.endpoints[0]: "etcd.db.svc" is not '
                           "host:port")
        self.assertRefused({"store": {"etcd": {"endpoints": ["e:2379",
                                                             "e:99999"]}}},
                           "store.etcd.endpoints[1]: port 99999")
        self.assertRefused({"store": {"etcd": {"endpoints": ["e:2379"],
                                               "prefix": "/aside"}}},
                           "must end with '/'")
        self.assertRefused({"store": {"etcd": {
            "endpoints": ["e:2379"],
            "tls": {"existingSecret": "s", "caKey": "", "certKey": ""}}}},
            "store.etcd.tls.caKey or store.etcd.tls.certKey")
        self.assertRefused({"config": {"store": {"type": "etcd"}}},
                           "config.store is set by the chart")

    def test_egress_needs_backend_rules(self):
        self.assertRefused({"networkPolicy": {"enabled": True,
                                              "egress": {"enabled": True}}},
                           "networkPolicy.egress.backends")

    def test_load_reports_values(self):
        self.assertRefused({"loadReports": {"auth": "anyone"}},
                           'loadReports.auth: "anyone" is not token or open')
        self.assertRefused({"loadReports": {"maxReporterShare": 0}},
                           "loadReports.maxReporterShare: 0 out of range")
        self.assertRefused({"config": {"load_reports": {"auth": "open"}}},
                           "config.load_reports is set by the chart")

    def test_persistence_refuses_autoscaling(self):
        self.assertRefused({"persistence": {"enabled": True}, "replicaCount": 1,
                            "autoscaling": {"enabled": True}},
                           "autoscaling.enabled")

    def test_tls_needs_the_health_port(self):
        self.assertRefused({"tls": {"enabled": True, "existingSecret": "s"},
                            "ports": {"health": 0}}, "cannot do TLS")

    def test_tls_needs_a_secret(self):
        self.assertRefused({"tls": {"enabled": True}}, "tls.existingSecret")

    def test_chart_owned_keys(self):
        self.assertRefused({"config": {"listen": "0.0.0.0:1"}},
                           "config.listen is set by the chart")
        self.assertRefused({"config": {"groups": []}},
                           "config.groups is set by the chart")
        self.assertRefused({"config": {"session_key_file": "/k"}},
                           "config.session_key_file is set by the chart")

    def test_short_termination_grace(self):
        self.assertRefused({"terminationGracePeriodSeconds": 12},
                           "must exceed config.shutdown_grace")
        self.assertRefused({"config": {"shutdown_grace": "ten seconds"}},
                           "invalid duration")

    def test_identities_need_mtls(self):
        self.assertRefused({"admin": {"allowedIdentities": [
            {"identity": "x", "role": "admin"}]}}, "tls.clientCA.enabled")

    def test_service_monitor_needs_metrics(self):
        self.assertRefused({"serviceMonitor": {"enabled": True},
                            "ports": {"metrics": 0}}, "ports.metrics is 0")


class ChartValuesTest(unittest.TestCase):
    """Values reach aside.yaml as Helm passes them."""

    def test_null_removes_a_config_key(self):
        # Helm deletes a key the user sets to null: the way to leave a
        # server setting at its built-in default.
        objects, _ = render({"config": {"discovery": None,
                                        "limits": {"max_groups": None}}})
        config, _ = server_config(objects)
        self.assertNotIn("discovery", config)
        self.assertNotIn("max_groups", config["limits"])
        self.assertEqual(config["limits"]["max_concurrent_streams"], 100)

    def test_user_values_override_and_merge(self):
        objects, _ = render({"config": {"limits": {"max_groups": 7}},
                             "listenHost": "[::]",
                             "ports": {"grpc": 6000}})
        config, _ = server_config(objects)
        self.assertEqual(config["limits"]["max_groups"], 7)
        self.assertEqual(config["limits"]["max_receive_message_bytes"],
                         4194304)
        self.assertEqual(config["listen"], "[::]:6000")
        self.assertEqual(config["health_listen"], "[::]:50052")

    def test_kube_version_constraint(self):
        result = run_render({}, extra=["--kube-version", "v1.23.0"],
                            check=False)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("kubeVersion", result.stderr)
        run_render({}, extra=["--kube-version", "v1.24.3"])


class ChartChecksumTest(unittest.TestCase):
    """Without reload, the checksum annotation rolls the pods exactly when
    aside.yaml changes; with reload (the default), only when a setting the
    server cannot reload changes."""

    def test_checksum_follows_config(self):
        base = checksum(render(NO_RELOAD)[0])
        self.assertRegex(base, r"^[0-9a-f]{64}$")
        self.assertEqual(base, checksum(render(NO_RELOAD)[0]))
        for change in ({"config": {"log_level": "debug"}},
                       {"config": {"limits": {"max_groups": 50}}},
                       {"groups": VARIANTS["groups"]["groups"]},
                       {"ports": {"metrics": 9465}}):
            with self.subTest(change=change):
                self.assertNotEqual(
                    base, checksum(render(dict(change, **NO_RELOAD))[0]))
        # Changes outside aside.yaml do not roll the pods for nothing.
        for change in ({"podAnnotations": {"a": "b"}},
                       {"resources": {"requests": {"cpu": "1"}}}):
            with self.subTest(change=change):
                self.assertEqual(
                    base, checksum(render(dict(change, **NO_RELOAD))[0]))

    def test_reload_rolls_pods_only_for_restart_settings(self):
        objects = render({})[0]
        self.assertNotIn("checksum/config", annotations(objects))
        base = restart_checksum(objects)
        self.assertRegex(base, r"^[0-9a-f]{64}$")
        # What the server reloads in place leaves the pods alone...
        for change in ({"config": {"log_level": "debug"}},
                       {"config": {"log_format": "text"}},
                       {"config": {"config_reload": {"interval": "5s"}}},
                       {"groups": VARIANTS["groups"]["groups"]},
                       {"podAnnotations": {"a": "b"}}):
            with self.subTest(change=change):
                self.assertEqual(base, restart_checksum(render(change)[0]))
        # ...what needs a restart rolls them.
        for change in ({"config": {"limits": {"max_groups": 50}}},
                       {"config": {"health": {"max_concurrent_probes": 5}}},
                       {"ports": {"metrics": 9465}},
                       VARIANTS["tls"]):
            with self.subTest(change=change):
                self.assertNotEqual(base, restart_checksum(render(change)[0]))

    def test_checksum_is_of_the_configmap(self):
        import hashlib
        objects, text = render({"config": {"log_level": "warn"},
                                **NO_RELOAD})
        source = "# Source: aside/templates/configmap.yaml\n"
        start = text.index(source) + len(source)
        end = text.find("\n---", start)
        body = text[start:end if end >= 0 else len(text)]
        # Helm hashes the template's output including its final newline.
        self.assertIn(checksum(objects),
                      {hashlib.sha256(body.encode()).hexdigest(),
                       hashlib.sha256((body + "\n").encode()).hexdigest()})


def write_secret(path, text):
    """Writes a secret file as a Secret volume with the chart's defaultMode
    (0440) would give it to the pod: readable by no other user, which the
    server requires of its secrets."""
    mode = "wb" if isinstance(text, bytes) else "w"
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
              mode) as f:
        f.write(text)


def make_tls(root, tls):
    """Writes a self-signed certificate and key (and the same certificate as
    the client CA) where the config's tls section names them, under root."""
    for key in ("cert_file", "key_file", "client_ca_file"):
        if key in tls:
            os.makedirs(os.path.dirname(root + tls[key]), exist_ok=True)
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
         "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
         "-subj", "/CN=aside.lb.svc",
         "-keyout", root + tls["key_file"],
         "-out", root + tls["cert_file"]],
        check=True, capture_output=True, timeout=60)
    os.chmod(root + tls["key_file"], 0o600)
    if "client_ca_file" in tls:
        shutil.copy(root + tls["cert_file"], root + tls["client_ca_file"])


def make_etcd_files(root, etcd):
    """Writes what the config's store.etcd section names, under root: a
    self-signed client certificate and key (also the CA bundle) and a
    credentials file."""
    for key in ("ca_file", "cert_file", "key_file", "credentials_file"):
        if key in etcd:
            os.makedirs(os.path.dirname(root + etcd[key]), exist_ok=True)
    cert = etcd.get("cert_file", "/etcd-client.crt")
    key = etcd.get("key_file", "/etcd-client.key")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
         "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
         "-subj", "/CN=aside-etcd-client", "-keyout", root + key,
         "-out", root + cert],
        check=True, capture_output=True, timeout=60)
    os.chmod(root + key, 0o600)
    if "ca_file" in etcd:
        shutil.copy(root + cert, root + etcd["ca_file"])
    if "credentials_file" in etcd:
        write_secret(root + etcd["credentials_file"],
                     "aside:chart-test-password\n")


def health_check(address, timeout=10):
    """What the kubelet's gRPC probe does: a plaintext
    grpc.health.v1.Health/Check for the server (""). Returns the raw
    response; HealthCheckResponse{status: SERVING} is 08 01."""
    import grpc
    with grpc.insecure_channel(address) as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                    request_serializer=lambda b: b,
                                    response_deserializer=lambda b: b)
        return check(b"", timeout=timeout)


def wait_for_line(process, needles, timeout):
    """Reads the process's stderr until a line contains one of `needles`;
    returns the lines read. Fails after `timeout` seconds or at EOF."""
    import selectors
    import time
    deadline = time.monotonic() + timeout
    lines, partial = [], b""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stderr, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                raise AssertionError("no %s within %ss:\n%s"
                                     % (needles, timeout, b"".join(lines)))
            chunk = os.read(process.stderr.fileno(), 65536)
            if not chunk:
                raise AssertionError("stderr closed:\n%s" % b"".join(lines))
            partial += chunk
            *complete, partial = partial.split(b"\n")
            for line in complete:
                lines.append(line + b"\n")
                if any(n.encode() in line for n in needles):
                    return lines


class ChartServerConfigTest(unittest.TestCase):
    """The ConfigMap's aside.yaml is a config aside-server accepts."""

    def check_config(self, values, variant):
        objects, _ = render(values)
        config, cm = server_config(objects)
        with tempfile.TemporaryDirectory() as tmp:
            # The files the pod gets from its volumes, under a temporary root.
            text = cm["data"]["aside.yaml"]
            root = os.path.join(tmp, "root")
            for prefix in ("/etc/aside", "/var/lib/aside"):
                text = text.replace(prefix, root + prefix)
            os.makedirs(root + "/var/lib/aside")
            if "tls" in config:
                make_tls(root, config["tls"])
            if "store" in config:
                make_etcd_files(root, config["store"]["etcd"])
            if "session_key_file" in config:
                path = root + config["session_key_file"]
                os.makedirs(os.path.dirname(path), exist_ok=True)
                write_secret(path, os.urandom(32))
            if "token_file" in config.get("admin", {}):
                path = root + config["admin"]["token_file"]
                os.makedirs(os.path.dirname(path), exist_ok=True)
                write_secret(path, "# test tokens\nsecret-admin-token admin\n"
                             "secret-read-token read\n")
            path = os.path.join(tmp, "aside.yaml")
            with open(path, "w") as f:
                f.write(text)
            result = self.run_check(path)
        self.assertEqual(result.returncode, 0,
                         "variant %s: %s%s\n%s" % (variant, result.stdout,
                                                   result.stderr, text))
        groups = len(values.get("groups", []))
        self.assertIn("ok (%d groups)" % groups, result.stdout)

    @staticmethod
    def run_check(path):
        return subprocess.run([ARGS.server, "--check-config", path],
                              capture_output=True, text=True, timeout=60)

    def test_every_variant_passes_check_config(self):
        for name, values in VARIANTS.items():
            with self.subTest(variant=name):
                self.check_config(values, name)

    def test_check_config_loads_the_etcd_files(self):
        # The Secrets' keys must match what the chart tells the server to
        # read: a missing file is named before the pods start.
        objects, _ = render(VARIANTS["etcd"])
        _, cm = server_config(objects)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "aside.yaml")
            with open(path, "w") as f:
                f.write(cm["data"]["aside.yaml"].replace(
                    "/etc/aside/admin/tokens", os.path.join(tmp, "tokens")))
            write_secret(os.path.join(tmp, "tokens"),
                         "secret-admin-token admin\n")
            result = self.run_check(path)
        self.assertEqual(result.returncode, 1, result.stdout)
        for name in ("/etc/aside/etcd-tls/ca.crt: cannot open etcd CA bundle",
                     "/etc/aside/etcd-tls/tls.crt: cannot open etcd client",
                     "/etc/aside/etcd-credentials/credentials: cannot open"):
            self.assertIn(name, result.stderr)

    def test_check_config_rejects_a_broken_group(self):
        # The test would pass vacuously if --check-config accepted anything.
        values = {"groups": [{"name": "bad", "backends": [
            {"address": "10.0.0.1:8080", "weight": 20000}]}]}
        objects, _ = render(values)
        _, cm = server_config(objects)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "aside.yaml")
            with open(path, "w") as f:
                f.write(cm["data"]["aside.yaml"])
            result = subprocess.run([ARGS.server, "--check-config", path],
                                    capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 1)
        self.assertIn("weight", result.stderr)


def free_ports(count):
    """`count` distinct loopback ports free now, for a child that cannot
    bind port 0 and say which it got (etcd's peer URL is in its own
    arguments). Aside servers bind port 0 instead (bound_ports)."""
    import contextlib
    import socket
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(
                socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
        return ports


# The listeners an Aside server logs once bound, by their config key.
LISTENING_EVENTS = {"grpc.listening": "listen",
                    "health.listening": "health_listen",
                    "metrics.listening": "metrics"}


def bound_ports(lines):
    """The ports an Aside server started on 127.0.0.1:0 bound, by config key
    ("listen", "health_listen", "metrics"), from its log lines (JSON or
    key=value)."""
    ports = {}
    for raw in lines:
        line = raw.decode(errors="replace").strip()
        if line.startswith("{"):
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            event, port = entry.get("event"), entry.get("port")
        else:
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            event, port = fields.get("event"), fields.get("port")
        if event in LISTENING_EVENTS and port is not None:
            ports[LISTENING_EVENTS[event]] = int(port)
    return ports


class ChartServeTest(unittest.TestCase):
    """The server runs on the rendered aside.yaml and answers what the
    kubelet probes, on the port the probes use; SIGTERM ends it well within
    terminationGracePeriodSeconds."""

    def serve(self, variant):
        import grpc
        import time
        import urllib.request
        objects, _ = render(VARIANTS[variant])
        config, cm = server_config(objects)
        c, pod = container(objects)
        probe_port = c["readinessProbe"]["grpc"]["port"]
        with tempfile.TemporaryDirectory() as tmp:
            # The pod's files under a temporary root, and the pod's ports
            # moved to free loopback ports.
            root = os.path.join(tmp, "root")
            text = cm["data"]["aside.yaml"]
            for prefix in ("/etc/aside", "/var/lib/aside"):
                text = text.replace(prefix, root + prefix)
            os.makedirs(root + "/var/lib/aside")
            served = yaml.safe_load(text)
            if "tls" in served:
                make_tls(root, config["tls"])
            if "token_file" in served.get("admin", {}):
                os.makedirs(os.path.dirname(served["admin"]["token_file"]))
                write_secret(served["admin"]["token_file"],
                             "t0ken-for-the-chart-test admin\n")
            # Each listener on port 0; the pod's port -> the one bound.
            pod_ports = {}
            for key in ("listen", "health_listen", "metrics"):
                if served.get(key):
                    pod_ports[key] = port_of(served[key])
                    served[key] = "127.0.0.1:0"
            path = os.path.join(tmp, "aside.yaml")
            with open(path, "w") as f:
                yaml.safe_dump(served, f)
            server = subprocess.Popen([ARGS.server, "--config", path],
                                      stderr=subprocess.PIPE)
            try:
                bound = bound_ports(wait_for_line(
                    server, ["event=server.started",
                             '"event":"server.started"'], 30))
                self.assertEqual(set(bound), set(pod_ports))
                moved = {pod_ports[key]: bound[key] for key in pod_ports}
                for key in pod_ports:
                    served[key] = "127.0.0.1:%d" % bound[key]
                self.assertEqual(
                    health_check("127.0.0.1:%d" % moved[probe_port]),
                    b"\x08\x01")
                if "tls" in served:
                    # The gRPC port itself speaks only TLS.
                    with self.assertRaises(grpc.RpcError):
                        health_check(served["listen"], timeout=5)
                if served.get("metrics"):
                    url = "http://%s/metrics" % served["metrics"]
                    with urllib.request.urlopen(url, timeout=10) as r:
                        self.assertIn(b"aside_build_info", r.read())
                server.terminate()
                started = time.monotonic()
                self.assertEqual(server.wait(timeout=60), 0)
                self.assertLess(time.monotonic() - started,
                                pod["terminationGracePeriodSeconds"])
            finally:
                if server.poll() is None:
                    server.kill()
                    server.wait(timeout=10)
                server.stderr.close()
        return served

    def test_default_values(self):
        self.serve("default")

    def test_tls_keeps_plaintext_probes(self):
        served = self.serve("tls")
        self.assertIn("tls", served)

    def test_probes_on_the_grpc_port_without_health_port(self):
        self.serve("no-health-port")


class ChartFleetTest(unittest.TestCase):
    """The etcd shape serves one state: three servers on the rendered
    aside.yaml (the pods of replicaCount: 3), pointed at a real (one-member)
    etcd on loopback, all serve a group created through one of them, with
    the same generation."""

    def start_etcd(self, tmp):
        client, peer = free_ports(2)
        etcd = subprocess.Popen(
            ["/usr/bin/etcd", "--name", "chart", "--data-dir",
             os.path.join(tmp, "etcd"),
             "--listen-client-urls", "http://127.0.0.1:%d" % client,
             "--advertise-client-urls", "http://127.0.0.1:%d" % client,
             "--listen-peer-urls", "http://127.0.0.1:%d" % peer,
             "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer,
             "--initial-cluster", "chart=http://127.0.0.1:%d" % peer,
             "--logger", "zap", "--log-outputs", "stderr"],
            stderr=subprocess.PIPE)
        self.addCleanup(self.stop, etcd)
        wait_for_line(etcd, ["ready to serve client requests",
                             "serving client traffic insecurely"], 30)
        return "127.0.0.1:%d" % client

    @staticmethod
    def stop(process):
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        process.stderr.close()

    def asidectl(self, target, token, *args):
        return subprocess.run(
            [ARGS.asidectl, "--server", target, "--token", token,
             "--timeout", "10s", *args],
            capture_output=True, text=True, timeout=60)

    def test_replicas_share_admin_groups(self):
        import time
        values = copy.deepcopy(VARIANTS["etcd-plain"])
        values["admin"] = {"existingSecret": "aside-admin"}
        with tempfile.TemporaryDirectory() as tmp:
            values["store"]["etcd"]["endpoints"] = [self.start_etcd(tmp)]
            objects, _ = render(values)
            _, cm = server_config(objects)
            token = "t0ken-for-the-chart-fleet-test"
            targets = []
            for replica in ("a", "b", "c"):
                # Each pod's files under its own root, its ports moved.
                root = os.path.join(tmp, replica)
                text = cm["data"]["aside.yaml"]
                for prefix in ("/etc/aside", "/var/lib/aside"):
                    text = text.replace(prefix, root + prefix)
                served = yaml.safe_load(text)
                os.makedirs(served["state_dir"])
                os.makedirs(os.path.dirname(served["admin"]["token_file"]))
                write_secret(served["admin"]["token_file"],
                             "%s admin\n" % token)
                for key in ("listen", "health_listen", "metrics"):
                    served[key] = "127.0.0.1:0"
                path = os.path.join(root, "aside.yaml")
                with open(path, "w") as f:
                    yaml.safe_dump(served, f)
                server = subprocess.Popen([ARGS.server, "--config", path],
                                          stderr=subprocess.PIPE)
                self.addCleanup(self.stop, server)
                bound = bound_ports(wait_for_line(
                    server, ['"event":"server.started"'], 30))
                targets.append("127.0.0.1:%d" % bound["listen"])
            created = self.asidectl(
                targets[0], token, "create-group", "payments", "--backend",
                "10.0.0.1:8080", "--health-check", "none")
            self.assertEqual(created.returncode, 0, created.stderr)
            # The other replicas apply it from etcd's watch (bounded poll).
            for target in targets[1:]:
                deadline = time.monotonic() + 20
                while True:
                    listed = self.asidectl(target, token, "groups")
                    if "payments" in listed.stdout or \
                            time.monotonic() > deadline:
                        break
                    time.sleep(0.1)
                self.assertEqual(listed.returncode, 0, listed.stderr)
                self.assertIn("payments", listed.stdout)
            # Both publish the same generation for it.
            generations = []
            for target in targets:
                shown = self.asidectl(target, token, "--json", "groups")
                self.assertEqual(shown.returncode, 0, shown.stderr)
                generations.append(re.findall(
                    r'"name":\s*"payments".*?"generation":\s*"?(\d+)',
                    shown.stdout, re.S))
            self.assertTrue(generations[0])
            self.assertEqual(generations, [generations[0]] * 3)


class ChartNotesTest(unittest.TestCase):
    """NOTES.txt gives working grpcurl commands for the release."""

    def notes(self, values):
        return run_render(values, extra=["--notes"]).stdout

    def test_plaintext_notes(self):
        text = self.notes(VARIANTS["groups"])
        self.assertIn("port-forward svc/aside 50051:50051", text)
        self.assertIn("grpcurl -plaintext localhost:50051 list", text)
        self.assertIn("""grpcurl -plaintext -d '{"group":"payments"}' """
                      "localhost:50051 aside.v1.LoadBalancer/Pick", text)
        self.assertIn("grpc.health.v1.Health/Check", text)
        self.assertIn('-H "authorization: Bearer $TOKEN"', text)
        self.assertIn("aside.v1.Admin/ListGroups", text)
        self.assertIn("_grpclb._tcp.aside.lb.svc.cluster.local", text)
        self.assertIn("_grpclb._tcp.payments.lb.svc.cluster.local", text)

    def test_tls_notes(self):
        text = self.notes(VARIANTS["tls"])
        self.assertNotIn("-plaintext", text)
        self.assertIn("-cacert ca.crt -servername aside.lb.svc "
                      "-cert client.crt -key client.key", text)
        self.assertIn("get secret aside-admin", text)

    def test_persistence_notes(self):
        self.assertIn("sqlite3", self.notes(VARIANTS["persistence"]))
        self.assertIn("lost when the pod goes away", self.notes({}))

    def test_etcd_notes(self):
        text = self.notes(VARIANTS["etcd"])
        self.assertIn("with its state in etcd", text)
        self.assertIn("etcdctl --endpoints etcd-0.etcd.db.svc:2379 "
                      "--cacert ca.crt --cert tls.crt --key tls.key "
                      "snapshot save", text)
        self.assertIn("etcdctl --endpoints etcd.db.svc:2379 snapshot save",
                      self.notes(VARIANTS["etcd-plain"]))
        self.assertNotIn("lost when the pod goes away", text)
        self.assertIn("Load reports are open", text)

    def test_load_report_notes(self):
        self.assertIn("Load reports are refused", self.notes({}))
        self.assertNotIn("Load reports",
                         self.notes({"admin": {"existingSecret": "a"}}))


class DockerfileTest(unittest.TestCase):
    """The image's runtime stage installs every library the server links."""

    @classmethod
    def setUpClass(cls):
        with open(os.path.join(ARGS.source, "Dockerfile")) as f:
            cls.text = f.read()
        stages = re.split(r"(?m)^FROM ", cls.text)
        cls.runtime = "FROM " + stages[-1]

    def runtime_packages(self):
        # The runtime stage lists its packages between two marker comments.
        match = re.search(r"# runtime-packages-begin\n(.*?)# runtime-packages-end",
                          self.runtime, re.S)
        self.assertIsNotNone(match, "runtime package markers not found")
        packages = set()
        for line in match.group(1).splitlines():
            line = line.split("#", 1)[0].replace("\\", " ")
            packages.update(w for w in line.split() if w)
        return packages

    @staticmethod
    def owning_packages(paths):
        """Maps each library path to its Debian package (None if unowned),
        trying the usr-merged spellings of the path too; one dpkg call."""
        candidates = {}
        for path in paths:
            spellings = [path, os.path.realpath(path)]
            for p in list(spellings):
                spellings.append(p[len("/usr"):] if p.startswith("/usr/")
                                 else "/usr" + p)
            candidates[path] = spellings
        every = sorted({p for s in candidates.values() for p in s})
        result = subprocess.run(["dpkg", "-S", *every], capture_output=True,
                                text=True, timeout=120)
        owner = {}
        for line in result.stdout.splitlines():
            packages, _, owned = line.partition(": ")
            owner[owned.strip()] = packages.split(",")[0].split(":")[0].strip()
        return {path: next((owner[p] for p in spellings if p in owner), None)
                for path, spellings in candidates.items()}

    def test_runtime_packages_cover_ldd(self):
        result = subprocess.run(["ldd", ARGS.server], capture_output=True,
                                text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("not found", result.stdout)
        listed = self.runtime_packages()
        libraries = []
        for line in result.stdout.splitlines():
            match = re.search(r"=>\s+(/\S+)", line) or \
                re.match(r"\s*(/\S+)", line)
            if match:  # linux-vdso has no file
                libraries.append(match.group(1))
        # Sanitizer builds link the sanitizer runtimes, which the image (a
        # plain build) does not ship.
        libraries = [l for l in libraries
                     if not re.search(r"/lib(asan|ubsan|tsan|lsan)\.so",
                                      l)]
        needed = {}
        for library, package in self.owning_packages(libraries).items():
            self.assertIsNotNone(package, "no package owns %s" % library)
            needed.setdefault(package, []).append(os.path.basename(library))
        self.assertGreater(len(needed), 5)
        missing = {p: libs for p, libs in needed.items() if p not in listed}
        self.assertEqual(missing, {},
                         "runtime stage lacks packages for these libraries")
        self.assertFalse([p for p in listed if p.endswith("-dev")])

    def test_image_shape(self):
        self.assertRegex(self.text, r"(?m)^FROM debian:12\S* AS build")
        self.assertRegex(self.runtime, r"^FROM debian:12")
        self.assertIn("scripts/install-deps.sh", self.text)
        self.assertIn("make build", self.text)
        user = re.findall(r"(?m)^USER\s+(\S+)", self.runtime)
        self.assertTrue(user)
        self.assertNotIn(user[-1].split(":")[0], ("root", "0"))
        exposed = set()
        for line in re.findall(r"(?m)^EXPOSE\s+(.*)$", self.runtime):
            exposed.update(line.split())
        self.assertEqual(exposed, {"50051", "50052", "9464"})
        cmd = re.search(r"(?m)^CMD\s+(\[.*\])", self.runtime)
        self.assertIsNotNone(cmd)
        self.assertIn('"/etc/aside/aside.yaml"', cmd.group(1))
        self.assertIn('"/var/lib/aside"', cmd.group(1))
        # The chart's pod user owns the state directory in the image too.
        values = yaml.safe_load(open(os.path.join(chart_dir(), "values.yaml")))
        self.assertIn(str(values["podSecurityContext"]["runAsUser"]),
                      user[-1])

    def test_dockerignore_keeps_build_trees_out(self):
        with open(os.path.join(ARGS.source, ".dockerignore")) as f:
            ignored = f.read().split()
        for entry in ("build*", ".git", "var"):
            self.assertIn(entry, ignored)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--helmrender", required=True)
    parser.add_argument("--server", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--asidectl", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
