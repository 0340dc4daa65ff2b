// Command compat runs real client test suites through pgshard and prints a
// scoreboard: the own test suites of two Go drivers with protocol
// implementations of their own, pgx and lib/pq (fetched by version with
// `go`, never vendored), and PostgreSQL's regression suite (parallel_schedule, from
// Debian's source package, run by pg_regress with psql), each against
// Postgres directly, PgBouncer in session and transaction pooling, and
// pgshard in session and transaction pooling (one shard; the drivers also
// on two shards, their tables unsharded on the default shard). Every run is bounded
// in time. The scoreboard (passed / failed / skipped / not reached per
// target) is written as text and JSON, with every difference from direct
// Postgres and its reason; with -thresholds it exits 1 when a count is
// below its floor.
//
//	compat ─▶ cluster.Up (2 shards, PgBouncer txn each) + PgBouncer session (shard0)
//	       ─▶ pgshard proxy × 3 (session/1, transaction/1, transaction/2)
//	       ─▶ pgx and lib/pq suites (gosuite.go), pg_regress (regress.go) per target
//	       ─▶ score.go: scoreboard.txt, scoreboard.json, thresholds
//
// Usage (scripts/compat.sh prepares the regression sources and regress.so):
//
//	go run ./internal/tools/compat -pgshard bin/pgshard -out compat-out \
//	    -regress-src DIR/src/test/regress -regress-lib DIR -thresholds scripts/compat-thresholds.txt
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	var o options
	flag.StringVar(&o.pgshard, "pgshard", "bin/pgshard", "pgshard binary")
	flag.StringVar(&o.out, "out", "compat-out", "output directory (cluster, logs, results, scoreboard)")
	flag.StringVar(&o.regressSrc, "regress-src", "", "PostgreSQL's src/test/regress directory (sql/, expected/, parallel_schedule); empty skips the regression suite")
	flag.StringVar(&o.regressLib, "regress-lib", "", "directory holding regress.so, autoinc.so and refint.so (pg_regress --dlpath)")
	flag.StringVar(&o.pgRegress, "pg-regress", "/usr/lib/postgresql/15/lib/pgxs/src/test/regress/pg_regress", "pg_regress executable")
	flag.StringVar(&o.pgxVersion, "pgx-version", "v5.12.0", "pgx version whose test suite runs")
	flag.StringVar(&o.libpqVersion, "libpq-version", "v1.12.3", "lib/pq version whose test suite runs")
	flag.StringVar(&o.suites, "suites", "pgx,libpq,regress", "suites to run")
	flag.StringVar(&o.targets, "targets", "", "comma-separated targets to run (default: all)")
	flag.DurationVar(&o.pgxTimeout, "pgx-timeout", 10*time.Minute, "bound of one Go driver suite's run (pgx, lib/pq)")
	flag.DurationVar(&o.pgxPackageTimeout, "pgx-package-timeout", 4*time.Minute, "bound of one Go driver package's tests (go test -timeout)")
	flag.DurationVar(&o.regressTimeout, "regress-timeout", 6*time.Minute, "bound of one regression suite run")
	flag.DurationVar(&o.timeout, "timeout", 75*time.Minute, "bound of the whole run")
	flag.StringVar(&o.thresholds, "thresholds", "", "file of floors: lines `SUITE TARGET passed>=N` (exit 1 when one is not met)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	code, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "compat:", err)
		os.Exit(2)
	}
	os.Exit(code)
}

type options struct {
	pgshard, out, regressSrc, regressLib, pgRegress, pgxVersion, libpqVersion, suites, targets, thresholds string
	pgxTimeout, pgxPackageTimeout, regressTimeout, timeout                                                 time.Duration
}

func (o options) wants(suite, target string) bool {
	if !strings.Contains(","+o.suites+",", ","+suite+",") {
		return false
	}
	return o.targets == "" || target == "" || strings.Contains(","+o.targets+",", ","+target+",")
}

func run(ctx context.Context, o options) (int, error) {
	out, err := filepath.Abs(o.out)
	if err != nil {
		return 0, err
	}
	o.out = out
	if o.pgshard, err = filepath.Abs(o.pgshard); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return 0, err
	}
	logf("output in %s", out)
	env, err := startEnv(ctx, o)
	if env != nil {
		defer env.stop()
	}
	if err != nil {
		return 0, err
	}
	var results []*result
	drivers := env.targets("pgx_test") // the drivers' suites share the pgx_test database
	for _, su := range []goSuite{pgxSuite(o.pgxVersion), libpqSuite(o.libpqVersion)} {
		if !o.wants(su.name, "") {
			continue
		}
		mod, err := prepareGoSuite(ctx, o, su, drivers[0])
		if err != nil {
			return 0, err
		}
		for _, t := range drivers {
			if !o.wants(su.name, t.name) {
				continue
			}
			r := runGoSuite(ctx, o, mod, t)
			logf("%s %s: %s", su.name, t.name, r.summary())
			results = append(results, r)
			if ctx.Err() != nil {
				break
			}
		}
	}
	if o.regressSrc != "" && strings.Contains(o.suites, "regress") {
		for _, t := range env.targets("regression") {
			if !o.wants("regress", t.name) || t.shards > 1 {
				continue
			}
			r := runRegress(ctx, o, env, t)
			logf("regress %s: %s", t.name, r.summary())
			results = append(results, r)
			if ctx.Err() != nil {
				break
			}
		}
	}
	sb := newScoreboard(results)
	if err := sb.write(out); err != nil {
		return 0, err
	}
	fmt.Print(sb.text())
	if o.thresholds != "" {
		failed, err := sb.check(o.thresholds)
		if err != nil {
			return 0, err
		}
		for _, f := range failed {
			fmt.Println("THRESHOLD NOT MET:", f)
		}
		if len(failed) > 0 {
			return 1, nil
		}
		fmt.Println("compat: every threshold met")
	}
	if ctx.Err() != nil {
		return 0, fmt.Errorf("the run was cut short: %w", ctx.Err())
	}
	return 0, nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "compat %s: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
