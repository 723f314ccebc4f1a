package cluster

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

// MinKeyBytes is the shortest cluster key Credentials accept: a key is
// the only secret of a cluster that has one, and anyone who can reach a
// node can test guesses against it offline, so it must hold at least 128
// bits of entropy (32 hexadecimal digits; `openssl rand -hex 32` gives
// 64).
const MinKeyBytes = 32

// Credentials protect the traffic between a cluster's nodes. A protected
// node speaks TLS 1.3, with a certificate on both sides, on its Raft
// listener and to the /_cluster/ routes of the other nodes' HTTP
// listeners, and refuses a peer that cannot prove it holds the same
// credential: the connection is closed (Raft) or the request answered 401
// (HTTP), logged and counted.
//
// There are two kinds. With a cluster key (KeyCredentials), every node
// derives one Ed25519 key pair from the key and presents a certificate of
// it; a peer is accepted when its certificate holds that public key, which
// TLS makes it prove it holds the private key of. With an operator's
// certificate authority (TLSCredentials), every node presents its own
// certificate signed by the CA, for server and client authentication; a
// peer is accepted when its certificate chains to the CA, and a node
// dialling checks the certificate's names against the address it dials.
// Every certificate the CA signs is a member of the cluster, so the
// cluster needs a CA of its own.
//
// The zero Credentials leave the cluster unprotected, which a node allows
// only when all of its addresses are loopback (CheckExposure).
type Credentials struct {
	kind string // "", "key" or "ca"
	cert tls.Certificate
	pin  ed25519.PublicKey // the key's public key ("key")
	ca   *x509.CertPool    // ("ca")
}

// KeyCredentials derives the credentials of a cluster key, which every
// node of the cluster is given. Surrounding white space is not part of
// the key.
func KeyCredentials(key []byte) (Credentials, error) {
	key = bytes.TrimSpace(key)
	if len(key) < MinKeyBytes {
		return Credentials{}, fmt.Errorf("cluster: the cluster key has %d bytes; it needs at least %d (for example `openssl rand -hex 32`)", len(key), MinKeyBytes)
	}
	seed, err := hkdf.Key(sha256.New, key, []byte("tandem cluster key"), "tls ed25519 identity v1", ed25519.SeedSize)
	if err != nil {
		return Credentials{}, fmt.Errorf("cluster: derive the key's identity: %w", err)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	pub := priv.Public().(ed25519.PublicKey)
	// The certificate is the same on every node: Ed25519 signatures are
	// deterministic and every other field is fixed.
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "tandem cluster"},
		NotBefore:    time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:     time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"tandem-cluster"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		return Credentials{}, fmt.Errorf("cluster: certificate of the key's identity: %w", err)
	}
	return Credentials{kind: "key", cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}, pin: pub}, nil
}

// TLSCredentials reads the credentials of mutual TLS with an operator's
// certificate authority: caPEM holds the CA's certificates, certPEM and
// keyPEM this node's certificate (with its chain) and private key. The
// node's certificate must allow both server and client authentication and
// name every address the other nodes dial it at (an IP address as an IP
// SAN).
func TLSCredentials(caPEM, certPEM, keyPEM []byte) (Credentials, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return Credentials{}, errors.New("cluster: the CA file holds no PEM certificate")
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return Credentials{}, fmt.Errorf("cluster: node certificate and key: %w", err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return Credentials{}, fmt.Errorf("cluster: node certificate: %w", err)
	}
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	// A node is a TLS server to the nodes that dial it and a client of
	// those it dials (KeyUsages accepts a chain that allows any of them).
	for _, use := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{use}}); err != nil {
			return Credentials{}, fmt.Errorf("cluster: the node certificate does not chain to the CA for both server and client authentication: %w", err)
		}
	}
	return Credentials{kind: "ca", cert: cert, ca: pool}, nil
}

// Protected reports whether c protects anything.
func (c Credentials) Protected() bool { return c.kind != "" }

// String names the kind of credentials, for logs.
func (c Credentials) String() string {
	switch c.kind {
	case "key":
		return "cluster key"
	case "ca":
		return "mutual TLS"
	}
	return "none"
}

// baseTLS is what both sides of a connection between nodes set: TLS 1.3
// and this node's certificate. Sessions are not resumed, so that every
// connection is authenticated afresh.
func (c Credentials) baseTLS() *tls.Config {
	return &tls.Config{
		MinVersion:             tls.VersionTLS13,
		Certificates:           []tls.Certificate{c.cert},
		SessionTicketsDisabled: true,
	}
}

// serverTLS is the configuration of a listener that accepts only peers
// holding the same credentials.
func (c Credentials) serverTLS() *tls.Config {
	cfg := c.baseTLS()
	switch c.kind {
	case "key":
		cfg.ClientAuth = tls.RequireAnyClientCert
		cfg.VerifyConnection = c.checkPin
	case "ca":
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		cfg.ClientCAs = c.ca
	}
	return cfg
}

// ClientTLS is the configuration with which a node dials addr (host:port)
// of another; a program that calls a node's /_cluster/ routes (an
// operator's tool, a test) uses it too.
func (c Credentials) ClientTLS(addr string) *tls.Config {
	cfg := c.baseTLS()
	switch c.kind {
	case "key":
		// The peer is checked by the public key its certificate holds, not
		// by a chain: InsecureSkipVerify only skips the chain.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = c.checkPin
	case "ca":
		cfg.RootCAs = c.ca
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
	}
	return cfg
}

// checkPin accepts a peer whose certificate holds the cluster key's public
// key. It runs on every connection, resumed ones included.
func (c Credentials) checkPin(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("cluster: the peer presented no certificate")
	}
	pub, ok := cs.PeerCertificates[0].PublicKey.(ed25519.PublicKey)
	if !ok || !pub.Equal(c.pin) {
		return errors.New("cluster: the peer does not hold this cluster's key")
	}
	return nil
}

// CredentialSources names where a node's credentials come from, as
// `tandem serve --cluster` takes them: a file holding the cluster key
// (--cluster-key-file) or the key itself (TANDEM_CLUSTER_KEY), or the PEM
// files of the cluster's CA, this node's certificate and its private key
// (--cluster-ca, --cluster-cert, --cluster-cert-key).
type CredentialSources struct {
	KeyFile, Key      string
	CA, Cert, CertKey string
}

// LoadCredentials reads the credentials of src: a key, or the three PEM
// files, or none when src names nothing. Giving a key and certificates,
// or the key twice, is an error; every error names the flag or variable.
func LoadCredentials(src CredentialSources) (Credentials, error) {
	tlsFiles := src.CA != "" || src.Cert != "" || src.CertKey != ""
	switch {
	case tlsFiles && (src.KeyFile != "" || src.Key != ""):
		return Credentials{}, errors.New("give a cluster key (--cluster-key-file or TANDEM_CLUSTER_KEY) or certificates (--cluster-ca, --cluster-cert, --cluster-cert-key), not both")
	case src.KeyFile != "" && src.Key != "":
		return Credentials{}, errors.New("give the cluster key once: --cluster-key-file or TANDEM_CLUSTER_KEY")
	case src.KeyFile != "":
		key, err := os.ReadFile(src.KeyFile)
		if err != nil {
			return Credentials{}, fmt.Errorf("--cluster-key-file: %w", err)
		}
		creds, err := KeyCredentials(key)
		if err != nil {
			return Credentials{}, fmt.Errorf("--cluster-key-file %s: %w", src.KeyFile, err)
		}
		return creds, nil
	case src.Key != "":
		creds, err := KeyCredentials([]byte(src.Key))
		if err != nil {
			return Credentials{}, fmt.Errorf("TANDEM_CLUSTER_KEY: %w", err)
		}
		return creds, nil
	case tlsFiles:
		var pem [3][]byte
		for i, f := range []struct{ flag, path string }{{"--cluster-ca", src.CA}, {"--cluster-cert", src.Cert}, {"--cluster-cert-key", src.CertKey}} {
			if f.path == "" {
				return Credentials{}, fmt.Errorf("mutual TLS needs --cluster-ca, --cluster-cert and --cluster-cert-key: %s is missing", f.flag)
			}
			b, err := os.ReadFile(f.path)
			if err != nil {
				return Credentials{}, fmt.Errorf("%s: %w", f.flag, err)
			}
			pem[i] = b
		}
		return TLSCredentials(pem[0], pem[1], pem[2])
	}
	return Credentials{}, nil
}
