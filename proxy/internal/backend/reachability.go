package backend

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// Unreachable reports whether err, met while talking to a shard (directly
// or through its PgBouncer), means that the shard's server cannot be
// reached right now — as opposed to an answer from it (a missing or
// mismatching identity record, a bad setting) that must stop the start.
//
// Unreachable: network errors and timeouts, a connection closed under the
// query, and the SQLSTATEs a server or pooler sends when it cannot serve
// now: class 08 (connection exception; PgBouncer's 08P01 "server login has
// been failing, try again later (server_login_retry)" and "no more
// connections allowed"), 57P01-57P03 (shutting down, crash recovery,
// "the database system is starting up") and 53300 (too many connections).
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"),
			pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03",
			pe.Code == pgwire.CodeTooManyConnections:
			return true
		}
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if pgconn.Timeout(err) || pgconn.SafeToRetry(err) {
		return true
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	s := err.Error()
	return strings.Contains(s, "conn closed") || strings.Contains(s, "unexpected EOF") || strings.Contains(s, "connection reset")
}
