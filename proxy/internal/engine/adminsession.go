package engine

import (
	"context"
	"slices"
	"sync"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// The admin console's session side: the startup of a console session,
// its message loop and its cancel: consoleSession (admin.go is the proxy's side: the
// adminHost the commands of proxy/internal/admin see).

// adminStartup finishes the startup of an admin console session: register,
// authenticate, check the user is an admin, then the parameter statuses a
// client expects (no backend is involved: the console works with every
// shard down).
func (u *startup) adminStartup(_ context.Context) (bool, error) {
	s, pkt := u.s, u.pkt
	if ok, err := u.admit(); !ok {
		return false, err
	}
	if !slices.Contains(s.gen.Config.AdminUsers, s.user) {
		s.host.Clients.unregister(s)
		s.host.Metrics.ClientsRefused.WithLabelValues("not_admin").Inc()
		s.log.Info("admin console login refused: not an admin user", "user", s.user, "remote", s.cc.conn.RemoteAddr().String())
		return s.cc.fail(pgwire.NewFatal(pgwire.CodeInsufficientPrivilege, "permission denied to use the pgshard admin console"))
	}
	enc, _ := pkt.Param("client_encoding")
	if enc == "" {
		enc = "UTF8"
	}
	version := "15.0 (pgshard)"
	for _, p := range s.gen.Pools {
		if v := p.ServerVersion(); v != "" {
			version = v + " (pgshard)"
		}
	}
	for _, kv := range [][2]string{
		{"DateStyle", "ISO, MDY"}, {"application_name", s.app}, {"client_encoding", enc},
		{"integer_datetimes", "on"}, {"is_superuser", "off"}, {"server_encoding", "UTF8"},
		{"server_version", version}, {"standard_conforming_strings", "on"}, {"TimeZone", "UTC"},
	} {
		s.cc.out = pgwire.AppendParameterStatus(s.cc.out, kv[0], kv[1])
	}
	ok, err := u.sendKeyAndReady()
	if ok {
		s.log.Info("admin console session", "user", s.user, "remote", s.cc.conn.RemoteAddr().String())
	}
	return ok, err
}

// consoleSession is an admin console session's own state: the command
// it runs, which a cancel request cancels. The console reads and answers
// on the session's client connection; the commands are the host's
// (HostOps.ConsoleQuery).
type consoleSession struct {
	mu sync.Mutex
	// cancel cancels the command running (nil: none), under mu.
	cancel context.CancelFunc
}

// serve is the console's message loop on the client connection c; who
// is the console's user.
func (k *consoleSession) serve(ctx context.Context, c *clientConn, host *HostEnv, who ConsoleCaller) error {
	skipping := false
	for {
		if err := c.flush(); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		typ, msg, err := c.rd.Next()
		if err != nil {
			return err
		}
		switch typ {
		case 'Q':
			sql, err := pgwire.DecodeQuery(msg)
			if err != nil {
				return err
			}
			after := k.query(ctx, c, host, who, string(sql))
			c.out = pgwire.AppendRFQ(c.out, 'I')
			if after != nil {
				err := c.flush() // the answer first: after may close this session
				after()
				if err != nil {
					return err
				}
			}
		case 'X':
			return nil
		case 'S':
			skipping = false
			c.out = pgwire.AppendRFQ(c.out, 'I')
		case 'P', 'B', 'D', 'E', 'C', 'H', 'F':
			if !skipping {
				skipping = true
				c.out = pgwire.AppendError(c.out, pgwire.NewError(pgwire.CodeProtocolViolation, "the pgshard admin console supports the simple query protocol only"))
			}
			if typ == 'F' {
				skipping = false
				c.out = pgwire.AppendRFQ(c.out, 'I')
			}
		case 'd', 'c', 'f':
		default:
			return pgwire.ProtoErrorf("invalid frontend message type %d", typ)
		}
	}
}

// query runs the commands of one query string, answered into c.out, with
// a context a cancel request cancels (cancelRunning); it returns what
// the commands left for once the answer is flushed (HostOps.ConsoleQuery).
func (k *consoleSession) query(ctx context.Context, c *clientConn, host *HostEnv, who ConsoleCaller, sql string) (after func()) {
	cctx, cancel := context.WithCancelCause(ctx)
	k.mu.Lock()
	k.cancel = func() { cancel(host.ConsoleCanceled) }
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		k.cancel = nil
		k.mu.Unlock()
		cancel(nil)
	}()
	c.out, after = host.Ops.ConsoleQuery(cctx, who, sql, c.out)
	return after
}

// cancelRunning cancels the command the console runs (a cancel request).
func (k *consoleSession) cancelRunning() {
	k.mu.Lock()
	cancel := k.cancel
	k.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}
