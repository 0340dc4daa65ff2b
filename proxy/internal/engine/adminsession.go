package engine

import (
	"context"
	"slices"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// The admin console's session side: the startup of a console session,
// its message loop and its cancel (admin.go is the proxy's side: the
// adminHost the commands of proxy/internal/admin see).

// adminStartup finishes the startup of an admin console session: register,
// authenticate, check the user is an admin, then the parameter statuses a
// client expects (no backend is involved: the console works with every
// shard down).
func (s *Session) adminStartup(_ context.Context, pkt *pgwire.StartupPacket) (bool, error) {
	if ok, err := s.admit(); !ok {
		return false, err
	}
	if !slices.Contains(s.gen.Config.AdminUsers, s.user) {
		s.host.Clients.unregister(s)
		s.host.Metrics.ClientsRefused.WithLabelValues("not_admin").Inc()
		s.log.Info("admin console login refused: not an admin user", "user", s.user, "remote", s.conn.RemoteAddr().String())
		return s.fail(pgwire.NewFatal(pgwire.CodeInsufficientPrivilege, "permission denied to use the pgshard admin console"))
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
		s.out = pgwire.AppendParameterStatus(s.out, kv[0], kv[1])
	}
	ok, err := s.sendKeyAndReady()
	if ok {
		s.log.Info("admin console session", "user", s.user, "remote", s.conn.RemoteAddr().String())
	}
	return ok, err
}

// serveAdmin is the console's message loop.
func (s *Session) serveAdmin(ctx context.Context) error {
	skipping := false
	for {
		if err := s.flush(); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		typ, msg, err := s.rd.Next()
		if err != nil {
			return err
		}
		switch typ {
		case 'Q':
			sql, err := pgwire.DecodeQuery(msg)
			if err != nil {
				return err
			}
			s.adminQuery(ctx, string(sql))
			s.out = pgwire.AppendRFQ(s.out, 'I')
		case 'X':
			return nil
		case 'S':
			skipping = false
			s.out = pgwire.AppendRFQ(s.out, 'I')
		case 'P', 'B', 'D', 'E', 'C', 'H', 'F':
			if !skipping {
				skipping = true
				s.out = pgwire.AppendError(s.out, pgwire.NewError(pgwire.CodeProtocolViolation, "the pgshard admin console supports the simple query protocol only"))
			}
			if typ == 'F' {
				skipping = false
				s.out = pgwire.AppendRFQ(s.out, 'I')
			}
		case 'd', 'c', 'f':
		default:
			return pgwire.ProtoErrorf("invalid frontend message type %d", typ)
		}
	}
}

// adminQuery runs the commands of one query string (the console), with
// a context a cancel request cancels (cancelAdmin).
func (s *Session) adminQuery(ctx context.Context, sql string) {
	cctx, cancel := context.WithCancelCause(ctx)
	s.mu.Lock()
	s.adminCancel = func() { cancel(s.host.ConsoleCanceled) }
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.adminCancel = nil
		s.mu.Unlock()
		cancel(nil)
	}()
	s.out = s.host.Ops.ConsoleQuery(cctx, ConsoleCaller{User: s.user, Log: s.log}, sql, s.out)
}

// cancelAdmin cancels the command an admin session runs (a cancel request).
func (s *Session) cancelAdmin() {
	s.mu.Lock()
	cancel := s.adminCancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}
