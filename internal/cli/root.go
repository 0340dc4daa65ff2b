// Package cli is pgshard's command tree (cobra). Each subcommand lives in
// its own file; commands return errors and never exit the process.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// Exit codes.
const (
	ExitOK    = 0
	ExitError = 1 // the command failed
	ExitUsage = 2 // bad flags or arguments
)

// ExitError carries a specific exit code out of a command (for example a
// breached load threshold) with the message to print.
type ExitCodeError struct {
	Code int
	Err  error
}

func (e *ExitCodeError) Error() string { return e.Err.Error() }
func (e *ExitCodeError) Unwrap() error { return e.Err }

// usageError marks errors in flags or arguments.
type usageError struct{ error }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// Run executes the command line and returns the process exit code. Errors are
// printed as one line on stderr: "pgshard: <message>".
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := NewRoot(stdin, stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(stderr, "pgshard: %s\n", oneLine(err))
	var ce *ExitCodeError
	var ue usageError
	switch {
	case errors.As(err, &ce):
		return ce.Code
	case errors.As(err, &ue) || isCobraUsage(err):
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", commandPath(root, args))
		return ExitUsage
	case ctx.Err() != nil:
		return 130
	}
	return ExitError
}

// NewRoot builds the command tree.
func NewRoot(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "pgshard",
		Short: "A durable execution store on many PostgreSQL shards",
		Long: `pgshard runs a durable statechart execution store on many PostgreSQL shards:
the shard map, schema migrations on every shard, a local multi-shard cluster
for development and tests, and the tools that route, proxy, load and verify it.

Configuration: flags > PGSHARD_* environment > config file > defaults.
The config file is --config, else $PGSHARD_CONFIG, else ./pgshard.yaml,
else ./.pgshard/pgshard.yaml (written by "pgshard dev up").`,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newDevCmd(), newMigrateCmd(), newMapCmd(), newVersionCmd())
	root.AddCommand(newProxyCmd(), newPasswdCmd())
	root.AddCommand(newLoadgenCmd())
	root.AddCommand(newRouteCmd())
	root.AddCommand(newStoreCmd())
	root.AddCommand(newChaosCmd())
	root.AddCommand(newVerifyCmd())
	root.AddCommand(newReshardCmd())
	return root
}

func isCobraUsage(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "unknown command") || strings.HasPrefix(s, "unknown flag") ||
		strings.Contains(s, "arg(s)") || strings.HasPrefix(s, "required flag")
}

func commandPath(root *cobra.Command, args []string) string {
	c, _, err := root.Find(args)
	if err != nil || c == nil {
		return root.Name()
	}
	return c.CommandPath()
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}
