package reshard

import (
	"context"
	"testing"
	"time"
)

// fakeClock is a clock that moves only when told to (and by pauses).
type fakeClock struct {
	t      time.Time
	pauses []time.Duration
}

func (c *fakeClock) now() time.Time { return c.t }

func (c *fakeClock) pause(_ context.Context, d time.Duration) error {
	c.pauses = append(c.pauses, d)
	c.t = c.t.Add(d)
	return nil
}

func fakePacer(duty float64) (*pacer, *fakeClock) {
	c := &fakeClock{t: time.Date(2026, 12, 3, 15, 0, 0, 0, time.UTC)}
	o := Options{DutyCycle: duty, now: c.now, pause: c.pause}.withDefaults()
	p := newPacer(o)
	p.begin()
	return p, c
}

// TestPacerDutyCycle: after work that took t the pacer pauses
// t·(1−d)/d; tick pauses only once a slice of work is done; a duty cycle
// of 1 and a nil pacer never pause.
func TestPacerDutyCycle(t *testing.T) {
	ctx := context.Background()
	p, c := fakePacer(0.25)
	c.t = c.t.Add(30 * time.Millisecond)
	if err := p.rest(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if len(c.pauses) != 1 || c.pauses[0] != 90*time.Millisecond {
		t.Fatalf("duty 0.25 after 30 ms of work: pauses %v, want [90ms]", c.pauses)
	}
	// tick: nothing before a slice of work, then one pause for it.
	for range 5 {
		c.t = c.t.Add(paceSlice / 8)
		if err := p.tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.pauses) != 1 {
		t.Fatalf("tick paused before a slice of work: %v", c.pauses)
	}
	for range 3 {
		c.t = c.t.Add(paceSlice / 8)
		if err := p.tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.pauses) != 2 || c.pauses[1] != 3*paceSlice {
		t.Fatalf("tick after a slice of work: pauses %v, want a second of %v", c.pauses, 3*paceSlice)
	}
	if p.pauses != 2 || p.paused != 90*time.Millisecond+3*paceSlice {
		t.Errorf("pacer counted %d pauses, %v; want 2, %v", p.pauses, p.paused, 90*time.Millisecond+3*paceSlice)
	}
	// Scaled: half a pause.
	c.t = c.t.Add(10 * time.Millisecond)
	if err := p.rest(ctx, 0.5); err != nil {
		t.Fatal(err)
	}
	if got := c.pauses[len(c.pauses)-1]; got != 15*time.Millisecond {
		t.Errorf("scale 0.5 after 10 ms at duty 0.25: paused %v, want 15ms", got)
	}

	for _, duty := range []float64{1, 7} { // over 1: capped to 1
		p, c := fakePacer(duty)
		c.t = c.t.Add(time.Second)
		if err := p.rest(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if err := p.tick(ctx); err != nil {
			t.Fatal(err)
		}
		if len(c.pauses) != 0 {
			t.Errorf("duty %v paused %v", duty, c.pauses)
		}
	}
	var nilPacer *pacer
	nilPacer.begin()
	if err := nilPacer.rest(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := nilPacer.tick(ctx); err != nil {
		t.Fatal(err)
	}
	if d := (Options{}).withDefaults().DutyCycle; d != DefaultDutyCycle {
		t.Errorf("default duty cycle %v, want %v", d, DefaultDutyCycle)
	}
}

// TestCatchUpPaceConverges: rounds that shrink the backlog keep the full
// pause, a full batch included; two full batches in a row, or a backlog
// that stops shrinking, halve the pauses until they stop; a move's next
// catch-up keeps the scale reached. Then a simulated capture
// whose writers add more per paced round than the freeze's threshold
// still drains: the pauses fall away and the unpaced mover catches up.
func TestCatchUpPaceConverges(t *testing.T) {
	c := newCatchUpPace()
	for i, step := range []struct {
		n    int
		want float64
	}{
		{2000, 1},    // a batch behind: the full pause (the trend is not known yet)
		{2000, 0.5},  // a batch behind again: it may not shrink, halved
		{1500, 0.5},  // shrinking: kept
		{900, 0.5},   // shrinking
		{1200, 0.25}, // grew: halved
		{800, 0.25},  // shrinking: kept
		{800, 0.125}, // not shrinking: halved again
		{900, 0.0625},
		{960, 0}, // under a sixteenth: no pauses any more
		{10, 0},
	} {
		if got := c.after(step.n); got != step.want {
			t.Fatalf("round %d (%d records): scale %v, want %v", i, step.n, got, step.want)
		}
	}
	// Another catch-up of the move (before a freeze's lock): the scale
	// stays, the previous round is forgotten.
	c = newCatchUpPace()
	c.after(300)
	c.after(400) // halved
	c.reset()
	if got := c.after(500); got != 0.5 {
		t.Fatalf("first round after reset: scale %v, want the 0.5 reached before", got)
	}

	// The simulation: the writers add rate records per ms; a round
	// replays what is there (up to the batch) in 1 ms per 100 records
	// plus 5 ms; a paced round is followed by its pause at duty 0.2.
	// Paced at full pauses the backlog settles above the threshold, so
	// only the fallback lets it get under it.
	const batch, small, rate, duty = 2000, 2000 / 4, 30.0, 0.2
	c = newCatchUpPace()
	backlog := 3000.0
	drained := false
	for range 50 { // the mover's CatchUpRounds
		n := min(int(backlog), batch)
		busy := 5 + float64(n)/100 // ms
		backlog += rate*busy - float64(n)
		if n <= small {
			drained = true
			break
		}
		backlog += rate * busy * (1 - duty) / duty * c.after(n)
	}
	if !drained {
		t.Fatalf("a paced catch-up did not get under %d records in 50 rounds (backlog %.0f)", small, backlog)
	}
	if c.waived == 0 {
		t.Error("the simulation never needed the fallback: it does not test it")
	}
}
