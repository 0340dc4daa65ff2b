package backend

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestBouncerLoginError: PgBouncer's login refusals (all 08P01 from it)
// reach the client with Postgres's authorization SQLSTATEs and the shard
// named; its other errors, and Postgres's own, are left as they are.
func TestBouncerLoginError(t *testing.T) {
	for _, c := range []struct{ code, msg, want string }{
		{"08P01", `"trust" authentication failed`, "28000"},
		{"08P01", "no such user: bob", "28000"},
		{"08P01", "password authentication failed", "28P01"},
		{"08P01", "SASL authentication failed", "28P01"},
		{"08P01", "no such database: x", "08P01"},
		{"08P01", "server conn crashed?", "08P01"},
		{"28P01", `password authentication failed for user "bob"`, "28P01"},
		{"3D000", `database "x" does not exist`, "3D000"},
	} {
		in := &pgconn.PgError{Severity: "FATAL", Code: c.code, Message: c.msg}
		got := bouncerLoginError(in, "shard1")
		if got.Code != c.want {
			t.Errorf("%s %q: %s, want %s", c.code, c.msg, got.Code, c.want)
		}
		if changed := got.Code != c.code; changed != strings.Contains(got.Message, `shard "shard1"`) || !strings.Contains(got.Message, c.msg) {
			t.Errorf("%s %q: message %q", c.code, c.msg, got.Message)
		}
		if in.Code != c.code {
			t.Errorf("the input error was changed")
		}
	}
}
