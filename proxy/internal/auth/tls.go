package auth

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"
	"time"
)

// LoadCertificate reads the proxy's certificate and key for the server
// side of client TLS: TLS 1.2 or newer, offering the "postgresql" ALPN
// protocol. It returns the configuration and the certificate's expiry
// (zero when the leaf does not parse).
func LoadCertificate(certFile, keyFile string) (*tls.Config, time.Time, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("tls: load certificate %s and key %s: %w", certFile, keyFile, err)
	}
	conf := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		// PostgreSQL 17's direct TLS negotiation asks for this protocol.
		NextProtos: []string{"postgresql"},
	}
	var notAfter time.Time
	if leaf, err := x509.ParseCertificate(cert.Certificate[0]); err == nil {
		notAfter = leaf.NotAfter
	}
	return conf, notAfter, nil
}

// TLSMode says whether clients may or must use TLS.
type TLSMode int

const (
	// TLSDisable answers SSLRequest with 'N': no TLS (the default).
	TLSDisable TLSMode = iota
	// TLSAllow accepts TLS and plain-text clients.
	TLSAllow
	// TLSRequire refuses plain-text clients (28000).
	TLSRequire
)

// String returns disable, allow or require.
func (m TLSMode) String() string {
	switch m {
	case TLSAllow:
		return "allow"
	case TLSRequire:
		return "require"
	}
	return "disable"
}

// ParseTLSMode parses disable, allow or require.
func ParseTLSMode(s string) (TLSMode, error) {
	switch strings.ToLower(s) {
	case "", "disable":
		return TLSDisable, nil
	case "allow":
		return TLSAllow, nil
	case "require":
		return TLSRequire, nil
	}
	return TLSDisable, fmt.Errorf("tls mode %q: want disable, allow or require", s)
}

// TLSSetup is a loaded TLS configuration towards clients (the certificate
// read from its files at New and at each reload).
type TLSSetup struct {
	Mode TLSMode
	Conf *tls.Config
	// NotAfter is the certificate's expiry (SHOW CONFIG).
	NotAfter time.Time
}

// LoadTLS reads the certificate and key for mode (none when TLS is off).
func LoadTLS(mode TLSMode, certFile, keyFile string) (*TLSSetup, error) {
	if mode == TLSDisable {
		return &TLSSetup{Mode: TLSDisable}, nil
	}
	conf, notAfter, err := LoadCertificate(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &TLSSetup{Mode: mode, Conf: conf, NotAfter: notAfter}, nil
}
