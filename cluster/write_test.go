package cluster

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/testtime"
)

// TestForwardToSlowLeader writes through a node without a replica of the
// shard, whose leader answers the forwarded entry only after 15 election
// timeouts, as a leader applying a large batch on a slow machine does
// (here the answer is held back on its way). The node must wait for that
// answer, asking the leader meanwhile whether it still leads, and send
// the entry once. It used to give up after 10 election timeouts and send
// it again, and again, until the write's context ended.
func TestForwardToSlowLeader(t *testing.T) {
	ctx := testtime.Context(t)
	et := testtime.D(100 * time.Millisecond)
	hold := 15 * et
	var sent atomic.Int32 // entries sent to /_cluster/apply
	nodes := testClusterConfig(t, make([]Credentials, 2), engine.Options{NoSync: true}, func(i int, cfg *Config) {
		cfg.HeartbeatTimeout, cfg.ElectionTimeout = et, et
		cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &slowApplyConn{Conn: c, hold: hold, sent: &sent}, nil
		}
	})
	if err := nodes[0].CreateCollection(ctx, CollectionSpec{Name: "c", Shards: 1, Replicas: 1, Schema: testSchema()}); err != nil {
		t.Fatal(err)
	}
	// The node without the shard's one replica forwards every write.
	var bare *Node
	testtime.Until(t, time.Minute, 20*time.Millisecond, "the collection on both nodes, its shard on one", func() error {
		bare = nil
		held := 0
		for _, n := range nodes {
			c, err := n.collection("c")
			if err != nil {
				return err
			}
			n.mu.RLock()
			r := c.replicas[0]
			n.mu.RUnlock()
			if r == nil {
				bare = n
			} else {
				held++
			}
		}
		if held != 1 {
			return fmt.Errorf("%d nodes hold the shard", held)
		}
		return nil
	})
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, hold+testtime.D(time.Minute))
	defer cancel()
	r, err := bare.Index(wctx, "c", credDocs(3))
	if err != nil {
		t.Fatalf("a write through %s to a leader answering after %v: %v (%d entries sent)", bare.ID(), hold, err, sent.Load())
	}
	t.Logf("answered after %v (held %v; the former cutoff was %v)", time.Since(start).Round(time.Millisecond), hold, 10*et)
	if r.Put != 3 {
		t.Errorf("put %d, want 3", r.Put)
	}
	if n := sent.Load(); n != 1 {
		t.Errorf("the entry was sent to the leader %d times, want once", n)
	}
}

// slowApplyConn holds back the answer to each /_cluster/apply request
// written on it for hold, and counts those requests; any other traffic
// (Raft, the other routes) passes at once.
type slowApplyConn struct {
	net.Conn
	hold time.Duration
	sent *atomic.Int32

	mu      sync.Mutex
	pending bool // an apply request was written; its answer is not yet read
}

func (c *slowApplyConn) Write(p []byte) (int, error) {
	if bytes.HasPrefix(p, []byte("POST /_cluster/apply/")) {
		c.sent.Add(1)
		c.mu.Lock()
		c.pending = true
		c.mu.Unlock()
	}
	return c.Conn.Write(p)
}

// Read holds back the first bytes of an answer read after an apply
// request was written (the transport reads ahead, so the check comes
// after the bytes arrive).
func (c *slowApplyConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	wait := c.pending && n > 0
	if wait {
		c.pending = false
	}
	c.mu.Unlock()
	if wait {
		time.Sleep(c.hold)
	}
	return n, err
}
