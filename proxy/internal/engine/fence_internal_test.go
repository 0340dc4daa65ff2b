package engine

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/shardmap"
)

// TestFenceSQL: the assert's key is one string literal whatever it holds.
func TestFenceSQL(t *testing.T) {
	for key, want := range map[string]string{
		"abc":      "SELECT pgshard_fence_assert('abc')",
		"42":       "SELECT pgshard_fence_assert('42')",
		"o'hara":   "SELECT pgshard_fence_assert('o''hara')",
		`a\b`:      `SELECT pgshard_fence_assert(E'a\\b')`,
		`'\`:       `SELECT pgshard_fence_assert(E'''\\')`,
		"":         "SELECT pgshard_fence_assert('')",
		"x'); --":  "SELECT pgshard_fence_assert('x''); --')",
		"ünïcødé€": "SELECT pgshard_fence_assert('ünïcødé€')",
	} {
		if got := fenceSQL(key, false); got != want {
			t.Errorf("fenceSQL(%q) = %s, want %s", key, got, want)
		}
		call := "CALL pgshard_fence_enter(" + strings.TrimPrefix(want, "SELECT pgshard_fence_assert(")
		if got := fenceSQL(key, true); got != call {
			t.Errorf("fenceSQL(%q, call) = %s, want %s", key, got, call)
		}
	}
}

// TestParseFenceMode: auto (also ""), on, off, nothing else.
func TestParseFenceMode(t *testing.T) {
	for s, want := range map[string]FenceMode{"": FenceAuto, "auto": FenceAuto, "ON": FenceOn, "off": FenceOff} {
		m, err := ParseFenceMode(s)
		if err != nil || m != want {
			t.Errorf("ParseFenceMode(%q) = %v, %v; want %v", s, m, err, want)
		}
		if s != "" && m.String() != s && m.String() != "on" {
			t.Errorf("%v.String() = %q", m, m.String())
		}
	}
	if _, err := ParseFenceMode("yes"); err == nil {
		t.Error(`ParseFenceMode("yes") accepted`)
	}
}

// TestFenceStandIns: every bucket has a stand-in text that hashes to it,
// and a key is its own stand-in when its text hashes to its bucket.
func TestFenceStandIns(t *testing.T) {
	c := &StandInTexts{}
	m := &shardmap.Map{Buckets: 256}
	st := c.standIns(m.Buckets)
	if len(st) != 256 {
		t.Fatalf("%d stand-ins for 256 buckets", len(st))
	}
	for b, s := range st {
		if shardmap.BucketText(s, 256) != b {
			t.Fatalf("stand-in %q of bucket %d hashes to %d", s, b, shardmap.BucketText(s, 256))
		}
	}
	if got := c.fenceKeyFor(m, "abc", shardmap.BucketText("abc", 256)); got != "abc" {
		t.Errorf("a text key's assert names %q", got)
	}
	b := shardmap.BucketInt8(42, 256)
	if got := c.fenceKeyFor(m, "42", b); shardmap.BucketText(got, 256) != b {
		t.Errorf("int8 key 42 (bucket %d) asserts %q, which hashes to bucket %d", b, got, shardmap.BucketText(got, 256))
	}
}

// TestShiftPosition: an inlined assert's length is taken off the
// position of an error or notice pointing past it; other fields, and
// messages without a position (or one inside the assert), are kept;
// noPosition drops the position.
func TestShiftPosition(t *testing.T) {
	msg, err := (&pgproto3.ErrorResponse{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "42703",
		Message: `column "nope" does not exist`, Position: 50, Hint: "h"}).Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	got := shiftPosition(nil, msg, 42)
	if p := pgwire.ErrorField(got, 'P'); p != "8" {
		t.Fatalf("position %q, want 8", p)
	}
	for _, f := range []byte{'C', 'M', 'H', 'S'} {
		if a, b := pgwire.ErrorField(got, f), pgwire.ErrorField(msg, f); a != b {
			t.Errorf("field %c: %q, want %q", f, a, b)
		}
	}
	if string(shiftPosition(nil, msg, 0)) != string(msg) {
		t.Error("shift 0 changed the message")
	}
	if string(shiftPosition(nil, msg, 50)) != string(msg) {
		t.Error("a position inside the assert was changed")
	}
	// noPosition (an EXECUTE's statement: the position is in a text the
	// client did not send) drops the field, and only it.
	dropped := shiftPosition(nil, msg, noPosition)
	if p := pgwire.ErrorField(dropped, 'P'); p != "" {
		t.Errorf("noPosition kept position %q", p)
	}
	for _, f := range []byte{'C', 'M', 'H', 'S'} {
		if a, b := pgwire.ErrorField(dropped, f), pgwire.ErrorField(msg, f); a != b {
			t.Errorf("noPosition: field %c: %q, want %q", f, a, b)
		}
	}
	if e := pgwire.DecodeError(dropped); e == nil || e.Message != `column "nope" does not exist` {
		t.Errorf("noPosition: the message decodes as %+v", e)
	}
	plain := pgwire.AppendError(nil, &pgwire.Error{Code: "PS001", Message: "refused"})
	if string(shiftPosition([]byte("x"), plain, 42)) != "x"+string(plain) {
		t.Error("a message without a position was changed")
	}
}

// TestInlinable: only ASCII keys without NUL go inline.
func TestInlinable(t *testing.T) {
	for key, want := range map[string]bool{"abc": true, "o'hara": true, `a\b`: true, "": true, "ünï": false, "a\x00": false} {
		if got := inlinable(key); got != want {
			t.Errorf("inlinable(%q) = %v, want %v", key, got, want)
		}
	}
}
