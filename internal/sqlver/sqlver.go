package sqlver

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
)

// File is one released version: the file 0001_name.sql.
type File struct {
	Number   int    // 0001_name.sql → 1
	Name     string // 0001_name.sql → "name"
	SQL      string
	Checksum string // hex SHA-256 of SQL
}

// ID is "0001_name", the file's name without extension.
func (f File) ID() string { return ID(f.Number, f.Name) }

// ID formats a version as its file is named: ID(1, "name") = "0001_name".
func ID(number int, name string) string { return fmt.Sprintf("%04d_%s", number, name) }

// Load reads the files matching pattern in fsys (e.g. "sql/*.sql") and
// returns them in version order. kind names them in errors ("migration",
// "catalog schema file"). It refuses a name not shaped NNNN_name.sql, two
// files of one number and a gap in the numbering.
func Load(fsys fs.FS, pattern, kind string) ([]File, error) {
	names, err := fs.Glob(fsys, pattern)
	if err != nil {
		return nil, err
	}
	var out []File
	seen := map[int]string{}
	for _, name := range names {
		base := strings.TrimSuffix(path.Base(name), ".sql")
		num, rest, ok := strings.Cut(base, "_")
		n, err := strconv.Atoi(num)
		if !ok || err != nil || n <= 0 || rest == "" {
			return nil, fmt.Errorf("%s %s: name must be NNNN_description.sql", kind, name)
		}
		if other, dup := seen[n]; dup {
			return nil, fmt.Errorf("%s files %s and %s share version %d", kind, other, name, n)
		}
		seen[n] = name
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(body)
		out = append(out, File{Number: n, Name: rest, SQL: string(body), Checksum: hex.EncodeToString(sum[:])})
	}
	slices.SortFunc(out, func(a, b File) int { return a.Number - b.Number })
	for i, f := range out {
		if f.Number != i+1 {
			return nil, fmt.Errorf("%s %s: versions must be 1, 2, 3, ... without gaps", kind, f.ID())
		}
	}
	return out, nil
}

// Recorded is one ledger row: what a database says it applied.
type Recorded struct {
	Name, Checksum string
}

// Edited is a released file whose checksum differs from the ledger's.
type Edited struct {
	File   File
	Ledger string // the checksum the ledger recorded
}

// Check compares a ledger (version → row) with the files of this build. It
// returns the ledger's entries this build does not know (a newer build
// applied them; as "0007_name", in version order) and the lowest-numbered
// known file whose checksum the ledger disagrees with, or nil.
func Check(ledger map[int]Recorded, files []File) (unknown []string, edited *Edited) {
	known := make(map[int]File, len(files))
	for _, f := range files {
		known[f.Number] = f
	}
	for _, n := range slices.Sorted(maps.Keys(ledger)) {
		row := ledger[n]
		f, ok := known[n]
		if !ok || f.Name != row.Name {
			unknown = append(unknown, ID(n, row.Name))
			continue
		}
		if edited == nil && f.Checksum != row.Checksum {
			edited = &Edited{File: f, Ledger: row.Checksum}
		}
	}
	return unknown, edited
}
