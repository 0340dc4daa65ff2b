package migrations

import (
	"context"
	"io/fs"

	"github.com/pgshard/pgshard/shardmap"
)

// ApplyMigrations is Apply with an explicit migration set, for tests that
// simulate other builds.
func ApplyMigrations(ctx context.Context, m *shardmap.Map, opts Options, ms []Migration) (*Report, error) {
	return apply(ctx, m, opts, ms)
}

// Load reads migrations from a test file system.
func Load(fsys fs.FS) ([]Migration, error) { return load(fsys) }

// LockKey is the migrators' advisory lock key.
const LockKey = lockKey
