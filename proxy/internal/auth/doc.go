// Package auth is client authentication for the proxy: the server side of
// SCRAM-SHA-256 as Postgres implements it, and loading the certificate
// for client TLS. It imports nothing of pgshard's.
//
//	scram.go  Verifier (Postgres's stored form; ParseVerifier,
//	          NewSCRAMVerifier, DeriveVerifier) and SCRAMServer, one
//	          exchange: First(client-first) → server-first,
//	          Final(client-final) → server-final, or an error
//	tls.go    TLSMode (disable, allow, require), LoadTLS → TLSSetup (the
//	          mode, the tls.Config, the expiry), LoadCertificate
//
// The session drives the exchange over the wire (AuthenticationSASL…);
// this package sees only the SASL messages' text.
package auth
