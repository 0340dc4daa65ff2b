package proxy

import (
	"strings"
	"sync/atomic"

	"github.com/pgshard/pgshard/proxy/route"
)

// routeAnalyzer is the analyzer the proxy uses (route.Analyzer).
type routeAnalyzer = route.Analyzer

// analyzed is a statement's analysis plus what the engine derives from its
// text once: the leading keywords and what they imply.
type analyzed struct {
	st *route.Statement
	// words are the first (up to three) keywords, uppercased.
	words [3]string
	// noTxnBlock: the statement cannot run inside a transaction block
	// (VACUUM, CREATE DATABASE, ... CONCURRENTLY): never wrapped in one.
	noTxnBlock bool
	// copyFrom / copyTo: COPY ... FROM STDIN / TO STDOUT.
	copyStmt bool
	// unnamedSeen: a client has parsed this text as an unnamed statement
	// (the statement cache takes unnamed texts from their second use, so
	// one-off texts do not crowd out the ones that repeat).
	unnamedSeen atomic.Bool
}

// seenUnnamed reports whether the text was parsed as an unnamed statement
// before, and records that it now was.
func (a *analyzed) seenUnnamed() bool {
	return a.unnamedSeen.Load() || a.unnamedSeen.Swap(true)
}

func newAnalyzed(st *route.Statement) *analyzed {
	a := &analyzed{st: st}
	ws := leadingWords(st.SQL, 3)
	copy(a.words[:], ws)
	switch a.words[0] {
	case "VACUUM", "CLUSTER", "REINDEX", "CHECKPOINT":
		a.noTxnBlock = true
	case "CREATE", "DROP", "ALTER":
		switch a.words[1] {
		case "DATABASE", "TABLESPACE", "SYSTEM", "SUBSCRIPTION":
			a.noTxnBlock = true
		}
	case "COPY":
		a.copyStmt = true
	}
	if strings.Contains(strings.ToUpper(st.SQL), "CONCURRENTLY") && (a.words[0] == "CREATE" || a.words[0] == "DROP" || a.words[0] == "REINDEX" || a.words[0] == "REFRESH") {
		a.noTxnBlock = true
	}
	return a
}

// leadingWords returns the first n keywords of sql (uppercased), skipping
// whitespace, comments and opening parentheses.
func leadingWords(sql string, n int) []string {
	var out []string
	i := 0
	for len(out) < n && i < len(sql) {
		c := sql[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '(':
			i++
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			for i < len(sql) && sql[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			depth := 0
			for i < len(sql) {
				if i+1 < len(sql) && sql[i] == '/' && sql[i+1] == '*' {
					depth++
					i += 2
					continue
				}
				if i+1 < len(sql) && sql[i] == '*' && sql[i+1] == '/' {
					depth--
					i += 2
					if depth == 0 {
						break
					}
					continue
				}
				i++
			}
		case isWordByte(c):
			j := i
			for j < len(sql) && isWordByte(sql[j]) {
				j++
			}
			out = append(out, strings.ToUpper(sql[i:j]))
			i = j
		default:
			return out
		}
	}
	return out
}

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= '0' && c <= '9'
}

// localKind reports whether statements of kind k are always answered by
// the proxy itself (never sent to a backend).
func localKind(k route.Kind) bool {
	switch k {
	case route.KindSetSession, route.KindDeallocate, route.KindDiscard, route.KindPrepare,
		route.KindExecute, route.KindUnsupported, route.KindEmpty:
		return true
	}
	return false
}

// txnControl reports whether k is a transaction-control kind the proxy
// emulates while no backend is bound.
func txnControl(k route.Kind) bool {
	switch k {
	case route.KindBegin, route.KindCommit, route.KindRollback, route.KindSavepoint, route.KindSetLocal:
		return true
	}
	return false
}

// savepointVerb returns the tag and verb of a savepoint statement:
// SAVEPOINT, RELEASE or ROLLBACK (TO).
func (a *analyzed) savepointVerb() string {
	switch a.words[0] {
	case "RELEASE":
		return "RELEASE"
	case "ROLLBACK":
		return "ROLLBACK"
	}
	return "SAVEPOINT"
}

// savepointName extracts the savepoint name from SAVEPOINT x / RELEASE
// [SAVEPOINT] x / ROLLBACK [WORK|TRANSACTION] TO [SAVEPOINT] x (folded to
// lowercase unless quoted).
func (a *analyzed) savepointName() string {
	ws := leadingIdents(a.st.SQL, 6)
	for len(ws) > 0 {
		u := strings.ToUpper(ws[0])
		if u == "SAVEPOINT" || u == "RELEASE" || u == "ROLLBACK" || u == "TO" || u == "WORK" || u == "TRANSACTION" {
			ws = ws[1:]
			continue
		}
		break
	}
	if len(ws) == 0 {
		return ""
	}
	return ws[0]
}

// leadingIdents is leadingWords for identifiers: quoted identifiers keep
// their case, unquoted ones are folded to lowercase.
func leadingIdents(sql string, n int) []string {
	var out []string
	i := 0
	for len(out) < n && i < len(sql) {
		c := sql[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			for i < len(sql) && sql[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			end := strings.Index(sql[i+2:], "*/")
			if end < 0 {
				return out
			}
			i += end + 4
		case c == '"':
			var b strings.Builder
			j := i + 1
			for j < len(sql) {
				if sql[j] == '"' {
					if j+1 < len(sql) && sql[j+1] == '"' {
						b.WriteByte('"')
						j += 2
						continue
					}
					break
				}
				b.WriteByte(sql[j])
				j++
			}
			out = append(out, b.String())
			i = j + 1
		case isWordByte(c) || c >= 0x80:
			j := i
			for j < len(sql) && (isWordByte(sql[j]) || sql[j] >= 0x80 || sql[j] == '$') {
				j++
			}
			out = append(out, strings.ToLower(sql[i:j]))
			i = j
		default:
			return out
		}
	}
	return out
}
