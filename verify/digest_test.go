package verify

import (
	"encoding/json"
	"testing"
)

// TestStateDigestOfStoredRow: the state digest of an executions.data
// document as the store writes it (active_path, context) is the digest of
// the workload state's own document (HISTORY.md, "Content digests"), and
// any change of content changes it.
func TestStateDigestOfStoredRow(t *testing.T) {
	want, err := ContentDigest([]byte(`{"step":2,"active":"a","op":"r/w0/1","timers":{"t0":1.5},"payload":"xx"}`))
	if err != nil {
		t.Fatal(err)
	}
	row := func(data string) string {
		var d execDoc
		if err := json.Unmarshal([]byte(data), &d); err != nil {
			t.Fatal(err)
		}
		s, err := stateDigest(&d)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	stored := `{"id": "x", "definition_id": "chaos", "version": 3, "status": "running", "outcome": null, "active_path": ["a"], "parent_id": null,
		"context": {"op": "r/w0/1", "step": 2, "payload": "xx", "timers": {"t0": 1.5}}}`
	if got := row(stored); got != want {
		t.Errorf("stored row: digest %s, want %s", got, want)
	}
	for _, changed := range []string{
		`{"active_path": ["b"], "context": {"op": "r/w0/1", "step": 2, "payload": "xx", "timers": {"t0": 1.5}}}`,
		`{"active_path": ["a"], "context": {"op": "r/w0/1", "step": 2, "payload": "xx", "timers": {"t0": 1.50001}}}`,
		`{"active_path": ["a"], "context": {"op": "r/w0/1", "step": 2, "payload": "xx", "timers": {"t0": 1.5}, "x": 0}}`,
		`{"active_path": ["a", "b"], "context": {"op": "r/w0/1", "step": 2, "payload": "xx", "timers": {"t0": 1.5}}}`,
		`{"active_path": ["a"], "context": {"op": "r/w0/1", "step": 2, "payload": "xy", "timers": {"t0": 1.5}}}`,
	} {
		if got := row(changed); got == want {
			t.Errorf("%s: same digest as the writer's state", changed)
		}
	}
}

// TestUndecidedBound: at most 0.5 % of the executions, never more than 10.
func TestUndecidedBound(t *testing.T) {
	for _, c := range []struct{ exes, want int }{{0, 0}, {4, 0}, {199, 0}, {200, 1}, {1999, 9}, {2000, 10}, {1000000, 10}} {
		if got := maxUndecided(c.exes); got != c.want {
			t.Errorf("maxUndecided(%d) = %d, want %d", c.exes, got, c.want)
		}
	}
}
