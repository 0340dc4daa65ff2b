package mutant_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/chaos/mutant"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

func TestCatalogue(t *testing.T) {
	all := mutant.All()
	if len(all) != 17 {
		t.Fatalf("All() has %d mutants, want the 10 of issue 9, the 5 resharding ones of issue 20 and the two lease ones", len(all))
	}
	levels := map[mutant.Level]int{}
	seen := map[mutant.Kind]bool{}
	for _, m := range all {
		if seen[m.Kind] || m.Kind == "" {
			t.Errorf("kind %q empty or repeated", m.Kind)
		}
		seen[m.Kind] = true
		levels[m.Level]++
		if m.Description == "" || m.Exposes == "" {
			t.Errorf("%s: description or exposes missing", m.Kind)
		}
		got, err := mutant.Lookup(m.Kind)
		if err != nil || got.Kind != m.Kind || got.Level != m.Level {
			t.Errorf("Lookup(%s) = %+v, %v", m.Kind, got, err)
		}
	}
	want := map[mutant.Level]int{mutant.LevelStore: 7, mutant.LevelClient: 3, mutant.LevelConfig: 2, mutant.LevelMover: 3, mutant.LevelProxy: 1, mutant.LevelRouter: 1}
	for l, n := range want {
		if levels[l] != n {
			t.Errorf("%d %s-level mutants, want %d", levels[l], l, n)
		}
	}
	if len(levels) != len(want) {
		t.Errorf("levels %v, want only %v", levels, want)
	}
	var group []mutant.Kind
	for _, m := range all {
		if m.InGroup(mutant.ReshardGroup) {
			group = append(group, m.Kind)
		}
		if m.InGroup("no-such-group") {
			t.Errorf("%s is in a group that does not exist", m.Kind)
		}
	}
	wantGroup := []mutant.Kind{mutant.MoveWithoutFinalCatchUp, mutant.FlipWithoutFreeze, mutant.ShardNotFencing, mutant.DeleteSourceBeforeFlip, mutant.ProxyIgnoresFence}
	if !slices.Equal(group, wantGroup) {
		t.Errorf("group %s = %v, want %v", mutant.ReshardGroup, group, wantGroup)
	}
	// All returns copies.
	all[0].NeedsFaults = append(all[0].NeedsFaults, "x")
	all[5].NeedsFaults[0] = "changed"
	if again := mutant.All(); len(again[0].NeedsFaults) != 0 || again[5].NeedsFaults[0] == "changed" {
		t.Errorf("All() shares its slices with callers")
	}
}

func TestLookupUnknown(t *testing.T) {
	_, err := mutant.Lookup("no-such-bug")
	if err == nil {
		t.Fatal("Lookup of an unknown kind succeeded")
	}
	for _, m := range mutant.All() {
		if !strings.Contains(err.Error(), string(m.Kind)) {
			t.Errorf("the error %q does not list %s", err, m.Kind)
		}
	}
}

// TestLevelsRefused: each entry point takes its own level's kinds only,
// and refuses before connecting to anything.
func TestLevelsRefused(t *testing.T) {
	m, err := shardmap.Even(64, []shardmap.Shard{{Name: "s0", DSN: "postgres://nowhere:1/x"}, {Name: "s1", Ordinal: 1, DSN: "postgres://nowhere:1/x"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, mu := range append(mutant.All(), mutant.Mutant{Kind: "no-such-bug"}) {
		t.Run(string(mu.Kind), func(t *testing.T) {
			if mu.Level != mutant.LevelStore {
				if s, err := mutant.OpenStore(ctx, m, false, mu.Kind, store.Options{}); err == nil {
					s.Close()
					t.Error("OpenStore accepted it")
				}
			}
			if mu.Level != mutant.LevelClient {
				if _, err := mutant.Wrap(&fakeTarget{}, mu.Kind); err == nil {
					t.Error("Wrap accepted it")
				}
			}
			if mu.Level != mutant.LevelConfig {
				if _, err := mutant.Configure(ctx, m, mu.Kind); err == nil {
					t.Error("Configure accepted it")
				}
			}
			if mu.Level != mutant.LevelMover {
				if _, err := mutant.Mover(mu.Kind); err == nil {
					t.Error("Mover accepted it")
				}
			}
			if mu.Level != mutant.LevelProxy {
				if _, err := mutant.ProxyConfig(mu.Kind); err == nil {
					t.Error("ProxyConfig accepted it")
				}
			}
			if mu.Level != mutant.LevelRouter {
				if _, err := mutant.RouterLeaseTTL(mu.Kind); err == nil {
					t.Error("RouterLeaseTTL accepted it")
				}
			}
		})
	}
}

// TestStoreBugNeeds: a store bug that could not manifest is refused.
func TestStoreBugNeeds(t *testing.T) {
	one, err := shardmap.Even(64, []shardmap.Shard{{Name: "s0", DSN: "postgres://nowhere:1/x"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		bug  mutant.Kind
		o    store.Options
		want string
	}{
		{mutant.TraceTrimOffByOne, store.Options{}, "TraceMax"},
		{mutant.WrongShard, store.Options{}, "at least 2 shards"},
	} {
		s, err := mutant.OpenStore(context.Background(), one, false, c.bug, c.o)
		if err == nil {
			s.Close()
			t.Errorf("%s: OpenStore accepted %+v on one shard", c.bug, c.o)
		} else if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q does not say %q", c.bug, err, c.want)
		}
	}
}

// TestProxyConfig: the lease mutant sets a lease TTL that outlives any
// run, and the control sets nothing.
func TestProxyConfig(t *testing.T) {
	if c, err := mutant.ProxyConfig(""); err != nil || c != nil {
		t.Fatalf("control: %v, %v", c, err)
	}
	c, err := mutant.ProxyConfig(mutant.ProxyIgnoresLease)
	if err != nil {
		t.Fatal(err)
	}
	ttl, err := time.ParseDuration(c["catalog_lease_ttl"])
	if err != nil || ttl < time.Hour || len(c) != 1 {
		t.Fatalf("%v: %v", c, err)
	}
	if _, err := mutant.ProxyConfig("no-such-bug"); err == nil {
		t.Fatal("an unknown kind was accepted")
	}
}

// TestRouterLeaseTTL: the router's lease mutant gives a TTL that outlives
// any run, and the control the run's.
func TestRouterLeaseTTL(t *testing.T) {
	if ttl, err := mutant.RouterLeaseTTL(""); err != nil || ttl != 0 {
		t.Fatalf("control: %v, %v", ttl, err)
	}
	if ttl, err := mutant.RouterLeaseTTL(mutant.RouterIgnoresLease); err != nil || ttl < time.Hour {
		t.Fatalf("%v, %v", ttl, err)
	}
	if _, err := mutant.RouterLeaseTTL("no-such-bug"); err == nil {
		t.Fatal("an unknown kind was accepted")
	}
}
