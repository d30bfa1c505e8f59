# nave — build, run, test. See README.md.
GO            ?= go
BIN           := bin
STATICCHECK   := honnef.co/go/tools/cmd/staticcheck@v0.8.2
TEST_TIMEOUT  ?= 20m
CMDS          := nave-hub=./hub/cmd/nave-hub navectl=./cmd/navectl nave-spoke=./spoke/cmd/nave-spoke nave-agent=./spoke/cmd/nave-agent \
                 nave-demo=./examples/demo/launcher nave-demo-backend=./examples/demo/backend \
                 nave-demo-client=./examples/demo/client

.PHONY: all build images run test test-race test-node bench bench-load generate lint fmt clean kube-assets node-assets

all: build

## build: compile every binary into bin/
build:
	@mkdir -p $(BIN)
	@for c in $(CMDS); do \
		name=$${c%%=*}; pkg=$${c#*=}; \
		echo "go build -o $(BIN)/$$name $$pkg"; \
		$(GO) build -o $(BIN)/$$name $$pkg || exit 1; \
	done

## images: OCI image tarballs bin/images/<name>.tar (nave-hub, nave-spoke, ...: internal/imagebuild/images.go),
## static binaries on a base assembled from nothing, no container daemon, no base image pulled;
## the same commit gives the same digests (docs/install.md, docs/decisions/017-images-without-a-daemon.md);
## IMAGE_ARGS='-proxy-base FILE' adds nave-proxy, nave-agent on an Envoy base with iptables (docs/node-tests.md)
images:
	$(GO) run ./internal/imagebuild -out $(BIN)/images $(IMAGE_ARGS)

## run: start a hub, a spoke on examples/config, three demo backends and a demo client (Ctrl-C stops all)
run: build
	$(BIN)/nave-demo --bin $(BIN) --config examples/config

## kube-assets: build kube-apiserver and etcd for the tests into .cache/kube/ (once: ~6-15 min cold)
kube-assets:
	e2e/kube/build-assets.sh

## node-assets: kube-assets plus kubelet and kube-controller-manager for make test-node (once: ~15 min cold)
node-assets:
	NAVE_NODE_ASSETS=1 e2e/kube/build-assets.sh

## test-node: nave installed on a real single-node cluster (kubelet, containerd, runc, CNI; needs root and
## apt-get install containerd runc containernetworking-plugins iptables): e2e/node, docs/node-tests.md
test-node: node-assets
	NAVE_NODE_TESTS=1 $(GO) test -count=1 -timeout 30m -v ./e2e/node/

## test: every test (unit, fuzz seed corpora, end-to-end with real processes and real API servers)
test: kube-assets
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

## test-race: the same under the race detector (slower); RACE_PKGS narrows it
# (.ci/run leaves out e2e, see there)
RACE_PKGS ?= ./...
test-race: kube-assets
	$(GO) test -race -count=1 -timeout 40m $(RACE_PKGS)

## bench: Go benchmarks (each has a test twin that runs it once in make test), then the load benchmark
bench: kube-assets
	$(GO) test -run '^$$' -bench . -benchmem -timeout 60m ./...
	$(MAKE) bench-load

## bench-load: issue 6's load benchmark against a real hub, both ADS variants, median of 3 runs (docs/load-benchmark.md); LOAD_ARGS adds flags
bench-load:
	$(GO) run ./e2e/load/cmd/nave-load --mode sotw,delta --runs 3 $(LOAD_ARGS)

## generate: regenerate protobuf Go code, docs/config.md and the Istio CRDs in deploy/spoke (pinned tools, no protoc needed)
generate:
	$(GO) run ./internal/protogen protocol/v1 shared/meshconfig/v1 shared/nds/v1
	$(GO) run ./internal/configdoc > docs/config.md
	$(GO) run ./internal/crdgen deploy/spoke/istio-crds.yaml

## lint: gofmt, no merge conflict markers, no time.Sleep in tests outside synctest or internal/sleepcheck/allowlist.txt, go vet, staticcheck, and the layering (internal/layercheck/layers.txt)
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@if git grep -n -E '^(<<<<<<< |>>>>>>> )' -- . ; then echo "merge conflict markers committed (above)"; exit 1; fi
	$(GO) run ./internal/sleepcheck
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	$(GO) run ./internal/layercheck -rules internal/layercheck/layers.txt ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf $(BIN)
