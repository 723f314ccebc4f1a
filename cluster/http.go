package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"

	"github.com/hashicorp/raft"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/filter"
)

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// maxInternalBody bounds a request between nodes: an entry is at most
// maxEntryBytes plus one document.
const maxInternalBody = 256 << 20

// Handler serves the endpoints other nodes call (under /_cluster/) and
// the cluster's status (GET /_cluster/status); every other path goes to
// next, when it is not nil.
//
// On a protected cluster the /_cluster/ routes answer only requests that
// came over TLS from a peer holding the cluster's credential (the
// listener authenticated it in the handshake); any other request is
// answered 401, logged and counted. GET /_cluster/status without the
// credential goes to next instead, which may answer an operator.
func (n *Node) Handler(next http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /_cluster/meta", n.peersOnly(n.handleMeta))
	mux.HandleFunc("POST /_cluster/apply/{coll}/{shard}", n.peersOnly(n.handleApply))
	mux.HandleFunc("POST /_cluster/leader/{coll}/{shard}", n.peersOnly(n.handleLeader))
	mux.HandleFunc("POST /_cluster/shard/{coll}/{shard}/{phase}", n.peersOnly(n.handleShard))
	mux.HandleFunc("GET /_cluster/digest/{coll}/{shard}", n.peersOnly(n.handleDigest))
	mux.HandleFunc("POST /_cluster/join", n.peersOnly(n.handleJoin))
	mux.HandleFunc("POST /_cluster/member/{coll}/{shard}", n.peersOnly(n.handleMember))
	mux.HandleFunc("POST /_cluster/meta-applied", n.peersOnly(n.handleMetaApplied))
	status := n.peersOnly(func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, n.Status()) })
	mux.HandleFunc("GET /_cluster/status", func(w http.ResponseWriter, r *http.Request) {
		if next != nil && !n.fromPeer(r) {
			next.ServeHTTP(w, r)
			return
		}
		status(w, r)
	})
	if next != nil {
		mux.Handle("/", next)
	}
	return mux
}

// fromPeer reports whether r came from a node holding the cluster's
// credential: over TLS, whose handshake on this listener accepted only
// such a peer's certificate.
func (n *Node) fromPeer(r *http.Request) bool {
	return r.TLS != nil && len(r.TLS.PeerCertificates) > 0 && n.cfg.Credentials.Protected()
}

// peersOnly lets through to h the requests of the cluster's nodes, and
// every request on an unprotected cluster.
func (n *Node) peersOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if n.cfg.Credentials.Protected() && !n.fromPeer(r) {
			n.refuse("http", "credential", remoteAddr(r), fmt.Errorf("%s %s without the cluster's credential", r.Method, r.URL.Path))
			writeError(w, http.StatusUnauthorized, errors.New("cluster: the /_cluster/ routes are for the cluster's nodes: a request needs the cluster's credential (TLS with the cluster key or a certificate of the cluster's CA)"))
			return
		}
		h(w, r)
	}
}

func remoteAddr(r *http.Request) net.Addr {
	a, err := net.ResolveTCPAddr("tcp", r.RemoteAddr)
	if err != nil {
		return nil
	}
	return a
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, map[string]string{"error": err.Error()})
}

// statusOf maps an error to the status another node acts on: 503 to try
// elsewhere or later, 400 for the request's own fault, 404, 409 for a
// collection that exists and 422 for a refused membership change
// (remoteError unwraps them to ErrExists and ErrBadMember again), else
// 500.
func statusOf(err error) int {
	var be *tandem.FieldError
	var ve *tandem.VectorError
	var fe *filter.Error
	var re *remoteError
	switch {
	case errors.As(err, &re):
		return re.Status
	case errors.Is(err, errOutOfService), errors.Is(err, ErrNotLeader), errors.Is(err, raft.ErrNotLeader),
		errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrRaftShutdown):
		return http.StatusServiceUnavailable
	case errors.Is(err, ErrNoCollection):
		return http.StatusNotFound
	case errors.Is(err, ErrExists):
		return http.StatusConflict
	case errors.Is(err, ErrBadMember):
		return http.StatusUnprocessableEntity
	case errors.Is(err, engine.ErrBadRequest), errors.Is(err, engine.ErrUnknownRetriever),
		errors.As(err, &be), errors.As(err, &ve), errors.As(err, &fe), errors.Is(err, errBadEntry):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

func (n *Node) replicaOf(w http.ResponseWriter, r *http.Request) (*replica, bool) {
	c, err := n.collection(r.PathValue("coll"))
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err) // not yet known here
		return nil, false
	}
	s, err := strconv.Atoi(r.PathValue("shard"))
	if err != nil || s < 0 || s >= c.shards {
		writeError(w, http.StatusBadRequest, fmt.Errorf("cluster: bad shard %q", r.PathValue("shard")))
		return nil, false
	}
	n.mu.RLock()
	rep := c.replicas[s]
	n.mu.RUnlock()
	if rep == nil {
		writeError(w, http.StatusMisdirectedRequest, fmt.Errorf("cluster: %s shard %d is not on node %s", c.name, s, n.cfg.ID))
		return nil, false
	}
	return rep, true
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxInternalBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return nil, false
	}
	return b, true
}

func (n *Node) handleMeta(w http.ResponseWriter, r *http.Request) {
	b, ok := readBody(w, r)
	if !ok {
		return
	}
	if n.meta.State() != raft.Leader {
		writeError(w, http.StatusServiceUnavailable, ErrNotLeader)
		return
	}
	f := n.meta.Apply(b, timeoutOf(r.Context()))
	if err := f.Error(); err != nil {
		writeError(w, http.StatusServiceUnavailable, err)
		return
	}
	if err, ok := f.Response().(error); ok && err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

func (n *Node) handleApply(w http.ResponseWriter, r *http.Request) {
	rep, ok := n.replicaOf(w, r)
	if !ok {
		return
	}
	b, ok := readBody(w, r)
	if !ok {
		return
	}
	if rep.raft.State() != raft.Leader {
		writeError(w, http.StatusServiceUnavailable, ErrNotLeader)
		return
	}
	ar, err := rep.applyLocal(r.Context(), b)
	if err != nil {
		st := statusOf(err)
		if st == http.StatusInternalServerError {
			var be interface{ Unwrap() error }
			if errors.As(err, &be) {
				st = http.StatusBadRequest
			}
		}
		writeError(w, st, err)
		return
	}
	writeJSON(w, http.StatusOK, ar)
}

func (n *Node) handleLeader(w http.ResponseWriter, r *http.Request) {
	rep, ok := n.replicaOf(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, rep.state())
}

func (n *Node) handleShard(w http.ResponseWriter, r *http.Request) {
	rep, ok := n.replicaOf(w, r)
	if !ok {
		return
	}
	b, ok := readBody(w, r)
	if !ok {
		return
	}
	var sr shardRequest
	if err := json.Unmarshal(b, &sr); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("cluster: shard request: %w", err))
		return
	}
	var out any
	switch r.PathValue("phase") {
	case "prepare":
		out = &engine.Collected{}
	case "rank":
		out = &[]engine.Ranked{}
	case "fetch":
		out = &map[string]tandem.Doc{}
	case "stats":
		out = &engine.Stats{}
	case "facets":
		out = &[]engine.FacetCounts{}
	case "highlight":
		out = &map[string]*tandem.Highlights{}
	default:
		writeError(w, http.StatusNotFound, fmt.Errorf("cluster: unknown phase %q", r.PathValue("phase")))
		return
	}
	if err := rep.serve(r.Context(), r.PathValue("phase"), &sr, out); err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// Status describes a node's view of the cluster.
type Status struct {
	Node        string             `json:"node"`
	MetaLeader  string             `json:"meta_leader"`
	Peers       []Peer             `json:"peers"`
	Collections []CollectionStatus `json:"collections"`
	// Nodes are the cluster's members as the metadata records them, with
	// the replicas each holds.
	Nodes []NodeStatus `json:"nodes"`
	// Moves lists the move of a replica in progress; Done the last ones
	// finished, oldest first.
	Moves []MoveStatus `json:"moves"`
	Done  []MoveStatus `json:"done,omitempty"`
	// Rebalance is the metadata leader's last failed step, when this node
	// leads the metadata group (a move waiting on a node that is down).
	Rebalance string `json:"rebalance,omitempty"`
	// Failed lists replicas of this node taken out of service.
	Failed []string `json:"failed,omitempty"`
}

// NodeStatus is one member of the cluster.
type NodeStatus struct {
	NodeInfo
	Replicas int `json:"replicas"`
}

// MoveStatus is a move of a replica, with how long it has taken.
type MoveStatus struct {
	Move
	Seconds float64 `json:"seconds"`
}

// CollectionStatus is a collection as this node sees it.
type CollectionStatus struct {
	Spec   CollectionSpec `json:"spec"`
	Shards []ShardStatus  `json:"shards"`
}

// ShardStatus is one shard as this node sees it: its leader and, when
// this node holds a replica, how far it has applied.
type ShardStatus struct {
	Shard   int    `json:"shard"`
	Leader  string `json:"leader,omitempty"`
	Local   bool   `json:"local"`
	State   string `json:"state,omitempty"` // this node's Raft state in the shard's group
	Applied uint64 `json:"applied,omitempty"`
	Docs    uint64 `json:"docs,omitempty"`
}

// Status reports the node's view of the cluster.
func (n *Node) Status() Status {
	st := Status{Node: n.cfg.ID}
	if n.meta != nil {
		_, id := n.meta.LeaderWithID()
		st.MetaLeader = string(id)
	}
	n.mu.RLock()
	for _, id := range slices.Sorted(maps.Keys(n.peers)) {
		st.Peers = append(st.Peers, n.peers[id])
	}
	n.mu.RUnlock()
	n.mu.RLock()
	for _, err := range n.failed {
		st.Failed = append(st.Failed, err.Error())
	}
	if n.stepErr != nil {
		st.Rebalance = n.stepErr.Error()
	}
	n.mu.RUnlock()
	if n.fsm != nil {
		ms := n.fsm.state()
		for _, id := range slices.Sorted(maps.Keys(ms.Nodes)) {
			st.Nodes = append(st.Nodes, NodeStatus{NodeInfo: ms.Nodes[id], Replicas: ms.holds(id)})
		}
		st.Moves = []MoveStatus{}
		for _, m := range ms.Moves {
			st.Moves = append(st.Moves, MoveStatus{Move: m, Seconds: m.Took().Seconds()})
		}
		for _, m := range ms.Done {
			st.Done = append(st.Done, MoveStatus{Move: m, Seconds: m.Took().Seconds()})
		}
	}
	for _, spec := range n.Collections() {
		c, err := n.collection(spec.Name)
		if err != nil {
			continue
		}
		cs := CollectionStatus{Spec: spec}
		for s := range spec.Shards {
			ss := ShardStatus{Shard: s}
			n.mu.RLock()
			rep := c.replicas[s]
			n.mu.RUnlock()
			if rep != nil {
				ss.Local = true
				_, id := rep.raft.LeaderWithID()
				ss.Leader, ss.State, ss.Applied = string(id), rep.raft.State().String(), rep.applied.Load()
				if eng, err := rep.engine(); err == nil {
					ss.Docs = eng.Count()
					rep.mu.RUnlock()
				}
			}
			cs.Shards = append(cs.Shards, ss)
		}
		st.Collections = append(st.Collections, cs)
	}
	return st
}

// Digest describes the documents of one replica: how far it has applied,
// and each live document's id with a hash of its stored fields. Replicas
// of a shard that have applied as far have equal digests.
type Digest struct {
	Node    string            `json:"node"`
	Applied uint64            `json:"applied"`
	LastSeq uint64            `json:"last_seq"` // the store's change-log position
	Docs    map[string]string `json:"docs"`
}

func (n *Node) handleDigest(w http.ResponseWriter, r *http.Request) {
	rep, ok := n.replicaOf(w, r)
	if !ok {
		return
	}
	d, err := rep.digest(r.Context())
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	d.Node = n.cfg.ID
	writeJSON(w, http.StatusOK, d)
}

func (r *replica) digest(ctx context.Context) (Digest, error) {
	eng, err := r.engine()
	if err != nil {
		return Digest{}, fmt.Errorf("%w: %w", errOutOfService, err)
	}
	defer r.mu.RUnlock()
	d := Digest{Applied: r.applied.Load(), LastSeq: eng.Shard().Store().LastSeq(), Docs: map[string]string{}}
	err = eng.Shard().Store().ScanDocs(ctx, func(_ uint64, doc tandem.Doc) error {
		b, err := json.Marshal(doc.Fields) // map keys sorted: canonical
		if err != nil {
			return err
		}
		h := sha256.Sum256(b)
		d.Docs[doc.ID] = hex.EncodeToString(h[:12])
		return nil
	})
	return d, err
}
