package pgwire

import "testing"

// TestAppendShardFatal: a shard's FATAL reaches the client as an ERROR
// naming the shard, its SQLSTATE, detail and hint kept; an undecodable
// one becomes an internal error, never the raw bytes.
func TestAppendShardFatal(t *testing.T) {
	raw := AppendError(nil, &Error{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command", Detail: "d", Hint: "h"})
	e := DecodeError(AppendShardFatal(nil, raw, "shard1"))
	if e == nil || e.Severity != "ERROR" || e.Code != "57P01" || e.Detail != "d" || e.Hint != "h" ||
		e.Message != `shard "shard1" ended the connection: terminating connection due to administrator command` {
		t.Fatalf("got %+v", e)
	}
	if e := DecodeError(AppendShardFatal(nil, []byte{'E', 0, 0, 0, 5, 'x'}, "s")); e == nil || e.Code != CodeInternalError {
		t.Fatalf("malformed: %+v", e)
	}
}
