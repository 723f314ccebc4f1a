// Package server is Tandem's HTTP JSON API: the collections of one data
// directory, or those a Catalog holds (a cluster's, Config.Catalog),
// served over net/http. `tandem serve` runs it; a Go program can
// mount Server.Handler in its own server.
//
// The main types are Config, which holds the data directory, the API keys
// and the limits, and Server, which New opens and Close closes. The routes,
// their bodies and their answers are in openapi.json (OpenAPI 3), which the
// server also serves at /openapi.json.
//
// # Usage
//
//	cfg := &server.Config{DataDir: "data", AdminKeys: []string{key}}
//	if err := server.CheckExposure(addr, cfg); err != nil { ... } // no key: loopback only
//	srv, err := server.New(cfg)
//	if err != nil { ... }
//	ln, err := net.Listen("tcp", addr)
//	if err != nil { ... }
//	err = srv.Serve(ctx, ln) // until ctx is done; then shuts down and closes every collection
//
// # Collections
//
// Each collection is a subdirectory of Config.DataDir, opened with
// engine.Open when the server starts or when PUT /v1/collections/{name}
// creates it; with Config.Catalog set, the catalog opens and creates
// them instead (a cluster's collections, sharded and replicated), and the
// server keeps no directory of its own. A name matches ^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$, so it can
// never name a path outside the data directory. A request holds its
// collection for reading while it uses the engine; a drop takes it for
// writing, so it waits for the requests in flight, closes the engine, and
// only then removes the directory (renamed first, so that a crash during
// the removal leaves nothing that the next start would open). A request
// that comes after the drop answers 404.
//
// POST /v1/collections/{name}/restore creates a collection from a backup
// (the body, in the format of GET .../backup and engine.Backup), under
// the rules of a create: the name reserved, 409 if it is taken. The body
// is written to a working directory of the data directory whose name
// (".restoring-...") is no collection's, engine.Restore checks its length
// and SHA-256 before it uses a byte and makes the collection in that
// directory, and the collection is renamed to its name and opened only
// once whole and its models are installed ones (a backup is a client's
// data: its schema may not name a model by a path). The working
// directory is removed in every case, and the next start removes one a
// crash left: a restore leaves the whole collection or nothing, and a
// damaged backup (400 bad_backup, saying what is wrong) or a client that
// stops sending creates nothing. A cluster's catalog takes no restore
// (501).
//
// A create names its models (dense, late, and the schema's models that
// are not external) by the names of the models installed in the server's
// models directory (encoder.Installed): a name is runs of letters and
// digits joined by single '.', '_' or '-', so never a path, and any other
// is 400 bad_model naming the field and listing the installed names. No
// answer to a create shows a path of the server: the engine's errors name
// the collection's directory and the model's files, which the answer
// replaces with the collection's name and the model's (engine.Options
// still takes a model directory, for programs that embed the engine).
//
// A server holds at most Config.MaxCollections collections (--max-collections,
// default DefaultMaxCollections), those found at start included: a create
// or a restore beyond it answers 409 too_many_collections, naming the
// limit and the flag, before anything is made. Collections that use one
// model share its load (package engine), so a collection costs its own
// indexes, not a copy of the model (docs/server.md, Memory).
//
// # Authentication
//
// Keys come as "Authorization: Bearer KEY" or "X-API-Key: KEY". Admin keys
// may do everything; read keys may list and describe collections, get
// documents, search, and read /metrics and /openapi.json. With no key
// configured every request is allowed, and CheckExposure (which `tandem
// serve` applies) refuses to listen on anything but a loopback address.
// A missing or unknown key is 401, a read key on an admin route 403.
// /healthz, /readyz and the web page (/ and /ui/) are never authenticated.
//
// # Limits
//
// Every limit answers a 4xx whose message names the limit and the flag of
// `tandem serve` that sets it: a body over MaxBody (--max-body), a
// restore's over MaxRestore (--max-restore, in place of MaxBody), or an
// upsert line over MaxLine (--max-line) is 413; k+offset over MaxK
// (--max-k, compared without adding, so that no k or offset overflows),
// query text over MaxQuery (--max-query), and a filter over
// Engine.FilterLimits (--max-filter-clauses, --max-filter-depth; see
// package filter) are 400; a body that has not arrived within Timeout
// (--timeout) is 408, and a request that runs past it 504. A filter over
// its limits is refused as it is parsed, at the cost of the part read;
// every stage of a search looks at the request's context, so a 504 is
// answered within the timeout and the work stops with it. An upsert body
// is read whole and its lines measured before anything is stored, so a
// 413 stores nothing.
//
// Routes answer a 405 listing, in Allow, exactly the methods openapi.json
// has for the path (GET without the HEAD that net/http serves with it).
//
// # Requests
//
// A request is what openapi.json says, and what it does not admit is
// refused with a 400 naming the member or the parameter, never taken for
// something else. A body's keys are case-sensitive, and an unknown one is
// refused; a member given is of its type, and null is of none: {"ids_only":
// null} is refused naming ids_only (schema.fields[0].boost, depth.bm25 for
// nested ones) rather than taken for the default, which is what leaving the
// member out means; a body that must be an object refuses null. A GET
// search's parameters given are used: k=, offset=, ids_only= (and any value
// but true or false), filter= and filter=null are refused; fusion= and
// late_scoring= are the default, as "" is in the POST form. wait= on an
// upsert is refused like any wait but true. Documents are data, not
// requests: a field whose value is null has no value, as in a JSONL corpus,
// and "_vectors": null is no vectors. The rules the spec cannot state (a
// field or model declared twice, mode and retrievers together in a GET, a
// name the collection or the server lacks) are in docs/apifuzz.md, which
// lists them as the fuzzer's false positives.
//
// # Errors
//
// Every error answer is {"error": {"code": "...", "message": "..."}}. The
// message names what was wrong: the JSON field, the NDJSON line, the
// filter path, the model and vector part, the parameter or the limit. The
// client's mistakes (bad JSON, an invalid schema, filter or retriever, a
// vector of the wrong dimension) are 4xx; 5xx means the server failed and
// is logged with its cause. An upsert answers 200 with per-line errors:
// the good lines are stored, each bad one is reported with its 1-based
// line (for a JSON array, the element's index + 1) and never stored.
//
// # Durability and shutdown
//
// An upsert or delete answers once its batches are committed, fsynced
// (unless Config.Engine.NoSync) and applied to every index: an
// acknowledged write survives a crash. Serve shuts down when its context
// is done (`tandem serve` cancels it on SIGINT or SIGTERM): /readyz
// answers 503, the listener closes, requests in flight finish, and every
// engine is closed, which writes the vector indexes' snapshots so the next
// start need not rebuild them.
//
// # Observability
//
// Each request is logged with log/slog as one line: method, route
// pattern, path, status, bytes, duration, collection and remote address.
// /metrics serves Prometheus metrics from a registry of the server's own:
// requests by route and status, request latency by route, search latency
// by collection and mode (the retriever kinds that ran, joined by '+'; a
// fused search is one observation of its mode) and each retriever's time
// within it (query encoding included), documents per
// collection, documents ingested (whose rate() is the ingest rate), failed
// and deleted, each collection's size on disk by part, and, by model, the
// query encodings (engine.QueryEncodingStats): the cache's hits, misses,
// evictions, entries, bytes and capacity, and the model runs that encoded
// queries and the queries they encoded (their ratio is the mean batch);
// per dense and late-interaction index, whether it is retraining in the
// background and the retrainings started since it was opened; and the ingest tasks by
// state, with the documents and bytes queued.
package server
