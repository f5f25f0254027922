# Trainyard: `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The upstream CRD mirror used offline (tests, rehearsal). Absent on a fresh clone elsewhere:
# tests that need it skip, and `render` then fetches the pinned release files instead.
export TRAINYARD_CRDS_DIR ?= $(abspath ../shared/crds)
export TRAINYARD_TOOLS_DIR ?= $(HOME)/.cache/trainyard/tools
# The upstream chart mirror the chart-truth tests render from (tests/charts); absent: they skip.
export TRAINYARD_CHARTS_DIR ?= $(abspath ../shared/charts)
PYTEST_ARGS ?=

##@ Everyday

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} \
	  /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } \
	  /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

.PHONY: setup
setup: $(STAMP) ## Create .venv with the pinned dependencies

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	@# Pulumi starts the Python dynamic provider (components/generated.py) in the program directory
	@# (`main: platform/`) and resolves Pulumi.yaml's `virtualenv: .venv` from there: this link makes
	@# it find the project's venv (sdk/python/dist/pulumi-resource-pulumi-python, Pulumi v3.274.1).
	ln -sfn ../.venv platform/.venv
	@touch $@

.PHONY: test
test: setup lint typecheck helm barman-cloud-crd ## Lint, type-check and run every offline test tier (unit, conformance, program, policy, review, charts)
	$(BIN)/pytest -q -m "not cluster and not registry and not dataplane and not lab and not promtool and not node" $(PYTEST_ARGS)

# The chart-truth tier renders the upstream charts with helm built from Go modules, so
# `make test` builds it first (cached: instant when current; ~4 min cold on 2 cores).
.PHONY: helm
helm: ## Build helm from Go modules (tools/build.sh helm), for the chart-truth tests
	tools/build.sh helm

# The conformance tier validates the barman-cloud plugin's ObjectStore against its CRD, which ../shared/crds
# lacks: copied out of the plugin's pinned Go module into the tools cache (well under a second; instant when current).
.PHONY: barman-cloud-crd
barman-cloud-crd: ## Fetch the barman-cloud plugin's ObjectStore CRD (tools/build.sh barman-cloud-crd) for the conformance tier
	tools/build.sh barman-cloud-crd

.PHONY: lint
lint: setup ## ruff over the code, tests and policy pack
	$(BIN)/ruff check platform tests policies bench runtimes/programs serving-runtimes/programs

.PHONY: typecheck
typecheck: setup ## mypy, strict on platform/trainyard
	$(BIN)/mypy

.PHONY: schema
schema: setup ## Regenerate stacks/schema.json and docs/stack-config.md from the config model
	$(BIN)/trainyard schema > stacks/schema.json
	$(BIN)/trainyard schema --markdown > docs/stack-config.md

STACK ?= local
.PHONY: validate render capacity check
validate: setup ## Validate a stack (STACK=local|staging|prod)
	$(BIN)/trainyard validate $(STACK)
render: setup ## Render a stack to out/$(STACK)
	$(BIN)/trainyard render $(STACK)
capacity: setup ## GPU capacity table of a stack
	$(BIN)/trainyard capacity $(STACK)
check: setup ## Policy check of a stack
	$(BIN)/trainyard check $(STACK)

.PHONY: bench
bench: setup ## Benchmarks (print figures; never part of the tests); the engine one for the local stack only (make bench-engine: all sizes)
	$(BIN)/python bench/bench_render.py
	$(BIN)/python bench/bench_cli.py
	@if [ -x "$(TRAINYARD_TOOLS_DIR)/lab-torch-$$(sed -n 's/^torch==//p' runtimes/programs/requirements.txt)/bin/python" ]; then \
	  "$(TRAINYARD_TOOLS_DIR)/lab-torch-$$(sed -n 's/^torch==//p' runtimes/programs/requirements.txt)/bin/python" bench/bench_lora_gpu.py; fi
	@if [ -f bench/bench_diff.py ]; then $(BIN)/python bench/bench_diff.py; fi
	$(BIN)/python bench/bench_engine.py --sizes local --skip-without-tools

# Slow (a rehearsal cluster per stack size; the 200-tenant stack alone takes 15+ min on 2 cores).
BENCH_SIZES ?= local,5,50,200
.PHONY: bench-engine
bench-engine: tools setup ## `pulumi up` next to a server-side apply of the same objects (BENCH_SIZES=local,5,50,200); prints a table
	$(BIN)/python bench/bench_engine.py --sizes $(BENCH_SIZES)

.PHONY: bench-admission
bench-admission: cluster-up ## Admission benchmark on the rehearsal cluster: 1,000 TrainJobs vs batch Jobs (JOBS=N; prints figures)
	$(BIN)/python bench/bench_admission.py --stack $(STACK) --jobs $(or $(JOBS),1000)

##@ Rehearsal cluster and the real engine

.PHONY: tools
TOOL_JOBS ?= 2
tools: ## Build every platform tool from Go modules (cached; tools/build.sh --list; TOOL_JOBS at once), and the tool venvs
	tools/build.sh -j $(TOOL_JOBS) all
	tools/mlflow/install.sh
	tools/lab/install.sh

.PHONY: cluster-tools cluster-up cluster-down
cluster-tools: ## Build only what the rehearsal cluster runs (tools/build.sh cluster: control plane, engine, controllers, kwok)
	tools/build.sh -j $(TOOL_JOBS) cluster

cluster-up: cluster-tools setup ## Start the rehearsal cluster: control plane, real Kueue/JobSet/Trainer, kwok, the local stack's fake GPU nodes
	$(BIN)/trainyard cluster up local
cluster-down: setup ## Stop the rehearsal cluster (webhooks removed first; data kept, `trainyard cluster down --purge` removes it)
	$(BIN)/trainyard cluster down

.PHONY: up up-processes down
up: cluster-tools node-tools node-packages setup ## The main job (root): a real node runs Kueue, JobSet and Trainer from their charts, images built here into the loopback mirror; `pulumi up` of the local stack; one TrainJob per tenant (docs/rehearsal.md)
	$(BIN)/trainyard cluster up local --real-nodes
	$(BIN)/trainyard cluster deploy local
	$(BIN)/trainyard cluster smoke local
up-processes: cluster-up ## Without root: the same stack with Kueue, JobSet and Trainer as local processes and fake nodes only
	tools/pulumi-local.sh up local --yes --skip-preview
	$(BIN)/trainyard cluster smoke local
down: setup ## `pulumi destroy` of the local stack (CRDs and namespaces stay), then stop the cluster: nothing keeps running
	tools/pulumi-local.sh destroy local --yes --skip-preview
	$(BIN)/trainyard cluster down

.PHONY: up-kind down-kind
up-kind: tools setup ## Where Docker exists: the stack on a kind cluster, charts from upstream registries, fake GPU nodes (kwok)
	tools/kind-up.sh up $(STACK)
down-kind: setup ## `pulumi destroy` on the kind cluster, stop its kwok, delete the cluster
	tools/kind-up.sh down $(STACK)

SCENARIOS ?= $(sort $(basename $(notdir $(wildcard scenarios/*.yaml))))
.PHONY: rehearse
rehearse: cluster-up ## Run scenarios (SCENARIOS=..., default all) on the rehearsal cluster and print Kueue's decisions
	$(BIN)/trainyard rehearse $(STACK) $(SCENARIOS)

.PHONY: test-registry
test-registry: setup ## The registry tier: `trainyard images lock` and the air-gap export/import against real OCI registries on loopback (crane)
	$(BIN)/pytest -q -m registry tests/registry $(PYTEST_ARGS)

.PHONY: node-tools
node-tools: ## Build what a real node runs (tools/build.sh node: control plane, kubelet + kube-proxy, kube-router, CoreDNS, crane, CloudNativePG, KServe + kube-rbac-proxy, prometheus-operator + Prometheus, the barman-cloud plugin)
	tools/build.sh -j $(TOOL_JOBS) node

# What a real node runs that comes from Debian (docs/rehearsal.md, "Real nodes"); installed only where missing.
NODE_PACKAGES := containerd runc containernetworking-plugins busybox-static gcc libc6-dev binutils iproute2 nftables iptables ipset ca-certificates tzdata
.PHONY: node-packages
node-packages: ## Install the Debian packages a real node needs (containerd, runc, CNI plugins, busybox-static, gcc, iptables, ipset), where missing
	@missing=$$(for p in $(NODE_PACKAGES); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || echo $$p; done); \
	if [ -n "$$missing" ]; then echo "installing $$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; fi

.PHONY: test-node
test-node: setup node-tools node-packages ## The node tier (root): control plane + a real node (containerd, CNI bridge, kubelet); a pod from a locally built image
	@# One node tier per machine at a time: real nodes use machine-wide resources (kube-proxy's and kube-router's
	@# tables, kubelet's chains); a second run waits for the first (TRAINYARD_NODE_LOCK names the lock file).
	flock $${TRAINYARD_NODE_LOCK:-/tmp/trainyard-node.lock} $(BIN)/pytest -q -s -m node tests/node $(PYTEST_ARGS)

# The node tier in two parts, for .ci/run: the modules that start a control plane and nodes of their own need only the
# control plane, kubelet, CoreDNS, kube-router and crane, so a cold CI run starts them before the rest of the node tools
# (seaweedfs, kserve, cnpg, ...) are built; the platform package (one deployment of the whole local stack) needs them all.
NODE_BASE_TOOLS := etcd kube-apiserver crane kubelet coredns kube-router
.PHONY: test-node-base
test-node-base: setup node-packages ## The node tier without the platform package: real nodes, NetworkPolicy by packets, DNS, the in-cluster API
	tools/build.sh -j $(TOOL_JOBS) $(NODE_BASE_TOOLS)
	flock $${TRAINYARD_NODE_LOCK:-/tmp/trainyard-node.lock} $(BIN)/pytest -q -s -m node tests/node --ignore=tests/node/platform $(PYTEST_ARGS)

.PHONY: test-node-platform
test-node-platform: setup node-tools node-packages ## The node tier's platform package: `pulumi up` of the local stack on a real node, then its modules in order
	flock $${TRAINYARD_NODE_LOCK:-/tmp/trainyard-node.lock} $(BIN)/pytest -q -s -m node tests/node/platform $(PYTEST_ARGS)

.PHONY: test-cluster
# Two private clusters at once, a test file each at a time (pytest-xdist --dist loadfile: a module's fixtures stay on
# one worker): the tier mostly waits on its controllers and kwok's delays. CLUSTER_WORKERS=0 runs it in one process.
CLUSTER_WORKERS ?= 2
test-cluster: setup ## The cluster tier: real kube-apiserver + etcd, real Pulumi engine and provider (two clusters at once)
	$(BIN)/pytest -q -m cluster tests/cluster -n $(CLUSTER_WORKERS) --dist loadfile $(PYTEST_ARGS)

##@ Serving tier

.PHONY: serving-env
serving-env: ## The data plane's tool venv (MLflow, kserve-storage, moto; tools/mlflow/requirements.txt), shared with test-dataplane
	tools/mlflow/install.sh

.PHONY: test-serving
test-serving: setup serving-env ## Registry to storage for real: MLflow, S3 (SeaweedFS if built, else moto), trainyard promote, kserve_storage
	$(BIN)/pytest -q -s -m serving tests/serving $(PYTEST_ARGS)

.PHONY: test-dataplane
test-dataplane: setup ## The dataplane tier: a real SeaweedFS (weed) and a real MinIO (test server only) with Trainyard's identities and buckets; real MLflow (tools venv) + Debian PostgreSQL
	$(BIN)/pytest -q --tb=short -m dataplane tests/dataplane $(PYTEST_ARGS)
.PHONY: test-lab
test-lab: setup ## The lab tier: the reference LoRA program (tools/lab venv) on CPU against the dataplane servers: pinned data, SIGTERM + resume, MLflow, registry
	$(BIN)/pytest -q --tb=short -m lab tests/lab $(PYTEST_ARGS)
.PHONY: test-monitoring
test-monitoring: setup ## Alert rules through the real promtool (check rules, test rules); after `make tools`
	$(BIN)/pytest -q -m promtool tests/monitoring $(PYTEST_ARGS)

.PHONY: test-kind
test-kind: setup ## kind's own loader on every stack's generated kind config; after `make tools` (in `make test` they skip until kind is built)
	$(BIN)/pytest -q tests/unit/test_kind.py $(PYTEST_ARGS)

.PHONY: clean
clean: ## Remove rendered output and caches in the repo (not the tools cache)
	rm -rf out .pytest_cache .mypy_cache .ruff_cache
