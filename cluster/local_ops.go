package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// localBackend runs the fault hooks and Down of a local cluster. Every
// operation re-reads the state file under the directory lock, so clusters
// loaded by several processes (a test and `pgshard chaos`, say) agree.
type localBackend struct {
	bins Binaries
	run  runAs
}

// op runs f on the current state under the directory lock, saves the state
// and copies the shards' (and the catalog server's) PIDs into c (only the
// PIDs: other fields never change after Up, so goroutines may read them
// without the lock).
func (b *localBackend) op(ctx context.Context, c *Cluster, f func(st *state) error) error {
	lock, err := lockDir(ctx, c.Dir)
	if err != nil {
		return err
	}
	defer lock.unlock()
	st, err := readState(c.Dir)
	if err != nil {
		return err
	}
	ferr := f(st)
	werr := st.write(c.Dir)
	c.mu.Lock()
	for i := range st.Shards {
		c.Shards[i].PID, c.Shards[i].PoolerPID = st.Shards[i].PID, st.Shards[i].PoolerPID
	}
	if c.Catalog != nil && st.Catalog != nil {
		c.Catalog.PID = st.Catalog.PID
	}
	c.mu.Unlock()
	return errors.Join(ferr, werr)
}

func postgresSignal(m StopMode) syscall.Signal {
	switch m {
	case Immediate:
		return syscall.SIGQUIT
	case Kill:
		return syscall.SIGKILL
	}
	return syscall.SIGINT
}

func poolerSignal(m StopMode) syscall.Signal {
	switch m {
	case Immediate:
		return syscall.SIGTERM
	case Kill:
		return syscall.SIGKILL
	}
	return syscall.SIGINT
}

func (b *localBackend) pgProc(s Shard) proc { return proc{s.PID, b.bins.Postgres, dataDir(s.Dir)} }
func (b *localBackend) poolerProc(s Shard) proc {
	return proc{s.PoolerPID, b.bins.PgBouncer, bouncerIni(s.Dir)}
}

// server returns shard i's entry of st, or the catalog server's for
// catalogIndex.
func (st *state) server(i int) (*shardState, error) {
	if i == catalogIndex {
		if st.Catalog == nil {
			return nil, errors.New("the cluster has no catalog server")
		}
		return st.Catalog, nil
	}
	return &st.Shards[i], nil
}

func (b *localBackend) stopShard(ctx context.Context, c *Cluster, i int, mode StopMode) error {
	return b.op(ctx, c, func(st *state) error {
		s, err := st.server(i)
		if err != nil {
			return err
		}
		c.Spec.logf("%s: stopping postgres (%s)", s.Name, mode)
		if err := b.pgProc(s.Shard).stop(ctx, postgresSignal(mode), postgresStopGrace, true); err != nil {
			return fmt.Errorf("stop %s: %w", s.Name, err)
		}
		s.PID = 0
		return nil
	})
}

func (b *localBackend) startShard(ctx context.Context, c *Cluster, i int) error {
	return b.op(ctx, c, func(st *state) error {
		s, err := st.server(i)
		if err != nil {
			return err
		}
		if p := b.pgProc(s.Shard); p.running() {
			return waitPostgres(ctx, p, s.Shard, c.Spec.StartTimeout, -1)
		}
		pid, err := startPostgres(ctx, b.bins, b.run, c.Spec, s.Dir, s.Port, func(pid int) error {
			s.PID = pid
			return st.write(c.Dir)
		})
		if err != nil {
			if pid != 0 { // do not leave a half-started server behind
				_ = proc{pid, b.bins.Postgres, dataDir(s.Dir)}.stop(context.WithoutCancel(ctx), syscall.SIGINT, postgresStopGrace, true)
				s.PID = 0
			}
			if errors.Is(err, errPortInUse) {
				return fmt.Errorf("start %s: its port %d is taken by another process: %w", s.Name, s.Port, err)
			}
			return fmt.Errorf("start %s: %w", s.Name, err)
		}
		return nil
	})
}

func (b *localBackend) stopPooler(ctx context.Context, c *Cluster, i int, mode StopMode) error {
	return b.op(ctx, c, func(st *state) error {
		s := &st.Shards[i]
		c.Spec.logf("%s: stopping pgbouncer (%s)", s.Name, mode)
		if err := b.poolerProc(s.Shard).stop(ctx, poolerSignal(mode), pgbouncerStopGrace, false); err != nil {
			return fmt.Errorf("stop %s pgbouncer: %w", s.Name, err)
		}
		s.PoolerPID = 0
		return nil
	})
}

func (b *localBackend) startPooler(ctx context.Context, c *Cluster, i int) error {
	return b.op(ctx, c, func(st *state) error {
		s := &st.Shards[i]
		pgUp := b.pgProc(s.Shard).running()
		if p := b.poolerProc(s.Shard); p.running() {
			return waitPooler(ctx, p, s.Shard, c.Spec, c.Spec.StartTimeout, -1, pgUp)
		}
		pid, err := startPooler(ctx, b.bins, b.run, c.Spec, s.Shard, s.PoolerPort, pgUp, func(pid int) error {
			s.PoolerPID = pid
			return st.write(c.Dir)
		})
		if err != nil {
			if pid != 0 {
				_ = proc{pid, b.bins.PgBouncer, bouncerIni(s.Dir)}.stop(context.WithoutCancel(ctx), syscall.SIGINT, pgbouncerStopGrace, false)
				s.PoolerPID = 0
			}
			if errors.Is(err, errPortInUse) {
				return fmt.Errorf("start %s pgbouncer: its port %d is taken by another process: %w", s.Name, s.PoolerPort, err)
			}
			return fmt.Errorf("start %s pgbouncer: %w", s.Name, err)
		}
		return nil
	})
}

func (b *localBackend) alive(c *Cluster, i int) (bool, bool) {
	s := c.server(i)
	return b.pgProc(s).running(), b.poolerProc(s).running()
}

func (b *localBackend) down(ctx context.Context, c *Cluster) error {
	return b.op(ctx, c, func(st *state) error { return stopAll(ctx, c.Dir, st) })
}

// stopAll stops every server recorded in st (each shard's PgBouncer, then its
// PostgreSQL; shards and the catalog server in parallel), then any stray
// server process whose command line names dir (one started by an Up that
// died before recording it), and marks everything stopped. When ctx is
// done, servers still shutting down are SIGKILLed instead of awaited.
func stopAll(ctx context.Context, dir string, st *state) error {
	b := &localBackend{bins: st.Binaries}
	var wg sync.WaitGroup
	errs := make([]error, len(st.Shards))
	for i := range st.Shards {
		wg.Go(func() {
			s := &st.Shards[i]
			if err := b.poolerProc(s.Shard).stop(ctx, syscall.SIGINT, pgbouncerStopGrace, false); err != nil {
				errs[i] = fmt.Errorf("stop %s pgbouncer: %w", s.Name, err)
				return
			}
			s.PoolerPID = 0
			if err := b.pgProc(s.Shard).stop(ctx, syscall.SIGINT, postgresStopGrace, true); err != nil {
				errs[i] = fmt.Errorf("stop %s: %w", s.Name, err)
				return
			}
			s.PID = 0
		})
	}
	var catErr error
	if s := st.Catalog; s != nil {
		wg.Go(func() {
			if catErr = b.pgProc(s.Shard).stop(ctx, syscall.SIGINT, postgresStopGrace, true); catErr != nil {
				catErr = fmt.Errorf("stop the catalog server: %w", catErr)
				return
			}
			s.PID = 0
		})
	}
	wg.Wait()
	errs = append(errs, catErr)
	errs = append(errs, stopStrays(ctx, dir, st.Binaries)...)
	return errors.Join(errs...)
}

// stopStrays stops every stray server under dir (see strays): SIGINT, then
// SIGKILL after its kind's grace; a postmaster's children are awaited too.
func stopStrays(ctx context.Context, dir string, b Binaries) []error {
	var errs []error
	for _, p := range strays(dir, b) {
		isPG := p.bin == b.Postgres
		grace := pgbouncerStopGrace
		if isPG {
			grace = postgresStopGrace
		}
		if err := p.stop(ctx, syscall.SIGINT, grace, isPG); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// strays lists running postmasters and PgBouncers whose command line points
// into dir.
func strays(dir string, b Binaries) []proc {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	prefix := filepath.Clean(dir) + string(filepath.Separator)
	var out []proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		args := cmdline(pid)
		if len(args) < 2 {
			continue
		}
		for _, bin := range []string{b.Postgres, b.PgBouncer} {
			if bin == "" || args[0] != bin {
				continue
			}
			for _, a := range args[1:] {
				if strings.HasPrefix(a, prefix) {
					if p := (proc{pid, bin, a}); p.running() {
						out = append(out, p)
					}
					break
				}
			}
		}
	}
	return out
}

// Load reads the cluster recorded in dir without starting or probing
// anything. The error wraps ErrNoCluster if dir holds none.
func Load(dir string) (*Cluster, error) {
	if dir == "" {
		return nil, errors.New("load cluster: no directory given")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	st, err := readState(dir)
	if notExist(err) {
		return nil, fmt.Errorf("%w in %s; run `pgshard dev up`", ErrNoCluster, dir)
	}
	if err != nil {
		return nil, err
	}
	if st.Provider != localName {
		return nil, fmt.Errorf("%s holds a %s cluster, which only the process that started it can manage", dir, st.Provider)
	}
	run, err := currentRunAs()
	if err != nil {
		return nil, err
	}
	return newLocalCluster(dir, st, st.Binaries, run), nil
}

// Down stops every server of the local cluster in dir, identified by the
// PIDs in its state file (each verified against /proc first, so a recycled
// PID is never signalled). With purge it then removes dir. A directory
// without a cluster, or with nothing running, is not an error.
func Down(ctx context.Context, dir string, purge bool) error {
	if dir == "" {
		return errors.New("cluster down: no directory given")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(dir); notExist(err) {
		return nil
	}
	lock, err := lockDir(ctx, dir)
	if err != nil {
		return err
	}
	defer lock.unlock()
	st, err := readState(dir)
	switch {
	case notExist(err):
		if purge {
			return purgeDir(dir, false)
		}
		return nil
	case err != nil:
		return err
	case st.Provider != localName:
		return fmt.Errorf("%s holds a %s cluster, which only the process that started it can stop", dir, st.Provider)
	}
	err = stopAll(ctx, dir, st)
	if werr := st.write(dir); err == nil {
		err = werr
	}
	if err != nil {
		return fmt.Errorf("cluster down %s: %w", dir, err)
	}
	if purge {
		return purgeDir(dir, true)
	}
	return nil
}

// purgeDir removes a cluster directory. Without a state file it only removes
// a directory holding nothing but our lock file, so that a mistyped --dir
// never deletes someone's files.
func purgeDir(dir string, hasState bool) error {
	if !hasState {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if e.Name() != ".lock" && !strings.HasPrefix(e.Name(), ".cluster.json") {
				return fmt.Errorf("refusing to remove %s: it holds no %s but other files (%s)", dir, StateFile, e.Name())
			}
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}
