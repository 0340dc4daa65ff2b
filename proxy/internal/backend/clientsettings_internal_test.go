package backend

import "testing"

// TestTxnModes: the transaction modes a client's defaults give the
// transactions the proxy begins for it through a pooler — the level in
// any spelling Postgres accepts for the setting, none for a value that
// names no level, and what the client's own BEGIN names left out.
func TestTxnModes(t *testing.T) {
	cases := []struct {
		kv           [][2]string
		noIso, noDef bool
		modes, begin string
	}{
		{nil, false, false, "", "BEGIN"},
		{[][2]string{{"work_mem", "5MB"}}, false, false, "", "BEGIN"},
		{[][2]string{{"default_transaction_isolation", "serializable"}}, false, false, "ISOLATION LEVEL SERIALIZABLE", "BEGIN ISOLATION LEVEL SERIALIZABLE"},
		{[][2]string{{"default_transaction_isolation", "'Repeatable  Read'"}}, false, false, "ISOLATION LEVEL REPEATABLE READ", "BEGIN ISOLATION LEVEL REPEATABLE READ"},
		{[][2]string{{"default_transaction_isolation", "read committed"}, {"default_transaction_deferrable", "on"}}, false, false, "ISOLATION LEVEL READ COMMITTED, DEFERRABLE", "BEGIN ISOLATION LEVEL READ COMMITTED, DEFERRABLE"},
		{[][2]string{{"default_transaction_isolation", "serializable"}, {"default_transaction_deferrable", "off"}}, true, false, "NOT DEFERRABLE", "BEGIN ISOLATION LEVEL SERIALIZABLE, NOT DEFERRABLE"},
		{[][2]string{{"default_transaction_isolation", "serializable"}, {"default_transaction_deferrable", "true"}}, false, true, "ISOLATION LEVEL SERIALIZABLE", "BEGIN ISOLATION LEVEL SERIALIZABLE, DEFERRABLE"},
		{[][2]string{{"default_transaction_isolation", "serializable; DROP TABLE x"}}, false, false, "", "BEGIN"},
	}
	for _, c := range cases {
		s := NewSettings(c.kv)
		if got := s.TxnModes(c.noIso, c.noDef); got != c.modes {
			t.Errorf("%v TxnModes(%v, %v) = %q, want %q", c.kv, c.noIso, c.noDef, got, c.modes)
		}
		if got := s.BeginSQL(); got != c.begin {
			t.Errorf("%v BeginSQL() = %q, want %q", c.kv, got, c.begin)
		}
	}
}
