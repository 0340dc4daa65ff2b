package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// runRegress runs PostgreSQL's regression suite (parallel_schedule) with
// pg_regress against t, on a freshly created database "regression".
func runRegress(ctx context.Context, o options, e *env, t target) *result {
	r := newResult("regress", t.name)
	start := time.Now()
	defer func() { r.duration = time.Since(start) }()
	if err := e.createRegressionDB(ctx); err != nil {
		r.err = err.Error()
		return r
	}
	out := filepath.Join(o.out, "regress-"+t.name)
	_ = os.RemoveAll(out)
	if err := os.MkdirAll(filepath.Join(out, "results"), 0o755); err != nil {
		r.err = err.Error()
		return r
	}
	cred, err := postgresCred()
	if err != nil {
		r.err = err.Error()
		return r
	}
	if cred != nil {
		// The server writes COPY files into results/.
		_ = filepath.Walk(out, func(p string, _ os.FileInfo, _ error) error {
			return os.Chown(p, int(cred.Uid), int(cred.Gid))
		})
	}
	schedule := filepath.Join(o.regressSrc, "parallel_schedule")
	args := []string{"--use-existing", "--host=" + t.host, "--port=" + strconv.Itoa(t.port),
		"--inputdir=" + o.regressSrc, "--outputdir=" + out, "--bindir=" + filepath.Dir(psqlPath()),
		"--dlpath=" + o.regressLib, "--schedule=" + schedule, "--max-concurrent-tests=20", "--dbname=regression"}
	cctx, cancel := context.WithTimeout(ctx, o.regressTimeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, o.pgRegress, args...)
	cmd.Dir = out
	cmd.Env = append(cleanEnv(os.Environ()), "PGUSER=postgres", "PGHOST="+t.host, "PGPORT="+strconv.Itoa(t.port))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// pg_regress's psql children are in its process group: end them all.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	logFile, err := os.Create(filepath.Join(out, "stdout"))
	if err != nil {
		r.err = err.Error()
		return r
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	logf("regress %s: pg_regress on %s:%d", t.name, t.host, t.port)
	runErr := cmd.Run()
	logFile.Close()
	timedOut := cctx.Err() != nil
	stdout, _ := os.ReadFile(filepath.Join(out, "stdout"))
	diffs, _ := os.ReadFile(filepath.Join(out, "regression.diffs"))
	sched, _ := os.ReadFile(schedule)
	scoreRegress(r, string(sched), string(stdout), string(diffs), timedOut)
	if runErr != nil && r.total() == 0 {
		r.err = fmt.Sprintf("pg_regress: %v: %s", runErr, tail(stdout, 5))
	}
	return r
}

func psqlPath() string {
	if p, err := exec.LookPath("psql"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil && !strings.HasSuffix(real, "pg_wrapper") {
			return real
		}
	}
	return "/usr/lib/postgresql/15/bin/psql"
}

var (
	regressLineRe = regexp.MustCompile(`^(?:test\s+|\s+)(\S+)\s+\.\.\. (ok|FAILED|failed \(ignored\))`)
	diffHeadRe    = regexp.MustCompile(`^diff .* \S*/results/(\S+)\.out$`)
)

// scheduleTests lists the tests of a pg_regress schedule in order.
func scheduleTests(schedule string) []string {
	var out []string
	for _, line := range strings.Split(schedule, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "test:" {
			out = append(out, f[1:]...)
		}
	}
	return out
}

// scoreRegress reads pg_regress's output: each scheduled test ok, FAILED
// (with the first line its output added, from regression.diffs), or not
// reached (pg_regress ended before it, e.g. at the time bound).
func scoreRegress(r *result, schedule, stdout, diffs string, timedOut bool) {
	got := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(stdout))
	for sc.Scan() {
		if m := regressLineRe.FindStringSubmatch(sc.Text()); m != nil {
			got[m[1]] = m[2]
		}
	}
	reasons := diffReasons(diffs)
	for _, name := range scheduleTests(schedule) {
		switch got[name] {
		case "ok":
			r.add(name, "pass", "")
		case "FAILED", "failed (ignored)":
			r.add(name, "fail", reasons[name])
		default:
			why := "not reached"
			if timedOut {
				why = "not reached: the run hit its time bound (a hang)"
			}
			r.add(name, "notrun", why)
		}
	}
}

// diffReasons gives each failed test the first line its output has that
// the expected output has not (an error, usually), from regression.diffs.
func diffReasons(diffs string) map[string]string {
	out := map[string]string{}
	cur := ""
	for _, line := range strings.Split(diffs, "\n") {
		if m := diffHeadRe.FindStringSubmatch(line); m != nil {
			cur = m[1]
			continue
		}
		if cur == "" || out[cur] != "" || !strings.HasPrefix(line, "+") || strings.HasPrefix(line, "+++") {
			continue
		}
		l := strings.TrimSpace(line[1:])
		if strings.HasPrefix(l, "ERROR:") || strings.HasPrefix(l, "FATAL:") || strings.Contains(l, "server closed") {
			out[cur] = l
		}
	}
	// Tests whose diff shows no error: the first added line.
	cur = ""
	for _, line := range strings.Split(diffs, "\n") {
		if m := diffHeadRe.FindStringSubmatch(line); m != nil {
			cur = m[1]
			continue
		}
		if cur != "" && out[cur] == "" && strings.HasPrefix(line, "+") && !strings.HasPrefix(line, "+++") {
			l := strings.TrimSpace(line[1:])
			if len(l) > 200 {
				l = l[:200] + "…"
			}
			if l != "" {
				out[cur] = "output differs: " + l
			}
		}
	}
	return out
}
