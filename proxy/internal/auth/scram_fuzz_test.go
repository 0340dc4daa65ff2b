package auth

import (
	"testing"
)

// FuzzSCRAM: the SCRAM server never panics on client messages and never
// accepts a proof made without the password.
func FuzzSCRAM(f *testing.F) {
	v, err := deriveVerifier("pw", []byte("0123456789abcdef"), 16)
	if err != nil {
		f.Fatal(err)
	}
	f.Add("n,,n=u,r=abc", "c=biws,r=abcXYZ,p=AAAA")
	f.Add("p=tls-unique,,n=u,r=x", "")
	f.Add("y,,n=,r=a,m=ext", "c=eSws,r=a,p=")
	f.Fuzz(func(t *testing.T, first, final string) {
		s := &SCRAMServer{Verifier: v}
		if _, err := s.First(first); err != nil {
			return
		}
		if _, err := s.Final(final); err == nil {
			t.Fatalf("accepted a final message built without the password: %q", final)
		}
	})
}
