package store

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Defaults of Options.
const (
	DefaultConnectAttempts = 15
	DefaultConnectInterval = time.Second
	DefaultConnectTimeout  = 5 * time.Second
	DefaultMaxConns        = 16
	// DefaultTraceMax is the trace ring's cap when Options.TraceMax is 0:
	// the seed store's DEFAULT_TRACE_MAX, 200 entries per execution.
	DefaultTraceMax = 200
)

// NoTraceCap, as Options.TraceMax, keeps every trace entry (no ring).
const NoTraceCap = -1

// Options configure Open. The zero value is usable: connect with 15
// attempts 1 s apart, 16 connections, no statement timeout, trace rings of
// DefaultTraceMax (200) entries, unnamed statements only.
type Options struct {
	// ConnectAttempts is how many times Open tries to reach the database
	// before giving up (default 15), so a worker started before Postgres
	// waits for it instead of failing.
	ConnectAttempts int
	// ConnectInterval is the pause between attempts (default 1 s).
	ConnectInterval time.Duration
	// ConnectTimeout bounds each new connection, in Open and later (default
	// 5 s). A small value makes operations on an unreachable server fail
	// fast.
	ConnectTimeout time.Duration
	// MaxConns bounds the pool (default 16).
	MaxConns int
	// StatementTimeout, when positive, bounds every statement: each
	// operation's transaction starts with the equivalent of SET LOCAL
	// statement_timeout, in the same round trip. No session state is set.
	StatementTimeout time.Duration
	// TraceMax caps each execution's trace ring: an append drops entries
	// with idx <= newest idx - TraceMax. 0 means DefaultTraceMax (200, as
	// in the seed); NoTraceCap (-1) keeps every entry.
	TraceMax int
	// ExecMode is how statements are sent (default pgx.QueryExecModeExec:
	// unnamed statements, parameters typed by the server, one round trip
	// per batch). See the package documentation for why.
	ExecMode pgx.QueryExecMode
	// BehindPooler says the DSN reaches a transaction-pooling PgBouncer.
	// Open then refuses exec modes that create named prepared statements
	// (QueryExecModeCacheStatement), which a transaction pooler hands to
	// other clients' sessions.
	BehindPooler bool
	// PingAfterIdle makes the pool check a connection that sat idle longer
	// than this before handing it out, at the cost of one round trip
	// (pgxpool's behaviour). 0 means 1 s, pgxpool's default; negative never
	// checks.
	PingAfterIdle time.Duration
	// ApplicationName is reported to the server (default "pgshard").
	ApplicationName string
	// StallCheck is how long an operation may run before the store checks
	// over a fresh connection that the server still answers, and again
	// after each further StallCheck; an operation on a server found
	// unreachable fails with ErrUnreachable instead of waiting (behind
	// PgBouncer, for its query_wait_timeout). 0 means ConnectTimeout;
	// negative turns the checks off.
	StallCheck time.Duration
}

func (o Options) withDefaults() Options {
	if o.ConnectAttempts <= 0 {
		o.ConnectAttempts = DefaultConnectAttempts
	}
	if o.ConnectInterval <= 0 {
		o.ConnectInterval = DefaultConnectInterval
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.TraceMax == 0 {
		o.TraceMax = DefaultTraceMax
	}
	if o.ExecMode == 0 {
		o.ExecMode = pgx.QueryExecModeExec
	}
	if o.PingAfterIdle == 0 {
		o.PingAfterIdle = time.Second
	}
	if o.ApplicationName == "" {
		o.ApplicationName = "pgshard"
	}
	if o.StallCheck == 0 {
		o.StallCheck = o.ConnectTimeout
	}
	return o
}

func (o Options) validate() error {
	var p []string
	if o.StatementTimeout < 0 {
		p = append(p, fmt.Sprintf("StatementTimeout: must not be negative (got %s)", o.StatementTimeout))
	}
	if o.TraceMax < NoTraceCap {
		p = append(p, fmt.Sprintf("TraceMax: must be positive, 0 (the default, %d) or NoTraceCap (-1, unbounded) (got %d)", DefaultTraceMax, o.TraceMax))
	}
	switch o.ExecMode {
	case pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeDescribeExec, pgx.QueryExecModeCacheDescribe:
	case pgx.QueryExecModeCacheStatement:
		if o.BehindPooler {
			p = append(p, "ExecMode: cache_statement creates named prepared statements, which a transaction pooler shares between clients (use exec)")
		}
	default:
		p = append(p, fmt.Sprintf("ExecMode: unknown mode %d", int(o.ExecMode)))
	}
	if len(p) > 0 {
		return errors.New("store options: " + strings.Join(p, "; "))
	}
	return nil
}

// redacted replaces a DSN's password.
const redacted = "[redacted]"

var kvPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// RedactDSN returns dsn with its password (URL user info, a password
// query parameter or keyword) replaced by "[redacted]" ("redacted" in a
// query parameter, where the brackets would be escaped), for error
// messages, logs and the proxy's console. The one redaction of a DSN in
// pgshard: the store and the proxy both use it.
func RedactDSN(dsn string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "[unparsable DSN]"
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "redacted")
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", "redacted")
			u.RawQuery = q.Encode()
		}
		return strings.Replace(u.String(), ":redacted@", ":"+redacted+"@", 1)
	}
	return kvPassword.ReplaceAllString(dsn, "${1}"+redacted)
}

// DSNPassword returns the password a DSN carries ("" if none).
func DSNPassword(dsn string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return ""
		}
		if p, ok := u.User.Password(); ok {
			return p
		}
		return u.Query().Get("password")
	}
	if m := kvPassword.FindStringSubmatch(dsn); m != nil {
		return strings.Trim(m[2], "'")
	}
	return ""
}
