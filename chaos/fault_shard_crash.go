package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/pgshard/pgshard/cluster"
)

var shardCrashInfo = kindInfo{
	needs:    NeedsProcessControl,
	resource: "proc",
	settle:   3 * time.Second,
	params: map[string]paramCheck{
		"mode":   enumParam("immediate", "kill"),
		"during": enumParam("catch-up"),
		"role":   enumParam("source", "destination", "any"),
		"wait":   durationParam(100*time.Millisecond, 10*time.Minute),
	},
	// Aimed at a catch-up, it needs the run's catalog and its moves.
	byParams: func(p Params) (Needs, bool, string) {
		if p.str("during", "") == "catch-up" {
			return NeedsProcessControl | NeedsCatalog, false, "proc"
		}
		return NeedsProcessControl, false, "proc"
	},
	new: func() Fault { return &shardCrash{} },
}

// catchUpWaitDefault is how long a shard-crash with during=catch-up waits
// for a move of its shard to enter its catch-up (param wait).
const catchUpWaitDefault = 30 * time.Second

// recoveryPatterns pick a server log's lines about a crash and the crash
// recovery after it.
var recoveryPatterns = []string{
	"received immediate shutdown request",
	"was terminated by signal",
	"terminating any other active server processes",
	"all server processes terminated; reinitializing",
	"database system was interrupted",
	"database system was not properly shut down",
	"automatic recovery in progress",
	"redo starts at",
	"redo done at",
	"redo is not required",
	"database system is ready to accept connections",
}

// shardCrash is KindShardCrash.
type shardCrash struct {
	mu      sync.Mutex
	oldPID  int
	logPath string
	offset  int64
	// skipped: aimed at a catch-up, none came within the wait (nothing
	// to heal).
	skipped bool
}

func (*shardCrash) Kind() Kind   { return KindShardCrash }
func (*shardCrash) Needs() Needs { return shardCrashInfo.needs }

// Inject stops the shard's Postgres without a shutdown checkpoint (param
// mode: immediate, the default, like pg_ctl stop -m immediate; or kill,
// SIGKILL of the postmaster) and waits until it and its backends are gone.
// With param during=catch-up it first waits for a move of the shard to
// enter its catch-up (catchup.go). Evidence: old_pid, mode; aimed at a
// catch-up also during, waited_ms and the move's move, role (the shard's:
// source or destination), lo, hi, from, to — or no_catch_up when none
// came within the wait (then nothing is crashed).
func (f *shardCrash) Inject(ctx context.Context, env *Env, shard int, p Params, _ *rand.Rand) (Evidence, error) {
	ci, err := env.clusterShard(shard)
	if err != nil {
		return Evidence{}, err
	}
	modeName := p.str("mode", "immediate")
	mode, err := cluster.ParseStopMode(modeName)
	if err != nil || mode == cluster.Fast {
		return Evidence{}, fmt.Errorf("shard-crash: param mode %q: want immediate or kill", modeName)
	}
	fields := map[string]any{"mode": modeName}
	if p.str("during", "") == "catch-up" {
		if env.catchUps == nil {
			return Evidence{Fields: fields}, errors.New("shard-crash: during=catch-up needs the run's moves (move faults in the scenario)")
		}
		wait, err := p.duration("wait", catchUpWaitDefault)
		if err != nil {
			return Evidence{Fields: fields}, err
		}
		fields["during"] = "catch-up"
		t0 := time.Now()
		o := env.catchUps.wait(ctx, env.shardName(shard), p.str("role", "any"), wait)
		fields["waited_ms"] = time.Since(t0).Milliseconds()
		if o == nil {
			f.mu.Lock()
			f.skipped = true
			f.mu.Unlock()
			fields["no_catch_up"] = true
			env.logf("shard-crash: no move of %s entered its catch-up within %v: not crashed", env.shardName(shard), wait)
			return Evidence{Fields: fields}, nil
		}
		defer close(o.done) // the mover goes on once the shard is down
		m := o.move
		fields["move"], fields["role"], fields["lo"], fields["hi"], fields["from"], fields["to"] = m.ID, o.role, m.Lo, m.Hi, m.From, m.To
		env.logf("shard-crash: %s, the %s of move %d (%d-%d %s→%s), crashes at the start of its catch-up", env.shardName(shard), o.role, m.ID, m.Lo, m.Hi, m.From, m.To)
	}
	s := env.Cluster.Shard(ci)
	f.mu.Lock()
	f.oldPID, f.logPath, f.offset = s.PID, s.LogPath(), fileSize(s.LogPath())
	f.mu.Unlock()
	fields["old_pid"] = s.PID
	if err := env.Cluster.StopShard(ctx, ci, mode); err != nil {
		return Evidence{Fields: fields}, fmt.Errorf("shard-crash: %w", err)
	}
	return Evidence{Landed: s.PID != 0, Fields: fields}, nil
}

// Heal starts the shard again and waits until it accepts connections,
// after crash recovery. Evidence: old_pid, new_pid, recovery (the server
// log's lines about the crash and the recovery, written since Inject).
// Landed: a new postmaster ran automatic recovery.
func (f *shardCrash) Heal(ctx context.Context, env *Env, shard int) (Evidence, error) {
	f.mu.Lock()
	skipped := f.skipped
	f.mu.Unlock()
	if skipped {
		return Evidence{Fields: map[string]any{"no_catch_up": true}}, nil
	}
	ci, err := env.clusterShard(shard)
	if err != nil {
		return Evidence{}, err
	}
	err = env.Cluster.StartShard(ctx, ci)
	f.mu.Lock()
	old, path, off := f.oldPID, f.logPath, f.offset
	f.mu.Unlock()
	newPID := env.Cluster.Shard(ci).PID
	lines := logLines(path, off, recoveryPatterns)
	if lines == nil {
		lines = []string{}
	}
	ev := Evidence{
		Landed: old != 0 && newPID != 0 && newPID != old && anyContains(lines, "automatic recovery in progress"),
		Fields: map[string]any{"old_pid": old, "new_pid": newPID, "recovery": lines},
	}
	if err != nil {
		return ev, fmt.Errorf("shard-crash: restart: %w", err)
	}
	return ev, nil
}
