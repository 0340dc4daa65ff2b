package migrations_test

import (
	"strings"
	"testing"

	"github.com/pgshard/pgshard/migrations"
)

// TestCaptureRowsRefusesAnOldCapture: migration 0010 (row-level change
// capture) refuses to run while a capture of migration 0009 runs on the
// shard — its records and triggers would be lost — naming the move and
// saying what to do; once that capture ended it replaces 0009's capture
// (its trigger function and change table gone, the row log in place).
func TestCaptureRowsRefusesAnOldCapture(t *testing.T) {
	_, m := freshMap(t)
	ctx := ctxT(t)
	conn := connect(t, m.Shards[0].DSN)
	all := migrations.All()
	var upTo9 []migrations.Migration
	for _, mig := range all {
		if mig.Version <= 9 {
			upTo9 = append(upTo9, mig)
		}
	}
	if _, _, err := migrations.Migrate(ctx, conn, upTo9); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT pgshard_move_capture_begin(7, 0, 3)`); err != nil {
		t.Fatal(err)
	}
	_, _, err := migrations.Migrate(ctx, conn, all)
	if err == nil || !strings.Contains(err.Error(), "0009") || !strings.Contains(err.Error(), "moves 7") {
		t.Fatalf("migrate with a 0009 capture running: want a refusal naming move 7, got %v", err)
	}
	if _, err := conn.Exec(ctx, `SELECT pgshard_move_capture_end(7)`); err != nil {
		t.Fatal(err)
	}
	applied, _, err := migrations.Migrate(ctx, conn, all)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) == 0 || applied[0] != "0010_capture_rows" {
		t.Errorf("applied %v, want 0010_capture_rows first (the one the capture held back)", applied)
	}
	var changes, rowLog, oldTrigger bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('pgshard_move_changes') IS NOT NULL, to_regclass('pgshard_move_rows') IS NOT NULL,
		to_regprocedure('pgshard_move_capture_row()') IS NOT NULL`).Scan(&changes, &rowLog, &oldTrigger); err != nil {
		t.Fatal(err)
	}
	if changes || !rowLog || oldTrigger {
		t.Errorf("after 0010: pgshard_move_changes %v, pgshard_move_rows %v, pgshard_move_capture_row() %v; want false, true, false", changes, rowLog, oldTrigger)
	}
}
