package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// A node runs one Raft group per shard replica it holds, plus the
// metadata group, and all of them share one TCP listener: each connection
// opens with a header naming its group (connMagic, a length byte, the
// name), and the mux hands it to that group's transport. On a protected
// cluster every connection is TLS first (Credentials), and the header
// travels inside it.
const connMagic = "TDM1"

// handshakeTimeout bounds a connection's TLS handshake and header, so a
// peer that connects and says nothing holds nothing for long.
const handshakeTimeout = 10 * time.Second

// maxPending bounds the connections in their handshake or header at once;
// more are closed at once, so that silent connections cannot exhaust a
// node's descriptors. Raft opens a few per group and peer.
const maxPending = 256

// errMuxClosed is returned by a closed group's Accept.
var errMuxClosed = errors.New("cluster: transport closed")

// Dialer opens connections to other nodes. Tests give one that goes
// through a fault-injecting proxy.
type Dialer func(ctx context.Context, network, addr string) (net.Conn, error)

type mux struct {
	ln        net.Listener
	advertise net.Addr
	dial      Dialer
	creds     Credentials
	server    *tls.Config // nil on an unprotected cluster
	// refused reports a connection refused for its credentials or its
	// header.
	refused func(reason string, remote net.Addr, err error)

	mu     sync.Mutex
	layers map[string]*layer
	closed bool
	conns  map[net.Conn]struct{} // accepted, not yet handed over
	wg     sync.WaitGroup
}

func newMux(ln net.Listener, advertise string, dial Dialer, creds Credentials, refused func(reason string, remote net.Addr, err error)) (*mux, error) {
	adv, err := net.ResolveTCPAddr("tcp", advertise)
	if err != nil {
		return nil, fmt.Errorf("cluster: raft address %q: %w", advertise, err)
	}
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	m := &mux{ln: ln, advertise: adv, dial: dial, creds: creds, refused: refused, layers: map[string]*layer{}, conns: map[net.Conn]struct{}{}}
	if creds.Protected() {
		m.server = creds.serverTLS()
	}
	m.wg.Add(1)
	go m.serve()
	return m, nil
}

func (m *mux) serve() {
	defer m.wg.Done()
	for {
		c, err := m.ln.Accept()
		if err != nil {
			return
		}
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			c.Close()
			return
		}
		if len(m.conns) >= maxPending {
			m.mu.Unlock()
			m.refused("busy", c.RemoteAddr(), fmt.Errorf("%d connections are already being opened", maxPending))
			c.Close()
			continue
		}
		m.conns[c] = struct{}{}
		m.mu.Unlock()
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.handOver(c)
		}()
	}
}

// handOver authenticates c on a protected cluster, reads its header and
// gives it to its group; c is closed when the peer is refused, the header
// is bad or the group is not running here.
func (m *mux) handOver(raw net.Conn) {
	defer func() {
		m.mu.Lock()
		delete(m.conns, raw)
		m.mu.Unlock()
	}()
	c := raw
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	if m.server != nil {
		tc := tls.Server(raw, m.server)
		if err := tc.Handshake(); err != nil {
			m.refused("tls", raw.RemoteAddr(), err)
			raw.Close()
			return
		}
		c = tc
	}
	hdr := make([]byte, len(connMagic)+1)
	if _, err := io.ReadFull(c, hdr); err != nil || string(hdr[:len(connMagic)]) != connMagic {
		if err == nil {
			err = fmt.Errorf("bad header %q", hdr)
		}
		m.refused("header", raw.RemoteAddr(), err)
		c.Close()
		return
	}
	name := make([]byte, hdr[len(connMagic)])
	if _, err := io.ReadFull(c, name); err != nil {
		m.refused("header", raw.RemoteAddr(), err)
		c.Close()
		return
	}
	c.SetDeadline(time.Time{})
	m.mu.Lock()
	l := m.layers[string(name)]
	m.mu.Unlock()
	if l == nil {
		c.Close()
		return
	}
	select {
	case l.conns <- c:
	case <-l.done:
		c.Close()
	}
}

// layer returns the stream layer of a group; a group's layer can be
// asked for once until it is closed.
func (m *mux) layer(group string) (*layer, error) {
	if len(group) > 255 {
		return nil, fmt.Errorf("cluster: group name %q is too long", group)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errMuxClosed
	}
	if m.layers[group] != nil {
		return nil, fmt.Errorf("cluster: group %q has a transport already", group)
	}
	l := &layer{m: m, group: group, conns: make(chan net.Conn), done: make(chan struct{})}
	m.layers[group] = l
	return l, nil
}

func (m *mux) close() error {
	m.mu.Lock()
	m.closed = true
	for c := range m.conns {
		c.Close()
	}
	m.mu.Unlock()
	err := m.ln.Close()
	m.wg.Wait()
	return err
}

// layer is one group's raft.StreamLayer.
type layer struct {
	m     *mux
	group string
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

var _ raft.StreamLayer = (*layer)(nil)

func (l *layer) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, errMuxClosed
	}
}

func (l *layer) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.m.mu.Lock()
		if l.m.layers[l.group] == l {
			delete(l.m.layers, l.group)
		}
		l.m.mu.Unlock()
	})
	return nil
}

func (l *layer) Addr() net.Addr { return l.m.advertise }

func (l *layer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := l.m.dial(ctx, "tcp", string(addr))
	if err != nil {
		return nil, err
	}
	if l.m.server != nil {
		tc := tls.Client(c, l.m.creds.ClientTLS(string(addr)))
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("cluster: TLS to %s: %w", addr, err)
		}
		c = tc
	}
	hdr := append([]byte(connMagic), byte(len(l.group)))
	hdr = append(hdr, l.group...)
	c.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := c.Write(hdr); err != nil {
		c.Close()
		return nil, err
	}
	c.SetWriteDeadline(time.Time{})
	return c, nil
}
