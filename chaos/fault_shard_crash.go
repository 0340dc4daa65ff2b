package chaos

import (
	"context"
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
		"mode": enumParam("immediate", "kill"),
	},
	new: func() Fault { return &shardCrash{} },
}

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
}

func (*shardCrash) Kind() Kind   { return KindShardCrash }
func (*shardCrash) Needs() Needs { return shardCrashInfo.needs }

// Inject stops the shard's Postgres without a shutdown checkpoint (param
// mode: immediate, the default, like pg_ctl stop -m immediate; or kill,
// SIGKILL of the postmaster) and waits until it and its backends are gone.
// Evidence: old_pid, mode.
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
	s := env.Cluster.Shard(ci)
	f.mu.Lock()
	f.oldPID, f.logPath, f.offset = s.PID, s.LogPath(), fileSize(s.LogPath())
	f.mu.Unlock()
	fields := map[string]any{"old_pid": s.PID, "mode": modeName}
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
