package cli_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestChaosCatalogCut runs a short scenario (pgbouncer+proxy) whose
// proxy and router are both cut off from the run's catalog past their
// lease TTL while ranges move, and verifies it: the cuts land and name
// both followers, the keyed operations inside them are judged (the lease
// invariant checks something) and none was served — the router's among
// them —, every keyed op line names the client it went through, and the
// proxy's config holds the short lease.
func TestChaosCatalogCut(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a cluster")
	}
	r := newChaosRig(t)
	out := filepath.Join(r.dir, "catalogcut")
	sc := r.scenario(t, "catalogcut", "pgbouncer+proxy", "12s", `
  - {kind: catalog-cut, every: 5s, hold: 3500ms}
  - {kind: move, every: 2s, params: {freeze_budget: 200ms}}`)
	res := runWithin(t, 8*time.Minute, "", r.args("chaos", "run", "--scenario", sc, "--out", out)...)
	b, _ := os.ReadFile(filepath.Join(out, "faults.json"))
	if res.code != 0 || !strings.Contains(res.stdout, "verdict: PASS") {
		logFaultErrors(t, b)
		t.Fatalf("exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
	}
	v := readVerdict(t, out)
	checked := -1.0
	invs, _ := v["invariants"].([]any)
	for _, x := range invs {
		if m, ok := x.(map[string]any); ok && m["name"] == "lease" {
			checked, _ = m["checked"].(float64)
			if n, _ := m["violations"].(float64); n != 0 {
				t.Errorf("lease: %v violations", n)
			}
		}
	}
	if checked <= 0 {
		t.Errorf("the lease invariant checked %v ops: want the proxy's keyed ops inside the cuts", checked)
	}
	landed := -1.0
	faults, _ := v["faults"].([]any)
	for _, x := range faults {
		if m, ok := x.(map[string]any); ok && m["kind"] == "catalog-cut" {
			landed, _ = m["landed"].(float64)
		}
	}
	if landed < 1 {
		t.Errorf("catalog-cut landed %v times", landed)
	}
	cfg, err := os.ReadFile(filepath.Join(out, "proxy.yaml"))
	if err != nil || !strings.Contains(string(cfg), "catalog_lease_ttl: 2s") {
		t.Errorf("proxy.yaml: %v\n%s", err, cfg)
	}
	f, err := os.Open(filepath.Join(out, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc2 := bufio.NewScanner(f)
	sc2.Buffer(nil, 16<<20)
	type line struct {
		Type, Via, Kind, Exe, Outcome, Phase, ID string
		T, T0, T1                                int64
		Evidence                                 struct {
			Follower string `json:"follower"`
			TTLMS    int64  `json:"ttl_ms"`
			CutT     *int64 `json:"cut_t"`
			HealT    *int64 `json:"heal_t"`
		}
	}
	var ops []line
	type window struct{ from, to int64 }
	cuts := map[string]*window{}
	for sc2.Scan() {
		var l line
		if err := json.Unmarshal(sc2.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		switch {
		case l.Type == "op":
			ops = append(ops, l)
			switch l.Kind {
			case "load", "commit", "delete_timer":
				if l.Exe != "" && l.Via != "proxy" && l.Via != "router" {
					t.Fatalf("a keyed op line with via %q", l.Via)
				}
			}
		case l.Type == "fault" && l.Kind == "catalog-cut" && l.Phase == "inject" && l.Evidence.CutT != nil:
			if l.Evidence.Follower != "proxy,router" {
				t.Errorf("catalog-cut %s cut %q, want the proxy and the router", l.ID, l.Evidence.Follower)
			}
			cuts[l.ID] = &window{from: *l.Evidence.CutT + l.Evidence.TTLMS*int64(time.Millisecond) + int64(100*time.Millisecond)}
		case l.Type == "fault" && l.Kind == "catalog-cut" && l.Phase == "heal" && l.Evidence.HealT != nil:
			if w := cuts[l.ID]; w != nil {
				w.to = *l.Evidence.HealT
			}
		}
	}
	if err := sc2.Err(); err != nil || len(ops) == 0 {
		t.Fatalf("%d op lines: %v", len(ops), err)
	}
	// The router's keyed ops inside a cut past its lease: judged, and
	// refused (the lease invariant found none served).
	judged := map[string]int{}
	for _, op := range ops {
		switch op.Kind {
		case "load", "commit", "delete_timer":
		default:
			continue
		}
		for _, w := range cuts {
			if op.Exe != "" && w.to > 0 && op.T0 >= w.from && op.T1 <= w.to {
				judged[op.Via]++
				if op.Outcome == "ok" {
					t.Errorf("%s %s through the %s served inside a cut", op.Kind, op.ID, op.Via)
				}
			}
		}
	}
	if judged["router"] == 0 || judged["proxy"] == 0 {
		t.Errorf("keyed ops inside the cuts past the lease, by client: %v; want the router's and the proxy's", judged)
	}
}
