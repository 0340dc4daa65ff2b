package verify

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Content digests (HISTORY.md, "Content digests"): a history of version 2
// records, for every document a commit writes and every document a load or
// a delivery reads, the digest of its canonical form, computed by the
// writer from what it sent or received. The checks compare each final row
// and each read with the digest of its last writer: a row must hold
// exactly what its writer wrote, not only the right identity.
//
// The canonical form of a JSON document is the document re-serialized
// with object members sorted by key (bytewise, the last of repeated keys
// kept), no insignificant whitespace, numbers exactly as written, strings
// escaped as encoding/json escapes them without HTML escaping. It survives
// what the store's jsonb or text columns do to a document (member order,
// whitespace) and nothing else. The digest is the first 16 bytes of its
// SHA-256, in lowercase hex: 128 bits make an accidental collision among a
// run's documents impossible in practice, SHA-256 keeps that true for a
// corruption that is not accidental, and it is in the standard library on
// both sides (FNV is faster but trivially forged, and the time is spent
// parsing JSON, not hashing).

// canonicalJSON returns the canonical form of the JSON document b.
func canonicalJSON(b []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the document")
	}
	return encodeCanonical(v)
}

func encodeCanonical(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func digestBytes(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:16])
}

// ContentDigest is the digest of the canonical form of the JSON document
// doc (HISTORY.md, "Content digests").
func ContentDigest(doc []byte) (string, error) {
	c, err := canonicalJSON(doc)
	if err != nil {
		return "", fmt.Errorf("not a JSON document: %w", err)
	}
	return digestBytes(c), nil
}

// stateDigest is the digest of the workload state an executions.data
// document holds: its context's members with "active" set to the single
// element of active_path ("" when it is empty; a longer active_path is
// kept as "active_path", which no writer's state has).
func stateDigest(d *execDoc) (string, error) {
	m := map[string]json.RawMessage{}
	if isSet(d.Context) {
		if err := json.Unmarshal(d.Context, &m); err != nil {
			return "", fmt.Errorf("context is not an object: %w", err)
		}
	}
	switch len(d.ActivePath) {
	case 0:
		m["active"] = json.RawMessage(`""`)
	case 1:
		b, _ := json.Marshal(d.ActivePath[0])
		m["active"] = b
	default:
		b, _ := json.Marshal(d.ActivePath)
		m["active_path"] = b
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	return ContentDigest(b)
}

// spawnDigest is the digest of a spawn intent's content: the canonical
// form of {"context":CONTEXT,"root_path":ROOT}.
func spawnDigest(rootPath string, context Doc) (string, error) {
	ctx := json.RawMessage(context)
	if !json.Valid(ctx) {
		b, _ := json.Marshal(string(context)) // a corrupt context still has a digest
		ctx = b
	}
	b, err := json.Marshal(struct {
		Context  json.RawMessage `json:"context"`
		RootPath string          `json:"root_path"`
	}{ctx, rootPath})
	if err != nil {
		return "", err
	}
	return ContentDigest(b)
}

// docDigest is the digest of a document column; a column that is not JSON
// gets the digest of its text as a JSON string (never a writer's digest).
func docDigest(d Doc) string {
	if s, err := ContentDigest([]byte(d)); err == nil {
		return s
	}
	b, _ := json.Marshal(string(d))
	s, _ := ContentDigest(b)
	return s
}

// knownDataMembers are the members of the store's executions.data
// document; a version-2 history's rows must have no other.
var knownDataMembers = map[string]bool{"id": true, "definition_id": true, "version": true, "status": true,
	"outcome": true, "active_path": true, "parent_id": true, "context": true}
