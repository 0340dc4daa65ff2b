// Command testreport reads `go test -json` on stdin and prints what a person
// wants from a CI run: each package's result as it finishes, the full output
// of failed tests, and a summary with every skipped test and its reason. It
// exits non-zero when a test failed, a package did not build, or a test was
// skipped without being allowed to (-allow-skip REGEXP): a skipped
// integration suite is a silent failure.
//
// Usage: go test -json ./... | go run ./internal/tools/testreport -allow-skip 'TestX'
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
	// ImportPath is set on build events (Go 1.24+).
	ImportPath string
}

type key struct{ pkg, test string }

func main() {
	allow := flag.String("allow-skip", "", "regexp of test names allowed to skip")
	flag.Parse()
	var allowRe *regexp.Regexp
	if *allow != "" {
		allowRe = regexp.MustCompile(*allow)
	}
	out := map[key]*strings.Builder{}
	var failed, skipped []key
	passed := 0
	pkgFailed := map[string]bool{}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			fmt.Println(string(line)) // build errors and other non-JSON lines
			continue
		}
		k := key{e.Package, e.Test}
		switch e.Action {
		case "build-output":
			fmt.Print(e.Output)
		case "build-fail":
			pkgFailed[e.ImportPath] = true
			fmt.Printf("FAIL %s [build failed]\n", e.ImportPath)
		case "output":
			b := out[k]
			if b == nil {
				b = &strings.Builder{}
				out[k] = b
			}
			if b.Len() < 256<<10 {
				b.WriteString(e.Output)
			}
		case "pass":
			if e.Test == "" {
				fmt.Printf("ok   %-60s %6.1fs\n", e.Package, e.Elapsed)
			} else {
				passed++
			}
			delete(out, k)
		case "skip":
			if e.Test == "" {
				fmt.Printf("?    %-60s [no test files]\n", e.Package)
			} else {
				skipped = append(skipped, k)
			}
		case "fail":
			if e.Test == "" {
				pkgFailed[e.Package] = true
				fmt.Printf("FAIL %-60s %6.1fs\n", e.Package, e.Elapsed)
				if b := out[k]; b != nil {
					fmt.Print(indent(b.String()))
				}
			} else {
				failed = append(failed, k)
				fmt.Printf("--- FAIL: %s %s (%.1fs)\n", e.Package, e.Test, e.Elapsed)
				if b := out[k]; b != nil {
					fmt.Print(indent(b.String()))
				}
			}
		}
	}
	var badSkips []key
	fmt.Printf("\n==== %d passed, %d failed, %d skipped (%s)\n", passed, len(failed), len(skipped), time.Now().Format(time.RFC3339))
	sort.Slice(skipped, func(i, j int) bool { return skipped[i].pkg+skipped[i].test < skipped[j].pkg+skipped[j].test })
	for _, k := range skipped {
		reason := skipReason(out[k])
		ok := allowRe != nil && allowRe.MatchString(k.test)
		tag := "SKIP (allowed)"
		if !ok {
			tag = "SKIP (NOT ALLOWED)"
			badSkips = append(badSkips, k)
		}
		fmt.Printf("%s %s %s: %s\n", tag, k.pkg, k.test, reason)
	}
	switch {
	case len(failed) > 0 || len(pkgFailed) > 0:
		fmt.Printf("==== FAIL: %d tests failed, %d packages failed\n", len(failed), len(pkgFailed))
		os.Exit(1)
	case len(badSkips) > 0:
		fmt.Printf("==== FAIL: %d tests skipped that must run\n", len(badSkips))
		os.Exit(1)
	}
	fmt.Println("==== PASS")
}

func skipReason(b *strings.Builder) string {
	if b == nil {
		return "(no reason given)"
	}
	var lines []string
	for _, l := range strings.Split(b.String(), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		lines = append(lines, l)
	}
	if len(lines) == 0 {
		return "(no reason given)"
	}
	return strings.Join(lines, " | ")
}

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if l != "" {
			b.WriteString("    " + l)
		}
	}
	return b.String()
}
