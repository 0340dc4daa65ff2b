package auth

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// SCRAM-SHA-256 (RFC 5802, RFC 7677) as Postgres implements it, server side.
// Channel binding is not offered (the proxy does not speak TLS yet).

const (
	// Mechanism is the SASL mechanism's name (and a verifier's prefix).
	Mechanism       = "SCRAM-SHA-256"
	scramIterations = 4096 // Postgres's default scram_iterations
	scramNonceLen   = 18   // Postgres's SCRAM_RAW_NONCE_LEN
	scramSaltLen    = 16   // Postgres's SCRAM_DEFAULT_SALT_LEN
)

// Verifier is what a server stores for a password: Postgres's
// "SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>".
type Verifier struct {
	iterations int
	salt       []byte
	storedKey  []byte
	serverKey  []byte
}

// ParseVerifier parses a verifier in Postgres's format (as in
// pg_authid.rolpassword).
func ParseVerifier(s string) (Verifier, error) {
	var v Verifier
	rest, ok := strings.CutPrefix(s, Mechanism+"$")
	if !ok {
		return v, errors.New("not a SCRAM-SHA-256 verifier (want SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>)")
	}
	head, keys, ok := strings.Cut(rest, "$")
	if !ok {
		return v, errors.New("malformed SCRAM-SHA-256 verifier: missing keys")
	}
	it, salt, ok := strings.Cut(head, ":")
	if !ok {
		return v, errors.New("malformed SCRAM-SHA-256 verifier: missing salt")
	}
	n, err := strconv.Atoi(it)
	if err != nil || n < 1 {
		return v, fmt.Errorf("malformed SCRAM-SHA-256 verifier: iteration count %q", it)
	}
	sk, svk, ok := strings.Cut(keys, ":")
	if !ok {
		return v, errors.New("malformed SCRAM-SHA-256 verifier: missing ServerKey")
	}
	v.iterations = n
	if v.salt, err = base64.StdEncoding.DecodeString(salt); err != nil {
		return v, errors.New("malformed SCRAM-SHA-256 verifier: salt is not base64")
	}
	if v.storedKey, err = base64.StdEncoding.DecodeString(sk); err != nil || len(v.storedKey) != sha256.Size {
		return v, errors.New("malformed SCRAM-SHA-256 verifier: StoredKey is not a base64 SHA-256 digest")
	}
	if v.serverKey, err = base64.StdEncoding.DecodeString(svk); err != nil || len(v.serverKey) != sha256.Size {
		return v, errors.New("malformed SCRAM-SHA-256 verifier: ServerKey is not a base64 SHA-256 digest")
	}
	return v, nil
}

// NewSCRAMVerifier derives a verifier for password with a random salt, in
// Postgres's text format. Passwords are used as given (no SASLprep), which
// matches Postgres for ASCII passwords.
func NewSCRAMVerifier(password string) (string, error) {
	salt := make([]byte, scramSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	v, err := deriveVerifier(password, salt, scramIterations)
	if err != nil {
		return "", err
	}
	return v.String(), nil
}

func deriveVerifier(password string, salt []byte, iterations int) (Verifier, error) {
	salted, err := pbkdf2.Key(sha256.New, password, salt, iterations, sha256.Size)
	if err != nil {
		return Verifier{}, err
	}
	clientKey := hmacSHA256(salted, []byte("Client Key"))
	stored := sha256.Sum256(clientKey)
	return Verifier{
		iterations: iterations,
		salt:       salt,
		storedKey:  stored[:],
		serverKey:  hmacSHA256(salted, []byte("Server Key")),
	}, nil
}

// String formats v like Postgres.
func (v Verifier) String() string {
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("%s$%d:%s$%s:%s", Mechanism, v.iterations, b64(v.salt), b64(v.storedKey), b64(v.serverKey))
}

func hmacSHA256(key, msg []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(msg)
	return h.Sum(nil)
}

// SCRAMServer runs one SCRAM-SHA-256 exchange.
type SCRAMServer struct {
	Verifier        Verifier
	clientFirstBare string
	serverFirst     string
	nonce           string // client nonce + server nonce
	gs2Header       string
}

// errSCRAM is an authentication failure; the client gets 28P01.
var errSCRAM = errors.New("SCRAM authentication failed")

// first handles the client-first-message and returns the server-first-message.
func (s *SCRAMServer) First(clientFirst string) (string, error) {
	// gs2-header: "n,," (no binding) or "y,," (client could bind, we did
	// not offer it); "p=..." demands binding, which we do not support.
	var cbFlag string
	switch {
	case strings.HasPrefix(clientFirst, "n,"), strings.HasPrefix(clientFirst, "y,"):
		cbFlag = clientFirst[:2]
	case strings.HasPrefix(clientFirst, "p="):
		return "", errors.New("channel binding is not supported by pgshard (no TLS yet)")
	default:
		return "", errors.New("malformed SCRAM message: unexpected channel-binding flag")
	}
	rest := clientFirst[2:]
	authzid, bare, ok := strings.Cut(rest, ",")
	if !ok {
		return "", errors.New("malformed SCRAM message: missing gs2 header end")
	}
	if authzid != "" {
		return "", errors.New("client uses authorization identity, but it is not supported")
	}
	s.gs2Header = cbFlag + authzid + ","
	s.clientFirstBare = bare
	var cnonce string
	for _, attr := range strings.Split(bare, ",") {
		switch {
		case strings.HasPrefix(attr, "n="):
			// Postgres ignores the SCRAM user name (it uses the startup user).
		case strings.HasPrefix(attr, "r="):
			cnonce = attr[2:]
		case strings.HasPrefix(attr, "m="):
			return "", errors.New("client requires an unsupported SCRAM extension")
		}
	}
	if cnonce == "" || strings.ContainsAny(cnonce, ",") {
		return "", errors.New("malformed SCRAM message: missing or invalid nonce")
	}
	raw := make([]byte, scramNonceLen)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	s.nonce = cnonce + base64.StdEncoding.EncodeToString(raw)
	s.serverFirst = fmt.Sprintf("r=%s,s=%s,i=%d", s.nonce, base64.StdEncoding.EncodeToString(s.Verifier.salt), s.Verifier.iterations)
	return s.serverFirst, nil
}

// final checks the client-final-message and returns the server-final-message.
func (s *SCRAMServer) Final(clientFinal string) (string, error) {
	i := strings.LastIndex(clientFinal, ",p=")
	if i < 0 {
		return "", errors.New("malformed SCRAM message: missing proof")
	}
	withoutProof := clientFinal[:i]
	proof, err := base64.StdEncoding.DecodeString(clientFinal[i+3:])
	if err != nil || len(proof) != sha256.Size {
		return "", errors.New("malformed SCRAM message: invalid proof")
	}
	var cb, nonce string
	for _, attr := range strings.Split(withoutProof, ",") {
		switch {
		case strings.HasPrefix(attr, "c="):
			cb = attr[2:]
		case strings.HasPrefix(attr, "r="):
			nonce = attr[2:]
		}
	}
	if cb != base64.StdEncoding.EncodeToString([]byte(s.gs2Header)) {
		return "", errors.New("SCRAM channel binding check failed")
	}
	if nonce != s.nonce {
		return "", errors.New("SCRAM nonce mismatch")
	}
	authMessage := []byte(s.clientFirstBare + "," + s.serverFirst + "," + withoutProof)
	clientSig := hmacSHA256(s.Verifier.storedKey, authMessage)
	clientKey := make([]byte, sha256.Size)
	for k := range clientKey {
		clientKey[k] = proof[k] ^ clientSig[k]
	}
	got := sha256.Sum256(clientKey)
	if subtle.ConstantTimeCompare(got[:], s.Verifier.storedKey) != 1 {
		return "", errSCRAM
	}
	serverSig := hmacSHA256(s.Verifier.serverKey, authMessage)
	return "v=" + base64.StdEncoding.EncodeToString(serverSig), nil
}
