package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Model is the load model.
type Model string

// Load models.
const (
	// Closed runs Concurrency workers back to back: throughput follows the
	// system's latency.
	Closed Model = "closed"
	// Open starts operations at a fixed Rate whatever the latency; latency
	// is measured from each operation's intended start.
	Open Model = "open"
)

// Mix says what the transitions write.
type Mix struct {
	// Fast is the share of operations that commit state only (the store's
	// fast path); the others are complex commits (a trace entry plus the
	// optional parts below).
	Fast float64 `json:"fast"`
	// MaxEmits bounds the outbox emits of a complex commit (uniform 0..MaxEmits).
	MaxEmits int `json:"max_emits"`
	// Timer is the probability that a complex commit schedules or cancels a timer.
	Timer float64 `json:"timer"`
	// Spawn is the probability that a complex commit records a spawn.
	Spawn float64 `json:"spawn"`
}

// Workload is what the workers do; the same Workload and seed produce the
// same executions and the same per-worker operation streams on every target.
type Workload struct {
	// Executions is how many executions the setup phase creates.
	Executions int `json:"executions"`
	// Seed makes execution ids and every random choice reproducible.
	Seed uint64 `json:"seed"`
	// Keys is how operations choose their execution.
	Keys Keys `json:"keys"`
	// Mix is what commits write.
	Mix Mix `json:"mix"`
	// Redelivery is the share of operations that re-send an already
	// processed event (which must be deduplicated).
	Redelivery float64 `json:"redelivery"`
	// RetryCap bounds reload-and-retry after CAS conflicts.
	RetryCap int `json:"retry_cap"`
	// PayloadBytes pads each execution's stored state.
	PayloadBytes int `json:"payload_bytes"`
	// DefinitionID is the definition of the created executions.
	DefinitionID string `json:"definition_id"`
	// TimerDelay is how far ahead scheduled timers fire.
	TimerDelay time.Duration `json:"timer_delay"`
}

// Options configure one run.
type Options struct {
	Workload Workload `json:"workload"`
	// Model is closed or open.
	Model Model `json:"model"`
	// Concurrency is the closed loop's worker count.
	Concurrency int `json:"concurrency"`
	// Rate is the open loop's arrival rate (operations per second).
	Rate float64 `json:"rate,omitempty"`
	// MaxOutstanding bounds the open loop's operations in flight; an
	// arrival beyond it is dropped (and counted).
	MaxOutstanding int `json:"max_outstanding,omitempty"`
	// LateThreshold: an open-loop operation that starts more than this
	// after its intended time is counted late.
	LateThreshold time.Duration `json:"late_threshold,omitempty"`
	// Warmup is excluded from every result figure.
	Warmup time.Duration `json:"warmup"`
	// Duration bounds the measured period. With Until set it is the
	// shortest measured period instead, and MaxDuration the longest.
	Duration time.Duration `json:"duration"`
	// Until, when set, extends the run past Duration until it reports
	// true (polled a few times a second) or MaxDuration has passed: a
	// run that must reach an amount of work (e.g. a chaos run's
	// acknowledged commits) whatever the machine's speed, within a
	// bound. It must be cheap and safe for concurrent use.
	Until func() bool `json:"-"`
	// MaxDuration is the ceiling of a run extended by Until.
	MaxDuration time.Duration `json:"max_duration,omitempty"`
	// Ops, when > 0, ends the run after that many measured operations.
	Ops int64 `json:"ops,omitempty"`
	// Relays runs the outbox relay and timer sweeper in the background.
	Relays bool `json:"relays"`
	// RelayWorkers is how many deliveries (and timer fires) each relay
	// runs at once, like a pool of production relay workers.
	RelayWorkers int `json:"relay_workers"`
	// RelayInterval is the relays' pause after a poll that did not fill a
	// batch (nothing, or all there was, to do).
	RelayInterval time.Duration `json:"relay_interval"`
	// OpTimeout bounds every call to the target (setup included), so a
	// hung target fails calls as timeouts instead of hanging the run
	// (0: no bound). Calls share deadline contexts: each call gets
	// between OpTimeout and 9/8 of it.
	OpTimeout time.Duration `json:"op_timeout"`
	// DrainTimeout bounds how long in-flight operations may finish after
	// the run ends; then they are canceled.
	DrainTimeout time.Duration `json:"drain_timeout"`
	// Part, when set, makes the run one part of a run split over several
	// generators (see Part and Options.ForPart); zero is a whole run.
	Part Part `json:"part,omitzero"`
	// SkipSetup assumes the executions exist (a sweep creates them once).
	SkipSetup bool `json:"-"`
	// Target names the target (direct, pgbouncer, proxy, ...).
	Target string `json:"target"`
	// Label names the run in reports (default: the target name).
	Label string `json:"label,omitempty"`
	// Progress, when not nil, receives a progress line every second.
	Progress io.Writer `json:"-"`
	// Hook, when set, runs before each operation's Commit (tests only).
	Hook func() `json:"-"`
	// Observer, when set, receives every operation of the run, setup
	// included (a chaos run's history).
	Observer Observer `json:"-"`
	// RunID prefixes every op id and event id of the run; "" draws one
	// from the clock. Ids must be unique across runs on one store.
	RunID string `json:"run_id,omitempty"`
	// Quiesce, when set, adds a phase after the workers stopped: see
	// Quiesce.
	Quiesce *Quiesce `json:"-"`
	// OnStart, when set, is called once the setup is done, with the
	// instant the run's clock starts (warm-up, then the measured period).
	// It must not block.
	OnStart func(start time.Time) `json:"-"`
}

// Quiesce is the phase after the workers stopped, in which the system is
// brought to rest so that its final state can be checked: Heal is called
// (a chaos run heals every fault), then the outbox relay and the timer
// sweeper keep running until no outbox row, spawn intent or armed timer
// is left (timers armed near the end are waited for until they are due
// and fired), or Timeout passes.
type Quiesce struct {
	// Timeout bounds the phase, Heal included.
	Timeout time.Duration
	// Heal, when set, runs first; its error is recorded in the result
	// and the phase goes on.
	Heal func(ctx context.Context) error
	// Poll is how often the remaining work is counted (default 200ms).
	Poll time.Duration
}

// DefaultOptions returns the defaults of `pgshard loadgen run`.
func DefaultOptions() Options {
	return Options{
		Workload: Workload{
			Executions:   10000,
			Seed:         1,
			Keys:         Keys{Dist: Uniform},
			Mix:          Mix{Fast: 0.6, MaxEmits: 2, Timer: 0.3, Spawn: 0.05},
			Redelivery:   0.05,
			RetryCap:     10,
			PayloadBytes: 256,
			DefinitionID: "loadgen",
			TimerDelay:   200 * time.Millisecond,
		},
		Model:          Closed,
		Concurrency:    16,
		MaxOutstanding: 1024,
		LateThreshold:  10 * time.Millisecond,
		Warmup:         2 * time.Second,
		Duration:       10 * time.Second,
		Relays:         true,
		RelayWorkers:   8,
		RelayInterval:  20 * time.Millisecond,
		OpTimeout:      30 * time.Second,
		DrainTimeout:   5 * time.Second,
	}
}

// Validate checks o and names the setting of each problem.
func (o *Options) Validate() error {
	var p []string
	w := o.Workload
	if w.Executions < 1 {
		p = append(p, fmt.Sprintf("executions: must be at least 1 (got %d)", w.Executions))
	}
	if err := w.Keys.Validate(); err != nil {
		p = append(p, "keys: "+err.Error())
	}
	if w.Mix.Fast < 0 || w.Mix.Fast > 1 {
		p = append(p, fmt.Sprintf("mix.fast: must be in [0, 1] (got %g)", w.Mix.Fast))
	}
	if w.Mix.MaxEmits < 0 || w.Mix.MaxEmits > 100 {
		p = append(p, fmt.Sprintf("mix.max_emits: must be in [0, 100] (got %d)", w.Mix.MaxEmits))
	}
	if w.Mix.Timer < 0 || w.Mix.Timer > 1 {
		p = append(p, fmt.Sprintf("mix.timer: must be in [0, 1] (got %g)", w.Mix.Timer))
	}
	if w.Mix.Spawn < 0 || w.Mix.Spawn > 1 {
		p = append(p, fmt.Sprintf("mix.spawn: must be in [0, 1] (got %g)", w.Mix.Spawn))
	}
	if w.Redelivery < 0 || w.Redelivery > 1 {
		p = append(p, fmt.Sprintf("redelivery: must be in [0, 1] (got %g)", w.Redelivery))
	}
	if w.RetryCap < 0 {
		p = append(p, fmt.Sprintf("retry_cap: must not be negative (got %d)", w.RetryCap))
	}
	if w.PayloadBytes < 0 || w.PayloadBytes > 1<<20 {
		p = append(p, fmt.Sprintf("payload_bytes: must be in [0, 1MiB] (got %d)", w.PayloadBytes))
	}
	if w.TimerDelay <= 0 {
		p = append(p, fmt.Sprintf("timer_delay: must be positive (got %s)", w.TimerDelay))
	}
	switch o.Model {
	case Closed:
		if o.Concurrency < 1 || o.Concurrency > 10000 {
			p = append(p, fmt.Sprintf("concurrency: must be in [1, 10000] (got %d)", o.Concurrency))
		}
	case Open:
		if !(o.Rate > 0) || o.Rate > 1e7 {
			p = append(p, fmt.Sprintf("rate: must be in (0, 1e7] for the open loop (got %g)", o.Rate))
		}
		if o.MaxOutstanding < 1 || o.MaxOutstanding > 100000 {
			p = append(p, fmt.Sprintf("max_outstanding: must be in [1, 100000] (got %d)", o.MaxOutstanding))
		}
		if o.LateThreshold <= 0 {
			p = append(p, fmt.Sprintf("late_threshold: must be positive (got %s)", o.LateThreshold))
		}
	default:
		p = append(p, fmt.Sprintf("model: %q, want closed or open", o.Model))
	}
	if o.Warmup < 0 {
		p = append(p, fmt.Sprintf("warmup: must not be negative (got %s)", o.Warmup))
	}
	if o.Duration <= 0 {
		p = append(p, fmt.Sprintf("duration: must be positive: every run is bounded (got %s)", o.Duration))
	}
	if o.Ops < 0 {
		p = append(p, fmt.Sprintf("ops: must not be negative (got %d)", o.Ops))
	}
	if o.Until != nil && o.MaxDuration < o.Duration {
		p = append(p, fmt.Sprintf("max_duration: a run extended until its goal needs a ceiling of at least duration %s (got %s)", o.Duration, o.MaxDuration))
	}
	if o.Until == nil && o.MaxDuration != 0 {
		p = append(p, "max_duration: only a run with a goal (Until) is extended; leave it unset")
	}
	if o.Relays && o.RelayInterval <= 0 {
		p = append(p, fmt.Sprintf("relay_interval: must be positive (got %s)", o.RelayInterval))
	}
	if o.Relays && (o.RelayWorkers < 1 || o.RelayWorkers > 1000) {
		p = append(p, fmt.Sprintf("relay_workers: must be in [1, 1000] (got %d)", o.RelayWorkers))
	}
	if o.OpTimeout < 0 {
		p = append(p, fmt.Sprintf("op_timeout: must not be negative (got %s)", o.OpTimeout))
	}
	if q := o.Quiesce; q != nil {
		if q.Timeout <= 0 {
			p = append(p, fmt.Sprintf("quiesce.timeout: must be positive (got %s)", q.Timeout))
		}
		if !o.Relays {
			p = append(p, "quiesce: needs the relays (relays: true): they are what drains the outbox and fires the timers")
		}
	}
	if err := o.Part.Validate(); err != nil {
		p = append(p, err.Error())
	} else if !o.Part.Whole() && w.Executions < o.Part.Count {
		p = append(p, fmt.Sprintf("part: %d executions cannot be shared by %d parts", w.Executions, o.Part.Count))
	}
	if o.DrainTimeout <= 0 {
		p = append(p, fmt.Sprintf("drain_timeout: must be positive (got %s)", o.DrainTimeout))
	}
	if len(p) > 0 {
		return errors.New(strings.Join(p, "; "))
	}
	return nil
}
