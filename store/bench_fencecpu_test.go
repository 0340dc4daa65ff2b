package store_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/store"
)

// BenchmarkFenceBackendCPU measures what the fence costs the shard's
// backend itself, the one cost the fence adds that no other process
// shares: the CPU time of one backend (/proc/PID/schedstat, the time it
// ran on a CPU, which waiting for a core on a loaded machine does not
// inflate as it does latency), per operation, on one real shard, fence on
// (set from the map), each operation its own implicit transaction sent
// in the simple protocol:
//
//	select         the keyed point SELECT, unfenced
//	assert+select  the same after the proxy's assert, in one query string
//	               (what the proxy sends: internal/engine/fence.go)
//	cas            pgshard_cas losing its CAS (the UPDATE's probe, no
//	               write), without its assert (0007's body, a copy)
//	cas+assert     pgshard_cas as installed: its assert first
//	call+select    the proxy's assert as a CALL (migration 0013), then the SELECT
//	select+check   the SELECT with pgshard_fence_check in its WHERE (the
//	               store's form: a One-Time Filter, no second statement)
//	wrapped        the SELECT left as it is inside SELECT * FROM (…) q
//	               WHERE pgshard_fence_check(key): what a proxy could send
//	               for a keyed read instead of an assert
//
// The operations run in repetitions (which variant goes first rotates);
// each repetition prints its on/off ratios beside the machine's load
// average, so the noise is in sight. Asserts nothing:
//
//	go test -run '^$' -bench BenchmarkFenceBackendCPU -benchtime 6000x ./store/
func BenchmarkFenceBackendCPU(b *testing.B) {
	const reps, executions = 6, 64
	ctx := context.Background()
	d := freshDB(b, "direct")
	s, err := store.Open(ctx, d.dsn(), store.Options{MaxConns: 1, ConnectAttempts: 3})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ids := make([]string, executions)
	for i := range ids {
		e := &store.Execution{ID: newID(b), DefinitionID: "bench", Status: "running"}
		if err := s.Save(ctx, e); err != nil {
			b.Fatal(err)
		}
		ids[i] = e.ID
	}
	c, err := pgx.Connect(ctx, d.dsn())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	var def string
	if err := c.QueryRow(ctx, `SELECT pg_get_functiondef('pgshard_cas'::regproc)`).Scan(&def); err != nil {
		b.Fatal(err)
	}
	unfenced := strings.Replace(strings.Replace(def, "PERFORM pgshard_fence_assert(p_id);", "", 1),
		"FUNCTION public.pgshard_cas(", "FUNCTION public.pgshard_bench_cas_unfenced(", 1)
	if unfenced == def || !strings.Contains(unfenced, "pgshard_bench_cas_unfenced") {
		b.Fatal("pgshard_cas does not assert the fence as this benchmark expects")
	}
	if _, err := c.Exec(ctx, unfenced); err != nil {
		b.Fatal(err)
	}
	pid := c.PgConn().PID()
	if _, err := backendCPU(pid); err != nil {
		b.Skipf("the shard's backend is not readable here: %v", err)
	}
	variants := []struct{ name, sql string }{
		{"select", `SELECT data FROM executions WHERE id = '%[1]s'`},
		{"assert+select", "SELECT pgshard_fence_assert('%[1]s');\nSELECT data FROM executions WHERE id = '%[1]s'"},
		{"cas", `SELECT pgshard_bench_cas_unfenced('%[1]s', 'bench', 'x', 999999, NULL)`},
		{"cas+assert", `SELECT pgshard_cas('%[1]s', 'bench', 'x', 999999, NULL)`},
		// the proxy's form since migration 0013: CALL of the procedure
		{"call+select", "CALL pgshard_fence_enter('%[1]s');\nSELECT data FROM executions WHERE id = '%[1]s'"},
		// the check inside the read itself, as the store's reads do it
		// (a One-Time Filter): no second statement
		{"select+check", `SELECT data FROM executions WHERE id = '%[1]s' AND pgshard_fence_check('%[1]s')`},
		// the same around a client's statement left as it is: the form a
		// proxy could send in place of an assert for a keyed read
		{"wrapped", `SELECT * FROM (SELECT data FROM executions WHERE id = '%[1]s') q WHERE pgshard_fence_check('%[1]s')`},
	}
	spent := make([][]int64, reps) // [rep][variant] ns
	loads := make([]string, reps)
	b.ResetTimer()
	for r := range reps {
		spent[r] = make([]int64, len(variants))
		loads[r] = fenceLoadAvg()
		n := (r+1)*b.N/reps - r*b.N/reps
		for k := range variants {
			j := (k + r) % len(variants)
			before, err := backendCPU(pid)
			if err != nil {
				b.Fatal(err)
			}
			for i := range n {
				q := fmt.Sprintf(variants[j].sql, ids[i%executions])
				if _, err := c.PgConn().Exec(ctx, q).ReadAll(); err != nil {
					b.Fatalf("%s: %v", variants[j].name, err)
				}
			}
			after, err := backendCPU(pid)
			if err != nil {
				b.Fatal(err)
			}
			spent[r][j] += after - before
		}
	}
	b.StopTimer()
	perOp := func(ns int64) float64 { return float64(ns) / 1e3 / float64(b.N) }
	tot := make([]int64, len(variants))
	var selRat, casRat, repLoads []string
	for r := range reps {
		if (r+1)*b.N/reps == r*b.N/reps {
			continue // no operation in this repetition (b.N < reps)
		}
		selRat = append(selRat, fmt.Sprintf("%.2f", float64(spent[r][1])/float64(spent[r][0])))
		casRat = append(casRat, fmt.Sprintf("%.2f", float64(spent[r][3])/float64(spent[r][2])))
		repLoads = append(repLoads, loads[r])
		for j := range variants {
			tot[j] += spent[r][j]
		}
	}
	for j, v := range variants {
		b.ReportMetric(perOp(tot[j]), v.name+"-backend-cpu-µs/op")
	}
	b.ReportMetric(float64(tot[1])/float64(tot[0]), "select-on/off")
	b.ReportMetric(float64(tot[3])/float64(tot[2]), "cas-on/off")
	b.ReportMetric(float64(tot[4])/float64(tot[0]), "select-call-on/off")
	b.ReportMetric(float64(tot[5])/float64(tot[0]), "select-check-on/off")
	b.ReportMetric(float64(tot[6])/float64(tot[0]), "wrapped-on/off")
	b.Logf("fence, backend CPU µs per operation (one shard, %d ops each): select %.1f, assert+select %.1f (×%.3f, the assert %.1f); cas %.1f, cas+assert %.1f (×%.3f, the assert %.1f)",
		b.N, perOp(tot[0]), perOp(tot[1]), float64(tot[1])/float64(tot[0]), perOp(tot[1]-tot[0]),
		perOp(tot[2]), perOp(tot[3]), float64(tot[3])/float64(tot[2]), perOp(tot[3]-tot[2]))
	b.Logf("by repetition: assert+select/select %s; cas+assert/cas %s; load average (1, 5, 15 min) at each: %s",
		strings.Join(selRat, " "), strings.Join(casRat, " "), strings.Join(repLoads, " | "))
}

// backendCPU is the time process pid has run on a CPU, in ns
// (/proc/PID/schedstat's first field).
func backendCPU(pid uint32) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return 0, fmt.Errorf("/proc/%d/schedstat is empty", pid)
	}
	return strconv.ParseInt(f[0], 10, 64)
}

// fenceLoadAvg is the machine's load average over 1, 5 and 15 minutes
// (/proc/loadavg), "?" when unreadable.
func fenceLoadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(raw)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}
