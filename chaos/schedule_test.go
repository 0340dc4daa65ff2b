package chaos_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/chaos"
	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/shardmap"
)

var threeShards = []string{"shard0", "shard1", "shard2"}

// mixed is a schedule using every kind.
func mixed() []chaos.Spec {
	return []chaos.Spec{
		{Kind: chaos.KindTerminate, Every: 2 * time.Second},
		{Kind: chaos.KindLostAck, Every: 3 * time.Second, Hold: time.Second, Params: chaos.Params{"count": "2"}},
		{Kind: chaos.KindLostAck, Every: 5 * time.Second, Hold: time.Second, Params: chaos.Params{"via": "proxy"}},
		{Kind: chaos.KindPgBouncerKill, Every: 4 * time.Second, Hold: 500 * time.Millisecond},
		{Kind: chaos.KindPgBouncerPause, Every: 4 * time.Second, Hold: time.Second},
		{Kind: chaos.KindPgBouncerReconnect, Every: 3 * time.Second},
		{Kind: chaos.KindShardCrash, Every: 6 * time.Second, Hold: time.Second, Params: chaos.Params{"mode": "immediate"}},
		{Kind: chaos.KindBackendKill, Every: 6 * time.Second},
		{Kind: chaos.KindLatency, Every: 3 * time.Second, Hold: time.Second, Params: chaos.Params{"delay": "20ms", "jitter": "5ms"}},
		{Kind: chaos.KindStall, Every: 4 * time.Second, Hold: 500 * time.Millisecond},
		{Kind: chaos.KindReset, Every: 3 * time.Second},
		{Kind: chaos.KindPartition, Every: 5 * time.Second, Hold: time.Second},
		{Kind: chaos.KindProxyRestart, Every: 6 * time.Second, Hold: 300 * time.Millisecond},
	}
}

func mustPlan(t *testing.T, specs []chaos.Spec, period time.Duration, seed uint64) []chaos.Planned {
	t.Helper()
	plan, err := chaos.Plan(specs, period, threeShards, seed)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

func TestPlanDeterministic(t *testing.T) {
	a := mustPlan(t, mixed(), time.Minute, 7)
	b := mustPlan(t, mixed(), time.Minute, 7)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave two plans")
	}
	for seed := uint64(8); seed < 28; seed++ {
		if reflect.DeepEqual(a, mustPlan(t, mixed(), time.Minute, seed)) {
			t.Fatalf("seeds 7 and %d gave the same plan", seed)
		}
	}
}

// TestPlanSpecsIndependent: adding a spec on another resource leaves the
// others' draws alone.
func TestPlanSpecsIndependent(t *testing.T) {
	base := []chaos.Spec{{Kind: chaos.KindReset, Every: time.Second}}
	more := append(base, chaos.Spec{Kind: chaos.KindProxyRestart, Every: 2 * time.Second})
	var a, b []time.Duration
	for _, p := range mustPlan(t, base, 30*time.Second, 3) {
		a = append(a, p.At)
	}
	for _, p := range mustPlan(t, more, 30*time.Second, 3) {
		if p.Kind == chaos.KindReset {
			b = append(b, p.At)
		}
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("reset times changed when proxy-restart was added:\n%v\n%v", a, b)
	}
}

// resource mirrors the contract: which faults may not overlap.
func resource(p chaos.Planned) string {
	switch p.Kind {
	case chaos.KindProxyRestart:
		return "proxy"
	case chaos.KindLostAck:
		if p.Params["via"] == "proxy" {
			return "proxy-relay"
		}
		return fmt.Sprintf("relay:%d", p.Shard)
	case chaos.KindLatency, chaos.KindStall, chaos.KindReset, chaos.KindPartition:
		return fmt.Sprintf("relay:%d", p.Shard)
	}
	return fmt.Sprintf("proc:%d", p.Shard)
}

func TestPlanBoundsAndNoOverlap(t *testing.T) {
	for seed := range uint64(10) {
		plan := mustPlan(t, mixed(), time.Minute, seed)
		if len(plan) < 100 {
			t.Fatalf("seed %d: only %d faults planned", seed, len(plan))
		}
		last := map[string]chaos.Planned{}
		for i, p := range plan {
			if p.ID != fmt.Sprintf("f%d", i+1) {
				t.Fatalf("seed %d: fault %d has id %s", seed, i, p.ID)
			}
			if i > 0 && p.At < plan[i-1].At {
				t.Fatalf("seed %d: %s at %v before %s at %v", seed, p.ID, p.At, plan[i-1].ID, plan[i-1].At)
			}
			if p.At < 0 || p.At+p.Hold >= time.Minute {
				t.Fatalf("seed %d: %s [%v, %v] leaves the period", seed, p.ID, p.At, p.At+p.Hold)
			}
			global := p.Kind == chaos.KindProxyRestart || p.Params["via"] == "proxy"
			if global != (p.Shard == -1) || p.Shard >= len(threeShards) {
				t.Fatalf("seed %d: %s (%s) on shard %d", seed, p.ID, p.Kind, p.Shard)
			}
			res := resource(p)
			if prev, ok := last[res]; ok && prev.At+prev.Hold+250*time.Millisecond > p.At {
				t.Fatalf("seed %d: %s %s [%v+%v] overlaps %s %s at %v on %s", seed, prev.ID, prev.Kind, prev.At, prev.Hold, p.ID, p.Kind, p.At, res)
			}
			last[res] = p
		}
	}
}

func TestPlanRates(t *testing.T) {
	plan := mustPlan(t, []chaos.Spec{{Kind: chaos.KindReset, Every: time.Second}}, time.Minute, 1)
	if n := len(plan); n < 50 || n > 70 {
		t.Fatalf("every 1s over 1m planned %d faults, want about 60", n)
	}
	byShard := map[int]int{}
	for _, p := range plan {
		byShard[p.Shard]++
	}
	for i := range threeShards {
		if byShard[i] < 10 {
			t.Errorf("shard %d got %d of %d faults: the choice should spread", i, byShard[i], len(plan))
		}
	}
	plan = mustPlan(t, []chaos.Spec{{Kind: chaos.KindStall, At: []time.Duration{time.Second, 5 * time.Second}, Hold: time.Second, Shards: []string{"shard2"}}}, 10*time.Second, 1)
	if len(plan) != 2 || plan[0].At != time.Second || plan[1].At != 5*time.Second || plan[0].Shard != 2 || plan[1].Shard != 2 {
		t.Fatalf("explicit times on shard2: %+v", plan)
	}
	if n := plan[0].ShardName(threeShards); n != "shard2" {
		t.Fatalf("ShardName = %q", n)
	}
	if n := (chaos.Planned{Shard: -1}).ShardName(threeShards); n != "" {
		t.Fatalf("ShardName of a proxy fault = %q", n)
	}
}

// A busy resource delays a fault to when it is free, moves it to another
// free shard, or drops it when the period ends first.
func TestPlanMovesAndDrops(t *testing.T) {
	specs := []chaos.Spec{
		{Kind: chaos.KindShardCrash, At: []time.Duration{0}, Hold: 2 * time.Second, Shards: []string{"shard0"}},
		{Kind: chaos.KindTerminate, At: []time.Duration{time.Second}, Shards: []string{"shard0"}},
		{Kind: chaos.KindPgBouncerKill, At: []time.Duration{time.Second}},
	}
	plan := mustPlan(t, specs, 10*time.Second, 1)
	if len(plan) != 3 {
		t.Fatalf("plan %+v", plan)
	}
	for _, p := range plan {
		switch p.Kind {
		case chaos.KindTerminate:
			if p.At < 2*time.Second+3*time.Second {
				t.Errorf("terminate on the crashed shard at %v: should wait for the crash's hold and recovery", p.At)
			}
		case chaos.KindPgBouncerKill:
			if p.Shard == 0 || p.At != time.Second {
				t.Errorf("pgbouncer-kill on shard %d at %v: should move to a free shard at 1s", p.Shard, p.At)
			}
		}
	}
	plan = mustPlan(t, specs[:2], 4*time.Second, 1)
	if len(plan) != 1 {
		t.Fatalf("a fault pushed past the period should be dropped: %+v", plan)
	}
}

func TestPlanValidation(t *testing.T) {
	tests := []struct {
		name string
		spec chaos.Spec
		want string
	}{
		{"unknown kind", chaos.Spec{Kind: "flood", Every: time.Second}, `faults[0] (flood): kind: unknown fault kind "flood"`},
		{"no times", chaos.Spec{Kind: chaos.KindReset}, "every/at"},
		{"negative every", chaos.Spec{Kind: chaos.KindReset, Every: -time.Second}, "every: -1s is negative"},
		{"at outside", chaos.Spec{Kind: chaos.KindReset, At: []time.Duration{time.Hour}}, "at[0]: 1h0m0s is outside"},
		{"hold on an instant kind", chaos.Spec{Kind: chaos.KindReset, Every: time.Second, Hold: time.Second}, "hold: reset is instantaneous"},
		{"no hold on a window kind", chaos.Spec{Kind: chaos.KindStall, Every: time.Second}, "hold: stall needs a hold"},
		{"hold too long", chaos.Spec{Kind: chaos.KindStall, Every: time.Second, Hold: time.Hour}, "does not fit in the period"},
		{"bad delay", chaos.Spec{Kind: chaos.KindLatency, Every: time.Second, Hold: time.Second, Params: chaos.Params{"delay": "fast"}}, `faults[0] (latency): params.delay: "fast" is not a duration`},
		{"unknown param", chaos.Spec{Kind: chaos.KindLatency, Every: time.Second, Hold: time.Second, Params: chaos.Params{"dealy": "1ms"}}, "params.dealy: unknown parameter of latency (known: delay, jitter)"},
		{"param of a kind without", chaos.Spec{Kind: chaos.KindStall, Every: time.Second, Hold: time.Second, Params: chaos.Params{"count": "1"}}, "params.count: stall takes no parameters"},
		{"bad mode", chaos.Spec{Kind: chaos.KindShardCrash, Every: time.Second, Params: chaos.Params{"mode": "fast"}}, `params.mode: "fast": want immediate or kill`},
		{"bad count", chaos.Spec{Kind: chaos.KindLostAck, Every: time.Second, Hold: time.Second, Params: chaos.Params{"count": "0"}}, "params.count: 0 is outside 1..1000"},
		{"bad via", chaos.Spec{Kind: chaos.KindLostAck, Every: time.Second, Hold: time.Second, Params: chaos.Params{"via": "pigeon"}}, `params.via: "pigeon"`},
		{"unknown shard", chaos.Spec{Kind: chaos.KindReset, Every: time.Second, Shards: []string{"shard9"}}, `shards[0]: unknown shard "shard9"`},
		{"shards on the proxy", chaos.Spec{Kind: chaos.KindProxyRestart, Every: time.Second, Shards: []string{"shard0"}}, "shards: proxy-restart acts on the proxy"},
		{"no hold on a catalog cut", chaos.Spec{Kind: chaos.KindCatalogCut, Every: 10 * time.Second}, "hold: catalog-cut needs a hold"},
		{"catalog cut within the ttl", chaos.Spec{Kind: chaos.KindCatalogCut, Every: 10 * time.Second, Hold: 2500 * time.Millisecond}, "hold: 2.5s is too short for catalog-cut: the followers' leases (ttl 2s) must lapse within it; give at least 3s"},
		{"param of a catalog cut", chaos.Spec{Kind: chaos.KindCatalogCut, Every: 10 * time.Second, Hold: 4 * time.Second, Params: chaos.Params{"ttl": "1s"}}, "params.ttl: catalog-cut takes no parameters"},
		{"shards on a catalog cut", chaos.Spec{Kind: chaos.KindCatalogCut, Every: 10 * time.Second, Hold: 4 * time.Second, Shards: []string{"shard0"}}, "shards: catalog-cut acts on the catalog's followers"},
		{"shards on lost-ack via proxy", chaos.Spec{Kind: chaos.KindLostAck, Every: time.Second, Hold: time.Second, Shards: []string{"shard0"}, Params: chaos.Params{"via": "proxy"}}, "shards: lost-ack acts on the proxy"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := chaos.Plan([]chaos.Spec{tc.spec}, time.Minute, threeShards, 1)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
	// Every problem of every spec is reported, each naming its index.
	_, err := chaos.Plan([]chaos.Spec{{Kind: chaos.KindReset, Every: time.Second}, {Kind: chaos.KindStall, Every: time.Second}, {Kind: "x"}}, time.Minute, threeShards, 1)
	if err == nil || !strings.Contains(err.Error(), "faults[1] (stall)") || !strings.Contains(err.Error(), "faults[2] (x)") || strings.Contains(err.Error(), "faults[0]") {
		t.Fatalf("err = %v", err)
	}
	if _, err := chaos.Plan(nil, 0, nil, 1); err == nil || !strings.Contains(err.Error(), "period") || !strings.Contains(err.Error(), "shards") {
		t.Fatalf("empty period and shards: %v", err)
	}
}

func TestKinds(t *testing.T) {
	seen := map[chaos.Kind]bool{}
	for _, k := range chaos.Kinds() {
		if seen[k] {
			t.Fatalf("%s twice", k)
		}
		seen[k] = true
		if got, err := chaos.ParseKind(string(k)); err != nil || got != k {
			t.Fatalf("ParseKind(%s) = %v, %v", k, got, err)
		}
		f, err := chaos.NewFault(k)
		if err != nil || f.Kind() != k {
			t.Fatalf("NewFault(%s) = %v, %v", k, f, err)
		}
	}
	if len(seen) != 16 {
		t.Fatalf("%d kinds, want 16", len(seen))
	}
	if _, err := chaos.ParseKind("nope"); err == nil || !strings.Contains(err.Error(), "known: terminate, lost-ack") {
		t.Fatalf("ParseKind(nope): %v", err)
	}
	for _, k := range []chaos.Kind{chaos.KindTerminate, chaos.KindReset, chaos.KindPgBouncerReconnect, chaos.KindBackendKill} {
		if !k.Instantaneous() {
			t.Errorf("%s should be instantaneous", k)
		}
	}
	if chaos.KindStall.Instantaneous() {
		t.Error("stall is not instantaneous")
	}
	if s := (chaos.NeedsProcessControl | chaos.NeedsPooler).String(); s != "process-control+pooler" {
		t.Errorf("Needs.String() = %q", s)
	}
}

func TestCheck(t *testing.T) {
	m, err := shardmap.Even(64, []shardmap.Shard{
		{Name: "shard0", Ordinal: 0, DSN: "postgres://u@127.0.0.1:1/db", PoolerDSN: "postgres://u@127.0.0.1:2/db"},
		{Name: "shard1", Ordinal: 1, DSN: "postgres://u@127.0.0.1:3/db"},
	})
	if err != nil {
		t.Fatal(err)
	}
	relay := newRelay(t, "127.0.0.1:1")
	full := &chaos.Env{
		Map:     m,
		Cluster: &cluster.Cluster{Provider: "local", Spec: cluster.Spec{PgBouncer: true}, Shards: []cluster.Shard{{Name: "shard0"}, {Name: "shard1"}}},
		Relays:  []*chaos.Relay{relay, relay}, ProxyRelay: relay, Proxy: &chaos.ProxyProcess{},
	}
	plan := []chaos.Planned{
		{ID: "f1", Kind: chaos.KindShardCrash, Shard: 0},
		{ID: "f2", Kind: chaos.KindPgBouncerKill, Shard: 0},
		{ID: "f3", Kind: chaos.KindStall, Shard: 1},
		{ID: "f4", Kind: chaos.KindProxyRestart, Shard: -1},
		{ID: "f5", Kind: chaos.KindLostAck, Shard: -1, Params: chaos.Params{"via": "proxy"}},
		{ID: "f6", Kind: chaos.KindShardCrash, Shard: 1},
	}
	if err := chaos.Check(plan, full); err != nil {
		t.Fatalf("full env: %v", err)
	}
	tests := []struct {
		name string
		env  func(e chaos.Env) chaos.Env
		plan []chaos.Planned
		want []string
	}{
		{"no process control", func(e chaos.Env) chaos.Env { e.Cluster = nil; return e }, plan,
			[]string{"shard-crash (on shard0, shard1) needs process control", "pgbouncer-kill (on shard0) needs process control"}},
		{"containers", func(e chaos.Env) chaos.Env {
			e.Cluster = &cluster.Cluster{Provider: "testcontainers", Shards: e.Cluster.Shards}
			return e
		}, plan[:1], []string{"testcontainers provider"}},
		{"no relays", func(e chaos.Env) chaos.Env { e.Relays = nil; e.ProxyRelay = nil; return e }, plan,
			[]string{"stall (on shard1) needs a relay in front of the shard", "lost-ack (on the proxy) needs a relay in front of the proxy"}},
		{"no proxy", func(e chaos.Env) chaos.Env { e.Proxy = nil; return e }, plan, []string{"proxy-restart (on the proxy) needs the chaos-owned proxy"}},
		{"no pooler", func(e chaos.Env) chaos.Env { return e }, []chaos.Planned{{ID: "f1", Kind: chaos.KindPgBouncerPause, Shard: 1}},
			[]string{"pgbouncer-pause (on shard1) needs a PgBouncer"}},
		{"bad shard", func(e chaos.Env) chaos.Env { return e }, []chaos.Planned{{ID: "f9", Kind: chaos.KindReset, Shard: 5}}, []string{"shard 5 of the map"}},
		{"no catalog relay", func(e chaos.Env) chaos.Env { e.Catalog = &catalog.Catalog{}; return e }, []chaos.Planned{{ID: "f7", Kind: chaos.KindCatalogCut, Shard: -1}},
			[]string{"catalog-cut (on the catalog's followers) needs a relay between the store under test (the router, the chaos-owned proxy) and the run's catalog"}},
		{"no catalog", func(e chaos.Env) chaos.Env { e.CatalogRelay = relay; return e }, []chaos.Planned{{ID: "f7", Kind: chaos.KindCatalogCut, Shard: -1}},
			[]string{"catalog-cut (on the mover) needs the run's catalog"}},
		{"catch-up crash without a catalog", func(e chaos.Env) chaos.Env { return e }, []chaos.Planned{{ID: "f8", Kind: chaos.KindShardCrash, Shard: 0, Params: chaos.Params{"during": "catch-up"}}},
			[]string{"shard-crash (on the mover) needs the run's catalog"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := tc.env(*full)
			err := chaos.Check(tc.plan, &env)
			if err == nil {
				t.Fatal("Check passed")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v\nwant it to contain %q", err, w)
				}
			}
		})
	}
}
