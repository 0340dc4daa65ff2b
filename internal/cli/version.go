package cli

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Version is set at build time with -ldflags "-X github.com/pgshard/pgshard/internal/cli.Version=...".
var Version = "dev"

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := Version
			if bi, ok := debug.ReadBuildInfo(); ok && v == "dev" {
				for _, s := range bi.Settings {
					if s.Key == "vcs.revision" {
						v += "+" + s.Value
					}
				}
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "pgshard %s (%s)\n", v, bi.GoVersion)
				return err
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "pgshard %s\n", v)
			return err
		},
	}
}
