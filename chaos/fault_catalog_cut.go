package chaos

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// The catalog cut: the store under test's followers of the run's catalog —
// the chaos-owned proxy, the router — reach it through a relay
// (Env.CatalogRelay, started by Run in front of the catalog's server), so
// the cut takes the catalog away from them alone; the mover's connection
// (Env.Catalog) stays direct and the moves go on, changing the map they
// can no longer see.
//
//	proxy's follower ───────┐
//	router's follower, its  ├──▶ catalog relay ──▶ catalog (its server)
//	  reloads (movecatalog) ┘
//	mover (Env.Catalog) ──────────────────────────▶ catalog
//	                     cut: Partition ... heal: Unpartition
//
// With the lease TTL the run gives them (CatalogCutTTL: proxy config
// catalog_lease_ttl, the router's catalog.FollowOptions.TTL), their
// leases lapse within the hold, and they must refuse keyed operations
// (the proxy 57P03, the router router.ErrNotServing) until the heal; the
// shards' fences refuse what they route by a stale map meanwhile.

// CatalogCutTTL is the catalog lease TTL of the chaos-owned proxy and the
// router in a run with catalog-cut faults (proxy config
// catalog_lease_ttl; production's default, catalog.DefaultLeaseTTL, is
// untouched): short, so that a cut of a few seconds outlives the lease.
const CatalogCutTTL = 2 * time.Second

// catalogCutMinHold is the least hold of a catalog cut: the lease must
// lapse (CatalogCutTTL after the cut at the latest) and stay lapsed long
// enough for keyed operations to meet it.
const catalogCutMinHold = CatalogCutTTL + time.Second

var catalogCutInfo = kindInfo{
	needs:  NeedsCatalog | NeedsCatalogRelay,
	global: true,
	// The proxy's resource: a proxy restarted during the cut could not
	// read its map from the catalog to start.
	resource: "proxy",
	// After the heal the follower catches up and acquires again within
	// a renewal period (TTL/3).
	settle: time.Second,
	new:    func() Fault { return &catalogCut{} },
}

// catalogCut is KindCatalogCut.
type catalogCut struct {
	mu    sync.Mutex
	relay *Relay
	cutT  time.Duration // when the cut was in force, on the history's clock
}

func (*catalogCut) Kind() Kind   { return KindCatalogCut }
func (*catalogCut) Needs() Needs { return catalogCutInfo.needs }

// since is t on the history's clock (Env.Clock), or on t's own when the
// env has none.
func (e *Env) since(t time.Time) time.Duration {
	if e.Clock.IsZero() {
		return 0
	}
	return t.Sub(e.Clock)
}

// Inject cuts the catalog relay: the followers' open connections are
// blackholed, new ones held unconnected (Relay.Partition). Evidence:
// follower (whose catalog connections are cut, comma-separated as the op
// lines' via names them: "proxy", "router", "proxy,router"), ttl_ms
// (their lease TTL), cut_t (ns on the ops' clock, taken once the cut is
// in force: every request a follower sent before it went out earlier),
// held (connections blackholed now).
func (f *catalogCut) Inject(_ context.Context, env *Env, _ int, _ Params, _ *rand.Rand) (Evidence, error) {
	r := env.CatalogRelay
	if r == nil {
		return Evidence{}, errors.New("catalog-cut: the env has no catalog relay")
	}
	if env.CatalogTTL <= 0 {
		return Evidence{}, errors.New("catalog-cut: the follower behind the catalog relay has no lease TTL")
	}
	followers := "proxy"
	if len(env.CatalogFollowers) > 0 {
		followers = strings.Join(env.CatalogFollowers, ",")
	}
	n := r.Partition()
	cut := env.since(time.Now())
	f.mu.Lock()
	f.relay, f.cutT = r, cut
	f.mu.Unlock()
	env.logf("catalog-cut: the catalog relay of %s is cut (%d connections blackholed; lease ttl %v)", followers, n, env.CatalogTTL)
	return Evidence{Landed: false, Fields: map[string]any{
		"follower": followers, "ttl_ms": env.CatalogTTL.Milliseconds(), "cut_t": int64(cut), "held": n,
	}}, nil
}

// Heal ends the cut, resetting what it held. Evidence: heal_t (ns on the
// ops' clock, taken before the cut ends: nothing reached the catalog
// before it), ttl_ms, held, refused (connections the follower opened
// during the cut), requests (its chunks swallowed). Landed: the cut lasted
// longer than the TTL (the leases lapsed) and a follower tried the
// catalog during it (requests or refused positive).
func (f *catalogCut) Heal(_ context.Context, env *Env, _ int) (Evidence, error) {
	f.mu.Lock()
	r, cut := f.relay, f.cutT
	f.mu.Unlock()
	if r == nil {
		return Evidence{}, nil
	}
	healT := env.since(time.Now())
	busy, reqs := r.PartitionLoad()
	held, refused := r.Unpartition()
	ttl := env.CatalogTTL
	landed := healT-cut > ttl && reqs+refused > 0
	env.logf("catalog-cut: healed after %v (%d requests swallowed, %d connections refused)", (healT - cut).Round(time.Millisecond), reqs, refused)
	return Evidence{Landed: landed, Fields: map[string]any{
		"heal_t": int64(healT), "ttl_ms": ttl.Milliseconds(), "held": held, "refused": refused,
		"in_flight": busy, "requests": reqs,
	}}, nil
}
