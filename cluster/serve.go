package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync/atomic"

	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/server"
)

// ServeConfig is a node of a cluster that serves Tandem's HTTP API
// (package server) over the cluster's collections: what `tandem serve
// --cluster` runs.
type ServeConfig struct {
	// Node configures the node. Serve sets its API to the server's
	// handler.
	Node Config
	// Server configures the API. Serve sets its Catalog to the cluster's
	// collections, its Routes to GET /_cluster/status, POST
	// /_cluster/nodes/{id}/drain and GET /_cluster/backup (behind the
	// admin key) and its Collectors
	// to the node's, and clears its DataDir: the node's Dir holds the
	// data, and its tasks directory the uploads it takes as tasks.
	Server server.Config
	// Shards and Replicas are those of a collection created through this
	// node (Catalog).
	Shards, Replicas int
	// Listening, when set, is called with the node's HTTP address once it
	// serves the API.
	Listening func(addr string)
}

// Serve starts a node and serves the API on its HTTP listener, which also
// serves /_cluster/ to the other nodes, until ctx is done; then it closes
// the node and the server. Until the server is ready the API answers 503
// with the code "starting".
func Serve(ctx context.Context, cfg ServeConfig) error {
	var api atomic.Pointer[http.Handler]
	nc := cfg.Node
	nc.API = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := api.Load(); h != nil {
			(*h).ServeHTTP(w, r)
			return
		}
		http.Error(w, `{"error":{"code":"starting","message":"the node is starting"}}`, http.StatusServiceUnavailable)
	})
	node, err := Start(nc)
	if err != nil {
		return err
	}
	sc := cfg.Server
	sc.DataDir = ""
	if sc.TaskDir == "" {
		// Uploads as tasks are spooled on the node that takes them.
		sc.TaskDir = filepath.Join(nc.Dir, "tasks")
	}
	sc.Catalog = serverCatalog{Catalog{Node: node, Shards: cfg.Shards, Replicas: cfg.Replicas}}
	// The cluster's status, for an operator with the admin key (the other
	// nodes read it with the cluster's credential).
	sc.Routes = []server.Route{{Pattern: "GET /_cluster/status", Admin: true, Handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(node.Status())
	}}, {Pattern: "POST /_cluster/nodes/{id}/drain", Admin: true, Handler: func(w http.ResponseWriter, r *http.Request) {
		// Drain a node: its replicas move away, then it leaves.
		if err := node.Drain(r.Context(), r.PathValue("id")); err != nil {
			status, code := statusOf(err), "drain_refused"
			if status == http.StatusInternalServerError || status == http.StatusServiceUnavailable {
				code = "unavailable"
			}
			writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": err.Error()}})
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]string{"draining": r.PathValue("id")})
	}}, {Pattern: "GET /_cluster/backup", Admin: true, Handler: func(w http.ResponseWriter, r *http.Request) {
		// This node's backup (Node.Backup); a failure once it has begun
		// cuts the connection, and the backup cut short is refused on
		// restore.
		w.Header().Set("Content-Type", "application/octet-stream")
		if err := node.Backup(r.Context(), w); err != nil {
			node.log.Error("node backup stopped", "error", err)
			panic(http.ErrAbortHandler)
		}
	}}}
	sc.Collectors = node.Collectors()
	srv, err := server.New(&sc)
	if err != nil {
		node.Close()
		return err
	}
	h := srv.Handler()
	api.Store(&h)
	logger := sc.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.Info("cluster node", "node", node.self.ID, "raft", node.self.Raft, "http", node.self.HTTP, "credentials", nc.Credentials.String())
	if cfg.Listening != nil {
		cfg.Listening(node.self.HTTP)
	}
	<-ctx.Done()
	return errors.Join(node.Close(), srv.Close())
}

// serverCatalog adapts a cluster's collections to server.Catalog.
type serverCatalog struct{ c Catalog }

func (c serverCatalog) List() []string { return c.c.List() }
func (c serverCatalog) Open(name string) (server.Collection, error) {
	col, err := c.c.Open(name)
	if err != nil {
		return nil, err
	}
	return col, nil
}
func (c serverCatalog) Create(ctx context.Context, name string, opts engine.Options) (server.Collection, error) {
	col, err := c.c.Create(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	return col, nil
}
func (c serverCatalog) Drop(ctx context.Context, name string) error { return c.c.Drop(ctx, name) }
