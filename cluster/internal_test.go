package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestVersionDirsNewestFirst(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"9.6", "15", "16", "10", "common", "13.beta"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, d := range versionDirs(root) {
		got = append(got, filepath.Base(d))
	}
	if want := []string{"16", "15", "10", "9.6"}; !slices.Equal(got, want) {
		t.Errorf("versionDirs = %v, want %v", got, want)
	}
}

func TestProcIdentity(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	self := os.Getpid()
	// A test binary's command line holds its -test.* flags; use one as marker.
	marker := "-test."
	if (proc{self, exe, marker}).running() != true {
		t.Errorf("this process is not recognised by its binary and marker")
	}
	if (proc{self, "/usr/lib/postgresql/15/bin/postgres", marker}).running() {
		t.Error("a recycled PID running another binary is taken for ours")
	}
	if (proc{self, exe, "/some/other/data/dir"}).running() {
		t.Error("a process without our marker is taken for ours")
	}
	if (proc{0, exe, marker}).running() {
		t.Error("pid 0 runs")
	}
}

func TestContainerArgs(t *testing.T) {
	args := strings.Join(containerArgs(Spec{Settings: map[string]string{"work_mem": "it's"}}.withDefaults()), " ")
	for _, want := range []string{"postgres -c ", "-c fsync=off", "-c max_connections=300", "-c work_mem=it's", "-c synchronous_commit=on"} {
		if !strings.Contains(args, want) {
			t.Errorf("containerArgs = %s; missing %q", args, want)
		}
	}
	for _, owned := range ownedSettings {
		if strings.Contains(args, owned+"=") {
			t.Errorf("containerArgs = %s; sets %s", args, owned)
		}
	}
}

func TestAuthFileAndBouncerConf(t *testing.T) {
	spec := Spec{Roles: []string{"zed", "app", "postgres"}}.withDefaults()
	if got, want := authFile(spec), "\"app\" \"\"\n\"postgres\" \"\"\n\"zed\" \"\"\n"; got != want {
		t.Errorf("authFile = %q, want %q", got, want)
	}
	conf := bouncerConf("/d/shard0", 5000, 6000, spec)
	for _, want := range []string{"* = host=127.0.0.1 port=5000", "listen_port = 6000", "pool_mode = transaction", "unix_socket_dir =\n", "auth_type = trust", "admin_users = postgres", "pidfile = /d/shard0/pgbouncer.pid"} {
		if !strings.Contains(conf, want) {
			t.Errorf("pgbouncer.ini lacks %q:\n%s", want, conf)
		}
	}
	if strings.Contains(conf, "ignore_startup_parameters") {
		t.Error("pgbouncer.ini sets ignore_startup_parameters")
	}
}

// startIgnoringSIGINT starts `sleep 60` with SIGINT ignored, reaped by the
// test itself (not registered with the package's reapers, like a server
// started by another process), and waits until it has exec'd.
func startIgnoringSIGINT(t *testing.T) (proc, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command("sh", "-c", `trap "" INT; exec sleep 60`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	p := proc{cmd.Process.Pid, sleep, "60"}
	deadline := time.Now().Add(10 * time.Second)
	for !p.running() {
		if time.Now().After(deadline) {
			t.Fatalf("sleep did not start: %v", cmdline(p.pid))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return p, cmd
}

func TestStopEscalatesToSIGKILL(t *testing.T) {
	p, _ := startIgnoringSIGINT(t)
	start := time.Now()
	if err := p.stop(context.Background(), syscall.SIGINT, 200*time.Millisecond, false); err != nil {
		t.Fatal(err)
	}
	if p.running() {
		t.Fatal("still running after stop")
	}
	// Bounded by its design (the grace, then at most killGrace for the
	// SIGKILL to take), not by the machine's speed.
	if d := time.Since(start); d > 200*time.Millisecond+killGrace {
		t.Errorf("stop took %v", d)
	}
	// Stopping a process that is gone is fine.
	if err := p.stop(context.Background(), syscall.SIGINT, time.Second, false); err != nil {
		t.Error(err)
	}
}

func TestStopWithDoneContextKillsAtOnce(t *testing.T) {
	p, _ := startIgnoringSIGINT(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := p.stop(ctx, syscall.SIGINT, time.Minute, false); err != nil {
		t.Fatal(err)
	}
	// It does not wait out the minute of grace: whatever the machine's
	// speed, far less than half of it.
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("stop with a done context took %v: it waited for the grace", d)
	}
}

func TestStopLeavesStrangersAlone(t *testing.T) {
	p, _ := startIgnoringSIGINT(t)
	other := proc{p.pid, "/usr/lib/postgresql/15/bin/postgres", "/not/our/data"}
	if err := other.stop(context.Background(), syscall.SIGKILL, time.Second, false); err != nil {
		t.Fatal(err)
	}
	if !p.running() {
		t.Fatal("a process that is not ours was signalled")
	}
}

func TestTemplateComplete(t *testing.T) {
	dir := t.TempDir()
	if templateComplete(dir) {
		t.Error("an empty directory is a complete template")
	}
	for _, f := range []string{"PG_VERSION", "postgresql.conf", "pg_hba.conf", "global/pg_control", "base/1/PG_VERSION", "pg_wal/x"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if !templateComplete(dir) {
		t.Error("a complete template is rejected")
	}
}

func TestPrepareDir(t *testing.T) {
	mode := func(dir string) os.FileMode {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	root := t.TempDir()
	fresh := filepath.Join(root, "a", "b")
	if err := prepareDir(fresh); err != nil || mode(fresh) != 0o755 {
		t.Errorf("new dir: %v, mode %v", err, mode(fresh))
	}
	empty, _ := os.MkdirTemp(root, "x")
	if err := prepareDir(empty); err != nil || mode(empty) != 0o755 {
		t.Errorf("empty dir: %v, mode %v", err, mode(empty))
	}
	ours, _ := os.MkdirTemp(root, "x")
	_ = os.WriteFile(filepath.Join(ours, StateFile), nil, 0o644)
	if err := prepareDir(ours); err != nil || mode(ours) != 0o755 {
		t.Errorf("cluster dir: %v, mode %v", err, mode(ours))
	}
	theirs, _ := os.MkdirTemp(root, "x")
	_ = os.WriteFile(filepath.Join(theirs, "notes.txt"), nil, 0o644)
	if err := prepareDir(theirs); err != nil || mode(theirs) != 0o700 {
		t.Errorf("someone's dir: %v, mode %v (must stay 0700)", err, mode(theirs))
	}
	if r, err := currentRunAs(); err == nil && r.switchTo {
		if err := r.checkTraversable(theirs); err == nil || !strings.Contains(err.Error(), "cannot reach") {
			t.Errorf("checkTraversable(%s) = %v", theirs, err)
		}
	}
}

// A server that exits during startup is reported with how it ended, even
// when it wrote no line of its own.
func TestLogExcerptSaysHowTheProcessEnded(t *testing.T) {
	r, err := currentRunAs()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// The process may run as another user (postgres, when we are root).
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := r.chown(dir); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "server.log")
	pid, err := startDetached(r, dir, logPath, "/bin/sh", "-c", "echo 'FATAL: no luck'; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	got := logExcerpt(logPath, 0, pid)()
	want := fmt.Sprintf("process %d: exit status 3\nFATAL: no luck", pid)
	if got != want {
		t.Fatalf("excerpt %q, want %q", got, want)
	}
	pid, err = startDetached(r, dir, logPath, "/bin/sh", "-c", "kill -9 $$")
	if err != nil {
		t.Fatal(err)
	}
	if got := logExcerpt(logPath, fileSize(logPath), pid)(); got != fmt.Sprintf("process %d: signal: killed", pid) {
		t.Fatalf("excerpt %q after SIGKILL", got)
	}
}

// A server just started reads an empty /proc/PID/cmdline for a moment
// after exec (the kernel sets the new image's arguments after exec is
// committed); on a loaded machine a readiness poll saw that and reported
// "exited during startup" with an empty log. A process of ours that is
// not reaped is alive then; one that is not ours is not.
func TestRunningWhileArgumentsAreNotSetUp(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	readCmdline = func(int) []string { return nil }
	defer func() { readCmdline = cmdline }()
	p := proc{pid: pid, bin: "/usr/bin/sleep", marker: "30"}
	if p.running() {
		t.Fatal("a process that is not ours, with no arguments to check, counts as running")
	}
	reapers.Lock()
	reapers.m[pid] = make(chan struct{})
	reapers.Unlock()
	defer func() { reapers.Lock(); delete(reapers.m, pid); reapers.Unlock() }()
	if !p.running() {
		t.Fatal("a process of ours, not reaped, whose arguments read empty counts as dead")
	}
}

// A server its starter left behind (its parent is now init) reads an empty
// /proc/PID/cmdline while it exits: the kernel releases its memory before
// its files and sockets. CI saw Down return while such a postmaster was
// still running (state R, no arguments). waitGone must wait for the process
// itself, not for its arguments to disappear.
func TestWaitGoneOutlastsEmptyArguments(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	p := proc{pid: cmd.Process.Pid, bin: "/usr/bin/sleep", marker: "30"}
	// Right after exec its arguments may read empty for a moment (see
	// TestRunningWhileArgumentsAreNotSetUp): wait for them, bounded.
	for deadline := time.Now().Add(30 * time.Second); !p.running(); {
		if time.Now().After(deadline) {
			t.Fatal("sleep is not seen running")
		}
		time.Sleep(10 * time.Millisecond)
	}
	calls := 0
	readCmdline = func(pid int) []string {
		calls++
		if calls == 1 {
			return cmdline(pid)
		}
		return nil // from now on it reads as an exiting process does
	}
	defer func() { readCmdline = cmdline }()
	if p.waitGone(t.Context(), 200*time.Millisecond) {
		t.Fatal("waitGone reported a live process gone because its arguments read empty")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if !p.waitGone(t.Context(), time.Minute) {
		t.Fatal("waitGone did not see the killed process go")
	}
}
