package pgwire

import (
	"slices"
	"testing"
)

// TestMsgs: the messages laid back to back, each with its header; a
// partial message at the end, or a length below the header's own, ends
// the walk.
func TestMsgs(t *testing.T) {
	b := AppendEmpty(nil, '2')
	b = AppendCommandComplete(b, "SELECT 1")
	var got []string
	for m := range Msgs(append(b, 'D', 0, 0, 0, 9, 0)) { // a partial DataRow
		got = append(got, string(m[0])+":"+string(Body(m)))
	}
	if want := []string{"2:", "C:SELECT 1\x00"}; !slices.Equal(got, want) {
		t.Errorf("Msgs: %q, want %q", got, want)
	}
	n := 0
	for range Msgs([]byte{'Z', 0, 0, 0, 2, 'I'}) { // a length below 4
		n++
	}
	if n != 0 {
		t.Errorf("a malformed length yielded %d messages", n)
	}
}
