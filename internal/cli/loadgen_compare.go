package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/pgshard/pgshard/loadgen"
)

func newLoadgenCompareCmd() *cobra.Command {
	var htmlPath string
	cmd := &cobra.Command{
		Use:   "compare DIR1 DIR2 [DIR...]",
		Short: "Compare runs (or sweeps) side by side, with ratios to the first, and write one HTML overlay",
		Long: `Read the result.json (or sweep.json) in each report directory and print them
side by side — throughput, commits/s, latency percentiles per kind, errors,
conflicts, skew, self-checks — with each value's ratio to the first
directory's; for sweeps, throughput and p99 per step, knees, USL peaks and
shard answers. Writes one self-contained HTML page overlaying them
(throughput over time and latency spectra, or the sweep curves).`,
		Example: `  pgshard loadgen compare out/direct out/pgbouncer out/proxy --html out/compare.html`,
		Args:    cobra.MinimumNArgs(2),
	}
	cmd.Flags().StringVar(&htmlPath, "html", "loadgen-compare.html", "where to write the HTML overlay")
	cmd.RunE = func(cmd *cobra.Command, dirs []string) error {
		c, err := loadgen.LoadComparison(dirs)
		if err != nil {
			return err
		}
		if err := c.WriteText(cmd.OutOrStdout()); err != nil {
			return err
		}
		f, err := os.Create(htmlPath)
		if err != nil {
			return err
		}
		if err := c.WriteHTML(f); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "\nHTML overlay: %s\n", htmlPath)
		return nil
	}
	return cmd
}
