package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/pgshard/pgshard/proxy/internal/auth"
	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// startup is a session's startup phase: the negotiation (TLS, a cancel
// request), the client's identity and database, admission and
// authentication, then the parameter statuses, the cancel key and the
// first ReadyForQuery (adminsession.go: a console's). It holds what
// only the startup needs; what it settles (user, database, application,
// settings, what the client was told) it leaves on the Session, which
// keeps it past the startup.
type startup struct {
	s *Session
	// pkt is the startup packet that starts the session.
	pkt *pgwire.StartupPacket
	// asSelf: admitted through the "*" login; its backends log in as its
	// own user (settings.user).
	asSelf bool
}

// run negotiates, authenticates and sends the initial parameter
// statuses. It returns false when the connection is done (cancel request,
// refused or failed startup).
func (u *startup) run(ctx context.Context) (bool, error) {
	s := u.s
	_ = s.cc.conn.SetDeadline(time.Now().Add(s.gen.Config.StartupTimeout))
	defer s.cc.conn.SetDeadline(time.Time{})
	pkt, ok, err := s.cc.negotiate(ctx, s.host)
	if !ok {
		return false, err
	}
	u.pkt = pkt
	if e := u.identify(); e != nil {
		return s.cc.fail(e)
	}
	if s.admin {
		return u.adminStartup(ctx)
	}
	dbErr := u.chooseDatabase()
	kv, e := startupParams(pkt)
	if e != nil {
		return s.cc.fail(e)
	}
	if ok, err := u.admit(); !ok {
		return false, err
	}
	if dbErr != nil {
		// Refused after authentication, as Postgres does (InitPostgres):
		// who may not log in learns nothing of the names served.
		s.host.Clients.unregister(s)
		s.host.Metrics.ClientsRefused.WithLabelValues("no_database").Inc()
		return s.cc.fail(dbErr)
	}
	if pkt.Minor > 0 || len(pkt.ProtocolOptions) > 0 {
		s.cc.out = appendNegotiateProtocol(s.cc.out, pkt.ProtocolOptions)
	}
	return u.greet(ctx, kv)
}

// negotiate reads startup packets up to the one that starts the session:
// SSLRequest gets TLS (or 'N'), GSSENCRequest 'N', a CancelRequest is
// carried out. ok is false when the connection is done (a cancel request,
// or a failure: err).
func (c *clientConn) negotiate(ctx context.Context, host *HostEnv) (pkt *pgwire.StartupPacket, ok bool, err error) {
	for tries := 0; ; tries++ {
		pkt, err = pgwire.ReadStartupPacket(c.conn)
		if err != nil {
			var e *pgwire.Error
			if errors.As(err, &e) {
				ok, err = c.fail(e)
				return nil, ok, err
			}
			if errors.Is(err, pgwire.ErrProtocol) {
				ok, err = c.fail(pgwire.NewFatal(pgwire.CodeProtocolViolation, err.Error()))
				return nil, ok, err
			}
			return nil, false, err
		}
		if tries >= 2 && (pkt.Kind == pgwire.StartupSSL || pkt.Kind == pgwire.StartupGSSEnc) {
			ok, err = c.fail(pgwire.NewFatal(pgwire.CodeProtocolViolation, "too many encryption requests"))
			return nil, ok, err
		}
		switch pkt.Kind {
		case pgwire.StartupSSL:
			if err := c.startTLS(host.TLS.Load()); err != nil { // 'S' and a handshake, or 'N'
				return nil, false, err
			}
			continue
		case pgwire.StartupGSSEnc:
			// Not supported: 'N' tells the client to go on without it.
			if _, err := c.conn.Write([]byte{'N'}); err != nil {
				return nil, false, err
			}
			continue
		case pgwire.StartupCancel:
			host.Clients.Cancel(ctx, pkt.CancelPID, pkt.CancelKey)
			return nil, false, nil
		}
		return pkt, true, nil
	}
}

// identify takes the session's user, database and application from the
// startup packet, and refuses a connection the proxy does not accept
// (without TLS where it is required, without a user, for replication, or
// while logins are disabled, but to the console).
func (u *startup) identify() *pgwire.Error {
	s, pkt := u.s, u.pkt
	if ts := s.host.TLS.Load(); ts != nil && ts.Mode == auth.TLSRequire && !s.cc.tlsOn {
		s.host.Metrics.ClientsRefused.WithLabelValues("tls_required").Inc()
		return &pgwire.Error{Severity: "FATAL", Code: pgwire.CodeInvalidAuthorization,
			Message: "pgshard accepts only TLS connections (proxy.tls.mode: require)",
			Hint:    "Connect with sslmode=require, verify-ca or verify-full."}
	}
	user, _ := pkt.Param("user")
	if user == "" {
		return pgwire.NewFatal(pgwire.CodeInvalidAuthorization, "no PostgreSQL user name specified in startup packet")
	}
	s.user = user
	s.db, _ = pkt.Param("database")
	if s.db == "" {
		s.db = user
	}
	if v, ok := pkt.Param("replication"); ok && v != "false" && v != "0" && v != "off" && v != "no" {
		return pgwire.NewFatal(pgwire.CodeFeatureNotSupported, "replication connections are not supported by pgshard")
	}
	s.app, _ = pkt.Param("application_name")
	s.admin = len(s.gen.Config.AdminUsers) > 0 && s.db == s.gen.Config.AdminDatabase
	if !s.admin && s.host.LoginsDisabled.Load() {
		s.host.Metrics.ClientsRefused.WithLabelValues("disabled").Inc()
		return &pgwire.Error{Severity: "FATAL", Code: pgwire.CodeCannotConnectNow,
			Message: "pgshard is not accepting new connections (DISABLE on the admin console)",
			Hint:    "Retry later; an operator re-enables logins with ENABLE."}
	}
	return nil
}

// chooseDatabase gives the session the server of its logical database
// (databases.go), or refuses a database the proxy does not serve.
func (u *startup) chooseDatabase() *pgwire.Error {
	s := u.s
	if sub := s.gen.Ops.DatabaseEnv(s.db); sub != s.gen {
		// Another logical database: its server serves the session (its
		// pools and routing); the session stays with the accepting server (console,
		// cancel keys, shutdown).
		s.gen, s.log = sub, sub.Log
	} else if len(s.gen.Config.Databases) > 0 && !slices.Contains(s.gen.Config.Databases, s.db) {
		return pgwire.NewFatal(pgwire.CodeInvalidCatalogName, fmt.Sprintf("database %q does not exist", s.db))
	}
	return nil
}

// startupParams are the settings the startup packet gives the session:
// those of its options, then its parameters but those only startup takes
// — Postgres's order (process_startup_options: the options' switches
// first, then the packet's parameters), so a parameter overrides the same
// setting in options (last wins in backend.NewSettings); a pgshard hint
// among them is refused.
func startupParams(pkt *pgwire.StartupPacket) ([][2]string, *pgwire.Error) {
	var kv [][2]string
	if opts, ok := pkt.Param("options"); ok {
		o, err := pgwire.ParseOptions(opts)
		if err != nil {
			return nil, pgwire.AsError(err, pgwire.NewFatal(pgwire.CodeProtocolViolation, err.Error()))
		}
		kv = append(kv, o...)
	}
	for _, p := range pkt.Params {
		name := strings.ToLower(p[0])
		if backend.StartupOnly[name] {
			continue
		}
		kv = append(kv, [2]string{name, p[1]})
	}
	for _, p := range kv {
		if strings.HasPrefix(p[0], "pgshard.") {
			return nil, pgwire.NewFatal(pgwire.CodeFeatureNotSupported, fmt.Sprintf("%s cannot be a startup parameter: pgshard hints are transaction-local (SET LOCAL)", p[0]))
		}
	}
	return kv, nil
}

// greet sets the session's startup settings kv, pins it at startup or
// reads the shards' parameter statuses, and sends them, BackendKeyData
// and the first ReadyForQuery.
func (u *startup) greet(ctx context.Context, kv [][2]string) (bool, error) {
	s := u.s
	s.startup = backend.NewSettings(kv)
	if u.asSelf {
		s.startup = s.startup.WithUser(s.user) // it reaches the shards as itself
	}
	s.cur = s.startup
	st, e := pinning(s).pinAtStartup(ctx)
	if e == nil && st == nil {
		st, e = s.gen.initialStatuses(ctx, s.cur)
	}
	if e != nil {
		s.host.Clients.unregister(s)
		s.releaseAll()
		return s.cc.fail(e)
	}
	s.ps.reported = st
	s.ps.startupReported = st
	names := make([]string, 0, len(st))
	for n := range st {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		s.cc.out = pgwire.AppendParameterStatus(s.cc.out, n, st[n]) // s.seen: told
	}
	return u.sendKeyAndReady()
}

// sendKeyAndReady ends a greeting whose ParameterStatus messages are in
// s.out: BackendKeyData (the cancel key) and the first ReadyForQuery,
// flushed. A client it cannot reach leaves the register. The greeting's
// buffer is dropped: a client that stays idle holds none.
func (u *startup) sendKeyAndReady() (bool, error) {
	s := u.s
	s.cc.out = append(s.cc.out, 'K', 0, 0, 0, 12)
	s.cc.out = pgwire.AppendU32(s.cc.out, s.pid)
	s.cc.out = pgwire.AppendU32(s.cc.out, s.secret)
	s.cc.out = pgwire.AppendRFQ(s.cc.out, 'I')
	if err := s.cc.flush(); err != nil {
		s.host.Clients.unregister(s)
		return false, err
	}
	s.cc.out = nil
	return true, nil
}

func appendNegotiateProtocol(dst []byte, unsupported []string) []byte {
	dst, sp := pgwire.BeginMsg(dst, 'v')
	dst = pgwire.AppendU32(dst, pgwire.ProtocolV3)
	dst = pgwire.AppendU32(dst, uint32(len(unsupported)))
	for _, o := range unsupported {
		dst = pgwire.AppendCStr(dst, o)
	}
	return pgwire.FinishMsg(dst, sp)
}

// login is user's login (ok false: none); asSelf: through the "*" login,
// which stands for every user not listed (local development and
// compatibility runs: `--trust-user '*'`).
func (g *GenerationEnv) login(user string) (l Login, asSelf, ok bool) {
	if l, ok = g.Users[user]; ok {
		return l, false, true
	}
	l, ok = g.Users["*"]
	return l, ok, ok
}

// authenticate runs trust or SCRAM-SHA-256 with the client for user's
// login l (ok false: user has none); refusals are logged on log.
func (c *clientConn) authenticate(l Login, ok bool, user string, log *slog.Logger) (bool, error) {
	if !ok {
		_, err := c.fail(pgwire.NewFatal(pgwire.CodeInvalidPassword, fmt.Sprintf("password authentication failed for user %q", user)))
		log.Info("login refused: unknown user", "user", user, "remote", c.conn.RemoteAddr().String())
		return false, err
	}
	if l.Trust {
		c.out = append(c.out, 'R', 0, 0, 0, 8, 0, 0, 0, 0)
		return true, nil
	}
	// AuthenticationSASL
	c.out, _ = appendAuth(c.out, 10, []byte(auth.Mechanism+"\x00\x00"))
	if err := c.flush(); err != nil {
		return false, err
	}
	authFail := func(reason string) (bool, error) {
		log.Info("login refused", "user", user, "remote", c.conn.RemoteAddr().String(), "reason", reason)
		_, err := c.fail(pgwire.NewFatal(pgwire.CodeInvalidPassword, fmt.Sprintf("password authentication failed for user %q", user)))
		return false, err
	}
	typ, msg, err := c.rd.Next()
	if err != nil {
		return false, err
	}
	if typ != 'p' {
		return c.fail(pgwire.NewFatal(pgwire.CodeProtocolViolation, fmt.Sprintf("expected SASL response, got message type %d", typ)))
	}
	b := pgwire.Body(msg)
	mech, i, err := pgwire.CString(b, 0)
	if err != nil || len(b)-i < 4 {
		return c.fail(pgwire.NewFatal(pgwire.CodeProtocolViolation, "malformed SASLInitialResponse message"))
	}
	if string(mech) != auth.Mechanism {
		return c.fail(pgwire.NewFatal(pgwire.CodeProtocolViolation, "client selected an invalid SASL authentication mechanism"))
	}
	n := int(int32(uint32(b[i])<<24 | uint32(b[i+1])<<16 | uint32(b[i+2])<<8 | uint32(b[i+3])))
	i += 4
	if n < 0 || len(b)-i != n {
		return c.fail(pgwire.NewFatal(pgwire.CodeProtocolViolation, "malformed SASLInitialResponse message"))
	}
	sc := &auth.SCRAMServer{Verifier: l.Verifier}
	serverFirst, err := sc.First(string(b[i:]))
	if err != nil {
		return authFail(err.Error())
	}
	c.out, _ = appendAuth(c.out, 11, []byte(serverFirst))
	if err := c.flush(); err != nil {
		return false, err
	}
	typ, msg, err = c.rd.Next()
	if err != nil {
		return false, err
	}
	if typ != 'p' {
		return c.fail(pgwire.NewFatal(pgwire.CodeProtocolViolation, fmt.Sprintf("expected SASL response, got message type %d", typ)))
	}
	serverFinal, err := sc.Final(string(pgwire.Body(msg)))
	if err != nil {
		return authFail(err.Error())
	}
	c.out, _ = appendAuth(c.out, 12, []byte(serverFinal))
	c.out = append(c.out, 'R', 0, 0, 0, 8, 0, 0, 0, 0)
	return true, nil
}

func appendAuth(dst []byte, code uint32, data []byte) ([]byte, error) {
	dst, sp := pgwire.BeginMsg(dst, 'R')
	dst = pgwire.AppendU32(dst, code)
	dst = append(dst, data...)
	return pgwire.FinishMsg(dst, sp), nil
}

// initialStatuses returns the ParameterStatus values a client gets at
// startup: those of a backend connection opened with its startup
// settings cur (which also validates them, as Postgres would), plus the
// canonical values of the settings the preamble applies.
func (g *GenerationEnv) initialStatuses(ctx context.Context, cur *backend.Settings) (map[string]string, *pgwire.Error) {
	var lastErr error
	first := g.pickAny()
	for k := 0; k < len(g.Pools); k++ {
		p := g.Pools[(first+k)%len(g.Pools)]
		if p.IsDown() != nil {
			lastErr = p.IsDown()
			continue
		}
		key, pre := cur.Split(p.ViaPooler)
		st, err := p.StartupStatuses(ctx, key)
		if err != nil {
			var be *backend.PgError
			if errors.As(err, &be) {
				// The server refused the client's settings: that is the
				// client's error, as it would have been connecting directly.
				return nil, pgErrorToError(be.PgErr, "FATAL")
			}
			lastErr = err
			continue
		}
		if len(pre.KV) == 0 {
			// Shared by the sessions with these settings: the pool's
			// map is never written, and a session copies before writing.
			return st, nil
		}
		out := make(map[string]string, len(st)+4)
		for n, v := range st {
			out[n] = v
		}
		if len(pre.KV) > 0 {
			vals, e := g.validatePreamble(ctx, p, key, pre)
			if e != nil {
				e.Severity = "FATAL"
				return nil, e
			}
			for n, v := range vals {
				out[n] = v
			}
		}
		return out, nil
	}
	e := pgwire.AsError(lastErr, pgwire.NewFatal(pgwire.CodeCannotConnect, "no shard is reachable"))
	return nil, &pgwire.Error{Severity: "FATAL", Code: e.Code, Message: "cannot start the session: no shard is reachable: " + e.Message, Hint: e.Hint}
}

// admit registers the session (bounded by max_clients) and authenticates
// it: the start of every login, the admin console's too. A refusal is
// counted by its reason and leaves the session unregistered.
func (u *startup) admit() (bool, error) {
	s := u.s
	if !s.host.Clients.register(s, s.host.Ops.CurrentEnv().Config.MaxClients) {
		s.host.Metrics.ClientsRefused.WithLabelValues("max_clients").Inc()
		return s.cc.fail(pgwire.NewFatal(pgwire.CodeTooManyConnections, "sorry, too many clients already"))
	}
	l, asSelf, found := s.gen.login(s.user)
	u.asSelf = asSelf
	ok, err := s.cc.authenticate(l, found, s.user, s.log)
	if !ok {
		s.host.Clients.unregister(s)
		s.host.Metrics.ClientsRefused.WithLabelValues("auth").Inc()
		return false, err
	}
	return true, nil
}
