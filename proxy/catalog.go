package proxy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
)

// Following the shard-map catalog (Config.Follow; the command builds a
// catalog.Follower, kind "proxy", from proxy.catalog):
//
//	serve ─▶ follow (a goroutine of the server's group, ended by the hard
//	  │       stop, which follows a graceful shutdown's drain)
//	  ├─▶ waitFirstLease: no client is accepted (and Addr does not return)
//	  │     before Follow.Check passes; none within Config.LeaseWait:
//	  │     Serve fails, naming the catalog and its last error
//	  ▼
//	Follow.Run(ctx, served, apply)
//	  served: the current generation's map epoch
//	  apply(m): Config.Remap(m) (default: the running config with m and a
//	            route.Table for m) ─▶ Server.Reload: a new generation;
//	            sessions move to it between transactions (reload.go)
//	  lease:  acquired and renewed by the follower every TTL/3
//	  Nudge:  a fence refusal naming a newer epoch (the engine's retry,
//	          HostOps.NudgeCatalog) asks for a poll now
//
//	the engine's router (router.decide): a statement routed by a key while
//	Follow.Check(now) != nil is refused with 57P03 (the map in use can no
//	longer be proven current) instead of being routed by it.
//
// 57P03 (cannot_connect_now) is the class-57 "operator intervention"
// code clients and poolers already treat as transient: the proxy is up
// but cannot serve keyed statements now, and a retry after the catalog
// answers again succeeds. It is not PS001, which is a shard's verdict on
// a key (the shard does not own it); a lapsed lease proves nothing about
// any key. Statements that need no map (key-less reads of every shard,
// DestAny) still run: their shards are all the map's shards, and the
// fence (internal/engine/fence.go) guards what reaches a shard by a key.

// MapFollower keeps the proxy's shard map current from a catalog and
// holds its lease (catalog.Follower satisfies it).
type MapFollower interface {
	// Run follows the catalog until ctx ends: it hands each newer map to
	// apply and renews the lease with the epoch served reports.
	Run(ctx context.Context, served func() uint64, apply func(context.Context, *shardmap.Map) error) error
	// Check returns nil while the lease is live at now.
	Check(now time.Time) error
	// Nudge asks for a poll of the catalog now rather than at the next
	// interval (a shard's fence refused a statement naming a newer
	// epoch than the proxy's map); it never blocks.
	Nudge()
}

// follow runs Config.Follow until ctx ends (the server's hard stop).
func (s *Server) follow(ctx context.Context) {
	cfg := s.current().cfg
	f := cfg.Follow
	if f == nil {
		return
	}
	served := func() uint64 { return s.current().cfg.Map.Epoch }
	apply := func(ctx context.Context, m *shardmap.Map) error {
		_, err := s.applyCatalogMap(ctx, m)
		return err
	}
	if err := f.Run(ctx, served, apply); err != nil && !errors.Is(err, context.Canceled) {
		s.log.Error("following the shard-map catalog ended", "catalog", cfg.CatalogName, "err", err)
	}
}

// waitFirstLease waits, polling Follow.Check every 20 ms, until the
// proxy holds its first lease, at most Config.LeaseWait. It returns nil
// at once without a catalog, ctx.Err() when ctx ended first (a shutdown
// or the hard stop), and an error naming the catalog and why there is no
// lease (the follower's last catalog error) after LeaseWait.
func (s *Server) waitFirstLease(ctx context.Context) error {
	cfg := s.current().cfg
	f := cfg.Follow
	if f == nil {
		return nil
	}
	err := f.Check(time.Now())
	if err == nil {
		return nil
	}
	s.log.Info("waiting for the first lease in the shard-map catalog before accepting clients", "catalog", cfg.CatalogName, "within", cfg.LeaseWait.String())
	wctx, cancel := context.WithTimeout(ctx, cfg.LeaseWait)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("proxy: no lease in the shard-map catalog %s within %v (proxy.catalog: check that the catalog's server is up and reachable from here): %w", cfg.CatalogName, cfg.LeaseWait, err)
		case <-t.C:
		}
		if err = f.Check(time.Now()); err == nil {
			return nil
		}
	}
}

// applyCatalogMap installs the catalog's map m as a new generation when
// it is newer than the running one.
func (s *Server) applyCatalogMap(ctx context.Context, m *shardmap.Map) (ReloadResult, error) {
	cur := s.current()
	if m.Epoch <= cur.cfg.Map.Epoch {
		return ReloadResult{Generation: cur.number, Epoch: cur.cfg.Map.Epoch}, nil
	}
	remap := cur.cfg.Remap
	if remap == nil {
		remap = defaultRemap
	}
	next, err := remap(ctx, cur.cfg, m)
	if err != nil {
		return ReloadResult{}, fmt.Errorf("the catalog's map (epoch %d): %w", m.Epoch, err)
	}
	res, err := s.Reload(ctx, next)
	if err == nil {
		s.log.Info("followed the catalog to a new map", "catalog", cur.cfg.CatalogName, "epoch", m.Epoch, "generation", res.Generation)
	}
	return res, err
}

// defaultRemap is the running configuration with m and a router for m
// (the running analyzer must be a *route.Table).
func defaultRemap(_ context.Context, cfg Config, m *shardmap.Map) (Config, error) {
	r, ok := cfg.Analyzer.(*route.Table)
	if !ok {
		return Config{}, fmt.Errorf("the analyzer is a %T: set Config.Remap to build one for a new map", cfg.Analyzer)
	}
	an, err := route.New(m, r.Schema(), route.Options{DefaultShard: cfg.DefaultShard})
	if err != nil {
		return Config{}, err
	}
	cfg.Map, cfg.Analyzer = m, an
	return cfg, nil
}

// leaseError is the refusal of a keyed statement while the lease lapsed;
// nil while it is live (or the proxy follows no catalog).
func (g *generation) leaseError() *pgwire.Error {
	f := g.cfg.Follow
	if f == nil {
		return nil
	}
	err := f.Check(time.Now())
	if err == nil {
		return nil
	}
	g.srv.metrics.Refusals.WithLabelValues("lease").Inc()
	return &pgwire.Error{Code: pgwire.CodeCannotConnectNow,
		Message: fmt.Sprintf("pgshard proxy: the shard map (epoch %d) cannot be proven current: its lease in the catalog %s is not live", g.cfg.Map.Epoch, g.cfg.CatalogName),
		Detail:  err.Error(),
		Hint:    "Retry once the proxy reaches its catalog again (check the catalog database and the network to it); statements routed by a key are refused meanwhile rather than routed by a map that may be stale."}
}

// leaseState describes the catalog lease for SHOW CONFIG: "none" (no
// catalog), "live" or why it is not.
func leaseState(f MapFollower) string {
	if f == nil {
		return "none"
	}
	if err := f.Check(time.Now()); err != nil {
		return err.Error()
	}
	return "live"
}
