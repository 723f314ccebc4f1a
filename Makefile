# Tandem's Makefile is a menu of flag sets over `go build` and `go test`.
# Every target that needs the native stack runs scripts/setup.sh first; it is
# idempotent and finishes in seconds when nothing changed.

ROOT   := $(abspath .)
NATIVE := $(ROOT)/.native
PKG    := github.com/tandemsearch/tandem

export CGO_ENABLED := 1
export CGO_CFLAGS  := -I$(NATIVE)/include
export CGO_LDFLAGS := -L$(NATIVE)/lib -Wl,-rpath,$(NATIVE)/lib -Wl,-rpath,$$ORIGIN/../.native/lib

GO_LDFLAGS := -X $(PKG)/internal/native.builtinPrefix=$(NATIVE)
GOFLAGS_BUILD := -ldflags '$(GO_LDFLAGS)'
TESTFLAGS ?=

.PHONY: all setup models-extra build test test-short testrace eval-scifact eval-cranfield bench bench-encode bench-ingest bench-late bench-peers bench-serve soak soak-race lint demo clean-native

all: build ## the same as build

.PHONY: help
help: ## this menu: each target and what it does
	@awk -F':.*## ' '/^[a-z][a-zA-Z0-9_-]*:.*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

setup: ## build .native/: FAISS, ONNX Runtime and the default model (idempotent)
	@bash scripts/setup.sh

# Every model the tests use: the three float32 models and their int8
# variants, which a Python environment (.native/venv) quantises
# (docs/models.md). make test runs it; make demo and make build do not.
.PHONY: models
models: ## add the other models the tests use, and the int8 variants, to .native/
	@bash scripts/setup.sh --all

# Optional models beyond those (docs/models.md).
models-extra: setup ## add the optional encoder models to .native/
	@bash scripts/setup-models.sh answerai-colbert-small-v1

build: setup ## build bin/tandem
	go build $(GOFLAGS_BUILD) -o bin/tandem ./cmd/tandem

# The README's test command: set-up, lint, the embedding example, every
# test, then the build without cgo, which serves BM25 only, the native fuzz
# targets and a minute of the outside API fuzzer.
# TEST_TIMEOUT bounds each package's tests (go test -timeout); a slow
# machine gives more, together with TANDEM_TEST_TIMESCALE, which stretches
# every wait in the tests (internal/testtime; docs/testing.md).
TEST_TIMEOUT ?= 60m
test: models lint example ## the whole test suite: lint, the example, every test, fuzz seeds, a minute of Schemathesis
	bash scripts/setup-browser.sh
	go test $(GOFLAGS_BUILD) -count=1 -timeout $(TEST_TIMEOUT) $(TESTFLAGS) ./...
	CGO_ENABLED=0 go build ./...
	CGO_ENABLED=0 go vet ./...
	CGO_ENABLED=0 go test -count=1 -run NoCgo ./engine/
	$(MAKE) fuzz FUZZTIME=20s
	$(MAKE) fuzz-api APIFUZZ_TIME=1m APIFUZZ_DOCS=60

# The release archive, dist/tandem-VERSION-linux-amd64.tar.gz
# (scripts/dist.sh): the tandem binary, the shared libraries it loads,
# found beside it with no environment variables, the default model, the
# licences and a short README. VERSION is git describe's unless given.
.PHONY: dist
VERSION ?=
dist: setup ## build the release archive dist/tandem-VERSION-linux-amd64.tar.gz
	@bash scripts/dist.sh $(if $(VERSION),--version $(VERSION))

# Installs the native libraries and headers, and the models, where a Go
# program that imports Tandem finds them with no environment variables:
# /usr/local as root, else ~/.local (scripts/install.sh; INSTALL_FLAGS=--bin
# also installs the tandem command).
.PHONY: install example
INSTALL_FLAGS ?=
install: setup ## install the native libraries and models system-wide (scripts/install.sh)
	@bash scripts/install.sh $(INSTALL_FLAGS)

# examples/embed, a module of its own that depends on this checkout through
# a replace, run as a user's program would be: after a system-wide install
# (it fails, saying so, when that is not possible), with none of the CGO_*
# flags this Makefile exports and no TANDEM_* variable.
example: setup ## build and run examples/embed, the program that embeds Tandem
	@bash scripts/install.sh --system
	cd examples/embed && env -u CGO_ENABLED -u CGO_CFLAGS -u CGO_LDFLAGS -u TANDEM_NATIVE -u TANDEM_MODELS -u TANDEM_ONNXRUNTIME_LIB go run .

# Every native fuzz target in turn for FUZZTIME each (Go fuzzes one target
# per run): progress, then a table of targets, execs and results, also in
# .native/fuzz-summary.md (scripts/fuzz.sh). FUZZ=Pattern picks targets.
# A failing input lands in the package's testdata/fuzz/: commit it.
FUZZTIME ?= 1m
FUZZ ?= .
.PHONY: fuzz
fuzz: setup ## run every Go fuzz target for FUZZTIME each
	FUZZ_LDFLAGS='$(GO_LDFLAGS)' bash scripts/fuzz.sh $(FUZZTIME) '$(FUZZ)'

# Schemathesis, an outside API fuzzer, against a live tandem serve with
# keys and a collection indexed with the default model (the demo corpus,
# APIFUZZ_DOCS documents, 0 for all), every check and phase, stateful
# included, for APIFUZZ_TIME (scripts/apifuzz/run.sh, docs/apifuzz.md), in
# its own Python environment (.native/apifuzz, scripts/apifuzz/setup.sh).
# Prints Schemathesis's summary and the distinct failures, each with a curl;
# the reports go to APIFUZZ_OUT (default bin/apifuzz). Fails on any
# failure. make test runs it for 1 minute over 60 documents.
APIFUZZ_TIME ?= 10m
APIFUZZ_DOCS ?= 0
APIFUZZ_OUT ?= $(ROOT)/bin/apifuzz
.PHONY: fuzz-api
fuzz-api: build ## run Schemathesis against a live server (docs/apifuzz.md)
	bash scripts/apifuzz/setup.sh
	APIFUZZ_TIME=$(APIFUZZ_TIME) APIFUZZ_DOCS=$(APIFUZZ_DOCS) APIFUZZ_OUT=$(APIFUZZ_OUT) bash scripts/apifuzz/run.sh

test-short: setup ## go test -short: the tests that need no models or shared data
	go test $(GOFLAGS_BUILD) -short -count=1 ./...

RACE_TIMEOUT ?= 180m
testrace: models ## the tests under the race detector
	go test $(GOFLAGS_BUILD) -race -count=1 -timeout $(RACE_TIMEOUT) ./...

# The SciFact acceptance run of dense, late and hybrid search (engine's
# TestSciFact): indexes SciFact with the default model, then evaluates every
# mode and fusion. TANDEM_SCIFACT_DIR keeps the indexed collection between
# runs; TANDEM_SCIFACT_SUBSET=M cuts the corpus for a quick look.
eval-scifact: setup ## index SciFact and print nDCG@10, recall and p50 in every mode
	TANDEM_SCIFACT=1 go test $(GOFLAGS_BUILD) -count=1 -timeout 150m -run '^TestSciFact$$' -v ./engine/

# The same table for Cranfield through the CLI (scripts/eval-beir.sh).
eval-cranfield: build ## the same for Cranfield
	bash scripts/eval-beir.sh cranfield

bench: setup ## every Go benchmark (go test -bench)
	go test $(GOFLAGS_BUILD) -run '^$$' -bench . -benchmem -timeout 120m ./...

# Document encoding, Tandem against onnxruntime in Python on the same model
# file and threads, alternating (scripts/bench/encode.sh MODEL DOCS THREADS
# ROUNDS).
BENCH_MODEL ?= bge-small-en-v1.5-int8
bench-encode: build models ## encoding speed beside onnxruntime in Python
	bash scripts/bench/encode.sh $(BENCH_MODEL)

# Ingest and search at scale: a synthetic collection whose documents bring
# their vectors (tandem bench ingest). DOCS=1000000 is the README's run.
# Each phase (ingest, close, open from snapshot then searches, open with the
# dense index rebuilt then searches) reports its peak RSS, anonymous and
# mapped-file memory, per document; dense recall@10 is against an exact
# brute force over --recall-queries queries (default 20). A second process
# then opens the collection as a user would, fresh, and only searches
# (--search-only): its peaks are those of a server opening the collection.
# INGEST_FLAGS adds flags to the first; KEEP=1 keeps the collection, and
# `bin/tandem bench ingest --dir DIR --search-only` on copies of it then
# compares two binaries on one collection.
DOCS ?= 1000000
INGEST_FLAGS ?=
INGEST_DIR = $(or $(BENCH_DIR),$(ROOT)/.bench-ingest)
bench-ingest: build ## ingest DOCS synthetic documents that bring their vectors; memory per phase and document, disk, search p50, recall
	bin/tandem bench ingest --dir $(INGEST_DIR) --docs $(DOCS) --keep $(INGEST_FLAGS)
	bin/tandem bench ingest --dir $(INGEST_DIR) --search-only
	$(if $(KEEP),,rm -rf $(INGEST_DIR))

# Late interaction at scale: synthetic clustered token matrices (128 tokens
# of 128 values per document) that the documents bring, residual codes by
# default (tandem bench late): build time, bytes per token, peak RSS,
# latencies with and without filters, recall@10 against late-exact.
# LATE_DOCS=100000 is the acceptance run; LATE_FLAGS adds flags, e.g.
# LATE_FLAGS='--late-index FAISS' for the FAISS index.
LATE_DOCS ?= 100000
LATE_FLAGS ?=
bench-late: build ## late interaction at LATE_DOCS synthetic documents: build, memory, p50, recall
	bin/tandem bench late --dir $(or $(BENCH_DIR),$(ROOT)/.bench-late) --docs $(LATE_DOCS) $(LATE_FLAGS)

# Tandem beside its peers, alternating PEERS_ROUNDS rounds, in its own
# Python environment (.native/peers), never part of make test: BM25 beside
# Tantivy, bm25s and Lucene (Pyserini) on SciFact and Cranfield from
# ../shared/data; dense retrieval beside FAISS with onnxruntime in Python,
# and BM25 + dense beside LanceDB's hybrid search (with and without a
# filter), on SciFact, over vectors exported from a Tandem collection
# (PEERS_DENSE_DIR, else one indexed once into .native/peers, which takes
# minutes); late interaction beside PyLate's PLAID on Cranfield, over the
# token vectors of a Tandem collection (PEERS_LATE_DIR, else one indexed
# once with residual codes; PEERS_PLAID reuses a PLAID index an earlier run
# built, as its progress line says). Writes the tables to
# .native/peers/{bm25,dense,hybrid,late}.md.
PEERS_ROUNDS ?= 3
bench-peers: build ## Tandem beside Tantivy, bm25s, Lucene, FAISS, LanceDB and PyLate
	bash scripts/peers/setup.sh
	.native/peers/bin/python scripts/peers/bench_bm25.py --rounds $(PEERS_ROUNDS)
	.native/peers/bin/python scripts/peers/bench_dense.py --rounds $(PEERS_ROUNDS) $(if $(PEERS_DENSE_DIR),--dir $(PEERS_DENSE_DIR))
	.native/peers/bin/python scripts/peers/bench_hybrid.py --rounds $(PEERS_ROUNDS) $(if $(PEERS_DENSE_DIR),--dir $(PEERS_DENSE_DIR))
	.native/peers/bin/python scripts/peers/bench_late.py --rounds $(PEERS_ROUNDS) $(if $(PEERS_LATE_DIR),--dir $(PEERS_LATE_DIR)) $(if $(PEERS_PLAID),--plaid $(PEERS_PLAID))

# `tandem serve` under load on loopback (scripts/bench/serve.sh): SciFact
# indexed once with the default model into BENCH_SERVE_DATA (default
# .bench-serve), 8 searchers cycling bm25, dense, late and hybrid plus one
# writer upserting, for DURATION (default 2m); QPS, p50/p95/p99 per mode,
# searches/s, the server's query-encoding cache hit rate and queries per
# model run, and the error count, which must be 0. ZIPF=1.1 draws the
# queries from a Zipfian distribution (exponent 1.1) so that they repeat.
bench-serve: build ## tandem serve under load on loopback
	bash scripts/bench/serve.sh

# SciFact posted to a default server in one request, as a task, followed
# to the end with searches meanwhile, then ranked against the same corpus
# indexed by `tandem index`: the run files must be byte-identical
# (scripts/bench/task-scifact.sh; issue #44; about 15 minutes on 2 cores).
.PHONY: check-task-scifact
check-task-scifact: build ## SciFact uploaded through the server as a task, ranked as a local index
	bash scripts/bench/task-scifact.sh

# What collections cost `tandem serve` in memory (scripts/bench/collections.sh;
# docs/server.md, Memory): COLLECTIONS (default 20) collections of the
# default dense model with a few documents each, VmRSS before, after the
# first and after all, open files and threads. BENCH_COMPARE=PATH/tandem
# runs another binary too, alternating, ROUNDS rounds; MODEL= makes
# BM25-only collections.
.PHONY: bench-collections
BENCH_COMPARE ?=
bench-collections: build ## what collections cost tandem serve in memory
	bash scripts/bench/collections.sh $(BENCH_COMPARE) bin/tandem

# The replication layers issue #17 weighs, side by side on loopback
# (experiments/consensusbench, a module of its own; docs/cluster.md):
# acknowledged-write latency, throughput and recovery after the leader is
# lost, hashicorp/raft against NATS JetStream, alternating rounds;
# CONSENSUS_FLAGS="--kill --rounds 5" runs each node as a process and
# SIGKILLs the leader.
# CONSENSUS_FLAGS adds flags, e.g. --size 262144.
.PHONY: bench-consensus
CONSENSUS_FLAGS ?=
bench-consensus: ## the Raft experiment behind the cluster (experiments/consensusbench)
	cd experiments/consensusbench && go run . $(CONSENSUS_FLAGS)

# The crash torture harness (tandem torture): KILLS SIGKILLs of a writer
# that upserts and deletes documents bringing dense and token vectors
# (residual late index), each followed by a reopen checked against the
# writer's ledger of acknowledged operations. It fails on any lost
# operation or any disagreement among Badger, Bleve, FAISS and the token
# index. TORTURE_DIR keeps the collection and ledger (default: a temporary
# directory, removed when the run passes); TORTURE_FLAGS adds flags, e.g.
# --duration 30m, --seed N. make test runs 30 kills
# (internal/stress/torture TestTorture).
.PHONY: torture
KILLS ?= 1000
TORTURE_FLAGS ?=
torture: build ## KILLS SIGKILLs of a writer, then check every acknowledged write
	bin/tandem torture --kills $(KILLS) $(if $(TORTURE_DIR),--dir $(TORTURE_DIR)) $(TORTURE_FLAGS)

# The soak (tandem soak): 4 searchers in every mode, with and without
# filters, beside a writer and a deleter against one new collection for
# DURATION (default 60m), sampled every minute; it fails on any error, on
# a hit that breaks its filter or was deleted before its search began, and
# on growth of RSS, goroutines or open files after warm-up. The samples
# and the verdict go to bin/soak-report.md; SOAK_FLAGS adds flags.
SOAK_FLAGS ?=
soak: build ## searchers beside a writer and a deleter for DURATION; fails on growth
	bin/tandem soak --duration $(or $(DURATION),60m) --report bin/soak-report.md $(SOAK_FLAGS)

# The same under the race detector (default 5m), from a binary of its own:
# it judges errors, violations, data races, goroutines and open files, and
# reports memory without bounding it (the race runtime's own memory grows;
# internal/stress/soak judgesMemory);
# the report goes to bin/soak-race-report.md.
soak-race: setup ## a short soak under the race detector
	go build -race $(GOFLAGS_BUILD) -o bin/tandem-race ./cmd/tandem
	bin/tandem-race soak --duration $(or $(DURATION),5m) --report bin/soak-race-report.md $(SOAK_FLAGS)

lint: ## gofmt, go vet and the house lint
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet $(GOFLAGS_BUILD) ./...

# The README's main-job command: set-up, build, index a sample, search it.
demo: build ## index the Go standard library docs and run filtered hybrid searches
	@bash scripts/demo.sh

# A 3-node cluster on loopback (tandem serve --cluster, ports 7711-7713
# and 7811-7813): a collection of 3 shards x 3 replicas, the demo corpus
# uploaded through one node as a task and searched through another
# (scripts/cluster-demo.sh; README "Running a cluster").
.PHONY: cluster-demo
cluster-demo: build ## start a 3-node cluster on loopback, upload the demo corpus as a task, search through another node
	@bash scripts/cluster-demo.sh

# A 3-node cluster (nodes in one process on loopback, 3 shards x 3
# replicas) against one engine on SciFact, alternating: write latency per
# acknowledged batch and throughput, then search latency per mode
# (tandem bench cluster; docs/cluster.md, "Running a cluster", has the table).
# BENCH_CLUSTER_FLAGS adds flags, e.g. --late or --docs 2000.
.PHONY: bench-cluster
BENCH_CLUSTER_FLAGS ?=
bench-cluster: build ## a cluster of 3 shards against one node: speed and rankings
	bin/tandem bench cluster --data ../shared/data/scifact $(BENCH_CLUSTER_FLAGS)

clean-native: ## remove .native/
	rm -rf $(NATIVE)
