package cli

import (
	"testing"

	"github.com/pgshard/pgshard/chaos"
)

// A scenario's min_landed reaches the verifier as written: 0 (a
// measurement run) must become "no floor", not verify's default of 1.
func TestScenarioOptionsLandingFloor(t *testing.T) {
	for _, tt := range []struct{ scenario, verify int }{{0, -1}, {1, 1}, {3, 3}} {
		o := scenarioOptions(&chaos.Scenario{MinLanded: tt.scenario}, nil)
		if o.MinLanded != tt.verify {
			t.Errorf("min_landed %d: verify.Options.MinLanded %d, want %d", tt.scenario, o.MinLanded, tt.verify)
		}
	}
}
