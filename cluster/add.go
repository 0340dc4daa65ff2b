package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"syscall"
)

// ErrShardExists is wrapped by AddShard when the cluster already has a
// (completely added) shard of the name asked for.
var ErrShardExists = errors.New("shard already exists")

// shardNameRe is what a shard added by name may be called: a shard map
// name (letters, digits, '_', '-') that is also a safe directory name.
var shardNameRe = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_-]{0,62}$`)

// AddShard adds one shard to the local cluster recorded in dir: another
// PostgreSQL (and PgBouncer, if the cluster has them) with the cluster's
// settings, its data directory copied from the same initdb template, on
// ports picked as Up picks them, its database and roles provisioned. name
// "" names it "shardK" after its ordinal K, the smallest one the cluster
// does not use. It returns the cluster, the new shard last in Shards.
//
// The shard is recorded in the state file (marked as being added) before
// anything starts, and each server's PID as soon as it runs, so Down stops
// whatever an interrupted AddShard left, and Status shows it. If ctx is
// cancelled or a server fails, the servers this call started are stopped
// again and the shard stays recorded as being added: calling AddShard
// again with the same name (or none) finishes it; with another name it
// first stops and removes the unfinished one. A name that a completely
// added shard already has is an error wrapping ErrShardExists; a directory
// without a cluster, one wrapping ErrNoCluster. Up and Down keep working
// on the grown cluster (its spec's shard count includes the new shard).
func AddShard(ctx context.Context, dir, name string, log io.Writer) (*Cluster, Shard, error) {
	if dir == "" {
		return nil, Shard{}, errors.New("add shard: no directory given")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, Shard{}, err
	}
	if name != "" && !shardNameRe.MatchString(name) {
		return nil, Shard{}, fmt.Errorf("add shard: name %q: use letters, digits, '_' and '-' (at most 63, not starting with '-')", name)
	}
	if _, err := readState(dir); notExist(err) {
		return nil, Shard{}, fmt.Errorf("add shard: %w in %s; run `pgshard dev up --dir %s` first", ErrNoCluster, dir, dir)
	}
	run, err := currentRunAs()
	if err != nil {
		return nil, Shard{}, err
	}
	lock, err := lockDir(ctx, dir)
	if err != nil {
		return nil, Shard{}, err
	}
	defer lock.unlock()
	st, err := readState(dir)
	if err != nil {
		return nil, Shard{}, err
	}
	if st.Provider != localName {
		return nil, Shard{}, fmt.Errorf("add shard: %s holds a %s cluster; only local clusters grow", dir, st.Provider)
	}
	spec := st.Spec
	spec.Log = log
	bins, err := FindBinaries(ctx, spec)
	if err != nil {
		return nil, Shard{}, err
	}
	if st.Binaries.Major != 0 && st.Binaries.Major != bins.Major {
		return nil, Shard{}, fmt.Errorf("add shard: %s holds a PostgreSQL %d cluster but the binaries found are PostgreSQL %d (%s)",
			dir, st.Binaries.Major, bins.Major, bins.BinDir)
	}

	i, err := addEntry(ctx, dir, st, name, spec)
	if err != nil {
		return nil, Shard{}, err
	}
	u := newUpper(dir, spec, bins, run, st)
	s := u.shard(i)
	var template string
	if !s.Initialized {
		if template, err = ensureTemplate(ctx, bins, run, spec); err != nil {
			return nil, Shard{}, fmt.Errorf("add shard %s: %w", s.Name, err)
		}
	}
	err = u.upShard(ctx, i, template)
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		u.abort(ctx)
		if ctx.Err() != nil {
			err = fmt.Errorf("interrupted: %w", ctx.Err())
		}
		return nil, Shard{}, fmt.Errorf("add shard %s to %s: %w (nothing of it runs; run the add again to finish it, or `pgshard dev down`)", s.Name, dir, err)
	}
	if err := u.update(i, func(s *shardState) { s.Adding = false }); err != nil {
		return nil, Shard{}, err
	}
	spec.logf("%s added to the cluster in %s (ordinal %d, postgres 127.0.0.1:%d)", s.Name, dir, s.Ordinal, u.shard(i).Port)
	c := u.cluster()
	c.Spec.Log = log
	return c, c.Shards[i], nil
}

// addEntry finds or records the state entry of the shard to add and
// returns its index: an unfinished add of the same name (or of any name
// when name is "") is resumed, an unfinished add of another name removed.
func addEntry(ctx context.Context, dir string, st *state, name string, spec Spec) (int, error) {
	pending := slices.IndexFunc(st.Shards, func(s shardState) bool { return s.Adding })
	if pending >= 0 && (name == "" || name == st.Shards[pending].Name) {
		spec.logf("%s: finishing its interrupted add", st.Shards[pending].Name)
		return pending, nil
	}
	if pending >= 0 {
		if err := dropPending(ctx, dir, st, pending, spec); err != nil {
			return 0, err
		}
	}
	ordinal := 0
	for slices.ContainsFunc(st.Shards, func(s shardState) bool { return s.Ordinal == ordinal }) {
		ordinal++
	}
	if ordinal >= MaxShards {
		return 0, fmt.Errorf("add shard: the cluster has %d shards, the most there can be", len(st.Shards))
	}
	if name == "" {
		name = "shard" + strconv.Itoa(ordinal)
	}
	if j := slices.IndexFunc(st.Shards, func(s shardState) bool { return s.Name == name }); j >= 0 {
		s := st.Shards[j]
		return 0, fmt.Errorf("add shard: the cluster in %s already has a shard %q (ordinal %d, postgres 127.0.0.1:%d): %w; pick another --name",
			dir, name, s.Ordinal, s.Port, ErrShardExists)
	}
	shardDir := filepath.Join(dir, name)
	if _, err := os.Lstat(shardDir); err == nil {
		return 0, fmt.Errorf("add shard: %s already exists and is not a shard of the cluster; pick another --name", shardDir)
	}
	st.Shards = append(st.Shards, shardState{Adding: true, Shard: Shard{
		Name: name, Ordinal: ordinal, Host: "127.0.0.1", Dir: shardDir,
	}})
	st.Spec.Shards = len(st.Shards)
	// Recorded before anything starts: whatever happens next, Down and a
	// later AddShard know about the shard.
	if err := st.write(dir); err != nil {
		return 0, err
	}
	spec.logf("adding %s (ordinal %d) to the cluster in %s", name, ordinal, dir)
	return len(st.Shards) - 1, nil
}

// dropPending stops and removes the unfinished add st.Shards[i] and saves
// the state without it.
func dropPending(ctx context.Context, dir string, st *state, i int, spec Spec) error {
	s := st.Shards[i]
	spec.logf("%s: removing its unfinished add", s.Name)
	b := &localBackend{bins: st.Binaries}
	var errs []error
	if err := b.poolerProc(s.Shard).stop(ctx, syscall.SIGINT, pgbouncerStopGrace, false); err != nil {
		errs = append(errs, err)
	}
	if err := b.pgProc(s.Shard).stop(ctx, syscall.SIGINT, postgresStopGrace, true); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, stopStrays(ctx, s.Dir, st.Binaries)...)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("add shard: stop the unfinished add of %s: %w", s.Name, err)
	}
	if err := os.RemoveAll(s.Dir); err != nil {
		return fmt.Errorf("add shard: remove the unfinished add of %s: %w", s.Name, err)
	}
	st.Shards = slices.Delete(st.Shards, i, i+1)
	st.Spec.Shards = len(st.Shards)
	return st.write(dir)
}
