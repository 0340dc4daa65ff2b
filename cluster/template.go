package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// initdbArgs are the options every template is created with. Locale C makes
// text ordering bytewise (what the proxy's merge assumes) and is the fastest.
var initdbArgs = []string{"--username=postgres", "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"}

// templateRoot is the directory of cached initdb templates for uid.
func templateRoot(uid int) string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("pgshard-initdb-%d", uid))
}

// ensureTemplate returns a data directory made by initdb for these binaries
// and options, creating and caching it on first use. Initdb takes seconds;
// copying a template takes a fraction of that. A template is published by an
// atomic rename, so concurrent test processes at worst both run initdb.
func ensureTemplate(ctx context.Context, b Binaries, r runAs, spec Spec) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%d\n%s\n", b.Version, b.BinDir, r.UID, strings.Join(initdbArgs, " "))
	key := hex.EncodeToString(h.Sum(nil))[:16]
	root := templateRoot(r.UID)
	final := filepath.Join(root, fmt.Sprintf("pg%d-%s", b.Major, key))
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	if err := ownedByMe(root); err != nil {
		return "", err
	}
	if err := os.Chmod(root, 0o755); err != nil {
		return "", err
	}
	if templateComplete(final) {
		return final, nil
	}
	if _, err := os.Stat(final); err == nil {
		// Damaged, e.g. by a tmp cleaner that removed old files.
		spec.logf("initdb template %s is incomplete; rebuilding it", final)
		if err := os.RemoveAll(final); err != nil {
			return "", err
		}
	}
	cleanStaleStaging(root)
	staging, err := os.MkdirTemp(root, "staging-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(staging)
	if err := os.Chmod(staging, 0o755); err != nil {
		return "", err
	}
	if err := r.chown(staging); err != nil {
		return "", err
	}
	data := filepath.Join(staging, "data")
	spec.logf("initdb (cached for later runs in %s)", root)
	start := time.Now()
	cmd := exec.CommandContext(ctx, b.Initdb, append([]string{"--pgdata=" + data}, initdbArgs...)...)
	cmd.Dir = staging
	cmd.Env = childEnv()
	cmd.SysProcAttr = r.sysProcAttr(false)
	if err := runQuiet(cmd); err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", fmt.Errorf("initdb: %w", err)
	}
	spec.logf("initdb done in %v", time.Since(start).Round(time.Millisecond))
	if err := os.Rename(data, final); err != nil {
		if templateComplete(final) {
			return final, nil // another process published it first
		}
		return "", fmt.Errorf("publish initdb template: %w", err)
	}
	return final, nil
}

// templateComplete checks the files a usable data directory cannot lack.
func templateComplete(dir string) bool {
	for _, f := range []string{"PG_VERSION", "postgresql.conf", "pg_hba.conf", "global/pg_control", "base/1/PG_VERSION", "pg_wal"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return false
		}
	}
	return true
}

// ownedByMe refuses a cache directory someone else made in the shared
// temporary directory.
func ownedByMe(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || (ok && int(st.Uid) != os.Geteuid()) {
		return fmt.Errorf("%s is not a directory owned by uid %d; remove it", dir, os.Geteuid())
	}
	return nil
}

// cleanStaleStaging removes staging directories left by processes killed
// during initdb (older than an hour, so a running initdb is never touched).
func cleanStaleStaging(root string) {
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "staging-") {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > time.Hour {
			_ = os.RemoveAll(filepath.Join(root, e.Name()))
		}
	}
}

// copyTree copies the directory src to dst (which must not exist),
// preserving permission bits and giving everything to r. Only directories
// and regular files are expected in a fresh data directory.
func copyTree(ctx context.Context, src, dst string, r runAs) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(target, fi.Mode().Perm()); err != nil {
				return err
			}
			if err := os.Chmod(target, fi.Mode().Perm()); err != nil { // umask
				return err
			}
		case fi.Mode().IsRegular():
			if err := copyFile(p, target, fi.Mode().Perm()); err != nil {
				return err
			}
		default:
			return fmt.Errorf("copy %s: unexpected file type %v", p, fi.Mode().Type())
		}
		return r.chown(target)
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, perm)
}
