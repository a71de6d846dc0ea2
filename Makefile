# stratum: build, test, assets, demo, bench. `make help` lists the targets.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := all

GO ?= go
# Flags for the scenarios package's run in `make test` (CI sets its budget
# here, e.g. SCENARIO_FLAGS='-rapid.checks=20').
SCENARIO_FLAGS ?= -rapid.checks=3 -rapid.steps=8
# How many of ./ha's parallel tests run at once in `make test`. 4 took ./ha
# from 726 s to 637 s on 2 cores, but a CI run of it failed: with up to 12
# kube-apiservers starting at once, one took over 60 s to pass its RBAC
# bootstrap (docs/performance.md). 2, Go's default on 2 cores, is the setting
# every other CI run passed with.
HA_PARALLEL ?= 2
# 2: `make test` runs ./ha, ./sim and the fuzz run beside the other packages,
# ./e2e and ./scenarios, which leave a core mostly idle (measured 2026-12-06:
# ./ha 610 s of wall time for 640 s of CPU, the other packages 305 s for
# 196 s, ./e2e 145 s for 126 s, ./scenarios 315 s for 152 s: 0.83 of 2 cores
# in all). ./sim (about 100 s) is in ./ha's lane because the other lane was
# the longer by 200 to 250 s (2026-12-07). 1: one lane after the other (./ha,
# ./sim and the fuzz run last).
TEST_LANES ?= 2
# How long `make test` fuzzes the bundle envelope decoder (FuzzOpenEnvelope in
# ./internal/certbundle, kept free of ha's heavy dependencies so the
# instrumented build stays small). A count of executions, not a duration:
# Go 1.26's fuzz coordinator can report its own -fuzztime deadline as a
# failure ("context deadline exceeded", go.dev/issue/75804, fixed in Go 1.27),
# which failed a clean run here with no crasher. 150000 executions take about
# 6-20 s on 2 cores.
FUZZTIME ?= 150000x
# Checks per property for `make explore`.
CHECKS ?= 200
# Joins per side in `make bench`'s BenchmarkJoin (its median and spread).
JOIN_SAMPLES ?= 10

.PHONY: all build assets demo-assets tools-mod dist vet fmt-check test e2e e2e-deps timeline-deps demo bench explore mutate clean help

all: build

# MAKE_STARTED is when this make began, so `make test` can report its whole
# time: the asset build and the compiles before its tests included.
MAKE_STARTED := $(shell date +%s)

# VERSION is stratum's version as `git describe` tells it, stamped into
# bin/stratum (stratum version, stratum --version).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

## build: bin/stratum from ./cmd/stratum, its version stamped from git describe, built as make dist builds it (CGO_ENABLED=0 -trimpath)
# The release's flags, which are also the asset builds': the packages stratum
# and kube-apiserver compile identically (about 190 of stratum's 900; the rest
# differ in module versions or sit above ones that do) then come from the Go
# build cache once either is built (docs/assets.md).
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-X $$($(GO) list -m)/cmd/stratum/cli.Version=$(VERSION)" -o bin/stratum ./cmd/stratum

## assets: build the pinned kube-apiserver, kube-controller-manager, etcd, etcdctl and kubectl into the cache (15 min or more cold on 2 cores, instant once built)
assets:
	@dir="$$($(GO) run ./internal/assets/assetsdir)"; \
	tools/build-assets.sh "$$dir"

## tools-mod: regenerate tools/*/go.mod and go.sum from tools/versions.mk
tools-mod:
	tools/gen-mod.sh

## dist: dist/stratum-<git describe>-linux-<arch>/ with bin/ (stratum stamped with that version; etcd, kube-apiserver, kube-controller-manager, etcdctl, kubectl from the asset cache) and SHA256SUMS, and its .tar.gz beside it (see docs/assets.md)
dist: assets build
	@version="$(VERSION)"; \
	goos="$$($(GO) env GOOS)"; arch="$$($(GO) env GOARCH)"; \
	if [[ "$$goos" != linux ]]; then echo "make dist: the assets are built for GOOS=$$goos; a dist is for linux"; exit 1; fi; \
	name="stratum-$$version-linux-$$arch"; out="dist/$$name"; \
	assets="$$($(GO) run ./internal/assets/assetsdir)"; \
	etcd_version="$$(sed -n 's/^ETCD_VERSION := //p' tools/versions.mk)"; \
	etcd_old_version="$$(sed -n 's/^ETCD_OLD_VERSION := //p' tools/versions.mk)"; \
	rm -rf "$$out" "$$out.tar.gz"; \
	mkdir -p "$$out/bin"; \
	cp -p bin/stratum "$$out/bin/stratum"; \
	cp -p "$$assets/etcd-$$etcd_version" "$$out/bin/etcd"; \
	cp -p "$$assets/etcd-$$etcd_old_version" "$$out/bin/etcd-$$etcd_old_version"; \
	for b in kube-apiserver kube-controller-manager etcdctl kubectl; do cp -p "$$assets/$$b" "$$out/bin/$$b"; done; \
	(cd "$$out" && sha256sum bin/* > SHA256SUMS); \
	tar -C dist --sort=name --owner=0 --group=0 --numeric-owner -czf "$$out.tar.gz" "$$name"; \
	echo "dist: $$out/ ($$(ls "$$out/bin" | tr '\n' ' ')+ SHA256SUMS) and $$out.tar.gz"

## vet: go vet ./...
vet:
	$(GO) vet ./...

## fmt-check: fail listing every Go file gofmt would change
fmt-check:
	@files=$$(find . -name '*.go' -not -path './.git/*' -not -path '*/testdata/*'); \
	[[ -z "$$files" ]] && exit 0; \
	bad=$$(gofmt -l $$files); \
	if [[ -n "$$bad" ]]; then echo "gofmt: these files need formatting (run gofmt -w):"; echo "$$bad"; exit 1; fi

# leaked_pids prints the pids of orphaned kube-apiserver /
# kube-controller-manager / etcd processes running from the asset directory
# ($$dir), one per line. A server a test started and did not stop outlives
# its test binary and is reparented to init (ppid 1); one still parented by a
# live test binary belongs to another run (another checkout, a developer's
# test) and is not counted. `make test` fails on orphans that appear during
# its run; ones already there before are not counted either.
define leaked_pids
pgrep -P 1 -f -- "^$$(printf '%s' "$$dir" | sed 's/[][\.*^$$+?(){}|]/\\&/g')/(kube-apiserver|kube-controller-manager|etcd-)" || true
endef

## test: assets, go vet, gofmt check, then every package's tests (-p 1; ./sim/timeline's check the page in headless Chromium), ./e2e (real hosts) and ./scenarios with $(SCENARIO_FLAGS), with ./ha, ./sim and the fuzz run beside them (TEST_LANES=2); each step's wall and CPU time; fails if a test leaves a real server running
test: assets e2e-deps timeline-deps
	$(GO) vet ./...
	@$(MAKE) --no-print-directory fmt-check
	@dir="$$($(GO) run ./internal/assets/assetsdir)"; \
	before="$$($(leaked_pids))"; \
	rc=0; \
	start=$$SECONDS; \
	tf="$$(mktemp)"; atf="$$(mktemp)"; alog="$$(mktemp)"; trap 'rm -f "$$tf" "$$atf" "$$alog"' EXIT; \
	mark() { times > "$$tf"; cpu=$$(awk 'NR == 2 { n = split($$0, f, " "); t = 0; for (i = 1; i <= n; i++) { split(f[i], ms, "m"); sub("s", "", ms[2]); t += ms[1] * 60 + ms[2] } print int(t) }' "$$tf"); wall=$$SECONDS; }; \
	took() { local w=$$wall c=$$cpu; mark; echo "make test: $$1 took $$(( wall - w )) s, $$(( cpu - c )) s of CPU"; }; \
	lane_ha() { \
		local rc=0 tf="$$atf"; mark; \
		echo "$(GO) test -count=1 -timeout 35m -parallel $(HA_PARALLEL) ./ha"; \
		$(GO) test -count=1 -timeout 35m -parallel $(HA_PARALLEL) ./ha || rc=$$?; \
		took ./ha; \
		echo "$(GO) test -count=1 -timeout 15m ./sim"; \
		$(GO) test -count=1 -timeout 15m ./sim || rc=$$?; \
		took ./sim; \
		echo "$(GO) test -run '^$$' -fuzz FuzzOpenEnvelope -fuzztime $(FUZZTIME) ./internal/certbundle"; \
		$(GO) test -run '^$$' -fuzz FuzzOpenEnvelope -fuzztime $(FUZZTIME) ./internal/certbundle || rc=$$?; \
		took "the fuzz run"; \
		return $$rc; \
	}; \
	lane_rest() { \
		local rc=0; mark; \
		pkgs="$$($(GO) list -f '{{if and (ne .ImportPath "$(shell $(GO) list -m)/scenarios") (ne .ImportPath "$(shell $(GO) list -m)/e2e") (ne .ImportPath "$(shell $(GO) list -m)/ha") (ne .ImportPath "$(shell $(GO) list -m)/sim")}}{{.ImportPath}}{{end}}' ./...)" || return $$?; \
		if [[ -n "$${pkgs//[[:space:]]/}" ]]; then \
			echo "$(GO) test -p 1 -count=1 -timeout 25m <all packages but ./ha, ./sim, ./scenarios and ./e2e>"; \
			$(GO) test -p 1 -count=1 -timeout 25m $$pkgs || rc=$$?; \
			took "every package but ./ha, ./sim, ./scenarios and ./e2e"; \
		fi; \
		echo "$(GO) test -count=1 -timeout 15m ./e2e"; \
		$(GO) test -count=1 -timeout 15m ./e2e || rc=$$?; \
		took ./e2e; \
		if compgen -G 'scenarios/*.go' >/dev/null; then \
			echo "$(GO) test -count=1 -timeout 25m ./scenarios $(SCENARIO_FLAGS)"; \
			$(GO) test -count=1 -timeout 25m ./scenarios $(SCENARIO_FLAGS) || rc=$$?; \
			took ./scenarios; \
		fi; \
		return $$rc; \
	}; \
	if [[ "$(TEST_LANES)" == 2 ]]; then \
		echo "make test: ./ha, ./sim and the fuzz run go on beside the other packages, ./e2e and ./scenarios (TEST_LANES=2); their output follows"; \
		lane_ha > "$$alog" 2>&1 & apid=$$!; \
		(lane_rest) || rc=$$?; \
		arc=0; wait "$$apid" || arc=$$?; \
		echo "make test: the output of ./ha, ./sim and the fuzz run, which ran beside the rest:"; \
		cat "$$alog"; \
		[[ "$$arc" == 0 ]] || rc=$$arc; \
	else \
		(lane_rest) || rc=$$?; \
		lane_ha || rc=$$?; \
	fi; \
	leaked=""; \
	for i in 1 2 3 4 5 6 7 8 9 10; do \
		leaked=""; \
		for p in $$($(leaked_pids)); do \
			grep -qx "$$p" <<<"$$before" || leaked+=" $$p"; \
		done; \
		[[ -z "$$leaked" ]] && break; \
		sleep 0.5; \
	done; \
	if [[ -n "$$leaked" ]]; then \
		echo "make test: real servers started from $$dir outlived the tests (pids:$$leaked):"; \
		ps -o pid=,args= -p "$${leaked# }" | cut -c1-200 || true; \
		echo "a test did not stop what it started; kill them by pid once read"; \
		rc=1; \
	fi; \
	echo "make test: $$(( (SECONDS - start) / 60 )) min $$(( (SECONDS - start) % 60 )) s of tests (rc $$rc)"; \
	all=$$(( $$(date +%s) - $(MAKE_STARTED) )); \
	echo "make test: $$(( all / 60 )) min $$(( all % 60 )) s in all, since make started (the asset build, go vet and the test builds included)"; \
	exit $$rc

## e2e: the end-to-end test of the real bin/stratum on network-namespace hosts (root; see docs/real-hosts.md)
e2e: assets e2e-deps
	$(GO) test -count=1 -timeout 15m -v ./e2e

## e2e-deps: install what the end-to-end test's hosts need (iproute2's ip, util-linux's unshare, nsenter, setpriv, mountpoint, and mount; systemd and systemd-container's systemd-nspawn, for the host booted into systemd) when missing and root
e2e-deps:
	@missing=""; \
	for c in ip unshare nsenter setpriv mountpoint mount systemd-nspawn systemctl; do command -v "$$c" >/dev/null || missing+=" $$c"; done; \
	[[ -x /lib/systemd/systemd ]] || missing+=" /lib/systemd/systemd"; \
	if [[ -z "$$missing" ]]; then exit 0; fi; \
	if [[ "$$(id -u)" != 0 ]]; then echo "e2e-deps: missing$$missing; not root, so not installing (the e2e test skips without root)"; exit 0; fi; \
	pkgs="iproute2 util-linux mount systemd systemd-container"; \
	echo "e2e-deps: installing $$pkgs for$$missing"; \
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$pkgs >/dev/null || \
		{ apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$pkgs >/dev/null; }

## timeline-deps: install headless Chromium (Debian's chromium), which ./sim/timeline's browser tests render the timeline page in, when missing and root (without it they skip, or fail when CI is set)
timeline-deps:
	@if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then exit 0; fi; \
	if [[ "$$(id -u)" != 0 ]]; then echo "timeline-deps: chromium missing; not root, so not installing (./sim/timeline's browser tests skip, or fail when CI is set)"; exit 0; fi; \
	echo "timeline-deps: installing chromium"; \
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >/dev/null || \
		{ apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >/dev/null; }

## demo: build kube-apiserver, then stratum (nothing else the demo does not use), then start a simulated cluster of three control planes
# In turn, not together: stratum's build then takes the packages it shares
# with kube-apiserver from the build cache (2 cores are busy either way).
demo:
	@$(MAKE) --no-print-directory demo-assets
	@$(MAKE) --no-print-directory build
	bin/stratum sim up --control-planes 3

## demo-assets: build only what the demo needs (kube-apiserver; the simulator embeds etcd) into the asset cache
demo-assets:
	@dir="$$($(GO) run ./internal/assets/assetsdir)"; \
	tools/build-assets.sh "$$dir" kube-apiserver

## bench: every benchmark, one package at a time (BenchmarkJoin $(JOIN_SAMPLES) times per side), then a table of each one's ratio to its raw baseline
bench: assets
	@{ $(GO) test -p 1 -run '^$$' -bench 'BenchmarkJoin$$' -benchtime $(JOIN_SAMPLES)x -benchmem ./ha; \
	   $(GO) test -p 1 -run '^$$' -bench . -skip 'BenchmarkJoin$$' -benchmem ./...; } 2>&1 | $(GO) run ./internal/benchtable

## explore: run the scenarios with many checks per property (CHECKS=$(CHECKS), STEPS=30, SEED= for a random one, RUN= to pick properties); each logs its checks per minute
explore: assets
	$(GO) test ./scenarios -v -count=1 -timeout 0 -run '$(or $(RUN),.)' -rapid.checks=$(CHECKS) -rapid.steps=$(or $(STEPS),30) $(if $(SEED),-rapid.seed=$(SEED))

## mutate: plant each bug of internal/mutate's list in a scratch worktree, run the tests meant to catch it, and report any that none caught (RUN= to pick mutants by name; about 35 min for all)
mutate: assets
	$(GO) run ./internal/mutate $(if $(RUN),-run '$(RUN)')

## clean: remove bin/ and dist/ (the asset cache is kept: see docs/assets.md)
clean:
	rm -rf bin dist

## help: list the targets
help:
	@sed -n 's/^## //p' $(MAKEFILE_LIST)

## fixtures: remake the committed test fixtures under fixtures/ (see fixtures/README.md)
.PHONY: fixtures
fixtures: assets
	$(GO) run ./fixtures/gen -out fixtures/etcd-join-bundle.db
	@ls -l fixtures/etcd-join-bundle.db
