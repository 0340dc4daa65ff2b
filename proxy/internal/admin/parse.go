package admin

import "strings"

// command is one console command: its verb (upper case) and arguments.
type command struct {
	verb string
	args []string
	text string // as written, for messages
}

// parseQuery splits a console query into its commands (';' separates
// them; comments and empty commands are dropped).
func parseQuery(sql string) []command {
	var cmds []command
	for _, c := range strings.Split(stripComments(sql), ";") {
		words := strings.Fields(c)
		if len(words) == 0 {
			continue
		}
		cmds = append(cmds, command{verb: strings.ToUpper(words[0]), args: words[1:], text: strings.Join(words, " ")})
	}
	return cmds
}

// stripComments removes SQL comments (-- to the end of the line, /* */)
// from a console query: drivers send "-- ping" to check a connection.
func stripComments(sql string) string {
	var b strings.Builder
	for i := 0; i < len(sql); i++ {
		switch {
		case strings.HasPrefix(sql[i:], "--"):
			j := strings.IndexByte(sql[i:], '\n')
			if j < 0 {
				return b.String()
			}
			i += j
			b.WriteByte('\n')
		case strings.HasPrefix(sql[i:], "/*"):
			j := strings.Index(sql[i+2:], "*/")
			if j < 0 {
				return b.String()
			}
			i += j + 3
			b.WriteByte(' ')
		default:
			b.WriteByte(sql[i])
		}
	}
	return b.String()
}
