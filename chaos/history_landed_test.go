package chaos_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/pgshard/pgshard/chaos"
	"github.com/pgshard/pgshard/shardmap"
)

// TestHistoryCountsEachLandedFaultOnce: a fault that lands at its
// injection and shows again when healed counts once; a lost ack, which
// shows only when healed (its dropped replies), counts too — an extended
// run's goal waits on these counts.
func TestHistoryCountsEachLandedFaultOnce(t *testing.T) {
	m, err := shardmap.Even(64, []shardmap.Shard{{Name: "shard0", Ordinal: 0, DSN: "postgres://u@127.0.0.1:1/db"}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := chaos.CreateHistory(filepath.Join(t.TempDir(), "history.jsonl"), chaos.Header{Run: "r1", StartedAt: time.Now(), Map: chaos.HeaderMapOf(m)}, m, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, e := range []chaos.Event{
		{ID: "f1", Kind: chaos.KindShardCrash, Phase: "inject", Shard: "shard0", Landed: true},
		{ID: "f1", Kind: chaos.KindShardCrash, Phase: "heal", Shard: "shard0", Landed: true},
		{ID: "f2", Kind: chaos.KindLostAck, Phase: "inject", Shard: "shard0"},
		{ID: "f2", Kind: chaos.KindLostAck, Phase: "heal", Shard: "shard0", Landed: true},
		{ID: "f3", Kind: chaos.KindLostAck, Phase: "inject", Shard: "shard0"},
		{ID: "f3", Kind: chaos.KindLostAck, Phase: "heal", Shard: "shard0"},
	} {
		h.Fault(e)
	}
	if got := h.Landed(); got[chaos.KindShardCrash] != 1 || got[chaos.KindLostAck] != 1 || len(got) != 2 {
		t.Fatalf("landed %v: want shard-crash 1 and lost-ack 1", got)
	}
}
