package loadgen_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgshard/pgshard/loadgen/loadgentest"
)

// A run extended by a goal goes past Duration until the goal is met; the
// ceiling is far away, so only the goal can have ended it (the test's
// own timeout is the bound).
func TestUntilGoalEndsAnExtendedRun(t *testing.T) {
	f := loadgentest.New(loadgentest.Options{})
	o := quick()
	o.Warmup, o.Duration, o.MaxDuration = 0, 10*time.Millisecond, time.Hour
	var polls atomic.Int64
	o.Until = func() bool { return polls.Add(1) >= 5 }
	res := run(t, f, o)
	if polls.Load() < 5 {
		t.Fatalf("the goal was polled %d times; the run ended before it was met", polls.Load())
	}
	if res.Ops == 0 {
		t.Fatal("no operations in the extended run")
	}
}

// A goal that is never met ends at the ceiling, not later.
func TestUntilCeilingEndsARunWhoseGoalIsNeverMet(t *testing.T) {
	f := loadgentest.New(loadgentest.Options{})
	o := quick()
	o.Warmup, o.Duration, o.MaxDuration = 0, 10*time.Millisecond, 300*time.Millisecond
	var polls atomic.Int64
	o.Until = func() bool { polls.Add(1); return false }
	res := run(t, f, o)
	if polls.Load() == 0 {
		t.Fatal("the goal was never polled between duration and the ceiling")
	}
	if res.Ops == 0 {
		t.Fatal("no operations before the ceiling")
	}
}

func TestUntilNeedsACeiling(t *testing.T) {
	o := quick()
	o.Until = func() bool { return true }
	if err := o.Validate(); err == nil {
		t.Fatal("Validate accepted a goal without max_duration")
	}
	o.MaxDuration = o.Duration / 2
	if err := o.Validate(); err == nil {
		t.Fatal("Validate accepted a ceiling below duration")
	}
	o.MaxDuration = 2 * o.Duration
	if err := o.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	o.Until = nil
	if err := o.Validate(); err == nil {
		t.Fatal("Validate accepted max_duration without a goal")
	}
}
