package proxy

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/proxy/internal/admin"
	"github.com/pgshard/pgshard/proxy/internal/engine"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// The server's side of the engine boundary (internal/engine/sessionenv.go):
// making the environments a generation and the server give their
// sessions, and the operations a *generation (engine.GenerationOps) and
// the *Server (engine.HostOps) run for them.

// newSessionConfig copies what a session reads of c.
func newSessionConfig(c *Config) *engine.SessionConfig {
	sc := &engine.SessionConfig{
		Map: c.Map, Analyzer: c.Analyzer, HintKeyType: c.HintKeyType, Follows: c.Follow != nil,
		Fence: c.Fence, FenceRetryWait: c.FenceRetryWait,
		PoolMode: c.PoolMode, MaxPinned: c.MaxPinned, MaxClients: c.MaxClients, PoolTimeout: c.PoolTimeout,
		ConnectTimeout: c.ConnectTimeout,
		Databases:      acceptedDatabases(c), AdminDatabase: c.AdminDatabase, AdminUsers: c.AdminUsers,
		StartupTimeout: c.StartupTimeout, IdleInTransactionTimeout: c.IdleInTransactionTimeout,
		MaxMessageSize: c.MaxMessageSize, MaxPipelineBytes: c.MaxPipelineBytes, MergeGroupLimit: c.MergeGroupLimit,
		CursorBufferBytes:  c.CursorBufferBytes,
		StatementCacheSize: c.StatementCacheSize, UnnamedStatements: c.UnnamedStatements,
	}
	for _, u := range c.Users {
		if u.PoolMode != PoolModeDefault {
			sc.UserPoolModes = append(sc.UserPoolModes, engine.UserPoolMode{Name: u.Name, Mode: u.PoolMode})
		}
	}
	return sc
}

// acceptedDatabases is the list of database names the sessions accept
// (Config.Databases): as configured, or the map's shards' own names; nil
// (any name) for "*".
func acceptedDatabases(c *Config) []string {
	if slices.Contains(c.Databases, "*") {
		return nil
	}
	if len(c.Databases) > 0 || c.Map == nil {
		return c.Databases
	}
	var names []string
	for _, sh := range c.Map.Shards {
		for _, dsn := range []string{sh.DSN, sh.PoolerDSN} {
			if dsn == "" {
				continue
			}
			pc, err := pgconn.ParseConfig(dsn)
			if err != nil {
				continue // the pool reports it
			}
			name := pc.Database
			if name == "" {
				name = pc.User
			}
			if name != "" && !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	return names
}

// env returns the generation's environment, made once.
func (g *generation) env() *engine.GenerationEnv { return g.genv }

// makeEnv makes the generation's environment (once its pools are set,
// before it is published).
func (g *generation) makeEnv() {
	if g.srv.henv == nil {
		c := g.srv
		c.henv = &engine.HostEnv{
			Metrics: c.metrics, Log: c.log, TLS: &c.tls, LoginsDisabled: &c.life.disabled,
			NPinned: &c.npinned, PinsTotal: c.pinsTotal, Fences: &c.fences, StandIns: &c.standIns, Clients: c.clients, ConsoleCanceled: admin.ErrCanceled, Ops: c,
		}
	}
	g.genv = &engine.GenerationEnv{
		Config: newSessionConfig(&g.cfg), Pools: g.pools, DefaultShard: g.defaultShard, Users: g.users,
		Metrics: g.srv.metrics, Log: g.srv.log, StmtEpoch: &g.srv.stmtEpoch, Collation: &g.collation, RR: &g.rr,
		OIDs: &engine.OIDMaps{}, Home: g.srv.henv, Ops: g,
	}
}

// LeaseError implements engine.GenerationOps (catalog.go's leaseError).
func (g *generation) LeaseError() *pgwire.Error { return g.leaseError() }

// DatabaseEnv implements engine.GenerationOps.
func (g *generation) DatabaseEnv(name string) *engine.GenerationEnv {
	return g.srv.dbs.or(name, g.srv).current().env()
}

// CurrentEnv implements engine.HostOps.
func (s *Server) CurrentEnv() *engine.GenerationEnv { return s.current().env() }

// NudgeCatalog implements engine.HostOps: Config.Follow polls now.
func (s *Server) NudgeCatalog() {
	if f := s.current().cfg.Follow; f != nil {
		f.Nudge()
	}
}

// ConsoleQuery implements engine.HostOps: admin.Query over an adminHost
// acting for by; a SHUTDOWN among the commands begins once the answer
// reached the console (after).
func (s *Server) ConsoleQuery(ctx context.Context, by engine.ConsoleCaller, sql string, out []byte) ([]byte, func()) {
	h := &adminHost{by: by, c: s}
	out = admin.Query(ctx, h, sql, out)
	if !h.shutdown {
		return out, nil
	}
	return out, func() { s.life.beginShutdown("SHUTDOWN on the admin console", s.current().cfg.ShutdownTimeout) }
}
