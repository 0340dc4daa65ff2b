package catalog

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/shardmap"
)

func evenMap(t *testing.T, epoch uint64, buckets int, names ...string) *shardmap.Map {
	t.Helper()
	var shards []shardmap.Shard
	for i, n := range names {
		shards = append(shards, shardmap.Shard{Name: n, Ordinal: i, DSN: "postgres://h/" + n})
	}
	m, err := shardmap.Even(buckets, shards)
	if err != nil {
		t.Fatal(err)
	}
	m.Epoch = epoch
	return m
}

func TestPrepareRefusesBadMapsBeforeSending(t *testing.T) {
	good := evenMap(t, 3, 64, "a", "b")
	if _, err := prepare(good, 2); err != nil {
		t.Fatalf("a valid map with a growing epoch: %v", err)
	}
	if _, err := prepare(nil, 0); err == nil {
		t.Error("a nil map was accepted")
	}

	var ee *EpochError
	if _, err := prepare(good, 3); !errors.As(err, &ee) || ee.Current != 3 || ee.Pushed != 3 || !errors.Is(err, ErrEpochNotGrowing) {
		t.Errorf("same epoch: want an EpochError{3, 3}, got %v", err)
	} else if !strings.Contains(err.Error(), "epoch 3") {
		t.Errorf("the error must name the epochs: %v", err)
	}
	if _, err := prepare(good, 7); !errors.As(err, &ee) || ee.Current != 7 || ee.Pushed != 3 {
		t.Errorf("smaller epoch: want an EpochError{7, 3}, got %v", err)
	}

	bad := good.Clone()
	bad.Ranges = bad.Ranges[:1] // a gap
	var ve *shardmap.ValidationError
	if _, err := prepare(bad, 0); !errors.As(err, &ve) {
		t.Errorf("a map with a gap: want shardmap's ValidationError, got %v", err)
	}
	huge := good.Clone()
	huge.Epoch = 1 << 63
	if _, err := prepare(huge, 0); err == nil || !strings.Contains(err.Error(), "BIGINT") {
		t.Errorf("an epoch beyond BIGINT: got %v", err)
	}

	// prepare validates a copy: the caller's map is not touched.
	shuffled := evenMap(t, 2, 64, "a", "b")
	shuffled.Ranges[0], shuffled.Ranges[1] = shuffled.Ranges[1], shuffled.Ranges[0]
	before := shuffled.Ranges[0]
	if _, err := prepare(shuffled, 1); err != nil {
		t.Fatal(err)
	}
	if shuffled.Ranges[0] != before {
		t.Error("prepare reordered the caller's ranges")
	}
}

func TestLoadVersions(t *testing.T) {
	vs, err := loadVersions(sqlFiles)
	if err != nil || len(vs) == 0 || vs[0].ID() != "0001_catalog" {
		t.Fatalf("the embedded versions: %v, %v", vs, err)
	}
	for name, fsys := range map[string]fstest.MapFS{
		"gap":      {"sql/0001_a.sql": {}, "sql/0003_c.sql": {}},
		"dup":      {"sql/0001_a.sql": {}, "sql/0001_b.sql": {}},
		"bad name": {"sql/one_a.sql": {}},
		"no name":  {"sql/0001.sql": {}},
	} {
		if _, err := loadVersions(fsys); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestCheckLedger(t *testing.T) {
	v1 := Version{Number: 1, Name: "catalog", Checksum: "aaaa"}
	if err := checkLedger(map[int][2]string{1: {"catalog", "aaaa"}}, []Version{v1}); err != nil {
		t.Errorf("matching ledger: %v", err)
	}
	if err := checkLedger(map[int][2]string{}, []Version{v1}); err != nil {
		t.Errorf("empty ledger: %v", err)
	}
	var ue *UnknownVersionsError
	if err := checkLedger(map[int][2]string{1: {"catalog", "aaaa"}, 2: {"later", "bbbb"}}, []Version{v1}); !errors.As(err, &ue) || ue.Entries[0] != "0002_later" {
		t.Errorf("unknown version: got %v", err)
	}
	var ce *ChecksumMismatchError
	if err := checkLedger(map[int][2]string{1: {"catalog", "ffff"}}, []Version{v1}); !errors.As(err, &ce) {
		t.Errorf("edited version: got %v", err)
	}
}

func TestNotInstalledOnlyForTheCatalogsSchema(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "42P01", Message: `relation "pgshard_catalog.head" does not exist`}, true},
		{&pgconn.PgError{Code: "3F000", Message: `schema "pgshard_catalog" does not exist`}, true},
		{&pgconn.PgError{Code: "42P01", Message: `relation "other" does not exist`}, false},
		{&pgconn.PgError{Code: "42501", Message: `permission denied for schema pgshard_catalog`}, false},
		{errors.New("pgshard_catalog"), false},
	} {
		if got := notInstalled(tc.err); got != tc.want {
			t.Errorf("notInstalled(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
