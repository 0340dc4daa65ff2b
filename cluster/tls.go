package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// TLSFiles are a local certificate authority and a server certificate it
// signed, for a development or test cluster to use TLS for real (clients
// verify the server with sslmode=verify-full against CA).
type TLSFiles struct {
	// Dir holds the files.
	Dir string
	// CA is the authority's certificate (sslrootcert); CAKey its key.
	CA, CAKey string
	// Cert and Key are the server's certificate and key, for 127.0.0.1,
	// ::1, localhost and the extra hosts given (PostgreSQL's and the
	// proxy's alike).
	Cert, Key string
}

// WriteTLSFiles makes a new CA and a server certificate signed by it in
// dir (created 0755, so the servers' OS user can reach it), valid for two
// years for 127.0.0.1, ::1, localhost and hosts. The server key is owned by
// the OS user the servers run as (PostgreSQL refuses a key others can
// read). Existing files are kept: calling it again on the same dir returns
// the same certificates.
func WriteTLSFiles(dir string, hosts ...string) (TLSFiles, error) {
	f := TLSFiles{Dir: dir, CA: filepath.Join(dir, "ca.crt"), CAKey: filepath.Join(dir, "ca.key"),
		Cert: filepath.Join(dir, "server.crt"), Key: filepath.Join(dir, "server.key")}
	if _, err := os.Stat(f.Key); err == nil {
		if _, err := os.Stat(f.CA); err == nil {
			return f, nil
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return f, fmt.Errorf("tls files: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return f, fmt.Errorf("tls files: %w", err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, fmt.Errorf("tls files: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "pgshard development CA", Organization: []string{"pgshard"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(2 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return f, fmt.Errorf("tls files: CA: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return f, fmt.Errorf("tls files: CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, fmt.Errorf("tls files: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "localhost", Organization: []string{"pgshard"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(2 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return f, fmt.Errorf("tls files: server certificate: %w", err)
	}
	caKeyDER, err := x509.MarshalECPrivateKey(caKey)
	if err != nil {
		return f, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return f, err
	}
	run, err := currentRunAs()
	if err != nil {
		return f, err
	}
	for _, w := range []struct {
		path, typ string
		der       []byte
		mode      os.FileMode
		server    bool
	}{
		{f.CA, "CERTIFICATE", caDER, 0o644, false},
		{f.CAKey, "EC PRIVATE KEY", caKeyDER, 0o600, false},
		{f.Cert, "CERTIFICATE", der, 0o644, true},
		{f.Key, "EC PRIVATE KEY", keyDER, 0o600, true},
	} {
		data := pem.EncodeToMemory(&pem.Block{Type: w.typ, Bytes: w.der})
		tmp := w.path + ".tmp"
		if err := os.WriteFile(tmp, data, w.mode); err != nil {
			return f, fmt.Errorf("tls files: %w", err)
		}
		if w.server {
			if err := run.chown(tmp); err != nil {
				return f, fmt.Errorf("tls files: %w", err)
			}
		}
		if err := os.Rename(tmp, w.path); err != nil {
			return f, fmt.Errorf("tls files: %w", err)
		}
	}
	return f, nil
}

// PostgresSettings are the settings that turn TLS on in a shard's
// PostgreSQL with these files (plain-text clients are still accepted).
func (f TLSFiles) PostgresSettings() map[string]string {
	return map[string]string{"ssl": "on", "ssl_cert_file": f.Cert, "ssl_key_file": f.Key, "ssl_ca_file": f.CA}
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}
