package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// runAs is the OS identity the servers run as: the "postgres" user when the
// calling process is root (initdb, postgres and pgbouncer refuse root), the
// calling user otherwise.
type runAs struct {
	Name     string
	UID, GID int
	switchTo bool // the caller is root and children switch to UID/GID
}

// serverUser is the OS user the servers run as when the caller is root.
const serverUser = "postgres"

func currentRunAs() (runAs, error) {
	if os.Geteuid() != 0 {
		name := strconv.Itoa(os.Geteuid())
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
		return runAs{Name: name, UID: os.Geteuid(), GID: os.Getegid()}, nil
	}
	u, err := user.Lookup(serverUser)
	if err != nil {
		return runAs{}, fmt.Errorf("running as root, PostgreSQL must run as the %q OS user, which does not exist (%v); create it (useradd --system %s) or run as another user",
			serverUser, err, serverUser)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return runAs{}, fmt.Errorf("OS user %q has a non-numeric uid/gid %s/%s", serverUser, u.Uid, u.Gid)
	}
	return runAs{Name: serverUser, UID: uid, GID: gid, switchTo: true}, nil
}

// sysProcAttr detaches a child into its own session (so it outlives the
// caller and its terminal's Ctrl-C) and switches to r's identity.
func (r runAs) sysProcAttr(detach bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setsid: detach}
	if r.switchTo {
		a.Credential = &syscall.Credential{Uid: uint32(r.UID), Gid: uint32(r.GID), Groups: []uint32{}}
	}
	return a
}

// chown gives path to r when the servers run as another user.
func (r runAs) chown(path string) error {
	if !r.switchTo {
		return nil
	}
	return os.Lchown(path, r.UID, r.GID)
}

// checkTraversable verifies that r can reach dir: every ancestor must be
// searchable by r. A t.TempDir() (0700 root) is the classic failure.
func (r runAs) checkTraversable(dir string) error {
	if !r.switchTo {
		return nil
	}
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if ok {
			mode := fi.Mode().Perm()
			var can bool
			switch {
			case int(st.Uid) == r.UID:
				can = mode&0o100 != 0
			case int(st.Gid) == r.GID:
				can = mode&0o010 != 0
			default:
				can = mode&0o001 != 0
			}
			if !can {
				return fmt.Errorf("the %q OS user the servers run as cannot reach %s: %s is mode %v owned by uid %d; use a directory under %s (e.g. from os.MkdirTemp) instead",
					r.Name, dir, d, mode, st.Uid, os.TempDir())
			}
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// childEnv is the environment of every server process: just enough, and no
// PG* variables from the caller that could change a server's behaviour.
func childEnv() []string {
	env := []string{"LC_ALL=C", "LANG=C", "TZ=UTC"}
	if p := os.Getenv("PATH"); p != "" {
		env = append(env, "PATH="+p)
	}
	return env
}

// reapers tracks the processes this process started: a goroutine waits for
// each (so no zombie is left) and closes its channel when it has exited,
// noting how it ended (for "exited during startup" errors).
var reapers = struct {
	sync.Mutex
	m     map[int]chan struct{}
	ended map[int]string
}{m: map[int]chan struct{}{}, ended: map[int]string{}}

// howEnded says how a process started by startDetached ended ("exit status
// 1", "signal: killed"), waiting a moment for its reaper; "" while it runs
// or when unknown.
func howEnded(pid int) string {
	reapers.Lock()
	done := reapers.m[pid]
	reapers.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-time.After(time.Second):
			return ""
		}
	}
	reapers.Lock()
	defer reapers.Unlock()
	return reapers.ended[pid]
}

// startedAndAlive reports whether pid was started by startDetached and
// has not been reaped.
func startedAndAlive(pid int) bool {
	reapers.Lock()
	defer reapers.Unlock()
	_, ok := reapers.m[pid]
	return ok
}

// startDetached starts bin in its own session as r, stdout and stderr
// appended to logPath, and returns its PID. A goroutine reaps it when it
// exits.
func startDetached(r runAs, dir, logPath, bin string, args ...string) (int, error) {
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if err := r.chown(logPath); err != nil {
		return 0, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = childEnv()
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = r.sysProcAttr(true)
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", bin, err)
	}
	pid := cmd.Process.Pid
	done := make(chan struct{})
	reapers.Lock()
	reapers.m[pid] = done
	reapers.Unlock()
	go func() {
		_ = cmd.Wait()
		reapers.Lock()
		delete(reapers.m, pid)
		if len(reapers.ended) >= 1024 {
			clear(reapers.ended) // a bound; only recent exits are asked about
		}
		reapers.ended[pid] = cmd.ProcessState.String()
		reapers.Unlock()
		close(done)
	}()
	return pid, nil
}

// procStat is the part of /proc/PID/stat we use.
type procStat struct {
	state byte
	ppid  int
	start uint64 // clock ticks after boot
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	// "pid (comm) state ppid ..."; comm may contain spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	var s procStat
	s.state = f[0][0]
	s.ppid, _ = strconv.Atoi(f[1])
	s.start, _ = strconv.ParseUint(f[19], 10, 64)
	return s, nil
}

// readCmdline is cmdline; a test replaces it to see the moment after exec
// when the arguments read empty.
var readCmdline = cmdline

func cmdline(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// proc names a server process recorded in the state file. Before anything
// signals it, its command line must still show the binary we ran and the
// marker (data dir or ini path): a PID may have been recycled since.
type proc struct {
	pid    int
	bin    string
	marker string
}

// running reports whether p is alive (not a zombie) and still ours.
func (p proc) running() bool {
	if p.pid <= 0 {
		return false
	}
	st, err := readStat(p.pid)
	if err != nil || st.state == 'Z' || st.state == 'X' {
		return false
	}
	args := readCmdline(p.pid)
	if len(args) == 0 {
		// Right after exec the kernel has not set up the new image's
		// arguments yet (exec.Cmd.Start returns once exec is committed,
		// before that): /proc/PID/cmdline reads empty for a moment, long
		// enough on a loaded machine to be taken for a server that died
		// during startup. A process of ours not reaped yet is alive.
		return startedAndAlive(p.pid)
	}
	if args[0] != p.bin && filepath.Base(args[0]) != filepath.Base(p.bin) {
		return false
	}
	for _, a := range args[1:] {
		if strings.Contains(a, p.marker) {
			return true
		}
	}
	return false
}

// signal sends sig to p if it is still ours; a process already gone is not
// an error.
func (p proc) signal(sig syscall.Signal) error {
	if !p.running() {
		return nil
	}
	if err := syscall.Kill(p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %v to pid %d: %w", sig, p.pid, err)
	}
	return nil
}

// waitGone waits until p has exited, for at most d or until ctx is done.
// It reports whether p is gone.
func (p proc) waitGone(ctx context.Context, d time.Duration) bool {
	reapers.Lock()
	done, mine := reapers.m[p.pid]
	reapers.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	if mine {
		select {
		case <-done:
			return true
		case <-t.C:
		case <-ctx.Done():
		}
		return !p.running()
	}
	if !p.running() {
		return true
	}
	// Not our child (its starter exited): poll the process itself, named
	// by PID and start time. Its command line is no guide here: an exiting
	// process reads an empty one once it has released its memory, while it
	// still holds its files and sockets, so "cmdline empty" is not "gone".
	st, err := readStat(p.pid)
	if err != nil {
		return true
	}
	self := child{p.pid, st.start}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for self.alive() {
		select {
		case <-tick.C:
		case <-t.C:
			return !self.alive()
		case <-ctx.Done():
			return !self.alive()
		}
	}
	return true
}

// child is a process identified by PID and start time, so that a recycled
// PID is never mistaken for it.
type child struct {
	pid   int
	start uint64
}

func (c child) alive() bool {
	st, err := readStat(c.pid)
	return err == nil && st.start == c.start && st.state != 'Z' && st.state != 'X'
}

// childrenOf lists the live children of pid (a postmaster's backends and
// auxiliary processes).
func childrenOf(pid int) []child {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []child
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readStat(n); err == nil && st.ppid == pid && st.state != 'Z' {
			out = append(out, child{n, st.start})
		}
	}
	return out
}

// Grace periods of a stop: how long a signalled process may take before it
// is killed, and how long a killed one may take to vanish.
const (
	postgresStopGrace  = 30 * time.Second
	pgbouncerStopGrace = 10 * time.Second
	orphanGrace        = 10 * time.Second
	killGrace          = 5 * time.Second
)

// stop signals p and waits up to grace (or until ctx is done) for it to exit,
// then SIGKILLs it. When p is a postmaster, its children are awaited too
// (after a SIGKILL of the postmaster they exit on their own once they notice)
// and killed if they linger, so the data directory can be started again.
// Returns an error only if something could not be stopped.
func (p proc) stop(ctx context.Context, sig syscall.Signal, grace time.Duration, withChildren bool) error {
	if !p.running() {
		return nil
	}
	var kids []child
	if withChildren {
		kids = childrenOf(p.pid)
	}
	if err := p.signal(sig); err != nil {
		return err
	}
	bounded := context.WithoutCancel(ctx)
	if !p.waitGone(ctx, grace) {
		if err := p.signal(syscall.SIGKILL); err != nil {
			return err
		}
		if !p.waitGone(bounded, killGrace) {
			return fmt.Errorf("pid %d (%s) did not exit after SIGKILL", p.pid, filepath.Base(p.bin))
		}
	}
	if len(kids) > 0 {
		deadline := time.Now().Add(orphanGrace)
		if ctx.Err() != nil {
			deadline = time.Now()
		}
		for {
			var left []child
			for _, k := range kids {
				if k.alive() {
					left = append(left, k)
				}
			}
			kids = left
			if len(kids) == 0 {
				break
			}
			if time.Now().After(deadline) {
				for _, k := range kids {
					_ = syscall.Kill(k.pid, syscall.SIGKILL)
				}
				if time.Now().After(deadline.Add(killGrace)) {
					return fmt.Errorf("children %v of pid %d did not exit", kids, p.pid)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}
