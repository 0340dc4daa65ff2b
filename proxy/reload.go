package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/pgshard/pgshard/proxy/internal/auth"
	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/shardmap"
)

// Hot reload: RELOAD on the admin console, SIGHUP in the command. The new
// configuration (Config.Reload reads the config file and the shard map
// again) is validated whole, then applied at once as a new generation:
//
//	Reload(cfg) ─▶ validate (every field, users, TLS files, map epoch ≥
//	               the running one; an equal epoch must be the same map)
//	            ─▶ pools: a shard with the same name, ordinal and DSNs
//	               keeps its pool (connections, statistics); others get a
//	               new pool whose identity record is checked now (a
//	               mismatch rejects the reload; a shard that is down is
//	               checked on its first connection)
//	            ─▶ publish the generation (Server.cur)
//	            ─▶ removed shards' pools retire: no new transaction, each
//	               connection closes when released, the pool closes when
//	               none is in use (SHOW SHARDS "removed", WAIT_CLOSE)
//
// A session moves to the new generation between transactions (serve's
// loop, session.switchGeneration): its transaction, pipeline and
// prepared statements are never split across two maps; its prepared
// statements are analyzed again for the new map and schema. A rejected
// reload changes nothing. Settings that need a new listener (listen,
// metrics_listen, reuse_port, handover_socket) or a new process (procs,
// the GOMAXPROCS set at start) keep their running values and are
// reported.

// ReloadResult says what an applied reload changed.
type ReloadResult struct {
	// Generation is the new configuration's generation.
	Generation uint64
	// Epoch is the shard map's epoch.
	Epoch uint64
	// Added and Removed name the shards whose pools were opened or
	// retired (a shard whose DSNs changed is in both).
	Added, Removed []string
	// NeedRestart names settings that changed but only apply at a restart.
	NeedRestart []string
}

// String summarizes the result in one line.
func (r ReloadResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "configuration generation %d applied (shard map epoch %d)", r.Generation, r.Epoch)
	if len(r.Added) > 0 {
		fmt.Fprintf(&b, "; new pools: %s", strings.Join(r.Added, ", "))
	}
	if len(r.Removed) > 0 {
		fmt.Fprintf(&b, "; pools draining: %s", strings.Join(r.Removed, ", "))
	}
	if len(r.NeedRestart) > 0 {
		fmt.Fprintf(&b, "; unchanged until a restart: %s", strings.Join(r.NeedRestart, ", "))
	}
	return b.String()
}

// reloadMu serializes reloads (of any server in the process).
var reloadMu sync.Mutex

// ReloadFromSource reloads the configuration Config.Reload returns (the
// command calls it on SIGHUP).
func (s *Server) ReloadFromSource(ctx context.Context, why string) (ReloadResult, error) {
	cur := s.current()
	if cur.cfg.Reload == nil {
		err := errors.New("this proxy has no configuration source to reload from")
		s.metrics.Reloads.WithLabelValues("rejected").Inc()
		return ReloadResult{}, err
	}
	cfg, err := cur.cfg.Reload(ctx)
	if err != nil {
		s.metrics.Reloads.WithLabelValues("rejected").Inc()
		s.log.Error("reload rejected; the running configuration is unchanged", "why", why, "err", err)
		return ReloadResult{}, err
	}
	return s.Reload(ctx, cfg)
}

// Reload validates cfg and applies it as the server's next generation (see
// the comment at the top of reload.go). On error nothing changed.
func (s *Server) Reload(ctx context.Context, cfg Config) (ReloadResult, error) {
	reloadMu.Lock()
	defer reloadMu.Unlock()
	res, err := s.reload(ctx, cfg)
	if err != nil {
		s.metrics.Reloads.WithLabelValues("rejected").Inc()
		s.log.Error("reload rejected; the running configuration is unchanged", "err", err)
		return res, err
	}
	s.metrics.Reloads.WithLabelValues("applied").Inc()
	s.log.Info("reload applied", "generation", res.Generation, "map_epoch", res.Epoch,
		"added", strings.Join(res.Added, ","), "removed", strings.Join(res.Removed, ","),
		"need_restart", strings.Join(res.NeedRestart, ","))
	return res, nil
}

// reload validates cfg whole, builds its generation and publishes it
// (Reload is its caller). On error nothing changed.
func (s *Server) reload(ctx context.Context, cfg Config) (ReloadResult, error) {
	old := s.current()
	if cfg.Logger == nil {
		cfg.Logger = old.cfg.Logger
	}
	cfg = cfg.withDefaults()
	var res ReloadResult
	keepRestartOnly(old.cfg, &cfg, &res)
	if err := cfg.validate(); err != nil {
		return res, err
	}
	users, err := prepareUsers(cfg.Users)
	if err != nil {
		return res, fmt.Errorf("proxy config: %w", err)
	}
	if err := checkEpoch(old.cfg.Map, cfg.Map); err != nil {
		return res, err
	}
	ts, err := auth.LoadTLS(cfg.TLS.Mode, cfg.TLS.CertFile, cfg.TLS.KeyFile)
	if err != nil {
		return res, fmt.Errorf("proxy config: %w", err)
	}

	gen := &generation{srv: s, cfg: cfg, users: users, number: old.number + 1}
	pp, err := planPools(old, gen, &res)
	if err != nil {
		return res, err
	}
	if cfg.VerifyIdentity && len(pp.fresh) > 0 {
		if err := s.verifyFresh(ctx, old, cfg.Map, pp); err != nil {
			return res, err
		}
	}

	// The extra databases (Server.dbs) are the running ones: a reload keeps them (and
	// the sessions on them) as they are.
	if !sameDatabases(old.cfg.ExtraDatabases, cfg.ExtraDatabases) {
		res.NeedRestart = append(res.NeedRestart, "databases")
	}

	// Apply.
	env := gen.backendEnv()
	for p := range pp.keptAt {
		p.SetEnv(env)
	}
	// Direct pools (pinned sessions' backends) follow their shard's pool.
	retiredDirect := old.inheritDirect(gen, pp.keptAt)
	s.secrets.set(&cfg)
	s.tls.Store(ts)
	gen.makeEnv()
	s.cur.Store(gen)
	warnPlainPasswords(cfg.Users, s.log)
	for _, p := range pp.fresh {
		s.keeper.startMonitor(p)
	}
	for _, p := range pp.retired {
		s.keeper.retire(p)
	}
	for _, p := range retiredDirect {
		s.keeper.retire(p)
	}
	res.Generation, res.Epoch = gen.number, cfg.Map.Epoch
	return res, nil
}

// keepRestartOnly keeps in cfg the running configuration's (old) fields
// a reload cannot change, noting in res those that changed (they need a
// restart), and what a reload inherits (logger, reload hook, catalog
// follower, remap).
func keepRestartOnly(old Config, cfg *Config, res *ReloadResult) {
	for _, f := range []struct {
		name     string
		old, new any
		keep     func()
	}{
		{"listen", old.Listen, cfg.Listen, func() { cfg.Listen = old.Listen }},
		{"metrics_listen", old.MetricsListen, cfg.MetricsListen, func() { cfg.MetricsListen = old.MetricsListen }},
		{"reuse_port", old.ReusePort, cfg.ReusePort, func() { cfg.ReusePort = old.ReusePort }},
		{"handover_socket", old.HandoverSocket, cfg.HandoverSocket, func() { cfg.HandoverSocket = old.HandoverSocket }},
		{"procs", old.Procs, cfg.Procs, func() { cfg.Procs = old.Procs }},
	} {
		if f.old != f.new {
			res.NeedRestart = append(res.NeedRestart, f.name)
			f.keep()
		}
	}
	cfg.Logger = old.Logger
	if cfg.Reload == nil {
		cfg.Reload = old.Reload
	}
	// The catalog's follower runs for the server's life (catalog.go).
	if cfg.Follow != old.Follow || cfg.CatalogName != old.CatalogName {
		res.NeedRestart = append(res.NeedRestart, "catalog")
	}
	cfg.Follow, cfg.CatalogName = old.Follow, old.CatalogName
	if cfg.Remap == nil {
		cfg.Remap = old.Remap
	}
}

// poolPlan is what a reload does with the shards' pools.
type poolPlan struct {
	// fresh are the new generation's new pools, retired the running
	// generation's pools it does not keep.
	fresh, retired []*backend.Pool
	// keptAt are the running pools the new generation keeps, at their
	// index in it.
	keptAt map[*backend.Pool]int
}

// planPools gives gen (of the running generation old) its pools: a
// running shard's pool is kept when its shard, its way (pooler or direct)
// and the connect timeout are the same; other shards get new pools (noted
// in res.Added), and the running pools gen does not keep are retired
// (res.Removed).
func planPools(old, gen *generation, res *ReloadResult) (poolPlan, error) {
	cfg := &gen.cfg
	pp := poolPlan{keptAt: map[*backend.Pool]int{}}
	oldByName := map[string]*backend.Pool{}
	for _, p := range old.pools {
		oldByName[p.Shard.Name] = p
	}
	for i, sh := range cfg.Map.Shards {
		if p := oldByName[sh.Name]; p != nil && p.Shard == sh && p.ViaPooler == (cfg.UsePooler && sh.PoolerDSN != "") &&
			old.cfg.ConnectTimeout == cfg.ConnectTimeout {
			gen.pools = append(gen.pools, p)
			pp.keptAt[p] = i
		} else {
			np, err := backend.NewPool(gen.backendEnv(), sh, cfg.UsePooler)
			if err != nil {
				return pp, err
			}
			gen.pools = append(gen.pools, np)
			pp.fresh = append(pp.fresh, np)
			res.Added = append(res.Added, sh.Name)
		}
		if sh.Name == cfg.DefaultShard {
			gen.defaultShard = i
		}
	}
	for _, p := range old.pools {
		if _, ok := pp.keptAt[p]; !ok {
			pp.retired = append(pp.retired, p)
			res.Removed = append(res.Removed, p.Shard.Name)
		}
	}
	return pp, nil
}

// verifyFresh checks the identity records of the new pools' shards
// against m (and against the databases of the other shards, but those
// retired), and records them in s.dbIDs in place of the retired shards'.
func (s *Server) verifyFresh(ctx context.Context, old *generation, m *shardmap.Map, pp poolPlan) error {
	others := map[string]string{}
	s.mu.Lock()
	for id, name := range s.dbIDs {
		others[id] = name
	}
	s.mu.Unlock()
	for _, p := range pp.retired {
		for id, name := range others {
			if name == p.Shard.Name {
				delete(others, id) // a replaced shard may keep its database
			}
		}
	}
	ids, _, err := old.verifyPools(ctx, m, pp.fresh, others)
	if err != nil {
		return fmt.Errorf("the new shard map and the shards disagree: %w", err)
	}
	s.recordVerified(ids, pp.fresh, pp.retired)
	return nil
}

// checkEpoch refuses a map older than the running one, one with another
// bucket count, and a changed map that kept its epoch.
func checkEpoch(running, next *shardmap.Map) error {
	if next.Epoch < running.Epoch {
		return fmt.Errorf("shard map epoch %d is older than the running map's epoch %d: refused (an epoch only grows)", next.Epoch, running.Epoch)
	}
	if next.Buckets != running.Buckets {
		return fmt.Errorf("the shard map has %d buckets, the running one %d: the bucket count is fixed for a cluster's life", next.Buckets, running.Buckets)
	}
	if next.Epoch == running.Epoch {
		a, err := running.Marshal()
		if err != nil {
			return err
		}
		b, err := next.Marshal()
		if err != nil {
			return err
		}
		if !bytes.Equal(a, b) {
			return fmt.Errorf("the shard map changed but kept epoch %d: a changed map needs a higher epoch", next.Epoch)
		}
	}
	return nil
}
