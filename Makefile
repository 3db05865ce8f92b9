# agent-sandbox. `make help` lists the targets. Cluster targets run as root on Linux and keep their
# built binaries in ~/.cache/agent-sandbox (outside the repository).
SHELL := /bin/bash
GO ?= go
export GOTOOLCHAIN ?= local
export GOFLAGS ?= -buildvcs=false
BIN := bin/agent-sandbox
FUZZTIME ?= 10s
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.DEFAULT_GOAL := help
# PROFILE=gke (make up): the local cluster's one node shaped as a GKE gVisor node pool (scripts/lib.sh).
# make up records the profile; deploy, verify, e2e and install-client follow it without PROFILE.
ifneq ($(PROFILE),)
export AGENT_SANDBOX_PROFILE := $(PROFILE)
endif

##@ Develop

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*##"} /^##@/ {printf "\n%s\n", substr($$0, 5)} /^[a-zA-Z0-9_-]+:.*##/ {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/agent-sandbox
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app.version=$(VERSION)" -o $(BIN) ./cmd/agent-sandbox

.PHONY: test
test: ## Everything CI runs: unit and integration tests, then the live cluster (up, deploy, verify, e2e, chaos, down)
	scripts/test.sh

.PHONY: test-unit
test-unit: ## Unit tests only (no cluster, no root)
	$(GO) test -count=1 ./...

.PHONY: test-integration
test-integration: ## Tests against a real etcd + kube-apiserver (+ Vault), started by the test harness; against every supported Kubernetes release (INTEGRATION_ALL_VERSIONS=0: the default only)
	scripts/test-integration.sh

.PHONY: lint
lint: ## go vet, gofmt and shellcheck
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@if command -v shellcheck >/dev/null; then shellcheck -x -S warning scripts/*.sh bench/*.sh .ci/run; else echo "shellcheck not installed; skipped"; fi

.PHONY: chart-docs
chart-docs: ## Regenerate charts/agent-sandbox/README.md (the values reference) from values.schema.json
	$(GO) run ./scripts/chartdoc

.PHONY: rules-docs
rules-docs: ## Regenerate docs/rules.md (every refusal by rule ID) from internal/rules and policy/policy.yaml
	$(GO) run ./scripts/rulesdoc

.PHONY: mutate-exactness
mutate-exactness: ## Weaken each comparison of the webhook's exactness check in turn; every one must fail a unit test
	$(GO) run ./scripts/mutate-exactness $(MUTATE_FLAGS)

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 10s)
	scripts/fuzz.sh $(FUZZTIME)

.PHONY: bench
bench: ## Run the Go benchmarks (CEL rules, token verify, approval consume, audit write)
	$(GO) test -run '^$$' -bench . -benchmem ./cel/... ./internal/...

##@ Release

.PHONY: release
release: ## Build the images (webhook, credential agent, runner; OCI + SBOM) and the chart into dist/ without Docker; PUSH=1 REGISTRY=... pushes
	REGISTRY="$(REGISTRY)" VERSION="$(VERSION)" PUSH="$(PUSH)" CHECK="$(CHECK)" scripts/release.sh

.PHONY: release-check
release-check: ## Build the release twice (the second time with an empty Go build cache) and fail unless every file is identical
	REGISTRY="$(REGISTRY)" VERSION="$(VERSION)" CHECK=1 scripts/release.sh

##@ Local cluster (root, Linux)

.PHONY: tools
tools: ## Build or fetch every cluster binary into the cache (cold: tens of minutes; warm: seconds)
	scripts/build-tools.sh

.PHONY: up
up: ## Start the local Kubernetes (gVisor, NetworkPolicy, Vault); idempotent. PROFILE=gke: its node labelled and tainted sandbox.gke.io/runtime=gvisor:NoSchedule as GKE's gVisor pool, the policy placed there (deploy, verify, e2e follow)
	scripts/up.sh

.PHONY: down
down: ## Stop the local cluster and remove everything it left on the machine (keeps the build cache)
	scripts/down.sh

.PHONY: status
status: ## Show each local-cluster component's state
	scripts/status.sh

.PHONY: check-clean
check-clean: ## Check that nothing of the local cluster is left behind after `make down`
	scripts/check-clean.sh

.PHONY: verify-cluster
verify-cluster: ## Prove on the live cluster: gVisor kernel, NetworkPolicy egress enforcement
	scripts/verify-cluster.sh

.PHONY: preflight
preflight: ## Check a cluster before installing (gVisor runs, NetworkPolicy drops, Vault/API/DNS reachable, webhook callable); $KUBECONFIG or the local one
	scripts/preflight.sh

.PHONY: image
image: ## Build localhost/agent-sandbox:dev without Docker and import it into the local cluster
	scripts/image-agent-sandbox.sh

.PHONY: deploy
deploy: ## Install agent-sandbox into the cluster: image, Helm chart, approver keys, Vault configured, MCP kubeconfig; HELM=4 (or a path) installs with Helm 4
	HELM="$(HELM)" scripts/deploy.sh

.PHONY: helm-test
helm-test: ## Run the chart's `helm test` on the installed release, with its logs; HELM=3 (default), 4 or a path picks the helm
	HELM="$(HELM)" scripts/helm-test.sh

.PHONY: helm-compat
helm-compat: ## On the live local cluster: Helm 4 upgrades and rolls back the Helm 3 release, installs afresh, upgrades and rolls back; Helm 3 takes over and reinstalls; helm test after each step (~2-3 min: 125 s and 185 s measured; uninstalls twice)
	scripts/helm-compat.sh

.PHONY: install-client
install-client: build ## For you (SUDO_USER under sudo; INSTALL_USER=name as root): ~/.local/bin/agent-sandbox, ~/.config/agent-sandbox/{policy.yaml,workspaces/,mcp.kubeconfig}
	scripts/install-client.sh $(BIN)

.PHONY: verify
verify: ## verify-cluster, the chart's helm test, the admission check (with the approval race on both webhook replicas) (every unsafe object of the corpus rejected) and the harmful plans (each refused by a plan rule) on the live cluster; ends with audit verify --against-cluster on its MCP servers' logs
	scripts/verify.sh

.PHONY: chaos
chaos: ## On the live cluster: kill a webhook replica, restart Vault and the API server (also 90 s down), kill the MCP server, fill the audit disk, scale the webhook to zero during an approved apply; PASS/FAIL per scenario; each scenario repairs the cluster before and after (CHAOS_RUN=regexp picks scenarios)
	scripts/chaos.sh

##@ Benchmarks (print figures; nothing is asserted)

.PHONY: bench-admission
bench-admission: ## Admission latency through a real apiserver: none vs webhook vs ValidatingAdmissionPolicy, concurrency 1/16/64
	bench/admission.sh

##@ Demo

.PHONY: demo
demo: ## The scenario end to end through a real MCP client (sets up the local cluster, or uses $KUBECONFIG)
	scripts/demo.sh

.PHONY: e2e
e2e: ## End-to-end suite on the live cluster (after make deploy): real MCP clients, gVisor Jobs, approvals, audit; HELM as for deploy
	HELM="$(HELM)" scripts/e2e.sh

.PHONY: soak
soak: ## On the live cluster: 32 concurrent MCP sessions for SOAK_DURATION (5m); audit chains, leaks (Jobs, Vault objects), server RSS/goroutines
	bench/soak.sh

.PHONY: bench-e2e
bench-e2e: ## On the live cluster: warm and cold k8s_get_pod_status p50/p95 per phase, 32 concurrent callers (calls/min, errors, CPU-s per call, leftovers); MCP start-up and RSS
	bench/e2e.sh

.PHONY: bench-cost
bench-cost: ## On the live cluster (root): CPU-seconds per call, cold, warm and under load, by component (/proc, Pod cgroups, process accounting), idle subtracted; COST_N, COST_IDLE, COST_CONCURRENT, COST_DURATION
	bench/cost.sh
