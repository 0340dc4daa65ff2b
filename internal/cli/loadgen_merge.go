package cli

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgshard/pgshard/loadgen"
)

func newLoadgenMergeCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "merge DIR...",
		Short: "Merge the reports of the N parts of one run (run --part K/N) into one report",
		Long: `Read result.json in each report directory — one per part of a run split with
` + "`loadgen run --part K/N`" + ` — and write one report of the whole run to --out, of
the same form as a single run's (summary.txt, result.json, .hgrm files,
report.html). The merge is lossless: each latency histogram is the HDR merge
of the parts' histograms (the same percentiles as if one generator had
recorded every operation), counts and rates are summed, the per-shard table
is summed, and the 1-second windows are aligned by wall clock.

Every part 0..N-1 must be given once, from the same run: the same target,
shard map and options. Otherwise merge fails and says what differs.`,
		Example: `  pgshard loadgen merge out/part0 out/part1 out/part2 out/part3 --out out/merged`,
		Args:    cobra.MinimumNArgs(1),
	}
	cmd.Flags().StringVar(&out, "out", "", "report directory of the merged run (default loadgen-out/merged-<time>)")
	cmd.RunE = func(cmd *cobra.Command, dirs []string) error {
		parts := make([]*loadgen.Result, len(dirs))
		for i, d := range dirs {
			r, err := loadgen.ReadResult(filepath.Join(d, loadgen.ResultFile))
			if err != nil {
				return usagef("%s: %v", d, err)
			}
			parts[i] = r
		}
		res, err := loadgen.MergeResults(parts)
		if err != nil {
			return usagef("%v", err)
		}
		if out == "" {
			out = filepath.Join("loadgen-out", "merged-"+time.Now().Format("20060102-150405"))
		}
		files, err := loadgen.WriteReports(out, res)
		if err != nil {
			return fmt.Errorf("write reports: %w", err)
		}
		w := cmd.OutOrStdout()
		if err := loadgen.WriteText(w, res); err != nil {
			return err
		}
		fmt.Fprintln(w)
		printFiles(w, out, files)
		fmt.Fprintf(w, "HTML report: %s\n", filepath.Join(out, loadgen.HTMLFile))
		return nil
	}
	return cmd
}
