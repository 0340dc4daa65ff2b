package proxy

import (
	"testing"

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
		if got := fenceSQL(key); got != want {
			t.Errorf("fenceSQL(%q) = %s, want %s", key, got, want)
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
	if err := (Config{Fence: FenceMode(7)}).validate(); err == nil {
		t.Error("validate accepted fence mode 7")
	}
}

// TestFenceStandIns: every bucket has a stand-in text that hashes to it,
// and a key is its own stand-in when its text hashes to its bucket.
func TestFenceStandIns(t *testing.T) {
	c := &core{}
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
