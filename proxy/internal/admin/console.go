package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// ErrCanceled is the cause a session gives the context of a running
// console query when its client sends a cancel request: the command's
// error is then 57014, as for any canceled statement.
var ErrCanceled = errors.New("admin console command canceled by a cancel request")

// Commands documents every console command (SHOW HELP).
var Commands = [][2]string{
	{"SHOW HELP", "this list"},
	{"SHOW VERSION", "the pgshard version"},
	{"SHOW CONFIG", "the proxy's settings (secrets redacted); changeable = applied by RELOAD"},
	{"SHOW SHARDS", "every shard: state, buckets, DSNs (redacted), pool and routing figures, its PgBouncer's readings"},
	{"SHOW MAP", "the shard map: epoch, bucket ranges and their shards"},
	{"SHOW POOLS", "PgBouncer's SHOW POOLS, one row per shard: clients active/waiting, servers active/idle/login, maxwait"},
	{"SHOW STATS", "PgBouncer's SHOW STATS, one row per shard: totals, averages over the last period, p99 transaction time, errors by SQLSTATE class"},
	{"SHOW CLIENTS", "every client connection"},
	{"SHOW SERVERS", "every backend connection"},
	{"SHOW DATABASES", "PgBouncer's SHOW DATABASES, one row per shard"},
	{"SHOW LISTS", "counts of shards, users, clients and servers"},
	{"SHOW USERS", "the users that may log in (never their passwords)"},
	{"SHOW ROUTES", "recent routing decisions (keyed ones sampled 1 in 64): kind, shard, statement, reason"},
	{"RELOAD", "re-read the config file and shard map; applied between transactions, or rejected with the reason"},
	{"PAUSE [shard]", "wait for the shard's (every shard's) transactions to finish, then hold new ones"},
	{"RESUME [shard]", "end a pause"},
	{"DISABLE", "refuse new client logins (the console still accepts admins)"},
	{"ENABLE", "accept new client logins again"},
	{"RECONNECT [shard]", "close backend connections as they become free; new ones are opened"},
	{"KILL [shard]", "close the sessions using the shard (every non-admin session) and its backend connections"},
	{"SHUTDOWN", "graceful shutdown: stop accepting, let sessions finish (proxy.shutdown_timeout), exit"},
	{"WAIT_CLOSE [shard]", "wait until the backend connections a RECONNECT, KILL or RELOAD retired are closed"},
}

// Query runs the commands of one query string against h, stopping at the
// first error, and appends the answers to dst: per command its result set
// or tag (and notices), the error that stopped the string, or
// EmptyQueryResponse for a string without a command. ReadyForQuery is the
// caller's. A cancel request cancels ctx with ErrCanceled as its cause.
func Query(ctx context.Context, h Host, sql string, dst []byte) []byte {
	cmds := parseQuery(sql)
	if len(cmds) == 0 {
		return pgwire.AppendEmpty(dst, 'I')
	}
	for _, c := range cmds {
		var res *result
		var err error
		dst, res, err = run(ctx, h, c, dst)
		if err != nil {
			e := pgwire.AsError(err, pgwire.NewError(pgwire.CodeProtocolViolation, err.Error()))
			if errors.Is(err, context.Canceled) && errors.Is(context.Cause(ctx), ErrCanceled) {
				e = pgwire.NewError(pgwire.CodeQueryCanceled, "canceling statement due to user request")
			}
			return pgwire.AppendError(dst, e)
		}
		dst = res.append(dst)
	}
	return dst
}

// run runs one command; it may append notices to dst.
func run(ctx context.Context, h Host, c command, dst []byte) ([]byte, *result, error) {
	verb, args := c.verb, c.args
	arity := func(max int) error {
		if len(args) > max {
			return pgwire.NewError(pgwire.CodeSyntaxError, fmt.Sprintf("%s: too many arguments (%s)", verb, strings.Join(args, " ")))
		}
		return nil
	}
	switch verb {
	case "SHOW":
		if len(args) != 1 {
			return dst, nil, pgwire.NewError(pgwire.CodeSyntaxError, "SHOW needs one of: "+showNames())
		}
		f, ok := shows[strings.ToUpper(args[0])]
		if !ok {
			return dst, nil, pgwire.NewError(pgwire.CodeProtocolViolation, fmt.Sprintf("invalid command 'SHOW %s', use SHOW HELP;", args[0]))
		}
		return dst, f(h), nil
	case "RELOAD":
		if err := arity(0); err != nil {
			return dst, nil, err
		}
		return reload(ctx, h, dst)
	case "PAUSE", "RESUME", "RECONNECT", "KILL", "WAIT_CLOSE":
		if err := arity(1); err != nil {
			return dst, nil, err
		}
		shards, err := shardsNamed(h, args)
		if err != nil {
			return dst, nil, err
		}
		return dst, &result{tag: verb}, poolCommand(ctx, h, verb, shards)
	case "DISABLE", "ENABLE":
		if err := arity(0); err != nil {
			return dst, nil, pgwire.NewError(pgwire.CodeSyntaxError, verb+" takes no argument: it refuses (DISABLE) or accepts (ENABLE) new client logins to the whole proxy; PAUSE holds one shard")
		}
		h.DisableLogins(verb == "DISABLE")
		return dst, &result{tag: verb}, nil
	case "SHUTDOWN":
		if err := arity(0); err != nil {
			return dst, nil, err
		}
		h.Shutdown()
		return dst, &result{tag: "SHUTDOWN"}, nil
	}
	return dst, nil, pgwire.NewError(pgwire.CodeProtocolViolation, fmt.Sprintf("invalid command '%s', use SHOW HELP;", c.text))
}
