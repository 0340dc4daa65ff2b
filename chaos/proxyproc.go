package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pgshard/pgshard/internal/ctxtime"
)

// The chaos-owned proxy: `pgshard proxy` run as a child process, so that
// proxy-restart can SIGKILL it with clients connected and start it again on
// the same address.
//
//	StartProxy ──▶ exec BIN proxy --config C --listen A --ready-file R --trust-user U
//	                 └─ waits for R = {"pid":…,"addr":…} and a TCP connect to addr
//	Kill  ─▶ SIGKILL, reaped        Start ─▶ again on the same addr
//	Stop  ─▶ SIGTERM, bounded, then SIGKILL

// ProxyConfig says how to run the proxy.
type ProxyConfig struct {
	// Bin is the pgshard binary.
	Bin string
	// ConfigPath is the pgshard config the proxy runs with (its shard map
	// and proxy section).
	ConfigPath string
	// Listen is the first start's address ("127.0.0.1:0" picks a free
	// port; default). Restarts reuse the address the first start got.
	Listen string
	// LogPath receives the proxy's output (appended); "" discards it.
	LogPath string
	// ReadyFile is where the proxy announces itself (--ready-file); ""
	// uses a file in the temporary directory.
	ReadyFile string
	// TrustUser is admitted without a password (--trust-user); "" adds
	// none (the config's proxy.users must then cover the clients).
	TrustUser string
	// StartTimeout bounds each start (default 60 s).
	StartTimeout time.Duration
}

// ProxyProcess is a running (or killed) chaos-owned proxy. Its methods are
// safe for concurrent use; one goroutine per started process reaps it, and
// every method that ends a process waits for that.
type ProxyProcess struct {
	cfg ProxyConfig

	mu      sync.Mutex
	addr    string
	pid     int           // 0 when not running
	exited  chan struct{} // closed when the current process was reaped
	stopped bool          // Stop was called: no more starts
	startMu sync.Mutex    // serializes starts (p.mu is held only briefly)
	wg      sync.WaitGroup
}

// ErrProxyStopped is returned by Start after Stop.
var ErrProxyStopped = errors.New("the proxy was stopped")

// StartProxy starts the proxy and waits until it accepts connections
// (bounded by ctx and c.StartTimeout). The child gets the caller's
// environment without PGSHARD_* settings (so the config file alone rules),
// its own process group, and SIGKILL when the caller dies.
func StartProxy(ctx context.Context, c ProxyConfig) (*ProxyProcess, error) {
	if c.Bin == "" || c.ConfigPath == "" {
		return nil, errors.New("start proxy: ProxyConfig needs Bin and ConfigPath")
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:0"
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = 60 * time.Second
	}
	if c.ReadyFile == "" {
		f, err := os.CreateTemp("", "pgshard-chaos-proxy-*.json")
		if err != nil {
			return nil, fmt.Errorf("start proxy: %w", err)
		}
		c.ReadyFile = f.Name()
		_ = f.Close()
	}
	var err error
	if c.ReadyFile, err = filepath.Abs(c.ReadyFile); err != nil {
		return nil, fmt.Errorf("start proxy: %w", err)
	}
	p := &ProxyProcess{cfg: c, addr: c.Listen}
	if err := p.Start(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// Addr is the proxy's address (host:port), the same across restarts.
func (p *ProxyProcess) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// DSN is a URL connecting to the proxy as user to database.
func (p *ProxyProcess) DSN(user, database string) string {
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", user, p.Addr(), database)
}

// PID is the running proxy's process id, 0 when it is not running.
func (p *ProxyProcess) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.runningLocked() {
		return 0
	}
	return p.pid
}

// runningLocked reports whether the last started process runs (not yet
// reaped). p.mu is held.
func (p *ProxyProcess) runningLocked() bool {
	if p.pid == 0 {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Running reports whether the proxy process runs.
func (p *ProxyProcess) Running() bool { return p.PID() != 0 }

// Stopped reports whether Stop was called (the proxy is over for good).
func (p *ProxyProcess) Stopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped
}

type proxyReady struct {
	PID  int    `json:"pid"`
	Addr string `json:"addr"`
}

// Start starts the proxy again on its address (a no-op if it runs) and
// waits until it accepts connections. A proxy that exits during startup is
// started again every 500 ms until c.StartTimeout (or ctx) ends: it
// refuses to start while a shard behind a PgBouncer is down (the identity
// check's query fails), which a restart during a shard crash meets. After
// Stop it fails with ErrProxyStopped.
func (p *ProxyProcess) Start(ctx context.Context) error {
	p.startMu.Lock()
	defer p.startMu.Unlock()
	p.mu.Lock()
	stopped, running, addr := p.stopped, p.runningLocked(), p.addr
	p.mu.Unlock()
	if stopped {
		return ErrProxyStopped
	}
	if running {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StartTimeout)
	defer cancel()
	for {
		pid, exited, got, err := p.launch(ctx, addr)
		if err == nil {
			p.mu.Lock()
			if p.stopped { // Stop came meanwhile
				p.mu.Unlock()
				_ = syscall.Kill(pid, syscall.SIGKILL)
				<-exited
				return ErrProxyStopped
			}
			p.pid, p.addr, p.exited = pid, got, exited
			p.mu.Unlock()
			return nil
		}
		if !errors.Is(err, errExitedEarly) || ctxtime.Sleep(ctx, 500*time.Millisecond) != nil {
			return err
		}
	}
}

// errExitedEarly is wrapped when the proxy exits before it is ready.
var errExitedEarly = errors.New("it exited during startup")

// launch starts one proxy process on addr and waits until it is ready; on
// an error the process is gone.
func (p *ProxyProcess) launch(ctx context.Context, addr string) (int, chan struct{}, string, error) {
	c := p.cfg
	_ = os.Remove(c.ReadyFile)
	args := []string{"proxy", "--config", c.ConfigPath, "--listen", addr, "--ready-file", c.ReadyFile}
	if c.TrustUser != "" {
		args = append(args, "--trust-user", c.TrustUser)
	}
	cmd := exec.Command(c.Bin, args...)
	cmd.Env = proxyEnv(os.Environ())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if c.LogPath != "" {
		f, err := os.OpenFile(c.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return 0, nil, "", fmt.Errorf("start proxy: %w", err)
		}
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		return 0, nil, "", fmt.Errorf("start proxy (%s): %w", c.Bin, err)
	}
	exited := make(chan struct{})
	p.wg.Go(func() {
		_ = cmd.Wait()
		close(exited)
	})
	pid := cmd.Process.Pid
	got, err := waitProxyReady(ctx, c, pid, exited)
	if err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		<-exited
		return 0, nil, "", err
	}
	return pid, exited, got, nil
}

// waitProxyReady waits for the ready file naming pid and a successful
// connect to its address.
func waitProxyReady(ctx context.Context, c ProxyConfig, pid int, exited <-chan struct{}) (string, error) {
	for {
		if b, err := os.ReadFile(c.ReadyFile); err == nil {
			var r proxyReady
			if json.Unmarshal(b, &r) == nil && r.PID == pid && r.Addr != "" {
				conn, err := net.DialTimeout("tcp", r.Addr, time.Second)
				if err == nil {
					_ = conn.Close()
					return r.Addr, nil
				}
			}
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-exited:
			t.Stop()
			return "", fmt.Errorf("start proxy: %w%s", errExitedEarly, logHint(c.LogPath))
		case <-ctx.Done():
			t.Stop()
			return "", fmt.Errorf("start proxy: not ready: %w%s", ctx.Err(), logHint(c.LogPath))
		case <-t.C:
		}
	}
}

func logHint(path string) string {
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "; see " + path
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return "; the end of " + path + ":\n" + strings.Join(lines, "\n")
}

// proxyEnv drops the caller's PGSHARD_* settings except PGSHARD_TEST_*.
func proxyEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if strings.HasPrefix(kv, "PGSHARD_") && !strings.HasPrefix(kv, "PGSHARD_TEST_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// Kill SIGKILLs the proxy and waits until it is reaped (at most 10 s). It
// is a no-op if the proxy is not running.
func (p *ProxyProcess) Kill() error {
	return p.signalAndWait(syscall.SIGKILL, 10*time.Second)
}

// signalAndWait sends sig and waits up to d for the process to be reaped.
func (p *ProxyProcess) signalAndWait(sig syscall.Signal, d time.Duration) error {
	p.mu.Lock()
	pid, exited, running := p.pid, p.exited, p.runningLocked()
	p.mu.Unlock()
	if !running {
		return nil
	}
	if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal the proxy (pid %d): %w", pid, err)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-exited:
		return nil
	case <-t.C:
		return fmt.Errorf("the proxy (pid %d) did not exit within %v of %v", pid, d, sig)
	}
}

// Stop ends the proxy for good: SIGTERM (a graceful shutdown), then
// SIGKILL after 15 s or when ctx ends, and waits until it is reaped. Later
// starts fail (HealAll leaves a stopped proxy alone). Idempotent.
func (p *ProxyProcess) Stop(ctx context.Context) error {
	p.mu.Lock()
	p.stopped = true
	pid, exited, running := p.pid, p.exited, p.runningLocked()
	p.mu.Unlock()
	if !running {
		p.wg.Wait()
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	t := time.NewTimer(15 * time.Second)
	defer t.Stop()
	select {
	case <-exited:
	case <-t.C:
	case <-ctx.Done():
	}
	err := p.Kill()
	p.wg.Wait()
	return err
}
