package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/netaddr"
)

// Peer is one node of a cluster: its id and the addresses other nodes
// reach it at.
type Peer struct {
	ID string `json:"id"`
	// Raft is the address of the node's Raft listener (every group it
	// runs shares it); HTTP that of its HTTP API, which other nodes use to
	// forward writes and to search its shards.
	Raft string `json:"raft"`
	HTTP string `json:"http"`
}

// Config configures a node.
type Config struct {
	// ID names this node; it must be one of Peers.
	ID string
	// Dir holds the node's Raft state and its shard replicas.
	Dir string
	// Peers lists every node of the cluster, this one included. A new
	// cluster's nodes bootstrap its metadata group with this list, so every
	// node must be given the same one. A node joining a running cluster
	// (Join) lists itself.
	Peers []Peer
	// Join, when set, is the HTTP address of a member of a running
	// cluster: a node starting without state asks it to be added, and
	// takes the cluster's nodes from its answer. A node that has joined
	// before resumes as a member.
	Join string
	// RaftListener and HTTPListener, when set, are the listeners to serve
	// on (tests pass ones bound to port 0); otherwise the node listens on
	// its own Peer addresses.
	RaftListener, HTTPListener net.Listener
	// Dial opens connections to other nodes, for Raft and HTTP; nil dials
	// TCP directly. Fault tests route it through a proxy.
	Dial Dialer
	// HeartbeatTimeout and ElectionTimeout are Raft's (raft.Config); 0
	// means 500 ms each. Lower recovers from a lost leader sooner and risks
	// needless elections on a loaded machine.
	HeartbeatTimeout, ElectionTimeout time.Duration
	// Engine holds the options every shard replica opens with (model
	// threads, NoSync...). Schema, Dense, Late and LateIndex come from the
	// collection's spec instead.
	Engine engine.Options
	// Log receives Raft's log at warning level and above; nil discards it.
	Log io.Writer
	// SnapshotThreshold and TrailingLogs are Raft's (raft.Config): a group
	// snapshots its FSM (for a shard, a backup of its store) once that many
	// entries follow the last snapshot, and keeps that many entries behind
	// it for lagging replicas; a replica further behind restores a
	// snapshot. 0 means Raft's defaults (8,192 and 10,240).
	SnapshotThreshold, TrailingLogs uint64
	// API serves every HTTP path outside /_cluster/ on the node's HTTP
	// listener: tandem serve --cluster gives the server's handler, so that
	// one address serves clients and the other nodes. Nil answers 404. A
	// request for /_cluster/status without the cluster's credential goes
	// to API too, which may answer it for an operator (tandem serve does,
	// behind its admin key).
	API http.Handler
	// Credentials protect the traffic between nodes; every node of the
	// cluster must hold the same. Without them every address of the node
	// must be loopback (CheckExposure).
	Credentials Credentials
	// RequestTimeout, when set, bounds reading a request on the HTTP
	// listener (and writing its answer, 5 s more), as the server's
	// --timeout does; 0 leaves only the header's 10 s bound.
	RequestTimeout time.Duration
}

// CheckExposure refuses a node whose Raft or HTTP address is not loopback
// when the cluster is unprotected: its /_cluster/ routes write to shards
// and its Raft listener takes log entries, so without credentials they
// must not be reachable from other machines.
func CheckExposure(self Peer, c Credentials) error {
	if c.Protected() {
		return nil
	}
	for _, a := range []struct{ what, addr string }{{"Raft", self.Raft}, {"HTTP", self.HTTP}} {
		if !netaddr.IsLoopback(a.addr) {
			return fmt.Errorf("cluster: refusing to listen on %s (node %s's %s address) without cluster credentials: it is not a loopback address; give every node the same cluster key (--cluster-key-file, or TANDEM_CLUSTER_KEY) or certificates of the cluster's CA (--cluster-ca, --cluster-cert, --cluster-cert-key), or bind 127.0.0.1", a.addr, self.ID, a.what)
		}
	}
	return nil
}

// CollectionSpec describes a sharded collection. It is replicated by the
// cluster's metadata group, so every node sees the same one.
type CollectionSpec struct {
	Name string `json:"name"`
	// Shards is the number of shards, fixed at creation: a document's
	// shard is a hash of its id (ShardOf), so an upsert always lands where
	// the document is.
	Shards int `json:"shards"`
	// Replicas is the number of copies of each shard, on different nodes;
	// a write is acknowledged once a majority of them has it.
	Replicas int `json:"replicas"`
	// Schema is the collection's schema. It is strict in a cluster: a
	// shard cannot infer a new field's type the way every other shard
	// would, so documents with undeclared fields are refused.
	Schema *tandem.Schema `json:"schema"`
	// Dense, Late, LateIndex and LateEncoding are as in engine.Options.
	Dense        []string `json:"dense,omitempty"`
	Late         []string `json:"late,omitempty"`
	LateIndex    string   `json:"late_index,omitempty"`
	LateEncoding string   `json:"late_encoding,omitempty"`
	// Placement lists, per shard, the ids of the nodes holding a replica;
	// the node creating the collection fills it in, and moves change it.
	Placement [][]string `json:"placement,omitempty"`
	// UID tells the collection from a dropped one of the same name; the
	// node creating it draws it.
	UID string `json:"uid,omitempty"`
	// Moved marks, per shard, a shard whose placement a move has changed:
	// its group exists, so a replica opening for it joins the group rather
	// than bootstrapping one.
	Moved []bool `json:"moved,omitempty"`
}

// ShardOf is the shard of a document id among n shards.
func ShardOf(id string, n int) int {
	h := fnv.New64a()
	h.Write([]byte(id))
	return int(h.Sum64() % uint64(n))
}

// Node is one node of a cluster. It runs the metadata group, a Raft group
// per shard replica it holds, and the HTTP endpoints other nodes call.
type Node struct {
	cfg    Config
	self   Peer
	peers  map[string]Peer
	rs     *raftStore
	mux    *mux
	client *http.Client
	scheme string // of the URLs of other nodes' HTTP listeners
	http   *http.Server
	httpLn net.Listener
	split  *splitter // nil on an unprotected cluster
	log    hclog.Logger
	// refusals counts connections and requests refused for their
	// credentials, by listener and reason.
	refusals *prometheus.CounterVec

	meta      *raft.Raft
	metaTrans *raft.NetworkTransport
	fsm       *metaFSM
	stop      context.CancelFunc // ends rebalance and goLive
	wg        sync.WaitGroup     // rebalance and goLive

	mu      sync.RWMutex // guards peers, colls, collection.spec and replicas, closed, failed, stepErr
	colls   map[string]*collection
	closed  bool
	failed  []error // replicas that broke
	stepErr error   // the metadata leader's last step, when it failed
	// copyMark holds the metadata leader's marks between steps: per
	// replica or node catching up, the leader's applied index at the
	// last look (caughtUp), and flags (mark).
	copyMark map[string]uint64
	// settled is set, in rebalance's goroutine only, once this node's
	// metadata has applied everything committed in its leadership.
	settled bool
}

type collection struct {
	// name, shards and uid are the spec's, which never change; the rest
	// of spec (the placement) does, under Node.mu.
	name     string
	shards   int
	uid      string
	spec     CollectionSpec
	replicas map[int]*replica // the shards this node holds

	coordMu sync.Mutex
	coord   *replica // an engine with no documents, for a node without replicas (anyReplica)
}

// close closes the collection's replicas and coordinator engine on this
// node.
func (c *collection) close() error {
	var errs []error
	for _, r := range c.replicas {
		errs = append(errs, r.close())
	}
	c.coordMu.Lock()
	if c.coord != nil {
		errs = append(errs, c.coord.close())
	}
	c.coordMu.Unlock()
	return errors.Join(errs...)
}

// Start starts a node: it opens its Raft store, starts serving Raft and
// HTTP, and joins the metadata group, bootstrapping it with Peers on a
// new cluster. Collections the node holds shards of reopen as the
// metadata group replays.
func Start(cfg Config) (*Node, error) {
	n := &Node{cfg: cfg, peers: map[string]Peer{}, colls: map[string]*collection{}}
	for _, p := range cfg.Peers {
		if p.ID == "" || p.Raft == "" || p.HTTP == "" {
			return nil, fmt.Errorf("cluster: peer %+v: id, raft and http addresses are required", p)
		}
		if _, dup := n.peers[p.ID]; dup {
			return nil, fmt.Errorf("cluster: peer %q listed twice", p.ID)
		}
		n.peers[p.ID] = p
	}
	self, ok := n.peers[cfg.ID]
	if !ok {
		return nil, fmt.Errorf("cluster: node id %q is not among the peers", cfg.ID)
	}
	n.self = self
	if err := CheckExposure(self, cfg.Credentials); err != nil {
		return nil, err
	}
	n.refusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tandem_cluster_refused_total",
		Help: "Connections and requests refused by this node for want of the cluster's credential, by listener (raft, http) and reason (tls: a failed TLS handshake, such as a wrong or missing key; credential: a /_cluster/ request without it; header: a Raft connection that did not name its group; busy: too many connections opening at once).",
	}, []string{"listener", "reason"})
	if n.cfg.HeartbeatTimeout == 0 {
		n.cfg.HeartbeatTimeout = 500 * time.Millisecond
	}
	if n.cfg.ElectionTimeout == 0 {
		n.cfg.ElectionTimeout = 500 * time.Millisecond
	}
	logOut := cfg.Log
	if logOut == nil {
		logOut = io.Discard
	}
	n.log = hclog.New(&hclog.LoggerOptions{Name: "tandem-" + cfg.ID, Level: hclog.Warn, Output: logOut})
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	var err error
	if n.rs, err = openRaftStore(filepath.Join(cfg.Dir, "raft")); err != nil {
		return nil, err
	}
	fail := func(err error) (*Node, error) {
		n.Close()
		return nil, err
	}
	rl := cfg.RaftListener
	if rl == nil {
		if rl, err = net.Listen("tcp", self.Raft); err != nil {
			return fail(fmt.Errorf("cluster: listen for raft: %w", err))
		}
	}
	if n.mux, err = newMux(rl, self.Raft, cfg.Dial, cfg.Credentials, func(reason string, remote net.Addr, err error) {
		n.refuse("raft", reason, remote, err)
	}); err != nil {
		rl.Close()
		return fail(err)
	}
	dial := cfg.Dial
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	tr := &http.Transport{DialContext: dial, MaxIdleConnsPerHost: 32, IdleConnTimeout: time.Minute}
	n.scheme = "http"
	if cfg.Credentials.Protected() {
		// Host names in URLs are the peers' HTTP addresses, which a CA's
		// certificates name; ClientTLS sets ServerName from them.
		tr.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			tc := tls.Client(c, cfg.Credentials.ClientTLS(addr))
			if err := tc.HandshakeContext(ctx); err != nil {
				c.Close()
				return nil, fmt.Errorf("cluster: TLS to %s: %w", addr, err)
			}
			return tc, nil
		}
		n.scheme = "https"
	}
	n.client = &http.Client{Transport: tr}
	n.httpLn = cfg.HTTPListener
	if n.httpLn == nil {
		if n.httpLn, err = net.Listen("tcp", self.HTTP); err != nil {
			return fail(fmt.Errorf("cluster: listen for http: %w", err))
		}
	}
	n.http = &http.Server{Handler: n.Handler(cfg.API), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	if cfg.RequestTimeout > 0 {
		n.http.ReadTimeout, n.http.WriteTimeout = cfg.RequestTimeout, cfg.RequestTimeout+5*time.Second
	}
	if cfg.Credentials.Protected() {
		n.split = newSplitter(n.httpLn, cfg.Credentials.serverTLS(), func(reason string, remote net.Addr, err error) {
			n.refuse("http", reason, remote, err)
		})
		go n.http.Serve(n.split.plain)
		go n.http.Serve(n.split.secure)
	} else {
		go n.http.Serve(n.httpLn)
	}

	// founders are the nodes the metadata state starts from, the same on
	// every node: the peers the cluster's first nodes were started with,
	// which a joining node takes from the member it joins through. Each
	// node keeps them (foundersFile), so that a --peers list changed later
	// changes nothing.
	var joined uint64 // the metadata index a joining node waits for
	metaStore := n.rs.group("meta")
	metaSnaps := filepath.Join(cfg.Dir, "meta-snapshots")
	fresh, err := hasNoState(metaStore, metaSnaps)
	if err != nil {
		return fail(err)
	}
	founders, err := readFounders(cfg.Dir)
	if err != nil {
		return fail(err)
	}
	_, serr := os.Stat(filepath.Join(cfg.Dir, restoredFile))
	restored := serr == nil
	switch {
	case restored && fresh && cfg.Join == "":
		return fail(fmt.Errorf("cluster: node %s was restored from a backup (%s): start it with the HTTP address of a member to rejoin through (--join)", cfg.ID, filepath.Join(cfg.Dir, restoredFile)))
	case restored && !fresh:
		// It has rejoined the metadata group before: its Raft state is
		// its own again.
		if err := os.Remove(filepath.Join(cfg.Dir, restoredFile)); err != nil {
			return fail(err)
		}
	}
	var voters []string
	switch {
	case cfg.Join == "":
		if founders == nil {
			founders = cfg.Peers
		}
		if fresh {
			for _, p := range founders {
				voters = append(voters, p.ID)
			}
			sort.Strings(voters)
		}
	case fresh:
		jctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		jr, err := n.join(jctx, cfg.Join)
		cancel()
		if err != nil {
			return fail(err)
		}
		founders, joined = jr.Founders, jr.Index
		n.mu.Lock()
		for _, p := range jr.Nodes {
			n.peers[p.ID] = p
		}
		n.mu.Unlock()
	case founders == nil:
		return fail(fmt.Errorf("cluster: node %s joined a cluster, and keeps the cluster's founding nodes in %s, which is missing", cfg.ID, filepath.Join(cfg.Dir, foundersFile)))
	}
	if err := writeFounders(cfg.Dir, founders); err != nil {
		return fail(err)
	}
	n.mu.Lock()
	for _, p := range founders {
		if _, ok := n.peers[p.ID]; !ok {
			n.peers[p.ID] = p
		}
	}
	n.mu.Unlock()
	n.fsm = newMetaFSM(n, founders)
	// The log as found: replicas open once it has been applied (or once
	// the part of it that was committed has, when a new leader cut an
	// uncommitted tail).
	last, err := metaStore.LastIndex()
	if err != nil {
		return fail(err)
	}
	if n.meta, n.metaTrans, err = n.startGroup("meta", n.fsm, voters, metaSnaps, false); err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.stop = cancel
	n.wg.Go(func() {
		for n.meta.AppliedIndex() < min(last, n.meta.LastIndex()) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		n.fsm.goLive()
	})
	n.wg.Go(func() { n.rebalance(ctx) })
	if joined > 0 {
		// Serve once the metadata has arrived: the collections, and
		// the cluster's nodes.
		deadline := time.Now().Add(2 * time.Minute)
		for n.meta.AppliedIndex() < joined {
			if time.Now().After(deadline) {
				return fail(fmt.Errorf("cluster: joined, but the metadata did not reach index %d within 2 minutes (at %d)", joined, n.meta.AppliedIndex()))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return n, nil
}

// startGroup starts a Raft group with this node as one of voters; a
// group with no state yet bootstraps with them (every voter bootstraps
// with the same configuration, which Raft allows).
func (n *Node) startGroup(name string, fsm raft.FSM, voters []string, snapDir string, durableFSM bool) (*raft.Raft, *raft.NetworkTransport, error) {
	l, err := n.mux.layer(name)
	if err != nil {
		return nil, nil, err
	}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: l, MaxPool: 3, Timeout: 10 * time.Second, Logger: n.log.Named(name)})
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(n.cfg.ID)
	conf.HeartbeatTimeout, conf.ElectionTimeout = n.cfg.HeartbeatTimeout, n.cfg.ElectionTimeout
	conf.LeaderLeaseTimeout = min(conf.LeaderLeaseTimeout, n.cfg.HeartbeatTimeout)
	conf.Logger = n.log.Named(name)
	// A replica's state is durable in its own store, which records the
	// last entry applied: Raft replays the log after its snapshot, and the
	// replica skips what it has.
	conf.NoSnapshotRestoreOnStart = durableFSM
	if n.cfg.SnapshotThreshold > 0 {
		conf.SnapshotThreshold = n.cfg.SnapshotThreshold
	}
	if n.cfg.TrailingLogs > 0 {
		conf.TrailingLogs = n.cfg.TrailingLogs
	}
	if err := os.MkdirAll(snapDir, 0o755); err != nil {
		trans.Close()
		return nil, nil, fmt.Errorf("cluster: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(snapDir, 2, n.log.Named(name))
	if err != nil {
		trans.Close()
		return nil, nil, fmt.Errorf("cluster: snapshots of %s: %w", name, err)
	}
	if rp, ok := fsm.(*replica); ok {
		if err := rp.repair(snaps, n.log.Named(name)); err != nil {
			trans.Close()
			return nil, nil, err
		}
	}
	store := n.rs.group(name)
	r, err := raft.NewRaft(conf, fsm, store, store, snaps, trans)
	if err != nil {
		trans.Close()
		return nil, nil, fmt.Errorf("cluster: start raft group %s: %w", name, err)
	}
	if len(voters) == 0 {
		return r, trans, nil // joining a group that exists
	}
	var servers []raft.Server
	for _, id := range voters {
		p, _ := n.peer(id)
		servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(p.Raft)})
	}
	if err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		r.Shutdown()
		trans.Close()
		return nil, nil, fmt.Errorf("cluster: bootstrap raft group %s: %w", name, err)
	}
	return r, trans, nil
}

// Close stops the node: its Raft groups, its replicas and its listeners.
// Data stays on disk; Start with the same Config resumes.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	colls := n.colls
	n.mu.Unlock()
	if n.stop != nil {
		n.stop()
	}
	n.wg.Wait()
	var errs []error
	if n.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		n.http.Shutdown(ctx)
		cancel()
	}
	if n.split != nil {
		n.split.close()
	}
	if n.meta != nil {
		errs = append(errs, n.meta.Shutdown().Error())
		n.metaTrans.Close()
	}
	for _, c := range colls {
		errs = append(errs, c.close())
	}
	if n.mux != nil {
		n.mux.close()
	}
	if n.rs != nil {
		errs = append(errs, n.rs.Close())
	}
	return errors.Join(errs...)
}

// peer returns a node's addresses.
func (n *Node) peer(id string) (Peer, bool) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	p, ok := n.peers[id]
	return p, ok
}

// activeNodes lists the ids of the cluster's nodes that are not draining.
func (n *Node) activeNodes() []string {
	var ids []string
	st := n.fsm.state()
	for _, id := range slices.Sorted(maps.Keys(st.Nodes)) {
		if !st.Nodes[id].Draining {
			ids = append(ids, id)
		}
	}
	return ids
}

// placement returns the nodes holding a replica of shard s of c.
func (n *Node) placement(c *collection, s int) []string {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return c.spec.Placement[s]
}

// hasNoState reports whether a Raft group has neither log nor snapshot.
func hasNoState(store *groupStore, snapDir string) (bool, error) {
	snaps, err := raft.NewFileSnapshotStore(snapDir, 2, io.Discard)
	if err != nil {
		return false, fmt.Errorf("cluster: %w", err)
	}
	has, err := raft.HasExistingState(store, store, snaps)
	return !has, err
}

// ID is the node's id.
func (n *Node) ID() string { return n.cfg.ID }

// Collectors are the node's Prometheus metrics, for the program serving
// them to register (tandem serve --cluster adds them to /metrics).
func (n *Node) Collectors() []prometheus.Collector {
	return []prometheus.Collector{n.refusals}
}

// refuse logs and counts a connection or request refused on a listener.
func (n *Node) refuse(listener, reason string, remote net.Addr, err error) {
	n.refusals.WithLabelValues(listener, reason).Inc()
	from := ""
	if remote != nil {
		from = remote.String()
	}
	n.log.Warn("refused", "listener", listener, "reason", reason, "remote", from, "error", err)
}

// Sentinel errors.
var (
	ErrExists        = fmt.Errorf("cluster: collection exists (%w)", fs.ErrExist)
	ErrNoCollection  = fmt.Errorf("cluster: no such collection (%w)", fs.ErrNotExist)
	ErrNotLeader     = errors.New("cluster: not the leader")
	ErrNoReplica     = errors.New("cluster: no replica of the shard answered")
	ErrBadCollection = fmt.Errorf("cluster: bad collection spec (%w)", engine.ErrBadRequest)
)

// openCollection opens the replicas of spec that want names and starts
// their Raft groups, and closes and deletes those open that it does not;
// replicas open already are left alone.
func (n *Node) openCollection(spec CollectionSpec, want map[int]bool, rejoining bool) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return errors.New("cluster: node closed")
	}
	c := n.colls[spec.Name]
	fresh := c == nil
	if fresh {
		c = &collection{name: spec.Name, shards: spec.Shards, uid: spec.UID, spec: spec, replicas: map[int]*replica{}}
		n.colls[spec.Name] = c
	}
	c.spec = spec
	var gone []*replica
	for s, r := range c.replicas {
		if !want[s] {
			gone = append(gone, r)
			delete(c.replicas, s)
		}
	}
	n.mu.Unlock()
	var errs []error
	for _, r := range gone {
		errs = append(errs, r.close(), n.removeReplica(spec.Name, r.shard))
	}
	if fresh {
		if err := n.claimDir(spec); err != nil {
			return errors.Join(append(errs, err)...)
		}
	}
	for s, nodes := range spec.Placement {
		if !want[s] {
			continue
		}
		n.mu.RLock()
		open := c.replicas[s] != nil
		n.mu.RUnlock()
		if open {
			continue
		}
		opts := n.cfg.Engine
		opts.Schema, opts.Dense, opts.Late, opts.LateIndex, opts.LateEncoding = spec.Schema, spec.Dense, spec.Late, spec.LateIndex, spec.LateEncoding
		dir := shardDir(n.cfg.Dir, spec.Name, s)
		r, err := openReplica(spec.Name, s, dir, opts)
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		// A shard's first replicas bootstrap its group; one a move brings
		// joins it, and waits for its leader.
		var voters []string
		if slices.Contains(nodes, n.cfg.ID) && (s >= len(spec.Moved) || !spec.Moved[s]) && !rejoining {
			voters = nodes
		}
		group := fmt.Sprintf("%s/%d", spec.Name, s)
		r.fail = n.replicaFailed
		rf, tr, err := n.startGroup(group, r, voters, dir+".raft-snapshots", true)
		if err != nil {
			r.close()
			return errors.Join(append(errs, err)...)
		}
		n.mu.Lock()
		r.raft, r.trans = rf, tr
		if n.closed {
			n.mu.Unlock()
			return errors.Join(append(errs, r.close())...)
		}
		broken := r.brokenErr()
		c.replicas[s] = r
		n.mu.Unlock()
		if broken != nil { // it broke as it started, before it had a group to leave
			rf.Shutdown()
		}
	}
	return errors.Join(errs...)
}

// replicaFailed takes a replica that could not apply an entry out of its
// group, so that it can neither vote nor serve; restarting the node
// applies the entry again.
func (n *Node) replicaFailed(r *replica, err error) {
	n.log.Error("replica out of service", "collection", r.coll, "shard", r.shard, "error", err)
	n.mu.Lock()
	n.failed = append(n.failed, fmt.Errorf("%s shard %d: %w", r.coll, r.shard, err))
	rf := r.raft // nil while the group starts: openCollection shuts it down then
	n.mu.Unlock()
	if rf != nil {
		rf.Shutdown()
	}
}

// CreateCollection creates a sharded collection and returns once this
// node's replicas of it are open and every shard has a leader.
func (n *Node) CreateCollection(ctx context.Context, spec CollectionSpec) error {
	active := n.activeNodes()
	if spec.Name == "" || spec.Shards < 1 || spec.Replicas < 1 || spec.Replicas > len(active) {
		return fmt.Errorf("%w: name %q, %d shards, %d replicas on %d nodes", ErrBadCollection, spec.Name, spec.Shards, spec.Replicas, len(active))
	}
	if spec.Schema == nil {
		spec.Schema = tandem.DefaultSchema()
	}
	spec.Schema = spec.Schema.Clone()
	spec.Schema.Strict = true
	spec.Schema.Fill()
	if err := engine.CheckSchema(spec.Schema); err != nil {
		return fmt.Errorf("%w: %w", ErrBadCollection, err)
	}
	if spec.Schema.BM25 != nil && spec.Schema.BM25.Scoring == tandem.BM25Bleve {
		return fmt.Errorf("%w: BM25 scoring %q cannot take the statistics of every shard; use textbook BM25", ErrBadCollection, tandem.BM25Bleve)
	}
	spec.UID, spec.Moved = newUID(), nil
	if spec.Placement == nil {
		ids := active
		for s := range spec.Shards {
			var nodes []string
			for i := range spec.Replicas {
				nodes = append(nodes, ids[(s+i)%len(ids)])
			}
			spec.Placement = append(spec.Placement, nodes)
		}
	}
	if err := n.applyCommand(ctx, metaCommand{Op: "create", Spec: &spec}); err != nil {
		return err
	}
	return n.waitCollection(ctx, spec.Name)
}

// waitCollection waits until this node has opened its replicas of a
// collection and each shard has a leader that this node or a node holding
// the shard knows.
func (n *Node) waitCollection(ctx context.Context, name string) error {
	for {
		c, err := n.collection(name)
		if err == nil {
			ready := true
			for s := range c.shards {
				if _, err := n.leaderOf(ctx, c, s); err != nil {
					ready = false
				}
			}
			if ready {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: collection %q not ready: %w", name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// applyMeta commits a metadata command through the metadata group's
// leader, forwarding it when this node does not lead.
func (n *Node) applyMeta(ctx context.Context, cmd []byte) error {
	for {
		var err error
		if n.meta.State() == raft.Leader {
			f := n.meta.Apply(cmd, timeoutOf(ctx))
			if err = f.Error(); err == nil {
				if rerr, ok := f.Response().(error); ok && rerr != nil {
					return rerr
				}
				return nil
			}
		} else if _, id := n.meta.LeaderWithID(); id != "" {
			err = n.forward(ctx, string(id), "/_cluster/meta", cmd, nil)
			if err == nil || !retryable(err) {
				return err
			}
		} else {
			err = ErrNotLeader
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: metadata: %w (last: %v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func timeoutOf(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d), time.Millisecond)
	}
	return 30 * time.Second
}

// collection returns a collection this node knows.
func (n *Node) collection(name string) (*collection, error) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	c := n.colls[name]
	if c == nil {
		return nil, fmt.Errorf("%w: %q", ErrNoCollection, name)
	}
	return c, nil
}

// Collections lists the specs of the cluster's collections.
func (n *Node) Collections() []CollectionSpec {
	n.mu.RLock()
	defer n.mu.RUnlock()
	out := make([]CollectionSpec, 0, len(n.colls))
	for _, c := range n.colls {
		out = append(out, c.spec)
	}
	slices.SortFunc(out, func(a, b CollectionSpec) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// shardLeader returns the id of the node leading a shard's group, as this
// node knows it.
func (n *Node) shardLeader(c *collection, s int) (string, error) {
	n.mu.RLock()
	r := c.replicas[s]
	n.mu.RUnlock()
	if r == nil {
		return "", fmt.Errorf("cluster: %s shard %d is not on this node", c.name, s)
	}
	_, id := r.raft.LeaderWithID()
	if id == "" {
		return "", fmt.Errorf("%w: %s shard %d has no leader", ErrNotLeader, c.name, s)
	}
	return string(id), nil
}

// --- errors over HTTP ---

// remoteError is an error another node returned.
type remoteError struct {
	Status int
	Msg    string
}

func (e *remoteError) Error() string { return e.Msg }

// Unwrap gives back the sentinel error a status stands for, so that a
// caller tells a forwarded ErrExists from the local one.
func (e *remoteError) Unwrap() error {
	switch e.Status {
	case http.StatusConflict:
		return ErrExists
	case http.StatusUnprocessableEntity:
		return ErrBadMember
	}
	return nil
}

func retryable(err error) bool {
	var re *remoteError
	if errors.As(err, &re) {
		return re.Status == http.StatusServiceUnavailable || re.Status == http.StatusMisdirectedRequest
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// forward POSTs body to another node's path and decodes its JSON answer
// into out (when not nil).
func (n *Node) forward(ctx context.Context, node, path string, body []byte, out any) error {
	p, ok := n.peer(node)
	if !ok {
		return fmt.Errorf("cluster: unknown node %q", node)
	}
	return n.post(ctx, p.HTTP, node, path, body, out)
}

// post POSTs body to path at a node's HTTP address and decodes its JSON
// answer into out (when not nil); node names it in errors.
func (n *Node) post(ctx context.Context, addr, node, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.scheme+"://"+addr+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := n.client.Do(req)
	if err != nil {
		return fmt.Errorf("cluster: %s%s: %w", node, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("cluster: %s%s: %w", node, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		json.Unmarshal(data, &e)
		return &remoteError{Status: resp.StatusCode, Msg: fmt.Sprintf("%s: %s", node, e.Error)}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("cluster: %s%s: %w", node, path, err)
		}
	}
	return nil
}
