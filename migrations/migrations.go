package migrations

import (
	"embed"
	"io/fs"

	"github.com/pgshard/pgshard/internal/sqlver"
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
func (m Migration) ID() string { return sqlver.ID(m.Version, m.Name) }

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
	files, err := sqlver.Load(fsys, "sql/*.sql", "migration")
	if err != nil {
		return nil, err
	}
	out := make([]Migration, len(files))
	for i, f := range files {
		out[i] = Migration{Version: f.Number, Name: f.Name, SQL: f.SQL, Checksum: f.Checksum}
	}
	return out, nil
}
