package cluster

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/testtime"
)

const (
	testKey  = "3f1c0b8e5d2a47c69e1f0a2b4c6d8e0f" // 32 bytes
	otherKey = "9a8b7c6d5e4f30211203f4e5d6c7b8a9"
)

func keyCreds(t *testing.T, key string) Credentials {
	t.Helper()
	c, err := KeyCredentials([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// testCA is a certificate authority made for a test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// creds issues a node certificate for 127.0.0.1 with the given key
// usages and returns the node's credentials.
func (ca *testCA) creds(t *testing.T, usages ...x509.ExtKeyUsage) (Credentials, error) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "node"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usages, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return TLSCredentials(ca.pem, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
}

func (ca *testCA) node(t *testing.T) Credentials {
	t.Helper()
	c, err := ca.creds(t, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestKeyCredentials(t *testing.T) {
	if _, err := KeyCredentials([]byte("  short key  \n")); err == nil || !strings.Contains(err.Error(), "9 bytes; it needs at least 32") {
		t.Errorf("a short key: %v", err)
	}
	a, b := keyCreds(t, testKey), keyCreds(t, testKey+"\n")
	if !bytes.Equal(a.cert.Certificate[0], b.cert.Certificate[0]) || !a.pin.Equal(b.pin) {
		t.Error("the same key (the second with a trailing newline, as a key file has) derived different identities")
	}
	if c := keyCreds(t, otherKey); c.pin.Equal(a.pin) {
		t.Error("two keys derived the same identity")
	}
	ca := newTestCA(t, "ca")
	if _, err := ca.creds(t, x509.ExtKeyUsageServerAuth); err == nil || !strings.Contains(err.Error(), "both server and client authentication") {
		t.Errorf("a node certificate for server authentication only: %v", err)
	}
	if _, err := TLSCredentials([]byte("not pem"), nil, nil); err == nil || !strings.Contains(err.Error(), "CA file holds no PEM certificate") {
		t.Errorf("a CA file without a certificate: %v", err)
	}
}

func TestCheckExposure(t *testing.T) {
	open := Peer{ID: "n0", Raft: "0.0.0.0:7811", HTTP: "127.0.0.1:7711"}
	err := CheckExposure(open, Credentials{})
	if err == nil || !strings.Contains(err.Error(), "0.0.0.0:7811 (node n0's Raft address)") || !strings.Contains(err.Error(), "--cluster-key-file") {
		t.Errorf("an unprotected node on every interface: %v", err)
	}
	if err := CheckExposure(Peer{ID: "n0", Raft: "127.0.0.1:7811", HTTP: "10.0.0.1:7711"}, Credentials{}); err == nil || !strings.Contains(err.Error(), "HTTP address") {
		t.Errorf("an unprotected node with a non-loopback HTTP address: %v", err)
	}
	if err := CheckExposure(Peer{ID: "n0", Raft: "localhost:7811", HTTP: "[::1]:7711"}, Credentials{}); err != nil {
		t.Errorf("an unprotected node on loopback: %v", err)
	}
	if err := CheckExposure(open, keyCreds(t, testKey)); err != nil {
		t.Errorf("a protected node: %v", err)
	}
	// Start refuses before it listens or writes anything.
	dir := t.TempDir()
	if _, err := Start(Config{ID: "n0", Dir: dir + "/n0", Peers: []Peer{open}}); err == nil || !strings.Contains(err.Error(), "refusing to listen") {
		t.Errorf("Start of an unprotected node on every interface: %v", err)
	}
}

// TestClusterCredentials runs a protected cluster, with a key and with a
// CA: writes are forwarded to other nodes' shard leaders and searches
// read other nodes' shards, all over TLS.
func TestClusterCredentials(t *testing.T) {
	ca := newTestCA(t, "cluster ca")
	for _, tc := range []struct {
		name  string
		creds []Credentials
	}{
		{"key", []Credentials{keyCreds(t, testKey), keyCreds(t, testKey), keyCreds(t, testKey)}},
		{"ca", []Credentials{ca.node(t), ca.node(t), ca.node(t)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := testClusterWith(t, tc.creds, engine.Options{})
			ctx := testtime.Context(t)
			// One replica per shard: most shards of a write and a search
			// are on another node, reached over HTTPS.
			if err := nodes[0].CreateCollection(ctx, CollectionSpec{Name: "c", Shards: 3, Replicas: 1, Schema: testSchema()}); err != nil {
				t.Fatal(err)
			}
			docs := credDocs(30)
			if _, err := nodes[1].Index(ctx, "c", docs); err != nil {
				t.Fatal(err)
			}
			res, err := nodes[2].Search(ctx, "c", engine.Request{Text: "honey", K: 50}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Hits) != 10 {
				t.Errorf("search through node 2: %d hits, want the 10 honey notes", len(res.Hits))
			}
			for _, n := range nodes {
				if got := refused(t, n); got != 0 {
					t.Errorf("node %s refused %v connections or requests of its own cluster", n.ID(), got)
				}
			}
		})
	}
}

func credDocs(n int) []tandem.Doc {
	var docs []tandem.Doc
	for i := range n {
		docs = append(docs, tandem.Doc{ID: fmt.Sprint("d", i), Fields: map[string]any{
			"title": fmt.Sprint("note ", i), "text": []string{"glaciers carve valleys", "bees make honey", "trains run on rails"}[i%3],
			"group": "red", "year": float64(1990 + i)}})
	}
	return docs
}

// TestClusterRefusesStrangers starts two nodes with the cluster's
// credential and a third with a wrong one or none: the two form the
// cluster and serve it; the third never joins, and every /_cluster/ route
// answers 401 to a client without the credential.
func TestClusterRefusesStrangers(t *testing.T) {
	ca := newTestCA(t, "cluster ca")
	for _, tc := range []struct {
		name           string
		good, stranger func() Credentials
		strangerReason string // what node 0 counts of the stranger's Raft connections
	}{
		{"wrong key", func() Credentials { return keyCreds(t, testKey) }, func() Credentials { return keyCreds(t, otherKey) }, "tls"},
		{"no key", func() Credentials { return keyCreds(t, testKey) }, func() Credentials { return Credentials{} }, "tls"},
		{"another CA", ca.nodeFunc(t), newTestCA(t, "rogue ca").nodeFunc(t), "tls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			good := tc.good()
			nodes := testClusterWith(t, []Credentials{good, tc.good(), tc.stranger()}, engine.Options{})
			ctx := testtime.Context(t)
			if err := nodes[0].CreateCollection(ctx, CollectionSpec{Name: "c", Shards: 1, Replicas: 3, Schema: testSchema()}); err != nil {
				t.Fatal(err)
			}
			w, err := nodes[1].Index(ctx, "c", credDocs(9))
			if err != nil {
				t.Fatal(err)
			}
			// Node 0, whose digest is read below, has applied the write.
			c0 := waitCollection(t, nodes[0], "c")
			if err := c0.replicas[0].waitApplied(ctx, w.Position[0]); err != nil {
				t.Fatal(err)
			}
			// The stranger calls elections and the leader sends it
			// heartbeats: both sides refuse the other's connections. Once
			// each has, the stranger has tried to take part, and must
			// not have joined.
			testtime.Until(t, time.Minute, 20*time.Millisecond, "both sides refuse each other's connections", func() error {
				if got := value(t, nodes[0].refusals.WithLabelValues("raft", tc.strangerReason)); got == 0 {
					return errors.New("node 0 has counted no refused Raft connection of the stranger")
				}
				if got := refused(t, nodes[2]); got == 0 {
					return errors.New("the stranger has counted no refused connection of the cluster")
				}
				return nil
			})
			if st := nodes[2].Status(); st.MetaLeader != "" || len(st.Collections) != 0 {
				t.Errorf("the stranger joined: it sees metadata leader %q and %d collections", st.MetaLeader, len(st.Collections))
			}

			// Every /_cluster/ route refuses a client without the
			// credential, the apply route included: the delete it carries
			// is not applied.
			del, err := (&entry{Deletes: []string{"d0", "d1"}}).encode()
			if err != nil {
				t.Fatal(err)
			}
			create, _ := json.Marshal(metaCommand{Op: "create", Spec: &CollectionSpec{Name: "evil", Shards: 1, Replicas: 1, Placement: [][]string{{"n0"}}}})
			base := "http://" + nodes[0].self.HTTP
			before := value(t, nodes[0].refusals.WithLabelValues("http", "credential"))
			routes := []struct {
				method, path string
				body         []byte
			}{
				{"POST", "/_cluster/apply/c/0", del},
				{"POST", "/_cluster/meta", create},
				{"POST", "/_cluster/leader/c/0", nil},
				{"POST", "/_cluster/shard/c/0/fetch", []byte(`{"ids":["d0"]}`)},
				{"GET", "/_cluster/digest/c/0", nil},
				{"GET", "/_cluster/status", nil},
			}
			for _, r := range routes {
				req, _ := http.NewRequest(r.method, base+r.path, bytes.NewReader(r.body))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "cluster's credential") {
					t.Errorf("%s %s without the credential: %d %s, want 401", r.method, r.path, resp.StatusCode, body)
				}
			}
			if got := value(t, nodes[0].refusals.WithLabelValues("http", "credential")) - before; got != float64(len(routes)) {
				t.Errorf("node 0 counted %v refused requests, want %d", got, len(routes))
			}
			// A client over TLS with the stranger's credential does not get
			// past the handshake.
			if s := nodes[2].cfg.Credentials; s.Protected() {
				client := &http.Client{Transport: &http.Transport{TLSClientConfig: s.ClientTLS(nodes[0].self.HTTP)}}
				if resp, err := client.Get("https://" + nodes[0].self.HTTP + "/_cluster/digest/c/0"); err == nil {
					resp.Body.Close()
					t.Errorf("a client with the stranger's credential got %d", resp.StatusCode)
				}
			}
			// With the cluster's credential the same route answers, and
			// every document is still there.
			client := &http.Client{Transport: &http.Transport{TLSClientConfig: good.ClientTLS(nodes[0].self.HTTP)}}
			resp, err := client.Get("https://" + nodes[0].self.HTTP + "/_cluster/digest/c/0")
			if err != nil {
				t.Fatal(err)
			}
			var d Digest
			json.NewDecoder(resp.Body).Decode(&d)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || len(d.Docs) != 9 || d.Docs["d0"] == "" {
				t.Errorf("digest with the credential: %d, %d documents (d0 %q), want 200 and all 9", resp.StatusCode, len(d.Docs), d.Docs["d0"])
			}
			if names := nodes[0].Collections(); len(names) != 1 {
				t.Errorf("collections after the refused requests: %v", names)
			}
		})
	}
}

func (ca *testCA) nodeFunc(t *testing.T) func() Credentials {
	return func() Credentials { return ca.node(t) }
}

// value is a counter's value.
func value(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var pb dto.Metric
	if err := c.Write(&pb); err != nil {
		t.Fatal(err)
	}
	return pb.GetCounter().GetValue()
}

// refused sums a node's refusal counts.
func refused(t *testing.T, n *Node) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	n.refusals.Collect(ch)
	close(ch)
	sum := 0.0
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		sum += pb.GetCounter().GetValue()
	}
	return sum
}

// BenchmarkCredentials measures what protection costs: two 3-node
// clusters on loopback, one with a cluster key and one without, each with
// a BM25 collection of 3 shards x 3 replicas, all led by node 1, taking
// the same writes and searches through node 0, alternating op by op. A
// write of 16 documents is forwarded to node 1 over HTTP and replicated
// by Raft; a search asks node 1 over HTTP how far each shard has applied.
// Writes run first, then searches, after one search on each side that
// waits for the last writes to be applied. It reports each side's median
// time per op and the ratio of the medians:
//
//	go test -run '^$' -bench Credentials -benchtime 400x ./cluster
func BenchmarkCredentials(b *testing.B) {
	key, err := KeyCredentials([]byte(testKey))
	if err != nil {
		b.Fatal(err)
	}
	sides := []struct {
		name  string
		nodes []*Node
		took  [2][]time.Duration // write, search
	}{{name: "none"}, {name: "key"}}
	for i := range sides {
		creds := make([]Credentials, 3)
		if sides[i].name == "key" {
			creds = []Credentials{key, key, key}
		}
		sides[i].nodes = benchCluster(b, creds)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := sides[i].nodes[0].CreateCollection(ctx, CollectionSpec{Name: "c", Shards: 3, Replicas: 3, Schema: testSchema()}); err != nil {
			b.Fatal(err)
		}
		cancel()
		leadFrom(b, sides[i].nodes, "c", 1)
	}
	ctx := context.Background()
	docs := credDocs(16)
	op := func(i, what int, f func(*Node) error) {
		for k := range sides {
			s := &sides[(i+k)%2] // alternate which side goes first
			start := time.Now()
			if err := f(s.nodes[0]); err != nil {
				b.Fatal(err)
			}
			s.took[what] = append(s.took[what], time.Since(start))
		}
	}
	search := func(n *Node) error {
		_, err := n.Search(ctx, "c", engine.Request{Text: "honey valleys", K: 10}, nil)
		return err
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range docs {
			docs[j].ID = fmt.Sprintf("d%d-%d", i, j)
		}
		op(i, 0, func(n *Node) error {
			_, err := n.Index(ctx, "c", docs)
			return err
		})
	}
	for _, s := range sides {
		if err := search(s.nodes[0]); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < b.N; i++ {
		op(i, 1, search)
	}
	b.StopTimer()
	median := func(d []time.Duration) time.Duration {
		d = slices.Clone(d)
		slices.Sort(d)
		return d[len(d)/2]
	}
	for what, name := range []string{"write", "search"} {
		none, keyed := median(sides[0].took[what]), median(sides[1].took[what])
		b.ReportMetric(float64(none.Microseconds()), name+"-none-p50-µs")
		b.ReportMetric(float64(keyed.Microseconds()), name+"-key-p50-µs")
		b.ReportMetric(float64(keyed)/float64(none), name+"-key/none")
	}
}

// leadFrom moves the leadership of every shard of coll to nodes[l], so
// that two clusters compared have the same leaders.
func leadFrom(b *testing.B, nodes []*Node, coll string, l int) {
	want := raft.ServerID(nodes[l].ID())
	for _, n := range nodes {
		c, err := n.collection(coll)
		if err != nil {
			b.Fatal(err)
		}
		if n == nodes[l] {
			continue
		}
		for s, r := range c.replicas {
			for r.raft.State() == raft.Leader {
				if err := r.raft.LeadershipTransferToServer(want, raft.ServerAddress(nodes[l].self.Raft)).Error(); err != nil {
					b.Logf("shard %d: leadership transfer: %v", s, err)
				}
			}
		}
	}
	for _, n := range nodes {
		c, _ := n.collection(coll)
		for _, r := range c.replicas {
			for {
				if _, id := r.raft.LeaderWithID(); id == want {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
}

// benchCluster starts 3 nodes for a benchmark, closed at its end.
func benchCluster(b *testing.B, creds []Credentials) []*Node {
	var peers []Peer
	var rls, hls []net.Listener
	for i := range creds {
		rl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		hl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		rls, hls = append(rls, rl), append(hls, hl)
		peers = append(peers, Peer{ID: fmt.Sprintf("n%d", i), Raft: rl.Addr().String(), HTTP: hl.Addr().String()})
	}
	root := b.TempDir()
	var nodes []*Node
	for i := range creds {
		nd, err := Start(Config{ID: peers[i].ID, Dir: filepath.Join(root, peers[i].ID), Peers: peers,
			RaftListener: rls[i], HTTPListener: hls[i], Credentials: creds[i], Engine: engine.Options{NoSync: true}})
		if err != nil {
			b.Fatal(err)
		}
		nodes = append(nodes, nd)
		b.Cleanup(func() { nd.Close() })
	}
	return nodes
}

func TestLoadCredentials(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	key := "0123456789abcdef0123456789abcdef"
	if err := os.WriteFile(keyFile, []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := LoadCredentials(CredentialSources{}); err != nil || c.Protected() {
		t.Errorf("no sources: %+v, %v; want no credentials", c, err)
	}
	for _, src := range []CredentialSources{{KeyFile: keyFile}, {Key: key}} {
		if c, err := LoadCredentials(src); err != nil || !c.Protected() {
			t.Errorf("%+v: %v, enabled %v", src, err, c.Protected())
		}
	}
	for _, tc := range []struct {
		src  CredentialSources
		want string
	}{
		{CredentialSources{KeyFile: keyFile, Key: key}, "give the cluster key once"},
		{CredentialSources{Key: key, CA: keyFile}, "not both"},
		{CredentialSources{Key: "short"}, "TANDEM_CLUSTER_KEY: "},
		{CredentialSources{KeyFile: filepath.Join(dir, "absent")}, "--cluster-key-file: open"},
		{CredentialSources{CA: keyFile, Cert: keyFile}, "--cluster-cert-key is missing"},
	} {
		if _, err := LoadCredentials(tc.src); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.src, err, tc.want)
		}
	}
}
