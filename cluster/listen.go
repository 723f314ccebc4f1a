package cluster

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// splitter serves a protected node's HTTP listener, where clients speak
// plain HTTP and the other nodes TLS. It reads the first byte of each
// connection, which starts a TLS record (0x16) or an HTTP request (a
// letter), and hands the connection to one of two listeners: a plain one
// as it is, a TLS one once its handshake has authenticated the peer. One
// http.Server serves both; a request that came over TLS carries the
// peer's certificate in Request.TLS.
type splitter struct {
	ln      net.Listener
	tls     *tls.Config
	refused func(reason string, remote net.Addr, err error)

	plain, secure *queue

	mu      sync.Mutex
	pending map[net.Conn]struct{} // accepted, not yet handed over
	closed  bool
	wg      sync.WaitGroup
}

func newSplitter(ln net.Listener, cfg *tls.Config, refused func(string, net.Addr, error)) *splitter {
	s := &splitter{ln: ln, tls: cfg, refused: refused, pending: map[net.Conn]struct{}{},
		plain: newQueue(ln.Addr()), secure: newQueue(ln.Addr())}
	s.wg.Add(1)
	go s.serve()
	return s
}

func (s *splitter) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		if len(s.pending) >= maxPending {
			s.mu.Unlock()
			s.refused("busy", c.RemoteAddr(), fmt.Errorf("%d connections are already being opened", maxPending))
			c.Close()
			continue
		}
		s.pending[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handOver(c)
		}()
	}
}

func (s *splitter) handOver(raw net.Conn) {
	defer func() {
		s.mu.Lock()
		delete(s.pending, raw)
		s.mu.Unlock()
	}()
	raw.SetDeadline(time.Now().Add(handshakeTimeout))
	first := make([]byte, 1)
	if _, err := io.ReadFull(raw, first); err != nil {
		raw.Close() // said nothing: not a refusal of credentials
		return
	}
	var c net.Conn = &sniffed{Conn: raw, first: first}
	q := s.plain
	if first[0] == 0x16 { // a TLS handshake record
		tc := tls.Server(c, s.tls)
		if err := tc.Handshake(); err != nil {
			s.refused("tls", raw.RemoteAddr(), err)
			raw.Close()
			return
		}
		c, q = tc, s.secure
	}
	raw.SetDeadline(time.Time{})
	select {
	case q.conns <- c:
	case <-q.done:
		c.Close()
	}
}

// close stops accepting, closes the connections not yet handed over and
// both listeners; the http.Server closes the ones it serves.
func (s *splitter) close() error {
	s.mu.Lock()
	s.closed = true
	for c := range s.pending {
		c.Close()
	}
	s.mu.Unlock()
	err := s.ln.Close()
	s.plain.Close()
	s.secure.Close()
	s.wg.Wait()
	return err
}

// sniffed is a connection whose first bytes were read already.
type sniffed struct {
	net.Conn
	first []byte
}

func (c *sniffed) Read(p []byte) (int, error) {
	if len(c.first) > 0 {
		n := copy(p, c.first)
		c.first = c.first[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// queue is a net.Listener of connections handed to it.
type queue struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newQueue(addr net.Addr) *queue {
	return &queue{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (q *queue) Accept() (net.Conn, error) {
	select {
	case c := <-q.conns:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

func (q *queue) Close() error {
	q.once.Do(func() { close(q.done) })
	return nil
}

func (q *queue) Addr() net.Addr { return q.addr }
