package reshard

import (
	"testing"
	"time"

	"github.com/pgshard/pgshard/catalog"
)

// TestFreezeRecord: a freeze as the journal records it — flipped once the
// flip committed (even if a step after it failed), else abandoned with
// why (an error when the freeze ended otherwise than over its budget).
func TestFreezeRecord(t *testing.T) {
	start := time.Date(2026, 12, 2, 23, 0, 1, 234567891, time.UTC)
	for _, c := range []struct {
		name string
		f    Freeze
		want catalog.FreezeRecord
	}{
		{"flipped", Freeze{Start: start, Duration: 61500 * time.Microsecond, flipped: true},
			catalog.FreezeRecord{StartedAt: start.Truncate(time.Microsecond), MS: 61.5, Outcome: catalog.FreezeFlipped}},
		{"over budget", Freeze{Start: start, Duration: 300 * time.Millisecond, Abandoned: true, Why: catalog.WhyDeadline, Reason: "writers in flight"},
			catalog.FreezeRecord{StartedAt: start.Truncate(time.Microsecond), MS: 300, Outcome: catalog.FreezeAbandoned, Why: catalog.WhyDeadline, Error: "writers in flight"}},
		{"kept coming", Freeze{Start: start, Duration: 75 * time.Millisecond, Abandoned: true, Why: catalog.WhyCatchUp, Reason: errKeptComing.Error()},
			catalog.FreezeRecord{StartedAt: start.Truncate(time.Microsecond), MS: 75, Outcome: catalog.FreezeAbandoned, Why: catalog.WhyCatchUp, Error: "freeze abandoned: changes kept coming during the freeze"}},
		{"failed", Freeze{Start: start, Duration: 2 * time.Millisecond, Reason: "shard down"},
			catalog.FreezeRecord{StartedAt: start.Truncate(time.Microsecond), MS: 2, Outcome: catalog.FreezeAbandoned, Why: catalog.WhyError, Error: "shard down"}},
	} {
		if got := c.f.Record(); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
