package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgshard/pgshard/migrations"
)

func newMigrateCmd() *cobra.Command {
	var viaPooler, asJSON, adopt bool
	var timeout, lockTimeout, statementTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the schema to every shard and write each shard's identity",
		Long: `Apply pgshard's embedded migrations to every shard of the map, concurrently,
and write (or check) each shard's identity record. Each migration runs in its
own transaction under a transaction-level advisory lock and is recorded in the
pgshard_migrations ledger: running migrate again is a no-op, concurrent
migrators serialize, and a ledger with migrations this build does not know is
refused. Every wait is bounded: a lock wait by --lock-timeout (its error names
the backend holding the lock), a statement by --statement-timeout, the whole
run by --timeout. Prints a per-shard report.

--adopt takes over a database whose store tables another program created
(the seed's Python store): it checks that the tables have exactly the
expected columns and types, that every row belongs to the shard's buckets and
that an existing harel_commit_cas has the seed's signature and behaviour,
records the migrations that made them as applied, replaces harel_commit_cas
with pgshard's (same signature and semantics), runs the rest, and strides the
sequences above the existing rows. Without it such a database is refused.`,
		Args: cobra.NoArgs,
	}
	cfgPath := addConfigFlag(cmd)
	cmd.Flags().BoolVar(&viaPooler, "via-pooler", false, "connect through each shard's PgBouncer (safe: no session state)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().BoolVar(&adopt, "adopt", false, "take over store tables another program (the seed's store) created, after checking them")
	cmd.Flags().DurationVar(&timeout, "timeout", 15*time.Minute, "bound of the whole run (0: none)")
	cmd.Flags().DurationVar(&lockTimeout, "lock-timeout", migrations.DefaultLockTimeout, "bound of each lock wait; the error names the blocking backend (negative: none)")
	cmd.Flags().DurationVar(&statementTimeout, "statement-timeout", migrations.DefaultStatementTimeout, "bound of each statement (negative: none)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		_, m, err := loadMap(cmd, *cfgPath)
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		rep, err := migrations.Apply(ctx, m, migrations.Options{ViaPooler: viaPooler, LockTimeout: lockTimeout, StatementTimeout: statementTimeout, Adopt: adopt})
		if err != nil && ctx.Err() != nil && cmd.Context().Err() == nil {
			err = fmt.Errorf("%w (--timeout %v)", err, timeout)
		}
		if asJSON {
			type shardJSON struct {
				Shard    string   `json:"shard"`
				Ordinal  int      `json:"ordinal"`
				Applied  []string `json:"applied"`
				Adopted  []string `json:"adopted,omitempty"`
				Present  int      `json:"already_applied"`
				Identity string   `json:"identity"`
				Millis   int64    `json:"duration_ms"`
				Error    string   `json:"error,omitempty"`
			}
			var out []shardJSON
			for _, s := range rep.Shards {
				j := shardJSON{Shard: s.Shard, Ordinal: s.Ordinal, Applied: s.Applied, Adopted: s.Adopted, Present: s.Present,
					Identity: s.Identity, Millis: s.Duration.Milliseconds()}
				if s.Err != nil {
					j.Error = s.Err.Error()
				}
				out = append(out, j)
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			if encErr := enc.Encode(map[string]any{"shards": out}); encErr != nil {
				return encErr
			}
		} else if werr := rep.WriteText(cmd.OutOrStdout()); werr != nil {
			return werr
		}
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		return nil
	}
	return cmd
}
