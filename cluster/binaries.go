package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MinPostgresMajor is the oldest PostgreSQL major version the cluster runs
// (DROP DATABASE ... WITH (FORCE) needs 13).
const MinPostgresMajor = 13

// ErrNoBinaries is wrapped by FindBinaries when PostgreSQL or PgBouncer is not
// installed; callers may skip instead of failing.
var ErrNoBinaries = errors.New("binaries not found")

// Binaries are the executables a local cluster runs.
type Binaries struct {
	// BinDir is the PostgreSQL bin directory holding Postgres and Initdb.
	BinDir string `json:"bin_dir"`
	// Postgres is the server executable.
	Postgres string `json:"postgres"`
	// Initdb creates data directories.
	Initdb string `json:"initdb"`
	// PgBouncer is the pooler executable, "" when the spec has none.
	PgBouncer string `json:"pgbouncer,omitempty"`
	// Version is the output of `postgres -V`, e.g.
	// "postgres (PostgreSQL) 15.18 (Debian 15.18-1.pgdg120+1)".
	Version string `json:"version"`
	// Major is the major version, e.g. 15.
	Major int `json:"major"`
}

// Search locations, variables so that tests can point them elsewhere.
var (
	pgLibRoots      = []string{"/usr/lib/postgresql"}
	pgBouncerStatic = []string{"/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"}
)

// FindBinaries locates initdb and postgres, and pgbouncer when spec.PgBouncer.
//
// PostgreSQL: spec.BinDir if set (no fallback), else the directory printed by
// `pg_config --bindir`, else the directory of `postgres` on PATH, else
// /usr/lib/postgresql/*/bin, newest version first. A candidate directory
// must hold both initdb and postgres. PgBouncer: spec.PgBouncerBin if set,
// else `pgbouncer` on PATH, else /usr/sbin/pgbouncer.
//
// The error wraps ErrNoBinaries when nothing suitable is installed and lists
// every place that was tried.
func FindBinaries(ctx context.Context, spec Spec) (Binaries, error) {
	var b Binaries
	var tried []string
	candidates := func(yield func(string, string) bool) {
		if spec.BinDir != "" {
			yield(spec.BinDir, "Spec.BinDir")
			return
		}
		if pgc, err := exec.LookPath("pg_config"); err == nil {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			out, err := exec.CommandContext(cctx, pgc, "--bindir").Output()
			cancel()
			if err == nil {
				if !yield(strings.TrimSpace(string(out)), pgc+" --bindir") {
					return
				}
			} else {
				tried = append(tried, fmt.Sprintf("%s --bindir (%v)", pgc, err))
			}
		}
		if pg, err := exec.LookPath("postgres"); err == nil {
			if abs, err := filepath.Abs(pg); err == nil {
				if !yield(filepath.Dir(abs), "PATH") {
					return
				}
			}
		} else {
			tried = append(tried, "postgres on PATH")
		}
		for _, root := range pgLibRoots {
			for _, dir := range versionDirs(root) {
				if !yield(filepath.Join(dir, "bin"), root) {
					return
				}
			}
		}
	}
	for dir, source := range candidates {
		pg, idb := filepath.Join(dir, "postgres"), filepath.Join(dir, "initdb")
		if !isExecutable(pg) || !isExecutable(idb) {
			tried = append(tried, fmt.Sprintf("%s (from %s): no postgres and initdb", dir, source))
			if spec.BinDir != "" {
				break
			}
			continue
		}
		b.BinDir, b.Postgres, b.Initdb = dir, pg, idb
		break
	}
	if b.BinDir == "" {
		if spec.BinDir == "" {
			for _, root := range pgLibRoots {
				tried = append(tried, filepath.Join(root, "*/bin"))
			}
		}
		return Binaries{}, fmt.Errorf("PostgreSQL %w: tried %s; install PostgreSQL (apt-get install postgresql-15) or set the bin dir",
			ErrNoBinaries, strings.Join(tried, ", "))
	}

	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, b.Postgres, "-V").Output()
	if err != nil {
		return Binaries{}, fmt.Errorf("%s -V: %w", b.Postgres, err)
	}
	b.Version = strings.TrimSpace(string(out))
	m := regexp.MustCompile(`\(PostgreSQL\) (\d+)`).FindStringSubmatch(b.Version)
	if m == nil {
		return Binaries{}, fmt.Errorf("%s -V: cannot parse version from %q", b.Postgres, b.Version)
	}
	b.Major, _ = strconv.Atoi(m[1])
	if b.Major < MinPostgresMajor {
		return Binaries{}, fmt.Errorf("%s is PostgreSQL %d; the cluster needs %d or newer", b.Postgres, b.Major, MinPostgresMajor)
	}

	if spec.PgBouncer {
		b.PgBouncer, err = findPgBouncer(spec.PgBouncerBin)
		if err != nil {
			return Binaries{}, err
		}
	}
	return b, nil
}

func findPgBouncer(explicit string) (string, error) {
	if explicit != "" {
		if !isExecutable(explicit) {
			return "", fmt.Errorf("PgBouncer %w: Spec.PgBouncerBin %s is not an executable file", ErrNoBinaries, explicit)
		}
		return explicit, nil
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return filepath.Abs(p)
	}
	for _, p := range pgBouncerStatic {
		if isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("PgBouncer %w: tried PATH, %s; install it (apt-get install pgbouncer)",
		ErrNoBinaries, strings.Join(pgBouncerStatic, ", "))
}

// versionDirs returns root's subdirectories named by a version number,
// newest first ("16" before "15" before "9.6").
func versionDirs(root string) []string {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	type vdir struct {
		v    []int
		path string
	}
	var ds []vdir
	for _, e := range ents {
		var v []int
		for part := range strings.SplitSeq(e.Name(), ".") {
			n, err := strconv.Atoi(part)
			if err != nil {
				v = nil
				break
			}
			v = append(v, n)
		}
		if v != nil {
			ds = append(ds, vdir{v, filepath.Join(root, e.Name())})
		}
	}
	slices.SortFunc(ds, func(a, b vdir) int { return slices.Compare(b.v, a.v) })
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.path
	}
	return out
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// runQuiet runs a short command and returns its error with its output.
func runQuiet(cmd *exec.Cmd) error {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}
