package verify

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// leaseMargin widens the bound of the lease check for clock granularity:
// the follower (another process) reads the same monotonic clock as the
// history's writer, but each takes its readings at its own moments.
const leaseMargin = 100 * time.Millisecond

// isCatalogLoss reports whether a fault kind takes the catalog away from
// its followers: catalog-cut (their relay to it cut) and catalog-crash
// (its server down). The lease invariant judges both alike, from the
// same evidence (follower, ttl_ms, cut_t, heal_t).
func isCatalogLoss(kind string) bool {
	return kind == FaultCatalogCut || kind == FaultCatalogCrash
}

// cutWindow is a catalog-cut's or a catalog-crash's evidence: the
// followers cut off from the catalog (the op lines' via names: "proxy",
// "router"), the lease TTL they hold, when the cut was in force (the
// crashed server and its backends gone) and when it ended (ns on the
// ops' clock).
type cutWindow struct {
	id             string
	followers      []string
	cut, heal, ttl int64
	healed         bool
}

// readCut reads a catalog-cut's or a catalog-crash's evidence (the
// inject's with the heal's laid over it). The cut's start is its evidence
// cut_t, which the writer takes once the cut is in force (once the
// crashed server is gone); its end is the evidence heal_t, else the heal
// line's time — both taken before the cut ends (before the server is
// started again). The evidence
// follower names the clients cut off, comma-separated ("proxy",
// "proxy,router"). ok is false when the evidence lacks the follower, the
// TTL or the start.
func readCut(f *FaultEvent) (c cutWindow, ok bool) {
	ev := f.Evidence
	var ttlMS int64
	var follower string
	if json.Unmarshal(ev["follower"], &follower) != nil ||
		json.Unmarshal(ev["ttl_ms"], &ttlMS) != nil || ttlMS <= 0 ||
		json.Unmarshal(ev["cut_t"], &c.cut) != nil {
		return cutWindow{}, false
	}
	for _, name := range strings.Split(follower, ",") {
		if name = strings.TrimSpace(name); name != "" {
			c.followers = append(c.followers, name)
		}
	}
	if len(c.followers) == 0 {
		return cutWindow{}, false
	}
	c.id, c.ttl = f.ID, ttlMS*int64(time.Millisecond)
	if _, has := ev["heal_t"]; has && json.Unmarshal(ev["heal_t"], &c.heal) == nil {
		c.healed = true
	}
	return c, true
}

// lease checks the catalog cuts and the catalog crashes alike: a
// follower cut off from the catalog (or whose catalog's server is down)
// must stop serving what its lease covers once the lease lapsed, and
// never serve it by a map it can no longer prove current.
//
// The bound: the follower's lease is live, by its own local bound, until
// the send time of the last acquire or renewal that the catalog answered,
// plus the TTL (catalog.Lease.ValidUntil). Every request it sent before
// the cut went out before cut_t (the writer takes cut_t once the cut is in
// force), and none sent after reaches the catalog until the heal, so from
// cut_t + TTL on it cannot hold a live lease; leaseMargin covers the two
// processes' clock readings. A keyed op (load, commit, delete_timer)
// through the follower that started after cut_t + TTL + margin and ended
// before the heal (heal_t, taken before the cut ends) therefore must not
// succeed: the follower had to refuse it (the proxy answers 57P03, the
// router router.ErrNotServing). Every follower the cut names is judged
// so (op via: "proxy", "router"). An op still running at the heal may
// succeed by a retry after it, so it is not judged; ops through other
// clients (via another name, or none) are not either.
func (ck *checker) lease() {
	w := ck.w
	healT := map[string]int64{}
	for _, f := range w.h.Faults {
		if isCatalogLoss(f.Kind) && f.Phase == "heal" {
			if _, ok := healT[f.ID]; !ok {
				healT[f.ID] = f.T
			}
		}
	}
	for _, win := range w.windows() {
		if !isCatalogLoss(win.inject.Kind) || win.inject.Err != "" {
			continue
		}
		c, ok := readCut(win.evidence)
		if !ok {
			continue
		}
		if !c.healed {
			t, ok := healT[c.id]
			if !ok {
				continue // no end recorded: nothing can be bounded
			}
			c.heal = t
		}
		from := c.cut + c.ttl + int64(leaseMargin)
		for _, op := range w.h.Ops {
			if op.Exe == "" || op.T0 < from || op.T1 > c.heal || !slices.Contains(c.followers, op.Via) {
				continue
			}
			switch op.Kind {
			case KindLoad, KindCommit, KindDeleteTimer:
			default:
				continue
			}
			ck.count(InvLease, 1)
			if op.Outcome != OutcomeOK {
				continue
			}
			ck.add(InvLease, op.Exe, fmt.Sprintf("lease: %s %s through the %s succeeded %v after the %s fault %s cut it off from the catalog (lease ttl %v), before the heal: its lease had lapsed, so it served by a map it could not prove current",
				op.Kind, op.ID, op.Via, time.Duration(op.T0-c.cut).Round(time.Millisecond), win.inject.Kind, c.id, time.Duration(c.ttl)),
				[]OpRef{ref(op, "succeeded after the lease lapsed")}, nil)
		}
	}
}
