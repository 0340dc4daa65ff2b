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

// TestChaosCatalogCut runs a short scenario whose proxy is cut off from
// the run's catalog past its lease TTL while ranges move, and verifies
// it: the cuts land, the proxy's keyed operations inside them are judged
// (the lease invariant checks something) and none was served, every op
// line names the client it went through, and the proxy's config holds
// the short lease.
func TestChaosCatalogCut(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a cluster")
	}
	r := newChaosRig(t)
	out := filepath.Join(r.dir, "catalogcut")
	sc := r.scenario(t, "catalogcut", "proxy", "12s", `
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
	ops := 0
	for sc2.Scan() {
		var l struct{ Type, Via string }
		if err := json.Unmarshal(sc2.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if l.Type == "op" {
			ops++
			if l.Via != "proxy" {
				t.Fatalf("an op line of a proxy target with via %q", l.Via)
			}
		}
	}
	if err := sc2.Err(); err != nil || ops == 0 {
		t.Fatalf("%d op lines: %v", ops, err)
	}
}
