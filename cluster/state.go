package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// StateFile is the name of the state file in a cluster directory.
const StateFile = "cluster.json"

// stateVersion is bumped when the state file's format changes incompatibly.
const stateVersion = 1

// ErrNoCluster is wrapped by Load when a directory holds no cluster.
var ErrNoCluster = errors.New("no cluster")

// state is the content of DIR/cluster.json: everything another process
// needs to find, restart or stop the cluster.
type state struct {
	Version  int          `json:"version"`
	Provider string       `json:"provider"`
	Spec     Spec         `json:"spec"`
	Binaries Binaries     `json:"binaries"`
	RunAs    string       `json:"run_as"`
	Shards   []shardState `json:"shards"`
	// Catalog is the catalog server (Spec.CatalogServer), nil without.
	Catalog *shardState `json:"catalog,omitempty"`
	Updated time.Time   `json:"updated"`
}

// shardState is one shard's entry in the state file.
type shardState struct {
	Shard
	// Initialized is set once the data directory is completely in place.
	Initialized bool `json:"initialized"`
	// Adding marks a shard AddShard recorded and has not finished adding.
	Adding bool `json:"adding,omitempty"`
}

func statePath(dir string) string { return filepath.Join(dir, StateFile) }

// readState reads DIR/cluster.json; the error wraps fs.ErrNotExist if there
// is none.
func readState(dir string) (*state, error) {
	b, err := os.ReadFile(statePath(dir))
	if err != nil {
		return nil, err
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("read %s: %w", statePath(dir), err)
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("%s has format version %d, this build reads %d; run `pgshard dev down --purge --dir %s`",
			statePath(dir), st.Version, stateVersion, dir)
	}
	if len(st.Shards) != st.Spec.Shards {
		return nil, fmt.Errorf("%s is corrupt: %d shard entries for %d shards", statePath(dir), len(st.Shards), st.Spec.Shards)
	}
	if (st.Catalog != nil) != st.Spec.CatalogServer {
		return nil, fmt.Errorf("%s is corrupt: its spec's catalog_server is %t but it has %s catalog entry", statePath(dir), st.Spec.CatalogServer, map[bool]string{true: "a", false: "no"}[st.Catalog != nil])
	}
	return &st, nil
}

// write replaces DIR/cluster.json atomically.
func (st *state) write(dir string) error {
	st.Version = stateVersion
	st.Updated = time.Now().UTC().Truncate(time.Millisecond)
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".cluster.json.*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(append(b, '\n'))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), statePath(dir))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", statePath(dir), err)
	}
	return nil
}

// dirLock is an exclusive flock on DIR/.lock. It serializes Up, Down and the
// fault hooks of one cluster directory across goroutines and processes.
type dirLock struct{ f *os.File }

// lockDir takes the lock, polling until ctx is done.
func lockDir(ctx context.Context, dir string) (*dirLock, error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return &dirLock{f}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", dir, err)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("lock %s (another pgshard process is working on it): %w", dir, ctx.Err())
		}
	}
}

func (l *dirLock) unlock() {
	if l != nil && l.f != nil {
		_ = l.f.Close() // closing releases the flock
		l.f = nil
	}
}

func notExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
