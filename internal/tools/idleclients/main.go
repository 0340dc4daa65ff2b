// Command idleclients measures what an idle client connection costs a
// server process (pgshard's proxy, PgBouncer, Postgres…): it opens client
// connections to a DSN in steps, each completing startup and
// authentication (and, with -query, running one query: an application's
// pooled connection that has been used) and then sending nothing, and
// after each step reads the server process's resident memory (VmRSS of
// /proc/PID/status, once it has settled) and prints the memory per
// client since the start: what a
// fleet of connected-but-idle application clients costs the middle layer
// a pooler is for. Every connection is held until the last step has been
// measured, so the last step holds them all at once; a connection that
// fails is counted and its first error printed (holding N clients
// without errors is part of the result). Exits 1 when any connection
// failed. Bounded: each connection attempt (and its query) by
// -connect-timeout, the whole run by -timeout.
//
//	idleclients -dsn URL -pid PID -steps 5000,10000 [-query SQL] [-label NAME] [-json FILE]
//
//	steps ─▶ connect (parallel, bounded) ─▶ settle ─▶ VmRSS(pid) ─▶ line
//	      ─▶ close all at the end
//
// The client's own file-descriptor limit is raised to its hard limit (Go
// does so at start on Linux); a step above it fails with "too many open
// files", reported as such.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/errgroup"
)

type options struct {
	dsn            string
	pid            int
	steps          []int
	label          string
	query          string
	jsonOut        string
	parallel       int
	settle         time.Duration
	connectTimeout time.Duration
	timeout        time.Duration
}

// stepResult is one measured step.
type stepResult struct {
	Clients int `json:"clients"` // connections held
	Failed  int `json:"failed"`  // attempts that failed (cumulative)
	// RSSKiB is the server's VmRSS with Clients held; BaseKiB before
	// the first connection.
	RSSKiB  int64   `json:"rss_kib"`
	BaseKiB int64   `json:"base_kib"`
	PerKiB  float64 `json:"kib_per_client"`
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "idleclients:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	res, err := run(ctx, o)
	if o.jsonOut != "" && len(res) > 0 {
		b, _ := json.MarshalIndent(map[string]any{"label": o.label, "steps": res}, "", "  ")
		if werr := os.WriteFile(o.jsonOut, append(b, '\n'), 0o644); werr != nil {
			fmt.Fprintln(os.Stderr, "idleclients:", werr)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "idleclients:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	var steps string
	fs := flag.NewFlagSet("idleclients", flag.ContinueOnError)
	fs.StringVar(&o.dsn, "dsn", "", "server to connect to (postgres:// URL)")
	fs.IntVar(&o.pid, "pid", 0, "PID of the server process whose memory is measured")
	fs.StringVar(&steps, "steps", "5000,10000", "comma-separated client counts, increasing: each step connects up to that many and measures")
	fs.StringVar(&o.label, "label", "server", "name printed on each line")
	fs.StringVar(&o.query, "query", "", "a query each client runs once after connecting, before it goes idle (\"\": none)")
	fs.StringVar(&o.jsonOut, "json", "", "also write the steps as JSON to this file")
	fs.IntVar(&o.parallel, "parallel", 32, "connections being opened at once")
	fs.DurationVar(&o.settle, "settle", 2*time.Second, "wait after a step before reading the server's memory")
	fs.DurationVar(&o.connectTimeout, "connect-timeout", 20*time.Second, "bound of one connection's startup")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "bound of the whole run")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.dsn == "" || o.pid <= 0 {
		return o, errors.New("-dsn and -pid are required")
	}
	prev := 0
	for _, f := range strings.Split(steps, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= prev {
			return o, fmt.Errorf("-steps %q: want increasing positive counts", steps)
		}
		o.steps, prev = append(o.steps, n), n
	}
	if o.parallel < 1 {
		return o, errors.New("-parallel must be at least 1")
	}
	return o, nil
}

// run connects the steps' clients, measuring after each, and closes
// them all at the end.
func run(ctx context.Context, o options) ([]stepResult, error) {
	cfg, err := pgconn.ParseConfig(o.dsn)
	if err != nil {
		return nil, fmt.Errorf("-dsn: %w", err)
	}
	cfg.ConnectTimeout = o.connectTimeout
	base, err := rssKiB(o.pid)
	if err != nil {
		return nil, err
	}
	var (
		mu       sync.Mutex
		conns    []*pgconn.PgConn
		failed   atomic.Int64
		firstErr atomic.Pointer[error]
	)
	defer func() {
		// Close in parallel: 10,000 sequential Terminates take a while.
		g := new(errgroup.Group)
		g.SetLimit(o.parallel)
		for _, c := range conns {
			g.Go(func() error {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				return c.Close(cctx)
			})
		}
		_ = g.Wait()
	}()
	var res []stepResult
	for _, target := range o.steps {
		g := new(errgroup.Group)
		g.SetLimit(o.parallel)
		for range target - len(conns) - int(failed.Load()) {
			g.Go(func() error {
				c, err := pgconn.ConnectConfig(ctx, cfg)
				if err == nil && o.query != "" {
					qctx, cancel := context.WithTimeout(ctx, o.connectTimeout)
					_, err = c.Exec(qctx, o.query).ReadAll()
					cancel()
					if err != nil {
						cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
						_ = c.Close(cctx)
						cancel()
					}
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, &err)
					return nil
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
				return nil
			})
		}
		_ = g.Wait()
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("step %d: %w", target, err)
		}
		select {
		case <-time.After(o.settle):
		case <-ctx.Done():
			return res, ctx.Err()
		}
		rss, err := rssKiB(o.pid)
		if err != nil {
			return res, err
		}
		r := stepResult{Clients: len(conns), Failed: int(failed.Load()), RSSKiB: rss, BaseKiB: base}
		if r.Clients > 0 {
			r.PerKiB = float64(rss-base) / float64(r.Clients)
		}
		res = append(res, r)
		fmt.Printf("%-10s %6d idle clients held, %d failed: VmRSS %7.1f MiB (%.1f MiB before): %5.2f KiB per client\n",
			o.label, r.Clients, r.Failed, float64(rss)/1024, float64(base)/1024, r.PerKiB)
	}
	if n := failed.Load(); n > 0 {
		e := *firstErr.Load()
		if errors.Is(e, syscall.EMFILE) {
			return res, fmt.Errorf("%d connections failed: this process ran out of file descriptors (raise `ulimit -n`): %w", n, e)
		}
		return res, fmt.Errorf("%d connections failed; the first: %w", n, e)
	}
	return res, nil
}

// rssKiB reads VmRSS (KiB) of process pid.
func rssKiB(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read the memory of process %d: %w", pid, err)
	}
	return parseRSS(string(b), pid)
}

// parseRSS finds VmRSS in the text of /proc/PID/status.
func parseRSS(status string, pid int) (int64, error) {
	for line := range strings.Lines(status) {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "VmRSS:" {
			return strconv.ParseInt(f[1], 10, 64)
		}
	}
	return 0, fmt.Errorf("process %d: no VmRSS in /proc/%d/status (a kernel thread?)", pid, pid)
}
