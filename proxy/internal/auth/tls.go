package auth

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
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
