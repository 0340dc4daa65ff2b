package route

import (
	"fmt"
	"strings"
)

// hintSetting is the setting a transaction names its key with:
// SET LOCAL pgshard.key = '...'. The proxy never sends it to a shard.
const hintSetting = "pgshard.key"

// shardSetting names a transaction's shard directly (an operator's tool):
// SET LOCAL pgshard.shard = 'name'. Never sent either.
const shardSetting = "pgshard.shard"

// hintPrefix starts every hint comment: /* pgshard:key=abc */.
const hintPrefix = "pgshard:"

// hints are the routing directives found in a statement's comments.
type hints struct {
	key, shard       string
	hasKey, hasShard bool
}

func (h hints) present() bool { return h.hasKey || h.hasShard }

// parseHints reads the hint comments among cs. A block comment whose body
// (trimmed) starts with "pgshard:" must hold only directives, each
// "pgshard:NAME=VALUE", separated by blanks or commas; VALUE is a bare word
// or quoted in '...' or "..." (a doubled quote stands for one). NAME is key
// or shard. The first key and the first shard directive win; later ones
// are ignored. Other comments are ignored.
func parseHints(cs []comment) (hints, error) {
	var h hints
	for _, c := range cs {
		body := strings.TrimSpace(c.body)
		if !strings.HasPrefix(body, hintPrefix) {
			continue
		}
		for body != "" {
			if !strings.HasPrefix(body, hintPrefix) {
				return h, fmt.Errorf("hint comment: expected %q at %q", hintPrefix+"NAME=VALUE", clip(body, 24))
			}
			body = body[len(hintPrefix):]
			eq := strings.IndexByte(body, '=')
			if eq <= 0 {
				return h, fmt.Errorf("hint comment: %q needs NAME=VALUE", clip(hintPrefix+body, 24))
			}
			name := strings.TrimSpace(body[:eq])
			body = body[eq+1:]
			val, rest, err := hintValue(body)
			if err != nil {
				return h, fmt.Errorf("hint pgshard:%s: %w", name, err)
			}
			switch name {
			case "key":
				if !h.hasKey {
					h.key, h.hasKey = val, true
				}
			case "shard":
				if !h.hasShard {
					h.shard, h.hasShard = val, true
				}
			default:
				return h, fmt.Errorf("unknown hint pgshard:%s (known: pgshard:key=VALUE, pgshard:shard=NAME)", clip(name, 24))
			}
			body = strings.TrimLeft(rest, " \t\r\n,")
		}
	}
	return h, nil
}

// hintValue reads one value: quoted or up to the next blank or comma.
func hintValue(s string) (val, rest string, err error) {
	if s != "" && (s[0] == '\'' || s[0] == '"') {
		q := s[0]
		var b strings.Builder
		for i := 1; i < len(s); i++ {
			if s[i] != q {
				b.WriteByte(s[i])
				continue
			}
			if i+1 < len(s) && s[i+1] == q {
				b.WriteByte(q)
				i++
				continue
			}
			if i+1 < len(s) && !strings.ContainsRune(" \t\r\n,", rune(s[i+1])) {
				return "", "", fmt.Errorf("unexpected %q after the quoted value", s[i+1])
			}
			return b.String(), s[i+1:], nil
		}
		return "", "", fmt.Errorf("unterminated quoted value")
	}
	end := strings.IndexAny(s, " \t\r\n,")
	if end < 0 {
		end = len(s)
	}
	if end == 0 {
		return "", "", fmt.Errorf("empty value")
	}
	return s[:end], s[end:], nil
}

// clip shortens s for an error message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
