package sqlver_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/pgshard/pgshard/internal/sqlver"
)

func files(names ...string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for _, n := range names {
		fsys["sql/"+n] = &fstest.MapFile{Data: []byte("SELECT '" + n + "';\n")}
	}
	return fsys
}

func TestLoad(t *testing.T) {
	got, err := sqlver.Load(files("0002_b.sql", "0001_a.sql", "README.md"), "sql/*.sql", "migration")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID() != "0001_a" || got[1].ID() != "0002_b" {
		t.Fatalf("loaded %+v", got)
	}
	sum := sha256.Sum256([]byte("SELECT '0001_a.sql';\n"))
	if got[0].Checksum != hex.EncodeToString(sum[:]) || got[0].SQL != "SELECT '0001_a.sql';\n" {
		t.Fatalf("0001_a: checksum %q of %q", got[0].Checksum, got[0].SQL)
	}
	if got[0].Checksum == got[1].Checksum {
		t.Fatal("two different files share a checksum")
	}
}

func TestLoadRefuses(t *testing.T) {
	for _, tt := range []struct {
		name  string
		fsys  fstest.MapFS
		wants string
	}{
		{"bad name", files("1_a.sql", "x_b.sql"), "name must be NNNN_description.sql"},
		{"no description", files("0001_.sql"), "name must be NNNN_description.sql"},
		{"zero", files("0000_a.sql"), "name must be NNNN_description.sql"},
		{"duplicate", files("0001_a.sql", "0001_b.sql"), "share version 1"},
		{"gap", files("0001_a.sql", "0003_c.sql"), "0003_c: versions must be 1, 2, 3, ... without gaps"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := sqlver.Load(tt.fsys, "sql/*.sql", "migration")
			if err == nil || !strings.Contains(err.Error(), tt.wants) || !strings.HasPrefix(err.Error(), "migration") {
				t.Fatalf("err = %v, want one naming the kind and %q", err, tt.wants)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	fs, err := sqlver.Load(files("0001_a.sql", "0002_b.sql", "0003_c.sql"), "sql/*.sql", "migration")
	if err != nil {
		t.Fatal(err)
	}
	rec := func(f sqlver.File) sqlver.Recorded { return sqlver.Recorded{Name: f.Name, Checksum: f.Checksum} }

	if unknown, edited := sqlver.Check(map[int]sqlver.Recorded{1: rec(fs[0]), 2: rec(fs[1])}, fs); unknown != nil || edited != nil {
		t.Fatalf("a ledger behind the build: unknown %v, edited %+v", unknown, edited)
	}
	ledger := map[int]sqlver.Recorded{
		1: rec(fs[0]),
		2: {Name: "b", Checksum: strings.Repeat("0", 64)},
		3: {Name: "c", Checksum: strings.Repeat("1", 64)},
		5: {Name: "e", Checksum: "x"},
		4: {Name: "d", Checksum: "x"},
	}
	unknown, edited := sqlver.Check(ledger, fs)
	if strings.Join(unknown, ",") != "0004_d,0005_e" {
		t.Errorf("unknown = %v, want 0004_d,0005_e in order", unknown)
	}
	if edited == nil || edited.File.ID() != "0002_b" || edited.Ledger != strings.Repeat("0", 64) {
		t.Errorf("edited = %+v, want the lowest edited version, 0002_b", edited)
	}
	// A ledger row under a known number but another name is not ours.
	unknown, edited = sqlver.Check(map[int]sqlver.Recorded{1: {Name: "other", Checksum: fs[0].Checksum}}, fs)
	if strings.Join(unknown, ",") != "0001_other" || edited != nil {
		t.Errorf("renamed entry: unknown %v, edited %+v", unknown, edited)
	}
}
