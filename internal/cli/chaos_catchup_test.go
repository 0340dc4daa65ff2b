package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestChaosCrashDuringCatchUp runs a short scenario whose shard crashes
// are aimed at the moves' catch-up (shard-crash during=catch-up) and
// verifies it: the run passes, and a crash landed on a move's source or
// destination at the start of its catch-up (the evidence names the move
// and the shard's role), followed by crash recovery.
func TestChaosCrashDuringCatchUp(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a cluster")
	}
	r := newChaosRig(t)
	out := filepath.Join(r.dir, "catchupcrash")
	// shard0 is spared: the run's catalog is on its server in this rig.
	sc := r.scenario(t, "catchupcrash", "pgbouncer", "10s", `
  - {kind: move, every: 500ms, params: {freeze_budget: 200ms}}
  - {kind: shard-crash, every: 4s, hold: 500ms, shards: [shard1, shard2], params: {during: catch-up, wait: 20s}}`)
	shorten(t, sc, "max_duration: 2m", "max_duration: 4m")
	res := runWithin(t, 8*time.Minute, "", r.args("chaos", "run", "--scenario", sc, "--out", out)...)
	b, _ := os.ReadFile(filepath.Join(out, "faults.json"))
	if res.code != 0 || !strings.Contains(res.stdout, "verdict: PASS") {
		logFaultErrors(t, b)
		t.Fatalf("exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
	}
	var fr struct {
		Events []struct {
			ID, Kind, Phase, Shard string
			Landed                 bool
			Evidence               map[string]any
		}
	}
	if err := json.Unmarshal(b, &fr); err != nil {
		t.Fatal(err)
	}
	aimed := map[string]bool{} // crash id → landed in a catch-up
	recovered := 0
	for _, e := range fr.Events {
		if e.Kind != "shard-crash" {
			continue
		}
		switch e.Phase {
		case "inject":
			if e.Evidence["during"] != "catch-up" {
				t.Errorf("%s: evidence %v, want during catch-up", e.ID, e.Evidence)
			}
			if e.Evidence["no_catch_up"] == true {
				continue
			}
			role, _ := e.Evidence["role"].(string)
			from, _ := e.Evidence["from"].(string)
			to, _ := e.Evidence["to"].(string)
			if mv, _ := e.Evidence["move"].(float64); mv <= 0 || (role == "source") != (from == e.Shard) || (role == "destination") != (to == e.Shard) || role == "" {
				t.Errorf("%s on %s: evidence %v, want the move and the shard's role in it", e.ID, e.Shard, e.Evidence)
			}
			aimed[e.ID] = e.Landed
		case "heal":
			if landed, ok := aimed[e.ID]; ok && landed && e.Landed {
				recovered++
			}
		}
	}
	if recovered == 0 {
		logFaultErrors(t, b)
		t.Errorf("no shard crash landed in a move's catch-up and recovered: %v", aimed)
	}
}
