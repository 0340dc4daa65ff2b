package admin

import (
	"context"
	"fmt"
	"slices"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// The commands that act: RELOAD; PAUSE, RESUME, RECONNECT, KILL and
// WAIT_CLOSE [shard]; DISABLE and ENABLE, SHUTDOWN (console.go) — each
// one call of the Host.

// reload runs RELOAD: a NOTICE with what changed, or the reason the
// running configuration is unchanged.
func reload(ctx context.Context, h Host, dst []byte) ([]byte, *result, error) {
	summary, err := h.Reload(ctx)
	if err != nil {
		return dst, nil, &pgwire.Error{Code: pgwire.CodeInvalidParameterValue, Message: "RELOAD rejected; the running configuration is unchanged: " + err.Error()}
	}
	dst = pgwire.AppendNotice(dst, "NOTICE", "00000", summary)
	return dst, &result{tag: "RELOAD"}, nil
}

// shardsNamed checks the shard args name (nil, every shard, for none).
func shardsNamed(h Host, args []string) ([]string, error) {
	if len(args) == 0 {
		return nil, nil
	}
	if slices.Contains(h.ShardNames(), args[0]) {
		return []string{args[0]}, nil
	}
	return nil, pgwire.NewError(pgwire.CodeInvalidParameterValue, fmt.Sprintf("no shard named %q (SHOW SHARDS lists them)", args[0]))
}

// poolCommand runs PAUSE, RESUME, RECONNECT, KILL or WAIT_CLOSE on shards
// (nil: every shard).
func poolCommand(ctx context.Context, h Host, verb string, shards []string) error {
	switch verb {
	case "PAUSE":
		return h.Pause(ctx, shards)
	case "RESUME":
		h.Resume(shards)
	case "RECONNECT":
		h.Reconnect(shards)
	case "KILL":
		h.Kill(shards)
	case "WAIT_CLOSE":
		return h.WaitClose(ctx, shards)
	}
	return nil
}
