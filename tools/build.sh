#!/usr/bin/env bash
# Build Trainyard's local platform tools from pinned Go wrapper modules.
#
#   tools/build.sh [-j N] [all|cluster|node|TOOL]...   TOOL: one of ALL_TOOLS or OPTIONAL_TOOLS below (--list prints them);
#                  cluster: CLUSTER_TOOLS, what the rehearsal cluster and the cluster tier run;
#                  node: NODE_TOOLS, what a real node (the node tier) runs
#                  -j N (or TRAINYARD_BUILD_JOBS=N): build N tools at once, longest first; each
#                  tool's output goes to TOOLS_DIR/logs/TOOL.log, shown whole if it fails
#   tools/build.sh --check [all|cluster|node|TOOL]...   exit 0 iff those binaries (default: all) are present and current
#   tools/build.sh --list      print the tools and binaries
#   tools/build.sh --graph     print the controllers' build graph (GRAPH_TOOLS): TOOL BINARY PACKAGE MODULE@PIN
#
# Binaries go to ${TRAINYARD_TOOLS_DIR:-$HOME/.cache/trainyard/tools}/bin, outside
# the repository. Each tool has a stamp (hash of its go.mod, go.sum, main
# sources, build flags and Go version); a tool whose stamp matches and whose
# binaries exist is skipped. Most of the rehearsal's controllers (GRAPH_TOOLS: jobset,
# trainer, kwok, cnpg, barman-cloud) are built in one Go build graph, tools/controllers
# (each upstream module at its pin here, the libraries they share compiled once), kueue
# and the others inside their upstream modules, and the manifests the rehearsal needs
# from their modules are copied to TOOLS_DIR/share/<tool>. Go's module and build caches stay in their default
# places, so a rebuild after a small change is fast. See docs/tools.md.
set -euo pipefail

TOOLS_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TOOLS_DIR="${TRAINYARD_TOOLS_DIR:-$HOME/.cache/trainyard/tools}"
BIN_DIR="$TOOLS_DIR/bin"
STAMP_DIR="$TOOLS_DIR/stamps"
SHARE_DIR="$TOOLS_DIR/share"
WORK_DIR="$TOOLS_DIR/work"
GO="${GO:-}"
if [[ -z "$GO" ]]; then
  if command -v go >/dev/null 2>&1; then GO="$(command -v go)"
  elif [[ -x /usr/local/go/bin/go ]]; then GO=/usr/local/go/bin/go
  else echo "build.sh: no go toolchain found (set GO=/path/to/go)" >&2; exit 2
  fi
fi
# Never switch toolchains behind our back; the build uses the committed go.sum.
export GOTOOLCHAIN=local
export CGO_ENABLED="${CGO_ENABLED:-0}"
# The compiler and linker collect garbage four times less often than Go's default (GOGC=100): ~20% less CPU for the
# same binaries (etcd, empty build cache: 91 s of CPU at 100, 87 s at 200, 73 s at 400; the three binaries identical:
# docs/tools.md "Measured build times"). GOMEMLIMIT bounds what that costs in memory: a compile whose heap nears it
# collects as often as it must. Either one set in the environment wins.
export GOGC="${GOGC:-400}" GOMEMLIMIT="${GOMEMLIMIT:-3GiB}"

ALL_TOOLS=(etcd kube-apiserver pulumi pulumi-kubernetes helm crane promtool kueue jobset trainer kwok seaweedfs kind barman-cloud-crd minio)
# Cold build cost, most first (CPU-seconds on a 2-core machine, docs/tools.md "Cold and warm"): the
# order -j N starts them in. pulumi-kubernetes compiles one huge package on one core for ~15 min, so
# with -j 2 the rest build beside it. The graph's tools (GRAPH_TOOLS) are one job, started at the place of the first
# of them asked for, which compiles most of what the others share: trainer in the cluster group; cnpg, late in .ci/run's
# late group, which then mostly finds them compiled by the cluster group (two builds compiling the same packages at
# once would both do the work).
BY_COST=(pulumi-kubernetes kube-apiserver seaweedfs kserve kubelet pulumi kueue trainer prometheus-operator promtool prometheus kube-router coredns kube-rbac-proxy helm etcd cnpg kwok barman-cloud jobset kind crane)
# What `trainyard cluster up`, `make up` and the cluster tier need (the control plane, the engine and its
# provider, the controllers, kwok; crane for the destroy test's registry). CI builds these first, beside
# `make test`, and the rest (seaweedfs, promtool, kind) beside the cluster tier (.ci/run).
CLUSTER_TOOLS=(etcd kube-apiserver pulumi pulumi-kubernetes kueue jobset trainer kwok crane)
# What a real rehearsal node needs besides the control plane (docs/rehearsal.md "Real nodes"): the kubelet
# and kube-proxy, kube-router (its network policy controller only: NetworkPolicy enforcement), CoreDNS (the
# cluster DNS its pods query), crane for the loopback registry its images are pulled from, and CloudNativePG's
# operator (the node tier runs the MLflow database: tests/node/test_postgres_on_real_node.py), KServe's controller
# and the kube-rbac-proxy sidecar its chart runs beside it (tests/node/test_kserve_on_real_node.py), and the
# rehearsal's monitoring: prometheus-operator (the operator and its config reloader) and the Prometheus server it runs
# (tests/node/test_monitoring_on_real_node.py; a site brings its own), and the barman-cloud CNPG-I plugin the site
# installs for the MLflow database's backups (tests/node/test_postgres_on_real_node.py). containerd, runc,
# the CNI plugins, iptables and ipset come from Debian (the node's prerequisites check names them).
NODE_TOOLS=(etcd kube-apiserver kubelet kube-router coredns crane cnpg kserve kube-rbac-proxy prometheus-operator prometheus barman-cloud)
# Tools outside `all` (so `make tools` and CI's `tools/build.sh all` do not build them yet; docs/tools.md has
# their cold and warm figures): built by name or by their group (.ci/run names them beside `all`).
OPTIONAL_TOOLS=(kubelet kube-router coredns cnpg kserve kube-rbac-proxy prometheus-operator prometheus barman-cloud)
# The controllers built in one Go build graph, the wrapper module tools/controllers (its gen-gomod.sh writes it from
# the pins below): each upstream module at its pin, and the libraries they share (Kubernetes' client libraries,
# controller-runtime, gRPC, OpenTelemetry, ...) at the one version Go's minimal version selection picks for them
# together, so Go's build cache compiles them once instead of once per controller (docs/tools.md "The controllers'
# build graph"). Only controllers that require no other one's module at another version than its pin: kueue v0.19.2
# requires Trainer v2.2.1 and compiles Trainer's API and runtime code into its TrainJob integration (in the graph it
# got v2.3.0's, and admitted a TrainJob differently: tests/cluster/test_job_shapes.py), cnpg requires
# prometheus-operator's monitoring API v0.92.0; so kueue and prometheus-operator build in their own modules
# (gen-gomod.sh refuses a graph that breaks this). The control plane (kube-apiserver, kubelet) is not in it either: it
# is built at exactly its release's versions, whose CEL and schema code every rehearsal proof runs through.
GRAPH_TOOLS=(jobset trainer kwok cnpg barman-cloud)
GRAPH_DIR="$TOOLS_SRC/controllers"

# ---------------------------------------------------------------- versions
# Keep these in sync with the wrapper go.mod files (docs/tools.md explains how).
K8S_VERSION=v1.36.3
PULUMI_VERSION=v3.274.1
PULUMI_K8S_VERSION=4.25.0   # release the provider/v4 pseudo-version went into (docs/tools.md)
HELM_VERSION=v3.22.0
CRANE_VERSION=v0.22.1       # github.com/google/go-containerregistry (tools/crane/go.mod)
KUBE_ROUTER_VERSION=v2.10.0 # github.com/cloudnativelabs/kube-router/v2 (tools/kube-router/go.mod)
COREDNS_VERSION=v1.15.0     # github.com/coredns/coredns (tools/coredns/go.mod); keep equal to trainyard.rehearsal.dns
# SeaweedFS is built inside its own module (from the module zip): its go.mod has a replace
# directive that a wrapper module would not inherit. The proxy lists exactly this pseudo-version
# (weed/util/version/constants.go of that commit says 4.53).
SEAWEEDFS_MODULE=github.com/seaweedfs/seaweedfs
SEAWEEDFS_VERSION=v0.0.0-20261109003541-7506e5f91cd6
SEAWEEDFS_MODSUM="h1:LOYZFToHq9F7pSR6lkPGfkM8RmHlVFrzndKdhmNZjrU="
# MinIO: only a test server for the dataplane tier (tests/minio.py; prod's object store backend), never
# shipped or linked into Trainyard (AGPL-3.0, docs/tools.md). Built inside its own module like seaweedfs:
# the proxy's "latest" is this pseudo-version (no tagged releases are served; 2026-02-12T20:18:48Z, commit 7aac2a2c5b7c).
MINIO_MODULE=github.com/minio/minio
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
MINIO_MODSUM="h1:/qdoYujxF5MBLDMVLeiYJ/7fBa1HikX39Dvzb9Ji8pA="
PROMTOOL_VERSION=3.16.0     # VERSION file of github.com/prometheus/prometheus v0.316.0
# The Prometheus server of the same module version (wrapper tools/prometheus: the same requirements as promtool's
# plus the server's own, so the two share Go's build cache). Only the rehearsal runs it (a site brings its own
# Prometheus); prometheus-operator v0.93.0 defaults to v3.13.1, for which this 3.16.0 stands in (docs/tools.md).
PROMETHEUS_VERSION=$PROMTOOL_VERSION
PROMETHEUS_MODULE_VERSION=v0.316.0
# prometheus-operator (the operator and the config reloader it runs beside every Prometheus), built inside its own
# module (module sum checked; not in the controllers' graph, GRAPH_TOOLS). Keep equal to trainyard.catalog's
# prometheus_operator release (a test checks it). The commit is the tag's (the proxy's Origin.Hash).
PROMETHEUS_OPERATOR_MODULE=github.com/prometheus-operator/prometheus-operator
PROMETHEUS_OPERATOR_VERSION=v0.93.0
PROMETHEUS_OPERATOR_MODSUM="h1:AohlYJT+En8TmNpAcEUJ3GsaJTAqfEBwHmGTVpRm/Io="
PROMETHEUS_OPERATOR_COMMIT=f8fafd475f3d132e239432ae6172de60a6cb6516
# Its go.mod replaces these two nested modules (tagged pkg/apis/monitoring/v0.93.0 and pkg/client/v0.93.0 on the same
# commit) with their directories, which a module zip leaves out: prepare_prometheus_operator puts them back from their
# own zips (sums checked here too).
PROMETHEUS_OPERATOR_APIS_MODSUM="h1:ZIouJCjC8R/XHxzGpOw+/czH9pVzg6wteYhLjJ80XGQ="
PROMETHEUS_OPERATOR_CLIENT_MODSUM="h1:PhWdtSu3FcxnFdKs5dDZcP46KMECEakbU84pYyaCfr4="
# The rehearsal's controllers: keep equal to trainyard.catalog (REHEARSAL_PROVEN; a test checks it).
KUEUE_VERSION=v0.19.2
JOBSET_VERSION=v0.12.0
TRAINER_VERSION=v2.3.0
KWOK_VERSION=v0.8.0
KIND_VERSION=v0.33.0        # keep equal to trainyard.rehearsal.kind.KIND_VERSION (a test checks it)
# Not a build: the barman-cloud CNPG-I plugin's ObjectStore CRD (not in ../shared/crds), copied out of the
# plugin's module (module sum checked as for seaweedfs, file checked against its git blob SHA) to
# share/barman-cloud-crd/; the conformance tier validates the rendered ObjectStore against it. v0.15.0 is
# the newest release, built against CloudNativePG v1.30.0 (its go.mod), the operator Trainyard pins. Keep version
# and blob equal to trainyard.catalog.BARMAN_CLOUD_PLUGIN_VERSION / BARMAN_CLOUD_CRD (a test checks it).
BARMAN_CLOUD_MODULE=github.com/cloudnative-pg/plugin-barman-cloud
BARMAN_CLOUD_VERSION=v0.15.0
BARMAN_CLOUD_MODSUM="h1:gNVytrzzYUE08wxLDrjfJqy1FPPSFkMe1OEr4s4pVI0="
BARMAN_CLOUD_CRD=config/crd/bases/barmancloud.cnpg.io_objectstores.yaml
BARMAN_CLOUD_CRD_BLOB=bb7db1e6e36cf04b137560d85d2ccdb57851aa9d
# The plugin itself (`barman-cloud`): cmd/manager of the module, one binary for the operator (`manager operator`),
# the instance sidecar (`manager instance`) and restore (`manager restore`), built (in the controllers' graph,
# GRAPH_TOOLS) as containers/Dockerfile.plugin and Dockerfile.sidecar build it: `CGO_ENABLED=0 go build -a -o manager
# cmd/manager/main.go`, no -ldflags (its version is in the source: internal/cnpgi/metadata/constants.go). v0.14.0,
# standing in for the v0.15.0 the catalog pins: the proxy refuses two modules v0.15.0 requires (github.com/cloudnative-pg/barman-cloud@v0.6.0 and machinery@v0.6.0: "403 This
# module version is not available") and serves every one of v0.14.0's; v0.14.0 is built against CloudNativePG v1.30.0
# too, and its ObjectStore schema is v0.15.0's but one description (docs/tools.md). Not used by a tier yet (#22 item 6).
BARMAN_CLOUD_BUILD_VERSION=v0.14.0
BARMAN_CLOUD_BUILD_MODSUM="h1:kpTo7egntRIM15hvo0xtOj07wyjj23jcz/Co0KfzC7s="
# CloudNativePG's operator (and instance manager: one binary, cmd/manager), built in the controllers' graph
# (GRAPH_TOOLS; module sum checked here and by the graph's go.sum). Keep equal to trainyard.catalog's cnpg release (a
# test checks it). The module zip has no git: the commit is the tag's (the proxy's Origin.Hash), as the upstream
# Makefile's COMMIT would give.
CNPG_MODULE=github.com/cloudnative-pg/cloudnative-pg
CNPG_VERSION=v1.30.0
CNPG_MODSUM="h1:fnhVq44xXx97MNiuvJsPrX1vSjYbgdyBK5MSGfdHdp0="
CNPG_COMMIT=4b5e244a7d031f67e025c83c1555e7726ecbbfa1
# KServe's controller (cmd/manager in the root module), built inside its module like cnpg (module sum checked). Keep
# equal to trainyard.catalog's kserve release (a test checks it). Upstream's root Dockerfile (v0.20.0) builds it with
# `CGO_ENABLED=0 GOOS=linux GOFLAGS=-mod=readonly go build -a -tags "" -o manager ./cmd/manager`: no -ldflags at all
# (no version variables, symbols kept), so none are set here either (tool_ldflags).
KSERVE_MODULE=github.com/kserve/kserve
KSERVE_VERSION=v0.20.0
KSERVE_MODSUM="h1:Bs7HxmGV4KFqqptDcWseKv+mwD4YOYHJWcuVgPG2Gug="
# The sidecar kserve-resources v0.20.0 runs beside the manager (values.yaml controller.rbacProxyImage
# quay.io/brancz/kube-rbac-proxy:v0.18.0; files/kserve/deployment-patch.yaml renders it unconditionally).
KUBE_RBAC_PROXY_MODULE=github.com/brancz/kube-rbac-proxy
KUBE_RBAC_PROXY_VERSION=v0.18.0
KUBE_RBAC_PROXY_MODSUM="h1:mceEQjQIkVeWkZyYMRK7i5LaA4bLm3+skiH14hmVcR0="
KUBE_RBAC_PROXY_COMMIT=e29dd733e317b71e4c8065e4f5bcb4cfc0a59bed   # the tag's commit (the proxy's Origin.Hash)

# tool_module TOOL -> module@version for tools built inside an upstream module (else nothing)
tool_module() {
  case "$1" in
    kueue) echo "sigs.k8s.io/kueue@$KUEUE_VERSION" ;;
    jobset) echo "sigs.k8s.io/jobset@$JOBSET_VERSION" ;;
    trainer) echo "github.com/kubeflow/trainer/v2@$TRAINER_VERSION" ;;
    kwok) echo "sigs.k8s.io/kwok@$KWOK_VERSION" ;;
    seaweedfs) echo "$SEAWEEDFS_MODULE@$SEAWEEDFS_VERSION" ;;
    minio) echo "$MINIO_MODULE@$MINIO_VERSION" ;;
    kind) echo "sigs.k8s.io/kind@$KIND_VERSION" ;;
    barman-cloud-crd) echo "$BARMAN_CLOUD_MODULE@$BARMAN_CLOUD_VERSION" ;;
    barman-cloud) echo "$BARMAN_CLOUD_MODULE@$BARMAN_CLOUD_BUILD_VERSION" ;;
    cnpg) echo "$CNPG_MODULE@$CNPG_VERSION" ;;
    kserve) echo "$KSERVE_MODULE@$KSERVE_VERSION" ;;
    kube-rbac-proxy) echo "$KUBE_RBAC_PROXY_MODULE@$KUBE_RBAC_PROXY_VERSION" ;;
    prometheus-operator) echo "$PROMETHEUS_OPERATOR_MODULE@$PROMETHEUS_OPERATOR_VERSION" ;;
  esac
}

in_graph() { [[ " ${GRAPH_TOOLS[*]} " == *" $1 "* ]]; }

# graph_check TOOL: the build graph (tools/controllers/go.mod) selects the tool's module at the version pinned here,
# or the build stops saying how to regenerate it (a pin changed here and not there, or a module of the graph requires
# a newer one).
graph_check() {
  local m v got; m="$(tool_module "$1")"; v="${m#*@}"; m="${m%@*}"
  got="$(cd "$GRAPH_DIR" && "$GO" list -mod=readonly -m -f '{{.Version}}' "$m")" || return 1
  [[ "$got" == "$v" ]] || {
    log "build.sh: tools/controllers/go.mod selects $m $got, this script pins $v: run tools/controllers/gen-gomod.sh"
    return 1; }
}

# tool_share TOOL -> module-relative directories the rehearsal reads (kustomize inputs)
tool_share() {
  case "$1" in
    kueue) echo "config/components/crd config/components/webhook" ;;
    jobset) echo "config/components/crd config/components/webhook" ;;
    trainer) echo "manifests/base/crds manifests/base/webhook" ;;
    kwok) echo "kustomize/stage" ;;
    barman-cloud-crd) echo "$(dirname "$BARMAN_CLOUD_CRD")" ;;
    # What the rehearsal reads to build and install the plugin of the version built: the sidecar image's pinned Python
    # requirements, upstream's install manifest, the licence.
    barman-cloud) echo "containers/sidecar-requirements.txt manifest.yaml LICENSE" ;;
    cnpg) echo "licenses LICENSE" ;;   # what the operator image COPYs besides the binary (its Dockerfile)
    # The rehearsal's install reads upstream's bundle (CRDs, RBAC, the operator's Deployment); the licence files;
    # pkg/operator/defaults.go: where the factory reads the Prometheus version the operator defaults to.
    prometheus-operator) echo "bundle.yaml LICENSE NOTICE pkg/operator/defaults.go" ;;
  esac
}

# ------------------------------------------------------ per-tool definition
# tool_bins TOOL  -> lines "binary-name go-package"
tool_bins() {
  case "$1" in
    etcd) echo "etcd go.etcd.io/etcd/server/v3" ;;
    kube-apiserver)
      echo "kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver"
      echo "kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager"
      echo "kubectl k8s.io/kubernetes/cmd/kubectl"
      echo "kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler"
      ;;
    # The node binaries of the same release, from their own wrapper (tools/kubelet/gen-gomod.sh).
    kubelet)
      echo "kubelet k8s.io/kubernetes/cmd/kubelet"
      echo "kube-proxy k8s.io/kubernetes/cmd/kube-proxy"
      ;;
    # Only its network policy controller runs (--run-firewall; trainyard.rehearsal.netpol).
    kube-router) echo "kube-router github.com/cloudnativelabs/kube-router/v2/cmd/kube-router" ;;
    # An external build (tools/coredns/main.go): coremain with kubeadm's Corefile plugins, no cloud SDKs.
    coredns) echo "coredns ." ;;
    pulumi)
      echo "pulumi github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"
      echo "pulumi-language-python ./cmd/pulumi-language-python"
      ;;
    pulumi-kubernetes) echo "pulumi-resource-kubernetes ./cmd/pulumi-resource-kubernetes" ;;
    helm) echo "helm helm.sh/helm/v3/cmd/helm" ;;
    crane) echo "crane github.com/google/go-containerregistry/cmd/crane" ;;
    seaweedfs) echo "weed ./weed" ;;
    minio) echo "minio ." ;;   # main.go at the module root (upstream Makefile: go build -tags kqueue)
    promtool) echo "promtool github.com/prometheus/prometheus/cmd/promtool" ;;
    kueue) echo "kueue ./cmd/kueue" ;;
    # The graph's tools by import path (tools/controllers/go.mod has a `tool` directive for each).
    jobset) echo "jobset-controller sigs.k8s.io/jobset" ;;   # main.go at the module root (upstream Makefile: build main.go)
    trainer) echo "trainer-controller-manager github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager" ;;
    kwok) echo "kwok sigs.k8s.io/kwok/cmd/kwok" ;;
    # kind's CLI (module root main.go) and our checker, which uses kind's internal config loader
    # and so is built as a package of the kind module (prepare_kind adds it to a copy of the module).
    kind)
      echo "kind ."
      echo "kind-config-check ./pkg/cmd/trainyard-kind-config-check"
      ;;
    # The operator and the instance manager it copies into every PostgreSQL pod: one binary (upstream's
    # .goreleaser.yml build "manager", main cmd/manager/main.go).
    cnpg) echo "cnpg-manager $CNPG_MODULE/cmd/manager" ;;
    # Upstream's root Dockerfile: ARG CMD=manager, `go build ... -o manager ./cmd/${CMD}`.
    kserve) echo "kserve-manager ./cmd/manager" ;;
    kube-rbac-proxy) echo "kube-rbac-proxy ./cmd/kube-rbac-proxy" ;;
    # Its Makefile's `operator` and `prometheus-config-reloader` targets (./cmd/operator/, ./cmd/$@/).
    prometheus-operator)
      echo "prometheus-operator ./cmd/operator"
      echo "prometheus-config-reloader ./cmd/prometheus-config-reloader"
      ;;
    prometheus) echo "prometheus github.com/prometheus/prometheus/cmd/prometheus" ;;
    barman-cloud-crd) ;;   # no binary: only the CRD, copied to share/ (post_build)
    barman-cloud) echo "barman-cloud-manager $BARMAN_CLOUD_MODULE/cmd/manager" ;;
    *) echo "build.sh: unknown tool '$1' (one of: all ${ALL_TOOLS[*]} ${OPTIONAL_TOOLS[*]})" >&2; return 2 ;;
  esac
}

# Extra files (besides binaries) a tool puts in BIN_DIR.
tool_extra_files() {
  case "$1" in
    pulumi) echo "pulumi-language-python-exec pulumi-resource-pulumi-python" ;;
  esac
}

tool_ldflags() {
  local x=""
  case "$1" in
    # Upstream's Dockerfile passes no -ldflags (not even -s -w): the binary keeps its symbols, as upstream's does.
    # barman-cloud's Dockerfiles: `go build -a -o manager cmd/manager/main.go`, no -ldflags either.
    kserve|barman-cloud) echo ""; return 0 ;;
    # kube-rbac-proxy's Makefile (v0.18.0): VERSION_SEMVER from its VERSION file (the commit suffix is git's, absent
    # from the module zip), programName; no -s -w there either. gitCommit is the tag's (the proxy's Origin.Hash).
    # prometheus-operator's Makefile GO_BUILD_LDFLAGS (v0.93.0): `-s` (not -w) and prometheus/common's version
    # variables: Version from its VERSION file (the operator's default config-reloader image is
    # quay.io/prometheus-operator/prometheus-config-reloader:v<Version>: pkg/operator/defaults.go), Revision the tag's
    # commit, BuildDate the epoch in its `date +%Y%m%d-%T` format; BuildUser and Branch (the builder's $USER and git
    # branch: none on a detached tag) left empty.
    prometheus-operator)
      local c=github.com/prometheus/common/version
      echo "-s -X $c.Version=${PROMETHEUS_OPERATOR_VERSION#v} -X $c.Revision=$PROMETHEUS_OPERATOR_COMMIT -X $c.BuildDate=19700101-00:00:00"
      return 0 ;;
    kube-rbac-proxy)
      echo "-X k8s.io/component-base/version.gitVersion=$KUBE_RBAC_PROXY_VERSION -X k8s.io/component-base/version.gitCommit=$KUBE_RBAC_PROXY_COMMIT -X k8s.io/component-base/version/verflag.programName=kube-rbac-proxy"
      return 0 ;;
    kube-apiserver|kubelet)
      local minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
      for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        x+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
        x+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
      done
      ;;
    pulumi) x=" -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$PULUMI_VERSION" ;;
    pulumi-kubernetes)
      x=" -X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$PULUMI_K8S_VERSION" ;;
    helm)
      # The same -X flags as helm's Makefile (v3.22.0): the version, a clean
      # tree, and the Kubernetes version `helm template` reports as
      # .Capabilities.KubeVersion by default, which the Makefile derives from
      # the client-go it builds with (v0.37.0 -> 1.37). Without them helm says
      # "v3.22" and renders against Kubernetes v1.20.0. No git commit: the
      # module zip carries none (like etcd's "Git SHA: Not provided").
      local cg major minor
      cg="$(awk '$1 == "k8s.io/client-go" {print $2}' "$(tool_mod_dir helm)/go.mod")"
      cg="${cg#v}"; major=$(( ${cg%%.*} + 1 )); minor="${cg#*.}"; minor="${minor%%.*}"
      x=" -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
      x+=" -X helm.sh/helm/v3/internal/version.metadata= -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
      for p in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
        x+=" -X $p.k8sVersionMajor=$major -X $p.k8sVersionMinor=$minor"
      done
      ;;
    # The variables kube-router's Makefile sets (GIT_COMMIT, BUILD_DATE); the epoch keeps the build reproducible.
    kube-router)
      x=" -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$KUBE_ROUTER_VERSION"
      x+=" -X github.com/cloudnativelabs/kube-router/v2/pkg/version.BuildDate=1970-01-01T00:00:00Z" ;;
    # `crane version` reads this variable (cmd/crane/cmd/version.go); without it it prints "(devel)".
    crane) x=" -X github.com/google/go-containerregistry/cmd/crane/cmd.Version=$CRANE_VERSION" ;;
    seaweedfs) x=" -X $SEAWEEDFS_MODULE/weed/util/version.COMMIT=$SEAWEEDFS_VERSION" ;;
    # What buildscripts/gen-ldflags.go sets for a DEVELOPMENT build of the pseudo-version's commit time
    # (no git in the module zip: the commit is the pseudo-version's 12-character prefix).
    minio)
      local when="${MINIO_VERSION#v0.0.0-}" c; c="${when#*-}"; when="${when%%-*}"
      when="${when:0:4}-${when:4:2}-${when:6:2}T${when:8:2}:${when:10:2}:${when:12:2}Z"
      x=" -X $MINIO_MODULE/cmd.Version=$when -X $MINIO_MODULE/cmd.CopyrightYear=${when:0:4}"
      x+=" -X $MINIO_MODULE/cmd.ReleaseTag=DEVELOPMENT.${when//:/-} -X $MINIO_MODULE/cmd.CommitID=$c"
      x+=" -X $MINIO_MODULE/cmd.ShortCommitID=$c"
      ;;
    promtool) x=" -X github.com/prometheus/common/version.Version=$PROMTOOL_VERSION" ;;
    # .promu.yml's -X variables but the build user and host (a fact of the building machine) and the revision (the
    # proxy gives no Origin for this module); the epoch for the date, in promu's format.
    prometheus)
      x=" -X github.com/prometheus/common/version.Version=$PROMETHEUS_VERSION -X github.com/prometheus/common/version.Branch=HEAD"
      x+=" -X github.com/prometheus/common/version.BuildDate=19700101-00:00:00" ;;
    # The variables upstream's .goreleaser.yml sets (pkg/versions); the epoch for the date keeps the build reproducible.
    cnpg)
      x=" -X $CNPG_MODULE/pkg/versions.buildVersion=${CNPG_VERSION#v} -X $CNPG_MODULE/pkg/versions.buildCommit=$CNPG_COMMIT"
      x+=" -X $CNPG_MODULE/pkg/versions.buildDate=1970-01-01T00:00:00Z" ;;
    # The version variables the upstream Makefiles set (kueue/jobset Makefile LD_FLAGS, kwok hack/releases.sh).
    kueue) x=" -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" ;;
    jobset) x=" -X sigs.k8s.io/jobset/pkg/version.GitVersion=$JOBSET_VERSION" ;;
    kwok) x=" -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=$K8S_VERSION" ;;
  esac
  echo "-s -w$x"
}

# Every build: no DWARF from the compiler (`-gcflags=all=-dwarf=false`). The linker drops it anyway (`-s -w`, or
# `-s`, which implies -w since Go 1.22), so the binaries lose nothing, and compiling without it costs ~11% less CPU
# (etcd, empty build cache: 66 s user CPU with it, 58 s without; docs/tools.md "Measured build times"). kserve and
# barman-cloud too: their binaries keep their symbol tables as upstream's do (no -ldflags, tool_ldflags), but not the
# DWARF upstream's carry only because their Dockerfiles pass no flags (a debugger's data: nothing reads it at run
# time). Compiled with DWARF, they shared no compiled package with the other tools, the standard library included.
NO_DWARF="-gcflags=all=-dwarf=false"
tool_buildflags() {
  local common="-trimpath -mod=readonly -buildvcs=false"
  case "$1" in
    # Rule checks and rule tests need no service discovery: drop the optional SD plugins
    # (cloud SDKs). Ref: prometheus README "Building with selected service discovery".
    promtool) echo "$common $NO_DWARF -tags remove_all_sd" ;;
    # The server needs one discovery plugin, Kubernetes (every ServiceMonitor and PodMonitor becomes a
    # kubernetes_sd_config): plugins/plugin_kubernetes.go is `!remove_all_sd || enable_kubernetes_sd`. Not
    # .promu.yml's `netgo builtinassets`: with CGO_ENABLED=0 the resolver is Go's anyway, and netgo would change
    # package net and so every package above it (no sharing with promtool's build cache); builtinassets embeds the
    # web UI, which is not built here (web/ui/static comes from an npm build): the API and /-/ endpoints are served.
    prometheus) echo "$common $NO_DWARF -tags remove_all_sd,enable_kubernetes_sd" ;;
    minio) echo "$common $NO_DWARF -tags kqueue" ;;   # the upstream Makefile's tag
    # The upstream Makefile's GOTAGS (v1.15.0): core/dnsserver links gRPC (its grpc:// servers); this tag
    # leaves gRPC's golang.org/x/net/trace hooks out.
    coredns) echo "$common $NO_DWARF -tags grpcnotrace" ;;
    *) echo "$common $NO_DWARF" ;;
  esac
}

# ------------------------------------------------------------------ helpers
log() { printf '%s\n' "$*" >&2; }

# git_blob_sha FILE -> the id git gives the file's content (`git hash-object`), without git; empty if absent.
git_blob_sha() { [[ -f "$1" ]] && { printf 'blob %d\0' "$(wc -c < "$1")"; cat "$1"; } | sha1sum | cut -d' ' -f1; }

# Module directory holding go.mod for a tool: the wrapper, or the upstream module in Go's
# module cache (downloaded and checked against the checksum database by `go mod download`).
tool_mod_dir() {
  local m; m="$(tool_module "$1")"
  if [[ -z "$m" ]]; then echo "$TOOLS_SRC/$1"; return 0; fi
  (cd / && "$GO" mod download -json "$m") | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}

# Stamp: go.mod, go.sum, every committed non-generated source in the wrapper,
# the build flags and the Go version.
tool_stamp() {
  local t="$1" dir m; m="$(tool_module "$t")"
  {
    echo "tool=$t"
    echo "go=$("$GO" env GOVERSION) $("$GO" env GOOS)/$("$GO" env GOARCH) cgo=$CGO_ENABLED"
    echo "ldflags=$(tool_ldflags "$t")"
    echo "flags=$(tool_buildflags "$t")"
    tool_bins "$t"
    [[ "$t" != seaweedfs ]] || echo "sum=$SEAWEEDFS_MODSUM"
    [[ "$t" != minio ]] || echo "sum=$MINIO_MODSUM"
    [[ "$t" != cnpg ]] || echo "sum=$CNPG_MODSUM"
    [[ "$t" != kserve ]] || echo "sum=$KSERVE_MODSUM"
    [[ "$t" != kube-rbac-proxy ]] || echo "sum=$KUBE_RBAC_PROXY_MODSUM"
    [[ "$t" != prometheus-operator ]] || echo "sum=$PROMETHEUS_OPERATOR_MODSUM $PROMETHEUS_OPERATOR_APIS_MODSUM $PROMETHEUS_OPERATOR_CLIENT_MODSUM"
    [[ "$t" != barman-cloud ]] || echo "sum=$BARMAN_CLOUD_BUILD_MODSUM"
    [[ "$t" != barman-cloud-crd ]] || echo "sum=$BARMAN_CLOUD_MODSUM crd=$BARMAN_CLOUD_CRD blob=$BARMAN_CLOUD_CRD_BLOB"
    if [[ -n "$m" ]]; then echo "module=$m share=$(tool_share "$t")"; fi
    if in_graph "$t"; then (cd "$GRAPH_DIR" && sha256sum go.mod go.sum); fi
    if [[ "$t" == kind ]]; then sha256sum "$TOOLS_SRC/kind-config-check/main.go" | cut -d' ' -f1; fi
    if [[ -z "$m" ]]; then
    dir="$(tool_mod_dir "$t")"
    (cd "$dir" && find . -type f \( -name go.mod -o -name go.sum -o -name '*.go' -o -name '*.sh' \) \
        | LC_ALL=C sort | xargs sha256sum); fi
  } | sha256sum | cut -d' ' -f1
}

tool_current() {
  local t="$1" want have b
  want="$(tool_stamp "$t")"
  have="$(cat "$STAMP_DIR/$t" 2>/dev/null || true)"
  [[ "$want" == "$have" ]] || return 1
  while read -r b _; do [[ -x "$BIN_DIR/$b" ]] || return 1; done < <(tool_bins "$t")
  for b in $(tool_extra_files "$t"); do [[ -x "$BIN_DIR/$b" ]] || return 1; done
  [[ -z "$(tool_module "$t")" || -f "$SHARE_DIR/$t/VERSION" ]] || return 1
  [[ "$t" != kubelet || -s "$SHARE_DIR/$t/pause/pause.c" ]] || return 1
  [[ "$t" != prometheus || -s "$SHARE_DIR/$t/prometheus.yml" ]] || return 1
  [[ "$t" != barman-cloud-crd || "$(git_blob_sha "$SHARE_DIR/$t/$BARMAN_CLOUD_CRD")" == "$BARMAN_CLOUD_CRD_BLOB" ]] || return 1
  return 0
}

# ------------------------------------------------------------ prepare hooks
# Print the tool's module directory: where `go build` runs (the wrapper module itself, or a copy outside the repo with
# generated files added) and where post_build copies the shared manifests from. The graph's tools build in
# tools/controllers instead (build_tool); their directory here is the upstream module's, checked against its pin.
prepare() {
  local t="$1" dir; dir="$(tool_mod_dir "$t")"
  case "$t" in
    pulumi-kubernetes) prepare_pulumi_kubernetes "$dir" ;;
    seaweedfs) prepare_module_zip "$SEAWEEDFS_MODULE" "$SEAWEEDFS_VERSION" "$SEAWEEDFS_MODSUM" ;;
    minio) prepare_module_zip "$MINIO_MODULE" "$MINIO_VERSION" "$MINIO_MODSUM" ;;
    kind) prepare_kind "$dir" ;;
    barman-cloud-crd) prepare_module_zip "$BARMAN_CLOUD_MODULE" "$BARMAN_CLOUD_VERSION" "$BARMAN_CLOUD_MODSUM" ;;
    barman-cloud) prepare_module_zip "$BARMAN_CLOUD_MODULE" "$BARMAN_CLOUD_BUILD_VERSION" "$BARMAN_CLOUD_BUILD_MODSUM" ;;
    cnpg) prepare_module_zip "$CNPG_MODULE" "$CNPG_VERSION" "$CNPG_MODSUM" ;;
    kserve) prepare_module_zip "$KSERVE_MODULE" "$KSERVE_VERSION" "$KSERVE_MODSUM" ;;
    kube-rbac-proxy) prepare_module_zip "$KUBE_RBAC_PROXY_MODULE" "$KUBE_RBAC_PROXY_VERSION" "$KUBE_RBAC_PROXY_MODSUM" ;;
    prometheus-operator) prepare_prometheus_operator ;;
    *) echo "$dir" ;;
  esac
}

# The upstream provider main go:embeds schema.json and the Python/.NET
# metadata generated by `make`, which are not in the module zip. Our main
# embeds the same files; they are generated here, outside the repo, from the
# provider module in the module cache (see docs/tools.md).
prepare_pulumi_kubernetes() {
  local src="$1" dst="$WORK_DIR/pulumi-kubernetes" moddir
  rm -rf "$dst"; mkdir -p "$dst"
  (cd "$src" && tar --exclude='*-embed.json' -cf - .) | (cd "$dst" && tar -xf -)
  moddir="$(cd "$src" && "$GO" list -mod=readonly -m -f '{{.Dir}}' github.com/pulumi/pulumi-kubernetes/provider/v4)"
  if [[ -z "$moddir" || ! -d "$moddir" ]]; then
    (cd "$src" && "$GO" mod download -json github.com/pulumi/pulumi-kubernetes/provider/v4 >/dev/null)
    moddir="$(cd "$src" && "$GO" list -mod=readonly -m -f '{{.Dir}}' github.com/pulumi/pulumi-kubernetes/provider/v4)"
  fi
  (cd "$dst" && "$GO" run -mod=readonly ./cmd/gen-embed -provider "$moddir" \
      -version "$PULUMI_K8S_VERSION" -out ./cmd/pulumi-resource-kubernetes >&2)
  echo "$dst"
}

# A module built in its own directory from the module cache (`go mod download` verifies the zip
# against the checksum database; the sum pinned above must match it too). Its own go.mod/go.sum
# then drive the build, with -mod=readonly.
prepare_module_zip() {
  local module="$1" version="$2" want_sum="$3" json dir sum
  json="$(cd "$WORK_DIR" && "$GO" mod download -json "$module@$version")"
  dir="$(sed -n 's/^\t"Dir": "\(.*\)",$/\1/p' <<<"$json")"
  sum="$(sed -n 's/^\t"Sum": "\(.*\)",$/\1/p' <<<"$json")"
  if [[ "$sum" != "$want_sum" ]]; then
    log "build.sh: $module@$version has sum '$sum', pinned '$want_sum'"; return 1
  fi
  echo "$dir"
}

# A copy of the prometheus-operator module (the module cache is read-only) with its two nested modules where its go.mod's
# replace directives look for them: upstream's tree at the tag, each part verified by the checksum database and its pin.
prepare_prometheus_operator() {
  local src dst="$WORK_DIR/prometheus-operator" sub nested path sum
  src="$(prepare_module_zip "$PROMETHEUS_OPERATOR_MODULE" "$PROMETHEUS_OPERATOR_VERSION" "$PROMETHEUS_OPERATOR_MODSUM")"
  rm -rf "$dst"; mkdir -p "$dst"
  (cd "$src" && tar -cf - .) | (cd "$dst" && tar -xf -)
  for sub in "pkg/apis/monitoring $PROMETHEUS_OPERATOR_APIS_MODSUM" "pkg/client $PROMETHEUS_OPERATOR_CLIENT_MODSUM"; do
    read -r path sum <<<"$sub"
    nested="$(prepare_module_zip "$PROMETHEUS_OPERATOR_MODULE/$path" "$PROMETHEUS_OPERATOR_VERSION" "$sum")"
    mkdir -p "$dst/$path"; (cd "$nested" && tar -cf - .) | (cd "$dst/$path" && tar -xf -)
  done
  chmod -R u+w "$dst"
  echo "$dst"
}

# A copy of the kind module (the module cache is read-only) with tools/kind-config-check added as
# pkg/cmd/trainyard-kind-config-check: Go lets only packages under sigs.k8s.io/kind/pkg import its internal config loader.
prepare_kind() {
  local src="$1" dst="$WORK_DIR/kind"
  rm -rf "$dst"; mkdir -p "$dst"
  (cd "$src" && tar -cf - .) | (cd "$dst" && tar -xf -)
  chmod -R u+w "$dst"
  mkdir -p "$dst/pkg/cmd/trainyard-kind-config-check"
  cp "$TOOLS_SRC/kind-config-check/main.go" "$dst/pkg/cmd/trainyard-kind-config-check/main.go"
  echo "$dst"
}

# ----------------------------------------------------------- post hooks
post_build() {
  local t="$1" dir="$2" m d
  m="$(tool_module "$t")"
  if [[ -n "$m" ]]; then
    # The manifests the rehearsal renders with `kubectl kustomize` (webhooks, CRDs, kwok stages).
    rm -rf "$SHARE_DIR/$t"; mkdir -p "$SHARE_DIR/$t"
    for d in $(tool_share "$t"); do
      mkdir -p "$SHARE_DIR/$t/$(dirname "$d")"; cp -r "$dir/$d" "$SHARE_DIR/$t/$d"
    done
    chmod -R u+w "$SHARE_DIR/$t"
    echo "${m#*@}" > "$SHARE_DIR/$t/VERSION"
  fi
  case "$t" in
    pulumi)
      # The Python language host runs this script; it must sit next to it.
      local sdk
      sdk="$(cd "$dir" && "$GO" list -mod=readonly -m -f '{{.Dir}}' github.com/pulumi/pulumi/sdk/v3)"
      install -m 0755 "$sdk/python/cmd/pulumi-language-python-exec" "$BIN_DIR/pulumi-language-python-exec"
      # The plugin Pulumi starts for Python dynamic providers (Trainyard's generated secrets,
      # components/generated.py). Lost once in a merge: a warm tools cache still had it, a cold build did not.
      install -m 0755 "$sdk/python/dist/pulumi-resource-pulumi-python" "$BIN_DIR/pulumi-resource-pulumi-python"
      ;;
    kubelet)
      # The pause (sandbox) container's source of the same release, verified with the module (go.sum): the
      # real node builds its sandbox image from it (trainyard.rehearsal.images; build/pause/Makefile's TAG
      # is the image's version).
      local k8s; k8s="$(cd "$dir" && "$GO" list -mod=readonly -m -f '{{.Dir}}' k8s.io/kubernetes)"
      rm -rf "${SHARE_DIR:?}/$t"; mkdir -p "$SHARE_DIR/$t/pause"
      install -m 0644 "$k8s/build/pause/linux/pause.c" "$SHARE_DIR/$t/pause/pause.c"
      sed -n 's/^TAG ?= //p' "$k8s/build/pause/Makefile" > "$SHARE_DIR/$t/pause/TAG"
      echo "k8s.io/kubernetes@$K8S_VERSION" > "$SHARE_DIR/$t/VERSION"
      ;;
    prometheus)
      # What upstream's Dockerfile COPYs besides the binaries (documentation/examples/prometheus.yml as
      # /etc/prometheus/prometheus.yml, LICENSE, NOTICE), from the module go.sum verified, for the rehearsal's image.
      local prom; prom="$(cd "$dir" && "$GO" list -mod=readonly -m -f '{{.Dir}}' github.com/prometheus/prometheus)"
      rm -rf "${SHARE_DIR:?}/$t"; mkdir -p "$SHARE_DIR/$t"
      install -m 0644 "$prom/documentation/examples/prometheus.yml" "$SHARE_DIR/$t/prometheus.yml"
      install -m 0644 "$prom/LICENSE" "$SHARE_DIR/$t/LICENSE"
      install -m 0644 "$prom/NOTICE" "$SHARE_DIR/$t/NOTICE"
      echo "github.com/prometheus/prometheus@$PROMETHEUS_MODULE_VERSION" > "$SHARE_DIR/$t/VERSION"
      ;;
    barman-cloud-crd)
      # The file trainyard.schemas reads ($TRAINYARD_BARMAN_CLOUD_CRD overrides), checked against the pin,
      # and where it came from: module version, its go.sum hash and the file's git blob SHA.
      local crd="$SHARE_DIR/$t/$BARMAN_CLOUD_CRD" blob
      blob="$(git_blob_sha "$crd" || true)"
      if [[ "$blob" != "$BARMAN_CLOUD_CRD_BLOB" ]]; then
        rm -rf "${SHARE_DIR:?}/$t"
        log "build.sh: $m $BARMAN_CLOUD_CRD has blob $blob, pinned $BARMAN_CLOUD_CRD_BLOB"; return 1
      fi
      printf 'module=%s\nversion=%s\nsum=%s\nfile=%s\nblob=%s\n' "$BARMAN_CLOUD_MODULE" "$BARMAN_CLOUD_VERSION" \
        "$BARMAN_CLOUD_MODSUM" "$BARMAN_CLOUD_CRD" "$blob" > "$SHARE_DIR/$t/SOURCE"
      ;;
  esac
}

# cpu_ticks: CPU_TICKS := the CPU time (user + system) this shell's finished children have used so far, in clock
# ticks (/proc/PID/stat cutime + cstime: proc(5)). Builtins only: in a subshell it would read the subshell's own.
CLK_TCK="$(getconf CLK_TCK)"
cpu_ticks() {
  local stat f; read -r stat < "/proc/$BASHPID/stat"; stat="${stat##*) }"; read -ra f <<< "$stat"
  CPU_TICKS=$(( f[13] + f[14] ))
}

build_tool() {
  local t="$1" start end dir build_dir b pkg ldflags cpu0
  if tool_current "$t"; then
    log "==> $t: up to date ($(tool_bins "$t" | cut -d' ' -f1 | tr '\n' ' ')in $BIN_DIR), skipped"
    return 0
  fi
  start=$(date +%s); cpu_ticks; cpu0=$CPU_TICKS
  log "==> $t: building"
  mkdir -p "$BIN_DIR" "$STAMP_DIR" "$WORK_DIR"
  rm -f "$STAMP_DIR/$t"
  local stamp; stamp="$(tool_stamp "$t")"
  dir="$(prepare "$t")"; build_dir="$dir"
  if in_graph "$t"; then graph_check "$t"; build_dir="$GRAPH_DIR"; fi
  ldflags="$(tool_ldflags "$t")"
  while read -r b pkg; do
    local s1=$SECONDS
    log "    go build $b ($pkg)"
    # shellcheck disable=SC2046
    (cd "$build_dir" && "$GO" build $(tool_buildflags "$t") -ldflags "$ldflags" -o "$BIN_DIR/$b.tmp" "$pkg")
    mv -f "$BIN_DIR/$b.tmp" "$BIN_DIR/$b"
    log "    $b: $((SECONDS - s1))s, $(du -h "$BIN_DIR/$b" | cut -f1)"
  done < <(tool_bins "$t")
  post_build "$t" "$dir"
  echo "$stamp" > "$STAMP_DIR/$t"
  end=$(date +%s)
  cpu_ticks
  log "==> $t: built in $((end - start))s, $(( (CPU_TICKS - cpu0) / CLK_TCK ))s of CPU"
}

# --------------------------------------------------------------------- main
main() {
  local tools=() check=0 a jobs="${TRAINYARD_BUILD_JOBS:-1}" next_is_jobs=0
  for a in "$@"; do
    if [[ $next_is_jobs == 1 ]]; then jobs="$a"; next_is_jobs=0; continue; fi
    case "$a" in
      -j) next_is_jobs=1 ;;
      -j[0-9]*) jobs="${a#-j}" ;;
      --check) check=1 ;;
      --list) for t in "${ALL_TOOLS[@]}" "${OPTIONAL_TOOLS[@]}"; do echo "$t: $(tool_bins "$t" | cut -d' ' -f1 | tr '\n' ' ')$(tool_extra_files "$t")"; done; return 0 ;;
      --graph) for t in "${GRAPH_TOOLS[@]}"; do tool_bins "$t" | while read -r b pkg; do echo "$t $b $pkg $(tool_module "$t")"; done; done; return 0 ;;
      -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; return 0 ;;
      all) tools+=("${ALL_TOOLS[@]}") ;;
      cluster) tools+=("${CLUSTER_TOOLS[@]}") ;;
      node) tools+=("${NODE_TOOLS[@]}") ;;
      *) tool_bins "$a" >/dev/null; tools+=("$a") ;;
    esac
  done
  [[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { log "build.sh: -j wants a positive number, got '$jobs'"; return 2; }
  [[ ${#tools[@]} -gt 0 ]] || tools=("${ALL_TOOLS[@]}")
  if [[ $check == 1 ]]; then
    local bad=0
    for t in "${tools[@]}"; do
      if tool_current "$t"; then log "ok: $t"; else log "stale or missing: $t"; bad=1; fi
    done
    return $bad
  fi
  local total=$SECONDS
  if [[ "$jobs" -le 1 || ${#tools[@]} -le 1 ]]; then
    for t in "${tools[@]}"; do build_tool "$t"; done
  else
    build_parallel "$jobs" "${tools[@]}"
  fi
  log "==> done in $((SECONDS - total))s; add to PATH: $BIN_DIR"
}

# build_parallel N TOOL...: at most N builds at once, in BY_COST order; a tool's log is shown when it ends
# (whole if it failed). Go's module and build caches are safe for concurrent builds (they lock). The graph's tools
# (GRAPH_TOOLS) asked for are one job, built one after another in BY_COST order: two builds of the graph at once would
# both compile the packages they share (a build cache entry exists only once a compile has finished), and after the
# first of them the others compile little of their own.
build_parallel() {
  local jobs="$1" t pid failed=0 ordered=() graph=() running=0; shift
  local -A want=() of_pid=()
  for t in "$@"; do want[$t]=1; done
  for t in "${BY_COST[@]}"; do [[ -z "${want[$t]:-}" ]] || ordered+=("$t"); done
  for t in "$@"; do [[ " ${BY_COST[*]} " == *" $t "* ]] || ordered+=("$t"); done
  for t in "${ordered[@]}"; do ! in_graph "$t" || graph+=("$t"); done
  mkdir -p "$TOOLS_DIR/logs"
  finish() {
    local done_pid rc=0 ended
    wait -n -p done_pid || rc=$?
    running=$((running - 1))
    ended="${of_pid[$done_pid]}"
    local logs=("$ended"); ! in_graph "$ended" || logs=("${graph[@]}")
    for ended in "${logs[@]}"; do
      [[ -f "$TOOLS_DIR/logs/$ended.log" ]] || continue   # a graph tool after the one that failed
      if [[ $rc -eq 0 ]] || tool_current "$ended"; then grep -E '^==> ' "$TOOLS_DIR/logs/$ended.log" >&2 || true
      else log "==> $ended: FAILED (exit $rc); its log ($TOOLS_DIR/logs/$ended.log):"; cat "$TOOLS_DIR/logs/$ended.log" >&2
      fi
    done
    [[ $rc -eq 0 ]] || failed=1
  }
  for t in "${ordered[@]}"; do
    # The graph's job is started at its first tool's place, and its later tools are skipped here.
    if in_graph "$t" && [[ "$t" != "${graph[0]}" ]]; then continue; fi
    while [[ $running -ge $jobs ]]; do finish; done
    if in_graph "$t"; then
      build_graph_job "${graph[@]}" &
    else
      build_tool "$t" > "$TOOLS_DIR/logs/$t.log" 2>&1 &
    fi
    of_pid[$!]="$t"; running=$((running + 1))
  done
  while [[ $running -gt 0 ]]; do finish; done
  return $failed
}

# build_graph_job TOOL...: the graph's tools one after another, each to its own log; stops at the first that fails.
build_graph_job() {
  local t
  for t in "$@"; do rm -f "$TOOLS_DIR/logs/$t.log"; done
  for t in "$@"; do build_tool "$t" > "$TOOLS_DIR/logs/$t.log" 2>&1 || return 1; done
}

main "$@"; exit $?
