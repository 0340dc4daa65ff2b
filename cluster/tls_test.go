package cluster_test

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"

	"github.com/pgshard/pgshard/cluster"
)

// TestWriteTLSFiles: the server certificate verifies against the CA for
// 127.0.0.1, ::1, localhost and the extra hosts; a second call keeps the
// files; the keys are private.
func TestWriteTLSFiles(t *testing.T) {
	dir := t.TempDir() + "/tls"
	f, err := cluster.WriteTLSFiles(dir, "db.example", "10.9.8.7")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("CA does not parse")
	}
	for _, host := range []string{"127.0.0.1", "::1", "localhost", "db.example", "10.9.8.7"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
			t.Errorf("%s: %v", host, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "other.example"}); err == nil {
		t.Error("verifies for a host it was not made for")
	}
	for _, k := range []string{f.Key, f.CAKey} {
		st, err := os.Stat(k)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, %v", k, st.Mode(), err)
		}
	}
	before, _ := os.ReadFile(f.Cert)
	g, err := cluster.WriteTLSFiles(dir)
	after, _ := os.ReadFile(g.Cert)
	if err != nil || string(before) != string(after) {
		t.Errorf("a second call replaced the certificate: %v", err)
	}
	if s := f.PostgresSettings(); s["ssl"] != "on" || s["ssl_cert_file"] != f.Cert || s["ssl_key_file"] != f.Key {
		t.Errorf("PostgresSettings: %v", s)
	}
}
