package migrations

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// Migration is one released schema change. Its SQL is never edited once
// released: the ledger records a checksum and Apply refuses a mismatch.
type Migration struct {
	Version  int    // from the file name: 0001_name.sql → 1
	Name     string // from the file name: 0001_name.sql → "name"
	SQL      string
	Checksum string // hex sha256 of SQL
}

// ID is "0001_name", the migration's file name without extension.
func (m Migration) ID() string { return fmt.Sprintf("%04d_%s", m.Version, m.Name) }

var all = mustLoad(sqlFiles)

// All returns the migrations of this build in version order.
func All() []Migration { return append([]Migration(nil), all...) }

func mustLoad(fsys fs.FS) []Migration {
	ms, err := load(fsys)
	if err != nil {
		panic(err)
	}
	return ms
}

func load(fsys fs.FS) ([]Migration, error) {
	names, err := fs.Glob(fsys, "sql/*.sql")
	if err != nil {
		return nil, err
	}
	var out []Migration
	seen := map[int]string{}
	for _, name := range names {
		base := strings.TrimSuffix(path.Base(name), ".sql")
		num, rest, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 || rest == "" {
			return nil, fmt.Errorf("migration file %s: name must be NNNN_description.sql", name)
		}
		if other, dup := seen[v]; dup {
			return nil, fmt.Errorf("migration files %s and %s share version %d", other, name, v)
		}
		seen[v] = name
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(body)
		out = append(out, Migration{Version: v, Name: rest, SQL: string(body), Checksum: hex.EncodeToString(sum[:])})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %s: versions must be 1, 2, 3, ... without gaps", m.ID())
		}
	}
	return out, nil
}
