package migrations_test

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/pgshard/pgshard/migrations"
)

func TestAllMigrationsLoad(t *testing.T) {
	ms := migrations.All()
	if len(ms) < 4 {
		t.Fatalf("want at least 4 migrations, got %d", len(ms))
	}
	for i, m := range ms {
		if m.Version != i+1 {
			t.Errorf("migration %d has version %d", i, m.Version)
		}
		if len(m.Checksum) != 64 || strings.TrimSpace(m.SQL) == "" {
			t.Errorf("%s: checksum %q, %d bytes of SQL", m.ID(), m.Checksum, len(m.SQL))
		}
	}
	if got := ms[0].ID(); got != "0001_store_tables" {
		t.Errorf("first migration is %s", got)
	}
}

// Released migrations must never change: their checksums are pinned here.
// Adding a migration appends a line; editing one fails this test (and
// `pgshard migrate` on every database that applied it).
func TestReleasedMigrationsUnchanged(t *testing.T) {
	pinned := map[string]string{
		"0001_store_tables":                   "7c58181dbf2e5b21df2fbe7d9e2049aee047f697039f7189334fb20af47a8a54",
		"0002_commit_cas":                     "e92b3536bdedcc2f03bbef32fd5c3de176dbb083366f41618ed042835df91414",
		"0003_shard_identity":                 "19ad86056a10d4f1b31ec71e449d3c66686b2eb70a8caa1efa0b204ee167aa27",
		"0004_bucket_functions":               "7b87a4b62f1e193ec6f25c56d62755fa2af2a5d3f6dda95dfc7b408d837eaaee",
		"0005_commit_in_one_round_trip":       "ffd8b8dfbe9eb0390dc2080f07f99ca6d8527bbc48eaf2310a47e2464aa98708",
		"0006_emit_targets_as_given":          "a257872b0b89ba20dad0159df79bc1c05e868aac22c92b97392d0e9acdaacd3c",
		"0007_commit_functions_own_their_cas": "b403807d090869ea959475c12248f5b364dd9cf7f77ca68f66c5898663ac56b2",
		"0008_fence":                          "1575732ba04f9d7ffc8e057e04f91031b1efef9e300c48cf32c9ec62f318686e",
		"0009_mover":                          "363850787af48745f1ee5a1bc37c2a08f990440862d57a9fa3a91a19ee68d2cb",
		"0010_capture_rows":                   "380a9e8f5337f69e1ecef7ce78e395efaedeb06c61c8dbf91f8780af08164fc7",
		"0011_fence_messages":                 "e9e91055ec81ecfb150dce3425bea04008e4d5f374c3b21f38f46bf8f43f7584",
		"0012_fence_assert_fast_path":         "dc652b98995965bd86c02936cc6b6391ed01f4e8bd092de09e40cdb43f9e3a5d",
		"0013_fence_assert_procedure":         "0a0ab3c7f0ef7c3119c52aca8dfb3242e9adec6bc99bd9b8a0bb965d42cf5c7b",
		"0014_fence_read_only":                "e011c50f2e561feda4467ccfe09bb4f3171843ebe5926ed52fd1e9912ef4b747",
		"0015_fence_served_by":                "7810e56218d82ded5281083ce41e3d3256561b2f218014e1db9e32921f26896a",
	}
	seen := 0
	for _, m := range migrations.All() {
		want, ok := pinned[m.ID()]
		if !ok {
			continue
		}
		seen++
		if m.Checksum != want {
			t.Errorf("released migration %s changed (checksum %s, pinned %s): add a new migration instead", m.ID(), m.Checksum, want)
		}
	}
	if seen != len(pinned) {
		t.Errorf("found %d of %d pinned migrations", seen, len(pinned))
	}
}

func TestLoadRejectsBadSets(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files fstest.MapFS
		want  string
	}{
		{"bad name", fstest.MapFS{"sql/one.sql": {Data: []byte("SELECT 1")}}, "NNNN_description.sql"},
		{"gap", fstest.MapFS{"sql/0001_a.sql": {Data: []byte("SELECT 1")}, "sql/0003_c.sql": {Data: []byte("SELECT 1")}}, "without gaps"},
		{"duplicate", fstest.MapFS{"sql/0001_a.sql": {Data: []byte("SELECT 1")}, "sql/001_b.sql": {Data: []byte("SELECT 1")}}, "share version 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := migrations.Load(tc.files)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestErrorMessages(t *testing.T) {
	u := &migrations.UnknownMigrationsError{Entries: []string{"0007_future", "0008_later"}}
	if got := u.Error(); !strings.Contains(got, "0007_future, 0008_later") || strings.Contains(got, "\n") {
		t.Errorf("unknown: %q", got)
	}
	c := &migrations.ChecksumMismatchError{Migration: "0002_x", Ledger: strings.Repeat("a", 64), Build: strings.Repeat("b", 64)}
	if got := c.Error(); !strings.Contains(got, "0002_x") || !strings.Contains(got, "never be edited") {
		t.Errorf("checksum: %q", got)
	}
	var target *migrations.UnknownMigrationsError
	if !errors.As(error(u), &target) {
		t.Error("errors.As")
	}
}
