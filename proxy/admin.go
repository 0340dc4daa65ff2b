package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgshard/pgshard/proxy/internal/auth"
	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/store"
)

// The admin console: a client that connects to the virtual database
// Config.AdminDatabase ("pgshard") as one of Config.AdminUsers talks to the
// proxy itself, PgBouncer-style, over the simple query protocol: one
// result set (or command tag) per command, PgBouncer's column names where
// the concept is the same, so that dashboards and scripts written for
// PgBouncer's console keep working (a "database" of PgBouncer is a shard
// here). Any other user connecting to that database is refused with 42501
// before anything is said.
//
//	startup (admin db) ─▶ authenticate ─▶ admin user? ─no─▶ FATAL 42501
//	                                          │ yes
//	                                          ▼
//	serveAdmin: Query ─▶ split on ';' ─▶ adminCommand ─▶ result set | tag | error
//	            Parse/Bind/... ─▶ one error per pipeline ("simple protocol only")
//
// Commands (SHOW HELP lists them): SHOW HELP | VERSION | CONFIG | SHARDS |
// MAP | POOLS | STATS | CLIENTS | SERVERS | DATABASES | LISTS | USERS |
// ROUTES; RELOAD; PAUSE [shard]; RESUME [shard]; DISABLE; ENABLE;
// RECONNECT [shard]; KILL [shard]; SHUTDOWN; WAIT_CLOSE [shard].

// adminCommands documents every console command (SHOW HELP).
var adminCommands = [][2]string{
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

// adminStartup finishes the startup of an admin console session: register,
// authenticate, check the user is an admin, then the parameter statuses a
// client expects (no backend is involved: the console works with every
// shard down).
func (s *session) adminStartup(_ context.Context, pkt *pgwire.StartupPacket) (bool, error) {
	if ok, err := s.admit(); !ok {
		return false, err
	}
	if !slices.Contains(s.srv.cfg.AdminUsers, s.user) {
		s.srv.unregister(s)
		s.core.metrics.clientsRefused.WithLabelValues("not_admin").Inc()
		s.log.Info("admin console login refused: not an admin user", "user", s.user, "remote", s.conn.RemoteAddr().String())
		return s.fail(pgwire.NewFatal(pgwire.CodeInsufficientPrivilege, "permission denied to use the pgshard admin console"))
	}
	enc, _ := pkt.Param("client_encoding")
	if enc == "" {
		enc = "UTF8"
	}
	version := "15.0 (pgshard)"
	for _, p := range s.srv.pools {
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
	s.out = append(s.out, 'K', 0, 0, 0, 12)
	s.out = pgwire.AppendU32(s.out, s.pid)
	s.out = pgwire.AppendU32(s.out, s.secret)
	s.out = pgwire.AppendRFQ(s.out, 'I')
	if err := s.flush(); err != nil {
		s.srv.unregister(s)
		return false, err
	}
	s.log.Info("admin console session", "user", s.user, "remote", s.conn.RemoteAddr().String())
	return true, nil
}

// serveAdmin is the console's message loop.
func (s *session) serveAdmin(ctx context.Context) error {
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

// adminQuery runs the commands of one query string, stopping at the first
// error.
func (s *session) adminQuery(ctx context.Context, sql string) {
	cmds := parseAdminQuery(sql)
	if len(cmds) == 0 {
		s.out = pgwire.AppendEmpty(s.out, 'I')
		return
	}
	cctx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	s.adminCancel = cancel
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.adminCancel = nil
		s.mu.Unlock()
		cancel()
	}()
	for _, c := range cmds {
		res, err := s.adminCommand(cctx, c)
		if err != nil {
			e := pgwire.AsError(err, pgwire.NewError(pgwire.CodeProtocolViolation, err.Error()))
			if errors.Is(err, context.Canceled) && ctx.Err() == nil {
				e = pgwire.NewError(pgwire.CodeQueryCanceled, "canceling statement due to user request")
			}
			s.out = pgwire.AppendError(s.out, e)
			return
		}
		s.out = res.append(s.out)
	}
}

// adminCmd is one console command: its verb (upper case) and arguments.
type adminCmd struct {
	verb string
	args []string
	text string // as written, for messages
}

// parseAdminQuery splits a console query into its commands (';'
// separates them; comments and empty commands are dropped).
func parseAdminQuery(sql string) []adminCmd {
	var cmds []adminCmd
	for _, c := range strings.Split(stripComments(sql), ";") {
		words := strings.Fields(c)
		if len(words) == 0 {
			continue
		}
		cmds = append(cmds, adminCmd{verb: strings.ToUpper(words[0]), args: words[1:], text: strings.Join(words, " ")})
	}
	return cmds
}

// stripComments removes SQL comments (-- to the end of the line, /* */)
// from a console query: drivers send "-- ping" to check a connection.
func stripComments(sql string) string {
	var b strings.Builder
	for i := 0; i < len(sql); i++ {
		switch {
		case strings.HasPrefix(sql[i:], "--"):
			j := strings.IndexByte(sql[i:], '\n')
			if j < 0 {
				return b.String()
			}
			i += j
			b.WriteByte('\n')
		case strings.HasPrefix(sql[i:], "/*"):
			j := strings.Index(sql[i+2:], "*/")
			if j < 0 {
				return b.String()
			}
			i += j + 3
			b.WriteByte(' ')
		default:
			b.WriteByte(sql[i])
		}
	}
	return b.String()
}

// adminResult is a command's answer: a result set (cols) or only a tag.
type adminResult struct {
	cols []adminCol
	rows [][]any
	tag  string
}

// adminCol is one result column: its name and type.
type adminCol struct {
	name string
	oid  uint32
}

// The console's column types are PgBouncer's: text, int4, int8 and
// numeric (pgx's pgtype OIDs).

func textCols(names ...string) []adminCol {
	out := make([]adminCol, len(names))
	for i, n := range names {
		out[i] = adminCol{n, pgtype.TextOID}
	}
	return out
}

// append encodes the result: RowDescription, DataRows, CommandComplete.
func (r *adminResult) append(dst []byte) []byte {
	if r.cols != nil {
		var sp int
		dst, sp = pgwire.BeginMsg(dst, 'T')
		dst = pgwire.AppendU16(dst, uint16(len(r.cols)))
		for _, c := range r.cols {
			dst = pgwire.AppendCStr(dst, c.name)
			dst = pgwire.AppendU32(dst, 0)
			dst = pgwire.AppendU16(dst, 0)
			dst = pgwire.AppendU32(dst, c.oid)
			size := uint16(0xffff) // -1: variable
			switch c.oid {
			case pgtype.Int4OID:
				size = 4
			case pgtype.Int8OID:
				size = 8
			}
			dst = pgwire.AppendU16(dst, size)
			dst = pgwire.AppendU32(dst, 0xffffffff) // typmod -1
			dst = pgwire.AppendU16(dst, 0)          // text
		}
		dst = pgwire.FinishMsg(dst, sp)
		for _, row := range r.rows {
			dst, sp = pgwire.BeginMsg(dst, 'D')
			dst = pgwire.AppendU16(dst, uint16(len(row)))
			for _, v := range row {
				txt, null := adminText(v)
				if null {
					dst = pgwire.AppendU32(dst, 0xffffffff)
					continue
				}
				dst = pgwire.AppendU32(dst, uint32(len(txt)))
				dst = append(dst, txt...)
			}
			dst = pgwire.FinishMsg(dst, sp)
		}
	}
	tag := r.tag
	if tag == "" {
		tag = "SHOW"
	}
	return pgwire.AppendCommandComplete(dst, tag)
}

// adminText formats a value (nil is NULL).
func adminText(v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "", true
	case string:
		return x, false
	case int:
		return strconv.Itoa(x), false
	case int64:
		return strconv.FormatInt(x, 10), false
	case uint64:
		return strconv.FormatUint(x, 10), false
	case uint32:
		return strconv.FormatUint(uint64(x), 10), false
	case bool:
		if x {
			return "1", false
		}
		return "0", false
	case time.Time:
		if x.IsZero() {
			return "", true
		}
		return x.UTC().Format("2006-01-02 15:04:05 UTC"), false
	case time.Duration:
		return x.String(), false
	}
	return fmt.Sprint(v), false
}

// adminCommand runs one console command.
func (s *session) adminCommand(ctx context.Context, c adminCmd) (*adminResult, error) {
	verb, args, cmd := c.verb, c.args, c.text
	srv := s.core.current()
	arity := func(max int) error {
		if len(args) > max {
			return pgwire.NewError(pgwire.CodeSyntaxError, fmt.Sprintf("%s: too many arguments (%s)", verb, strings.Join(args, " ")))
		}
		return nil
	}
	switch verb {
	case "SHOW":
		if len(args) != 1 {
			return nil, pgwire.NewError(pgwire.CodeSyntaxError, "SHOW needs one of: "+showNames())
		}
		f, ok := showCommands[strings.ToUpper(args[0])]
		if !ok {
			return nil, pgwire.NewError(pgwire.CodeProtocolViolation, fmt.Sprintf("invalid command 'SHOW %s', use SHOW HELP;", args[0]))
		}
		return f(srv, s), nil
	case "RELOAD":
		if err := arity(0); err != nil {
			return nil, err
		}
		res, err := srv.reloadFromSource(ctx, "RELOAD on the admin console")
		if err != nil {
			return nil, &pgwire.Error{Code: pgwire.CodeInvalidParameterValue, Message: "RELOAD rejected; the running configuration is unchanged: " + err.Error()}
		}
		s.out = pgwire.AppendNotice(s.out, "NOTICE", "00000", res.String())
		return &adminResult{tag: "RELOAD"}, nil
	case "PAUSE", "RESUME", "RECONNECT", "KILL", "WAIT_CLOSE":
		if err := arity(1); err != nil {
			return nil, err
		}
		pools, err := srv.poolsNamed(args)
		if err != nil {
			return nil, err
		}
		return &adminResult{tag: verb}, s.poolCommand(ctx, srv, verb, pools, len(args) == 0)
	case "DISABLE", "ENABLE":
		if err := arity(0); err != nil {
			return nil, pgwire.NewError(pgwire.CodeSyntaxError, verb+" takes no argument: it refuses (DISABLE) or accepts (ENABLE) new client logins to the whole proxy; PAUSE holds one shard")
		}
		s.core.life.disabled.Store(verb == "DISABLE")
		s.log.Info("client logins "+strings.ToLower(verb)+"d on the admin console", "by", s.user)
		return &adminResult{tag: verb}, nil
	case "SHUTDOWN":
		if err := arity(0); err != nil {
			return nil, err
		}
		s.log.Info("SHUTDOWN on the admin console", "by", s.user)
		s.core.beginShutdown("SHUTDOWN on the admin console")
		return &adminResult{tag: "SHUTDOWN"}, nil
	}
	return nil, pgwire.NewError(pgwire.CodeProtocolViolation, fmt.Sprintf("invalid command '%s', use SHOW HELP;", cmd))
}

// poolsNamed returns the pools named by args (every pool for none).
func (srv *Server) poolsNamed(args []string) ([]*backend.Pool, error) {
	if len(args) == 0 {
		return srv.pools, nil
	}
	for _, p := range srv.pools {
		if p.Shard.Name == args[0] {
			return []*backend.Pool{p}, nil
		}
	}
	return nil, pgwire.NewError(pgwire.CodeInvalidParameterValue, fmt.Sprintf("no shard named %q (SHOW SHARDS lists them)", args[0]))
}

// poolCommand runs PAUSE, RESUME, RECONNECT, KILL or WAIT_CLOSE on pools.
func (s *session) poolCommand(ctx context.Context, srv *Server, verb string, pools []*backend.Pool, all bool) error {
	names := make([]string, len(pools))
	for i, p := range pools {
		names[i] = p.Shard.Name
	}
	who := strings.Join(names, ",")
	switch verb {
	case "PAUSE":
		s.log.Info("PAUSE on the admin console: holding new transactions, waiting for running ones", "shards", who, "by", s.user)
		pctx, cancel := context.WithTimeout(ctx, srv.cfg.PauseTimeout)
		defer cancel()
		errs := make(chan error, len(pools))
		for _, p := range pools {
			go func() { errs <- p.Pause(pctx) }()
		}
		var first error
		for range pools {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		if first != nil {
			busy := 0
			for _, p := range pools {
				busy += p.InUse()
			}
			if errors.Is(first, context.Canceled) {
				return first
			}
			return &pgwire.Error{Code: pgwire.CodeQueryCanceled,
				Message: fmt.Sprintf("PAUSE: %d transactions still running after %s; new transactions stay held (RESUME to undo)", busy, srv.cfg.PauseTimeout)}
		}
	case "RESUME":
		for _, p := range pools {
			p.Resume()
		}
		s.log.Info("RESUME on the admin console", "shards", who, "by", s.user)
	case "RECONNECT":
		for _, p := range pools {
			p.Reconnect()
		}
	case "KILL":
		s.log.Warn("KILL on the admin console", "shards", who, "by", s.user)
		s.core.killSessions(func(x *session) bool {
			if x.admin {
				return false
			}
			if all {
				return true
			}
			x.mu.Lock()
			defer x.mu.Unlock()
			return x.bc != nil && slices.Contains(pools, x.bc.Pool)
		})
		for _, p := range pools {
			p.Ops.ReconnectGen.Add(1)
			p.CloseIdle()
			p.InterruptInUse()
		}
	case "WAIT_CLOSE":
		wctx, cancel := context.WithTimeout(ctx, srv.cfg.PauseTimeout)
		defer cancel()
		return backend.PollUntil(wctx, func() bool {
			for _, p := range pools {
				if p.OldConns() > 0 {
					return false
				}
			}
			if all {
				s.core.life.mu.Lock()
				n := len(s.core.life.retired)
				s.core.life.mu.Unlock()
				return n == 0
			}
			return true
		})
	}
	return nil
}

// killSessions closes the client connections of the sessions match
// selects (their transactions are lost, as with pg_terminate_backend).
func (c *core) killSessions(match func(*session) bool) int {
	c.mu.Lock()
	var victims []*session
	for _, x := range c.sessions {
		victims = append(victims, x)
	}
	c.mu.Unlock()
	n := 0
	for _, x := range victims {
		if match(x) {
			x.closeClient()
			n++
		}
	}
	return n
}

// cancelAdmin cancels the command an admin session runs (a cancel request).
func (s *session) cancelAdmin() {
	s.mu.Lock()
	cancel := s.adminCancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// ---- SHOW ----

var showCommands map[string]func(*Server, *session) *adminResult

func init() {
	showCommands = map[string]func(*Server, *session) *adminResult{
		"HELP": showHelp, "VERSION": showVersion, "CONFIG": showConfig, "SHARDS": showShards,
		"MAP": showMap, "POOLS": showPools, "STATS": showStats, "CLIENTS": showClients,
		"SERVERS": showServers, "DATABASES": showDatabases, "LISTS": showLists, "USERS": showUsers,
		"ROUTES": showRoutes,
	}
}

func showNames() string {
	names := make([]string, 0, len(showCommands))
	for n := range showCommands {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func showHelp(*Server, *session) *adminResult {
	r := &adminResult{cols: textCols("command", "description")}
	for _, c := range adminCommands {
		r.rows = append(r.rows, []any{c[0], c[1]})
	}
	return r
}

func showVersion(*Server, *session) *adminResult {
	return &adminResult{cols: textCols("version"), rows: [][]any{{"pgshard " + versionString()}}}
}

// versionString is the build's version (BuildVersion, or the module's).
func versionString() string {
	if BuildVersion != "" {
		return BuildVersion
	}
	return "dev"
}

func showPools(srv *Server, _ *session) *adminResult {
	r := &adminResult{cols: []adminCol{
		{"database", pgtype.TextOID}, {"user", pgtype.TextOID}, {"cl_active", pgtype.Int4OID}, {"cl_waiting", pgtype.Int4OID},
		{"cl_active_cancel_req", pgtype.Int4OID}, {"cl_waiting_cancel_req", pgtype.Int4OID}, {"sv_active", pgtype.Int4OID},
		{"sv_active_cancel", pgtype.Int4OID}, {"sv_being_canceled", pgtype.Int4OID}, {"sv_idle", pgtype.Int4OID},
		{"sv_used", pgtype.Int4OID}, {"sv_tested", pgtype.Int4OID}, {"sv_login", pgtype.Int4OID}, {"maxwait", pgtype.Int4OID},
		{"maxwait_us", pgtype.Int4OID}, {"pool_mode", pgtype.TextOID}, {"pool_size", pgtype.Int4OID}, {"state", pgtype.TextOID},
		{"cl_pinned", pgtype.Int4OID},
	}}
	pinned := map[string]int{} // shard → sessions of the main database pinned there
	for _, ps := range srv.PinnedSessions() {
		if srv.dbs[ps.DB] == nil {
			pinned[ps.Shard]++
		}
	}
	mode := srv.cfg.PoolMode
	if mode == PoolModeDefault {
		mode = PoolTransaction
	}
	for _, p := range srv.pools {
		f := p.Figures()
		r.rows = append(r.rows, []any{p.Shard.Name, p.BackendUser(), f.Active, f.Waiting, 0, 0, f.Active,
			0, 0, f.Idle, 0, 0, f.Login, int(f.MaxWait / time.Second), int((f.MaxWait % time.Second) / time.Microsecond),
			mode.String(), srv.cfg.PoolSize, p.State(), pinned[p.Shard.Name]})
	}
	return r
}

func showStats(srv *Server, _ *session) *adminResult {
	r := &adminResult{cols: []adminCol{
		{"database", pgtype.TextOID}, {"total_xact_count", pgtype.NumericOID}, {"total_query_count", pgtype.NumericOID},
		{"total_received", pgtype.NumericOID}, {"total_sent", pgtype.NumericOID}, {"total_xact_time", pgtype.NumericOID},
		{"total_query_time", pgtype.NumericOID}, {"total_wait_time", pgtype.NumericOID}, {"avg_xact_count", pgtype.NumericOID},
		{"avg_query_count", pgtype.NumericOID}, {"avg_recv", pgtype.NumericOID}, {"avg_sent", pgtype.NumericOID},
		{"avg_xact_time", pgtype.NumericOID}, {"avg_query_time", pgtype.NumericOID}, {"avg_wait_time", pgtype.NumericOID},
		{"p99_xact_time", pgtype.NumericOID}, {"errors", pgtype.TextOID},
	}}
	for _, p := range srv.pools {
		st := p.Stats
		xacts, xn := st.Xacts.Load(), st.XactNanos.Load()
		a := p.Averages()
		// Query times are not measured separately: a statement's time is
		// part of its transaction's (total_query_time and avg_query_time
		// report the transaction figures, as PgBouncer does in
		// transaction pooling for one-statement transactions).
		r.rows = append(r.rows, []any{p.Shard.Name, xacts, st.Queries.Load(), st.BytesIn.Load(), st.BytesOut.Load(),
			xn / 1e3, xn / 1e3, st.WaitNanos.Load() / 1e3, a.XactsPerSec, a.QueriesPerSec, a.RecvPerSec, a.SentPerSec,
			a.XactMicros, a.XactMicros, a.WaitMicros,
			uint64(backend.Quantile(st.XactHist, 0.99) / time.Microsecond), st.ErrorSummary()})
	}
	return r
}

func showShards(srv *Server, _ *session) *adminResult {
	r := &adminResult{cols: []adminCol{
		{"shard", pgtype.TextOID}, {"ordinal", pgtype.Int4OID}, {"state", pgtype.TextOID}, {"reason", pgtype.TextOID}, {"buckets", pgtype.Int4OID},
		{"ranges", pgtype.TextOID}, {"via", pgtype.TextOID}, {"addr", pgtype.TextOID}, {"dsn", pgtype.TextOID}, {"pooler_dsn", pgtype.TextOID},
		{"verified", pgtype.Int4OID}, {"cl_active", pgtype.Int4OID}, {"cl_waiting", pgtype.Int4OID}, {"sv_active", pgtype.Int4OID},
		{"sv_idle", pgtype.Int4OID}, {"maxwait_us", pgtype.Int8OID}, {"xact_count", pgtype.Int8OID}, {"avg_xact_time", pgtype.Int8OID},
		{"p99_xact_time", pgtype.Int8OID}, {"keyed", pgtype.Int8OID}, {"hinted", pgtype.Int8OID}, {"any", pgtype.Int8OID},
		{"fanout", pgtype.Int8OID}, {"refused", pgtype.Int8OID}, {"errors", pgtype.TextOID},
		{"pgbouncer_cl_active", pgtype.Int4OID}, {"pgbouncer_cl_waiting", pgtype.Int4OID}, {"pgbouncer_sv_active", pgtype.Int4OID},
		{"pgbouncer_sv_idle", pgtype.Int4OID}, {"pgbouncer_maxwait_us", pgtype.Int8OID}, {"pgbouncer_read_at", pgtype.TextOID},
	}}
	m := srv.cfg.Map
	for _, p := range srv.pools {
		f := p.Figures()
		st := p.Stats
		var ranges []string
		n := 0
		for _, rg := range m.RangesOf(p.Shard.Name) {
			ranges = append(ranges, fmt.Sprintf("%d-%d", rg.Lo, rg.Hi))
			n += rg.Hi - rg.Lo + 1
		}
		reason := ""
		switch {
		case p.Down.Load() != nil:
			reason = p.Down.Load().Message
		case p.Ops.Refuse.Load() != nil:
			reason = p.Ops.Refuse.Load().Message
		}
		via := "direct"
		if p.ViaPooler {
			via = "pgbouncer"
		}
		row := []any{p.Shard.Name, p.Shard.Ordinal, p.State(), reason, n, strings.Join(ranges, ","), via, p.Addr,
			store.RedactDSN(p.Shard.DSN), nullIfEmpty(store.RedactDSN(p.Shard.PoolerDSN)), p.Verified.Load(), f.Active, f.Waiting,
			f.Active, f.Idle, int64(f.MaxWait / time.Microsecond), st.Xacts.Load(),
			backend.AvgMicros(st.XactNanos.Load(), st.Xacts.Load()), uint64(backend.Quantile(st.XactHist, 0.99) / time.Microsecond),
			st.Routes[backend.RouteKeyed].Load(), st.Routes[backend.RouteHinted].Load(), st.Routes[backend.RouteAny].Load(),
			st.Routes[backend.RouteFanout].Load(), st.Routes[backend.RouteRefused].Load(), st.ErrorSummary()}
		if b := p.Ops.Bouncer.Load(); b != nil && b.Err == "" {
			row = append(row, b.ClActive, b.ClWaiting, b.SvActive, b.SvIdle, int64(b.MaxWait/time.Microsecond), b.At)
		} else if b != nil {
			row = append(row, nil, nil, nil, nil, nil, "error: "+b.Err)
		} else {
			row = append(row, nil, nil, nil, nil, nil, nil)
		}
		r.rows = append(r.rows, row)
	}
	return r
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func showMap(srv *Server, _ *session) *adminResult {
	m := srv.cfg.Map
	r := &adminResult{cols: []adminCol{{"epoch", pgtype.Int8OID}, {"bucket_count", pgtype.Int4OID}, {"lo", pgtype.Int4OID},
		{"hi", pgtype.Int4OID}, {"buckets", pgtype.Int4OID}, {"shard", pgtype.TextOID}, {"ordinal", pgtype.Int4OID}}}
	ords := map[string]int{}
	for _, sh := range m.Shards {
		ords[sh.Name] = sh.Ordinal
	}
	for _, rg := range m.Ranges {
		r.rows = append(r.rows, []any{m.Epoch, m.Buckets, rg.Lo, rg.Hi, rg.Hi - rg.Lo + 1, rg.Shard, ords[rg.Shard]})
	}
	return r
}

// clientCols are PgBouncer's SHOW CLIENTS / SHOW SERVERS columns, plus the
// shard and, for a client pinned to a backend of its own (pin.go), why
// (remote_pid is then that backend's PID, as PgBouncer's for a linked
// client).
var clientCols = []adminCol{
	{"type", pgtype.TextOID}, {"user", pgtype.TextOID}, {"database", pgtype.TextOID}, {"state", pgtype.TextOID}, {"addr", pgtype.TextOID},
	{"port", pgtype.Int4OID}, {"local_addr", pgtype.TextOID}, {"local_port", pgtype.Int4OID}, {"connect_time", pgtype.TextOID},
	{"request_time", pgtype.TextOID}, {"wait", pgtype.Int4OID}, {"wait_us", pgtype.Int4OID}, {"close_needed", pgtype.Int4OID},
	{"ptr", pgtype.TextOID}, {"link", pgtype.TextOID}, {"remote_pid", pgtype.Int8OID}, {"tls", pgtype.TextOID},
	{"application_name", pgtype.TextOID}, {"shard", pgtype.TextOID}, {"pinned", pgtype.TextOID},
}

func hostPort(a interface{ String() string }) (string, int) {
	if a == nil {
		return "", 0
	}
	h, p, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String(), 0
	}
	n, _ := strconv.Atoi(p)
	return h, n
}

func showClients(srv *Server, _ *session) *adminResult {
	r := &adminResult{cols: clientCols}
	srv.mu.Lock()
	sessions := make([]*session, 0, len(srv.sessions))
	for _, x := range srv.sessions {
		sessions = append(sessions, x)
	}
	srv.mu.Unlock()
	slices.SortFunc(sessions, func(a, b *session) int { return a.connected.Compare(b.connected) })
	for _, x := range sessions {
		state, shard, link := "idle", "", ""
		bcPID := 0
		req := x.connected
		x.mu.Lock()
		if bc := x.bc; bc != nil {
			state, shard, link = "active", bc.Pool.Shard.Name, fmt.Sprintf("%s/%d", bc.Pool.Shard.Name, bc.PID)
			bcPID = int(bc.PID)
			if ns := bc.UsedSince.Load(); ns != 0 {
				req = time.Unix(0, ns)
			}
		}
		x.mu.Unlock()
		remotePID, pinned := 0, ""
		x.pinMu.Lock()
		if ps := x.pinInfo; ps != nil {
			pinned, remotePID = ps.Reason, bcPID
		}
		x.pinMu.Unlock()
		if x.admin {
			state, shard = "active", ""
		}
		db := x.db
		addr, port := hostPort(x.conn.RemoteAddr())
		laddr, lport := hostPort(x.conn.LocalAddr())
		tlsInfo := ""
		if x.tlsOn {
			tlsInfo = "TLS"
		}
		r.rows = append(r.rows, []any{"C", x.user, db, state, addr, port, laddr, lport, x.connected, req, 0, 0, 0,
			fmt.Sprintf("%08x", x.pid), link, remotePID, tlsInfo, x.app, nullIfEmpty(shard), nullIfEmpty(pinned)})
	}
	return r
}

func showServers(srv *Server, _ *session) *adminResult {
	r := &adminResult{cols: clientCols}
	for _, p := range append(slices.Clip(srv.pools), srv.directPools()...) {
		gen := p.Ops.ReconnectGen.Load()
		for i, ci := range p.SnapshotConns() {
			state := "active"
			req := ci.Opened
			if ci.Idle {
				state = "idle"
			} else if ci.Since != 0 {
				req = time.Unix(0, ci.Since)
			}
			addr, port := hostPort(ci.Remote)
			laddr, lport := hostPort(ci.Local)
			tlsInfo := ""
			if ci.TLS {
				tlsInfo = "TLS"
			}
			_ = i
			r.rows = append(r.rows, []any{"S", p.BackendUser(), p.Database(), state, addr, port, laddr, lport,
				ci.Opened, req, 0, 0, ci.Gen < gen || p.Ops.Retired.Load(), fmt.Sprintf("%s/%d", p.Shard.Name, ci.PID), "",
				ci.PID, tlsInfo, "", p.Shard.Name, nil})
		}
	}
	return r
}

func showDatabases(srv *Server, _ *session) *adminResult {
	mode := srv.cfg.PoolMode
	if mode == PoolModeDefault {
		mode = PoolTransaction
	}
	r := &adminResult{cols: []adminCol{
		{"name", pgtype.TextOID}, {"host", pgtype.TextOID}, {"port", pgtype.Int4OID}, {"database", pgtype.TextOID}, {"force_user", pgtype.TextOID},
		{"pool_size", pgtype.Int4OID}, {"min_pool_size", pgtype.Int4OID}, {"reserve_pool", pgtype.Int4OID}, {"pool_mode", pgtype.TextOID},
		{"max_connections", pgtype.Int4OID}, {"current_connections", pgtype.Int4OID}, {"paused", pgtype.Int4OID}, {"disabled", pgtype.Int4OID},
	}}
	for _, p := range srv.pools {
		f := p.Figures()
		host, port := hostPort(stringer(p.Addr))
		r.rows = append(r.rows, []any{p.Shard.Name, host, port, p.Database(), p.BackendUser(), srv.cfg.PoolSize, 0, 0,
			mode.String(), srv.cfg.PoolSize, f.Open, p.Ops.Paused.Load(), srv.life.disabled.Load()})
	}
	return r
}

type stringer string

func (s stringer) String() string { return string(s) }

func showLists(srv *Server, _ *session) *adminResult {
	srv.mu.Lock()
	used := srv.nclients
	srv.mu.Unlock()
	open := 0
	for _, p := range srv.pools {
		open += p.Figures().Open
	}
	r := &adminResult{cols: []adminCol{{"list", pgtype.TextOID}, {"items", pgtype.Int4OID}}}
	for _, kv := range []struct {
		k string
		v int
	}{{"databases", len(srv.pools)}, {"users", len(srv.users)}, {"pools", len(srv.pools)},
		{"free_clients", max(srv.cfg.MaxClients-used, 0)}, {"used_clients", used}, {"login_clients", 0},
		{"pinned_clients", int(srv.npinned.Load())},
		{"free_servers", max(srv.cfg.PoolSize*len(srv.pools)-open, 0)}, {"used_servers", open},
		{"dns_names", 0}, {"dns_zones", 0}, {"dns_queries", 0}, {"dns_pending", 0}} {
		r.rows = append(r.rows, []any{kv.k, kv.v})
	}
	return r
}

func showUsers(srv *Server, _ *session) *adminResult {
	r := &adminResult{cols: textCols("name", "auth", "admin")}
	for _, u := range srv.cfg.Users {
		method := "scram-sha-256"
		switch {
		case u.Trust:
			method = "trust"
		case !strings.HasPrefix(u.Password, auth.Mechanism+"$"):
			method = "scram-sha-256 (plain-text password in the config)"
		}
		admin := "no"
		if slices.Contains(srv.cfg.AdminUsers, u.Name) {
			admin = "yes"
		}
		r.rows = append(r.rows, []any{u.Name, method, admin})
	}
	return r
}

func showRoutes(srv *Server, _ *session) *adminResult {
	r := &adminResult{cols: textCols("time", "kind", "shard", "statement", "reason")}
	for _, e := range srv.routes.recent() {
		r.rows = append(r.rows, []any{e.at.UTC().Format("2006-01-02 15:04:05.000 UTC"), e.kind.String(), nullIfEmpty(e.shard), e.sql, e.reason})
	}
	return r
}
