package verify_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/pgshard/pgshard/verify"
)

// leaseHistory is a finished run with one catalog-cut of the proxy's
// catalog (lease TTL 2 s) in force from 10 s to heal (s), and ops.
func leaseHistory(t *testing.T, inject, heal string, ops ...string) *verify.History {
	t.Helper()
	return lossHistory(t, verify.FaultCatalogCut, inject, heal, ops...)
}

// lossHistory is leaseHistory with a fault of kind (catalog-cut or
// catalog-crash).
func lossHistory(t *testing.T, kind, inject, heal string, ops ...string) *verify.History {
	t.Helper()
	var b strings.Builder
	b.WriteString(`{"type":"header","format":"pgshard-history","version":2,"run":"r1","seed":1,"scenario":"lease","target":"pgbouncer+proxy",` +
		`"map":{"epoch":1,"buckets":8,"shards":[{"name":"shard0","ordinal":0,"ranges":[[0,7]]}]},` +
		`"schedule":[{"id":"f1","kind":"` + kind + `","shard":"","at_ms":9990,"hold_ms":5000}]}` + "\n")
	b.WriteString(`{"type":"fault","id":"f1","kind":"` + kind + `","phase":"inject","t":9990000000,"landed":false,"evidence":` + inject + "}\n")
	for _, op := range ops {
		b.WriteString(op + "\n")
	}
	if heal != "" {
		b.WriteString(`{"type":"fault","id":"f1","kind":"` + kind + `","phase":"heal","t":15000000000,"landed":true,"evidence":` + heal + "}\n")
	}
	b.WriteString(`{"type":"end","t":20000000000,"ops":0,"quiesce":{"ok":true}}` + "\n")
	h, err := verify.ReadHistory(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

const (
	cutInject = `{"follower":"proxy","ttl_ms":2000,"cut_t":10000000000,"held":2}`
	cutHeal   = `{"heal_t":15000000000,"ttl_ms":2000,"held":2,"refused":3,"in_flight":0,"requests":4}`
)

// leaseOp is a load of execution e through via, from t0 to t1 (ms).
func leaseOp(id, kind, via string, t0, t1 int, outcome string) string {
	extra := `"event":"e1","exists":false`
	if kind == "commit" {
		extra = `"exp":0,"new":1,"event":"e1","input":"i1"`
	}
	if outcome != "ok" {
		extra += `,"err":"57P03 the shard map cannot be proven current","sqlstate":"57P03"`
	}
	return fmt.Sprintf(`{"type":"op","id":%q,"kind":%q,"src":"w0","exe":"00000000000000000000000000000001","shard":"shard0","via":%q,"t0":%d,"t1":%d,"outcome":%q,%s}`,
		id, kind, via, int64(t0)*1e6, int64(t1)*1e6, outcome, extra)
}

func leaseCheck(t *testing.T, h *verify.History) (checked int, vs []verify.Violation) {
	t.Helper()
	v := verify.Check(context.Background(), h, &verify.State{Map: h.Header.Map}, verify.Options{MinLanded: -1})
	for _, x := range v.Violations {
		if x.Invariant == verify.InvLease {
			vs = append(vs, x)
		}
	}
	for _, r := range v.Invariants {
		if r.Name == verify.InvLease {
			checked = r.Checked
		}
	}
	return checked, vs
}

// TestLeaseCheck: inside a catalog cut, a keyed op through the cut-off
// follower that started after cut_t + TTL + 100ms and ended before the
// heal must not succeed; refusals pass, and ops outside that window,
// through another client, or of a cut without a recorded end are not
// judged.
func TestLeaseCheck(t *testing.T) {
	cases := []struct {
		name          string
		inject, heal  string
		ops           []string
		checked, viol int
	}{
		{name: "refused after the lapse", inject: cutInject, heal: cutHeal,
			ops:     []string{leaseOp("r1/w0/1", "load", "proxy", 12500, 12600, "fail"), leaseOp("r1/w0/2", "commit", "proxy", 13000, 13100, "fail")},
			checked: 2},
		{name: "served after the lapse", inject: cutInject, heal: cutHeal,
			ops:     []string{leaseOp("r1/w0/1", "load", "proxy", 12500, 12600, "ok")},
			checked: 1, viol: 1},
		{name: "commit served after the lapse", inject: cutInject, heal: cutHeal,
			ops:     []string{leaseOp("r1/w0/1", "commit", "proxy", 14000, 14100, "ok")},
			checked: 1, viol: 1},
		{name: "served within the ttl", inject: cutInject, heal: cutHeal,
			// Started before cut_t + TTL + margin (12.1 s): the lease may
			// still have been live.
			ops: []string{leaseOp("r1/w0/1", "load", "proxy", 12050, 12060, "ok")}},
		{name: "served across the heal", inject: cutInject, heal: cutHeal,
			ops: []string{leaseOp("r1/w0/1", "load", "proxy", 14000, 15200, "ok")}},
		{name: "served through the router", inject: cutInject, heal: cutHeal,
			ops: []string{leaseOp("r1/w0/1", "load", "router", 13000, 13100, "ok"), leaseOp("r1/w0/2", "load", "", 13000, 13100, "ok")}},
		{name: "router and proxy cut", inject: `{"follower":"proxy,router","ttl_ms":2000,"cut_t":10000000000,"held":3}`, heal: cutHeal,
			ops: []string{leaseOp("r1/w0/1", "load", "router", 13000, 13100, "ok"), leaseOp("r1/w0/2", "commit", "router", 13000, 13100, "fail"),
				leaseOp("r1/w0/3", "load", "proxy", 13000, 13100, "fail"), leaseOp("r1/w0/4", "load", "", 13000, 13100, "ok")},
			checked: 3, viol: 1},
		{name: "router cut alone", inject: `{"follower":"router","ttl_ms":2000,"cut_t":10000000000,"held":1}`, heal: cutHeal,
			ops:     []string{leaseOp("r1/w0/1", "delete_timer", "router", 13000, 13100, "ok"), leaseOp("r1/w0/2", "load", "proxy", 13000, 13100, "ok")},
			checked: 1, viol: 1},
		{name: "heal line's time without heal_t", inject: cutInject, heal: `{"ttl_ms":2000}`,
			ops:     []string{leaseOp("r1/w0/1", "load", "proxy", 14000, 14900, "ok")},
			checked: 1, viol: 1},
		{name: "no heal recorded", inject: cutInject,
			ops: []string{leaseOp("r1/w0/1", "load", "proxy", 14000, 14900, "ok")}},
		{name: "no cut_t", inject: `{"follower":"proxy","ttl_ms":2000}`, heal: cutHeal,
			ops: []string{leaseOp("r1/w0/1", "load", "proxy", 14000, 14900, "ok")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checked, vs := leaseCheck(t, leaseHistory(t, c.inject, c.heal, c.ops...))
			if checked != c.checked || len(vs) != c.viol {
				t.Fatalf("checked %d, %d violations %v; want %d, %d", checked, len(vs), vs, c.checked, c.viol)
			}
			for _, v := range vs {
				if !strings.Contains(v.Summary, "f1") || len(v.Ops) != 1 {
					t.Errorf("violation does not name the fault and its op: %+v", v)
				}
			}
		})
	}
}

// TestLeaseCutLanded: a catalog cut lands when it outlasted the TTL and
// the follower tried the catalog during it.
func TestLeaseCutLanded(t *testing.T) {
	for _, c := range []struct {
		heal string
		want int
	}{
		{cutHeal, 1},
		{`{"heal_t":11000000000,"ttl_ms":2000,"requests":4}`, 0}, // shorter than the TTL
		{`{"heal_t":15000000000,"ttl_ms":2000,"requests":0,"refused":0}`, 0},
	} {
		v := verify.Check(context.Background(), leaseHistory(t, cutInject, c.heal), &verify.State{}, verify.Options{MinLanded: -1})
		got := -1
		for _, f := range v.Faults {
			if f.Kind == verify.FaultCatalogCut {
				got = f.Landed
			}
		}
		if got != c.want {
			t.Errorf("heal %s: landed %d, want %d", c.heal, got, c.want)
		}
	}
}

const (
	crashInject = `{"mode":"immediate","old_pid":100,"follower":"proxy,router","ttl_ms":2000,"cut_t":10000000000}`
	crashHeal   = `{"heal_t":15000000000,"ttl_ms":2000,"old_pid":100,"new_pid":200,"recovery":["database system was interrupted; last known up at x","automatic recovery in progress"]}`
)

// TestLeaseCatalogCrash: the lease invariant judges a catalog crash as it
// judges a cut (the same check, from the same evidence): a keyed op
// through a follower of the crashed catalog that started after cut_t +
// TTL + 100ms and ended before heal_t must not succeed. The crash lands
// when the server was down longer than the TTL and a new postmaster ran
// crash recovery.
func TestLeaseCatalogCrash(t *testing.T) {
	cases := []struct {
		name          string
		heal          string
		ops           []string
		checked, viol int
	}{
		{name: "refused after the lapse", heal: crashHeal,
			ops:     []string{leaseOp("r1/w0/1", "load", "proxy", 12500, 12600, "fail"), leaseOp("r1/w0/2", "commit", "router", 13000, 13100, "fail")},
			checked: 2},
		{name: "served after the lapse", heal: crashHeal,
			ops:     []string{leaseOp("r1/w0/1", "load", "router", 12500, 12600, "ok"), leaseOp("r1/w0/2", "commit", "proxy", 14000, 14100, "ok")},
			checked: 2, viol: 2},
		{name: "served within the ttl or across the heal", heal: crashHeal,
			ops: []string{leaseOp("r1/w0/1", "load", "proxy", 12050, 12060, "ok"), leaseOp("r1/w0/2", "load", "router", 14000, 15200, "ok")}},
		{name: "no heal recorded", ops: []string{leaseOp("r1/w0/1", "load", "proxy", 14000, 14900, "ok")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checked, vs := leaseCheck(t, lossHistory(t, verify.FaultCatalogCrash, crashInject, c.heal, c.ops...))
			if checked != c.checked || len(vs) != c.viol {
				t.Fatalf("checked %d, %d violations %v; want %d, %d", checked, len(vs), vs, c.checked, c.viol)
			}
			for _, v := range vs {
				if !strings.Contains(v.Summary, "catalog-crash fault f1") {
					t.Errorf("violation does not name the crash: %+v", v)
				}
			}
		})
	}
	for _, c := range []struct {
		heal string
		want int
	}{
		{crashHeal, 1},
		{`{"heal_t":11000000000,"ttl_ms":2000,"old_pid":100,"new_pid":200,"recovery":["automatic recovery in progress"]}`, 0}, // shorter than the TTL
		{`{"heal_t":15000000000,"ttl_ms":2000,"old_pid":100,"new_pid":200,"recovery":[]}`, 0},                                 // no crash recovery
		{`{"heal_t":15000000000,"ttl_ms":2000,"old_pid":100,"new_pid":100,"recovery":["automatic recovery in progress"]}`, 0}, // not restarted
	} {
		v := verify.Check(context.Background(), lossHistory(t, verify.FaultCatalogCrash, crashInject, c.heal), &verify.State{}, verify.Options{MinLanded: -1})
		got := -1
		for _, f := range v.Faults {
			if f.Kind == verify.FaultCatalogCrash {
				got = f.Landed
			}
		}
		if got != c.want {
			t.Errorf("heal %s: landed %d, want %d", c.heal, got, c.want)
		}
	}
}
