package verify_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports enforces the checker's independence (ARCHITECTURE.md §3): of
// pgshard's own packages, verify may depend on shardmap only — never on
// the store, router, loadgen or chaos code it checks, nor on the cluster,
// proxy or migrations code around it.
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/pgshard/pgshard/verify").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	allowed := map[string]bool{"github.com/pgshard/pgshard/verify": true, "github.com/pgshard/pgshard/shardmap": true}
	seen := 0
	for _, p := range strings.Fields(string(out)) {
		if !strings.HasPrefix(p, "github.com/pgshard/pgshard") {
			continue
		}
		seen++
		if !allowed[p] {
			t.Errorf("verify depends on %s", p)
		}
	}
	if seen < 2 {
		t.Fatalf("go list found %d of our packages, want verify and shardmap:\n%s", seen, out)
	}
}
