package chaos

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/pgshard/pgshard/loadgen"
)

// Targets a scenario can drive.
const (
	TargetDirect          = "direct"          // the router to each shard's Postgres
	TargetPgBouncer       = "pgbouncer"       // the router to each shard's PgBouncer
	TargetProxy           = "proxy"           // pgshard proxy (to each shard's PgBouncer, else Postgres)
	TargetPgBouncerPlusPx = "pgbouncer+proxy" // half the executions each way, at once
)

// Targets lists the targets, in the order the help text gives them.
func Targets() []string {
	return []string{TargetDirect, TargetPgBouncer, TargetProxy, TargetPgBouncerPlusPx}
}

// Duration is a time.Duration written as "1.5s" in YAML.
type Duration time.Duration

// UnmarshalYAML reads "250ms", "2s", "1m30s".
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: want a duration such as 2s", n.Line)
	}
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (write e.g. 250ms, 2s, 1m)", n.Line, s)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as text.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// MarshalText writes the duration as text (JSON).
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads the duration from text (JSON).
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = Duration(v)
	return err
}

// Scenario is a chaos scenario: the workload, how long, which faults how
// often, against what. It is read from YAML (configs/chaos/*.yaml); every
// field is documented there.
type Scenario struct {
	// Name names the scenario in reports (default: the file's base name).
	Name        string `yaml:"name" json:"name"`
	Description string `yaml:"description,omitempty" json:"description,omitempty"`
	// Target is direct, pgbouncer, proxy or pgbouncer+proxy.
	Target string `yaml:"target" json:"target"`
	// Shards, when set, is the shard count the cluster must have.
	Shards int `yaml:"shards,omitempty" json:"shards,omitempty"`
	// Duration is the period of load and faults (the heal-and-quiesce
	// phase comes after it).
	Duration Duration `yaml:"duration" json:"duration"`
	// Seed draws the workload's choices and the fault schedule.
	Seed uint64 `yaml:"seed" json:"seed"`
	// QuiesceTimeout bounds the heal-and-quiesce phase.
	QuiesceTimeout Duration `yaml:"quiesce_timeout" json:"quiesce_timeout"`
	// MinLanded is how many times each scheduled fault kind must land
	// (counted from evidence) for the run not to be vacuous; 0 makes a
	// measurement run, in which landing is reported, not required.
	MinLanded int `yaml:"min_landed" json:"min_landed"`
	// MinCommits, when set, fails the run as vacuous below that many
	// acknowledged commits.
	MinCommits int64 `yaml:"min_commits,omitempty" json:"min_commits,omitempty"`
	// MaxDuration, when set (with MinCommits), makes Duration the
	// shortest period of load and faults: the run goes on, faults and
	// all, until MinCommits commits are acknowledged and every fault
	// kind landed MinLanded times (in a mutant's run, every kind the
	// mutant needs: waitedFor), or MaxDuration has passed, so a slow
	// machine runs longer instead of failing a floor tuned on a fast
	// one. Only a run that hits the ceiling short of its goal is vacuous.
	MaxDuration Duration `yaml:"max_duration,omitempty" json:"max_duration,omitempty"`
	// Workload is the load (loadgen's worker loop and relays).
	Workload ScenarioWorkload `yaml:"workload" json:"workload"`
	// Faults are the fault kinds and their rates.
	Faults []ScenarioFault `yaml:"faults" json:"faults"`
	// MutantDuration is each mutant run's duration in `chaos mutants`
	// (default: Duration).
	MutantDuration Duration `yaml:"mutant_duration,omitempty" json:"mutant_duration,omitempty"`
}

// ScenarioWorkload is the workload part of a scenario.
type ScenarioWorkload struct {
	Executions   int      `yaml:"executions" json:"executions"`
	Concurrency  int      `yaml:"concurrency" json:"concurrency"`
	Keys         string   `yaml:"keys" json:"keys"`
	Fast         float64  `yaml:"fast" json:"fast"`
	MaxEmits     int      `yaml:"max_emits" json:"max_emits"`
	Timers       float64  `yaml:"timers" json:"timers"`
	Spawns       float64  `yaml:"spawns" json:"spawns"`
	Redelivery   float64  `yaml:"redelivery" json:"redelivery"`
	RetryCap     int      `yaml:"retry_cap" json:"retry_cap"`
	PayloadBytes int      `yaml:"payload_bytes" json:"payload_bytes"`
	TimerDelay   Duration `yaml:"timer_delay" json:"timer_delay"`
	TraceMax     int      `yaml:"trace_max" json:"trace_max"`
	OpTimeout    Duration `yaml:"op_timeout" json:"op_timeout"`
	RelayWorkers int      `yaml:"relay_workers" json:"relay_workers"`
	// MaxConns bounds each shard's pool (and the proxy client's).
	MaxConns int `yaml:"max_conns" json:"max_conns"`
}

// ScenarioFault is one fault kind of a scenario.
type ScenarioFault struct {
	Kind Kind `yaml:"kind" json:"kind"`
	// Every is the mean interval between injections (times drawn from
	// the seed); At lists explicit offsets instead.
	Every Duration   `yaml:"every,omitempty" json:"every,omitempty"`
	At    []Duration `yaml:"at,omitempty" json:"at,omitempty"`
	// Hold is how long the fault stays before it is healed.
	Hold Duration `yaml:"hold,omitempty" json:"hold,omitempty"`
	// Shards restricts the shards it hits (default: any, drawn).
	Shards []string `yaml:"shards,omitempty" json:"shards,omitempty"`
	// Params are the kind's parameters (delay, count, mode, via, ...).
	Params map[string]string `yaml:"params,omitempty" json:"params,omitempty"`
	// MinLanded, when above the scenario's min_landed, is this kind's
	// own floor (e.g. 20 completed moves): the run's goal waits for it
	// and the verdict is vacuous below it.
	MinLanded int `yaml:"min_landed,omitempty" json:"min_landed,omitempty"`
}

// DefaultScenario is a scenario's defaults: 60 s of a mixed workload with
// no faults, through PgBouncer.
func DefaultScenario() Scenario {
	return Scenario{
		Target:         TargetPgBouncer,
		Duration:       Duration(60 * time.Second),
		Seed:           1,
		QuiesceTimeout: Duration(60 * time.Second),
		MinLanded:      1,
		Workload: ScenarioWorkload{
			Executions: 1000, Concurrency: 16, Keys: "uniform",
			Fast: 0.5, MaxEmits: 2, Timers: 0.4, Spawns: 0.05, Redelivery: 0.05, RetryCap: 10,
			PayloadBytes: 64, TimerDelay: Duration(1500 * time.Millisecond), TraceMax: 8,
			OpTimeout: Duration(15 * time.Second), RelayWorkers: 8, MaxConns: 16,
		},
	}
}

// LoadScenario reads a scenario file: unknown keys and bad values are
// errors naming the key.
func LoadScenario(path string) (*Scenario, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	s, err := ParseScenario(raw)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", path, err)
	}
	if s.Name == "" {
		s.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	return s, nil
}

// ParseScenario decodes and validates a scenario document over the
// defaults.
func ParseScenario(raw []byte) (*Scenario, error) {
	s := DefaultScenario()
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil && !errors.Is(err, io.EOF) {
		return nil, errors.New(strings.ReplaceAll(strings.TrimPrefix(err.Error(), "yaml: "), "\n", "; "))
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Validate checks every field and names the key of each problem.
func (s *Scenario) Validate() error {
	var p []string
	bad := func(key, format string, args ...any) { p = append(p, key+": "+fmt.Sprintf(format, args...)) }
	if !slices.Contains(Targets(), s.Target) {
		bad("target", "want %s (got %q)", strings.Join(Targets(), ", "), s.Target)
	}
	if s.Shards < 0 || s.Shards > 1024 {
		bad("shards", "must be in [0, 1024] (got %d)", s.Shards)
	}
	if s.Duration <= 0 || time.Duration(s.Duration) > 24*time.Hour {
		bad("duration", "must be in (0, 24h]: every run is bounded (got %s)", time.Duration(s.Duration))
	}
	if s.QuiesceTimeout <= 0 {
		bad("quiesce_timeout", "must be positive (got %s)", time.Duration(s.QuiesceTimeout))
	}
	if s.MinLanded < 0 {
		bad("min_landed", "must not be negative (got %d)", s.MinLanded)
	}
	if s.MinCommits < 0 {
		bad("min_commits", "must not be negative (got %d)", s.MinCommits)
	}
	if s.MaxDuration != 0 {
		switch {
		case s.MinCommits == 0:
			bad("max_duration", "extends the run until min_commits is reached: set min_commits too (or remove max_duration)")
		case s.MaxDuration < s.Duration || time.Duration(s.MaxDuration) > 24*time.Hour:
			bad("max_duration", "must be in [duration %s, 24h] (got %s)", time.Duration(s.Duration), time.Duration(s.MaxDuration))
		}
	}
	if s.MutantDuration < 0 {
		bad("mutant_duration", "must not be negative (got %s)", time.Duration(s.MutantDuration))
	}
	w := s.Workload
	if _, err := loadgen.ParseKeys(w.Keys); err != nil {
		bad("workload.keys", "%v", err)
	}
	if w.TraceMax < 0 {
		bad("workload.trace_max", "must not be negative (got %d)", w.TraceMax)
	}
	if w.MaxConns < 1 || w.MaxConns > 1000 {
		bad("workload.max_conns", "must be in [1, 1000] (got %d)", w.MaxConns)
	}
	if w.OpTimeout <= 0 {
		bad("workload.op_timeout", "must be positive: a hung call must fail, not hang the run (got %s)", time.Duration(w.OpTimeout))
	}
	// The rest of the workload is checked by loadgen, with its own key
	// names; the run reports them under workload.
	o := s.loadgenOptions()
	if err := o.Validate(); err != nil {
		for _, e := range strings.Split(err.Error(), "; ") {
			p = append(p, "workload."+e)
		}
	}
	for i, f := range s.Faults {
		key := fmt.Sprintf("faults[%d]", i)
		if !slices.Contains(Kinds(), f.Kind) {
			bad(key+".kind", "unknown fault kind %q (known: %s)", f.Kind, kindList())
			continue
		}
		if f.Every < 0 || f.Hold < 0 {
			bad(key, "every and hold must not be negative")
		}
		if f.Every == 0 && len(f.At) == 0 {
			bad(key, "%s needs every (a mean interval) or at (explicit offsets)", f.Kind)
		}
		for j, at := range f.At {
			if at < 0 || at >= s.Duration {
				bad(fmt.Sprintf("%s.at[%d]", key, j), "%s is outside the run's duration %s", time.Duration(at), time.Duration(s.Duration))
			}
		}
		if f.MinLanded < 0 {
			bad(key+".min_landed", "%d is negative", f.MinLanded)
		}
		if needsProxy(f.Kind) && s.Target != TargetProxy && s.Target != TargetPgBouncerPlusPx {
			bad(key+".kind", "%s needs a proxy target (proxy or pgbouncer+proxy), not %s", f.Kind, s.Target)
		}
	}
	if len(p) > 0 {
		return errors.New(strings.Join(p, "; "))
	}
	return nil
}

func kindList() string {
	var ks []string
	for _, k := range Kinds() {
		ks = append(ks, string(k))
	}
	return strings.Join(ks, ", ")
}

func needsProxy(k Kind) bool { return k == KindProxyRestart }

// specs turns the scenario's faults into the planner's input.
func (s *Scenario) specs() []Spec {
	out := make([]Spec, len(s.Faults))
	for i, f := range s.Faults {
		sp := Spec{Kind: f.Kind, Every: time.Duration(f.Every), Hold: time.Duration(f.Hold), Shards: f.Shards, Params: Params(f.Params)}
		for _, at := range f.At {
			sp.At = append(sp.At, time.Duration(at))
		}
		out[i] = sp
	}
	return out
}

// loadgenOptions is the workload as loadgen options (without the target
// or the history).
func (s *Scenario) loadgenOptions() loadgen.Options {
	w := s.Workload
	o := loadgen.DefaultOptions()
	keys, _ := loadgen.ParseKeys(w.Keys)
	o.Workload.Executions, o.Workload.Seed, o.Workload.Keys = w.Executions, s.Seed, keys
	o.Workload.Mix = loadgen.Mix{Fast: w.Fast, MaxEmits: w.MaxEmits, Timer: w.Timers, Spawn: w.Spawns}
	o.Workload.Redelivery, o.Workload.RetryCap, o.Workload.PayloadBytes = w.Redelivery, w.RetryCap, w.PayloadBytes
	o.Workload.TimerDelay = time.Duration(w.TimerDelay)
	o.Workload.DefinitionID = "chaos"
	o.Concurrency = w.Concurrency
	o.Warmup, o.Duration = 0, time.Duration(s.Duration)
	if s.extended() {
		o.MaxDuration = time.Duration(s.MaxDuration)
		o.Until = func() bool { return false } // Run sets the real goal
	}
	o.Relays, o.RelayWorkers = true, w.RelayWorkers
	o.OpTimeout = time.Duration(w.OpTimeout)
	o.Target = s.Target
	return o
}

// extended reports whether the run goes on past Duration until
// MinCommits (up to MaxDuration).
func (s *Scenario) extended() bool { return s.MaxDuration > 0 && s.MinCommits > 0 }

// faultPeriod is the longest the fault schedule can run: the ceiling of
// an extended run, else Duration.
func (s *Scenario) faultPeriod() time.Duration {
	if s.extended() {
		return time.Duration(s.MaxDuration)
	}
	return time.Duration(s.Duration)
}

//go:embed default.yaml
var defaultScenario []byte

// DefaultScenarioFile is the built-in scenario (chaos/default.yaml), what
// `pgshard chaos run` runs without --scenario.
func DefaultScenarioFile() (*Scenario, error) {
	s, err := ParseScenario(defaultScenario)
	if err != nil {
		return nil, fmt.Errorf("built-in scenario: %w", err)
	}
	return s, nil
}

// MinLandedOf is how many times kind k must land: the scenario's
// min_landed, or a fault's own when higher.
func (s *Scenario) MinLandedOf(k Kind) int {
	n := s.MinLanded
	for _, f := range s.Faults {
		if f.Kind == k {
			n = max(n, f.MinLanded)
		}
	}
	return n
}
