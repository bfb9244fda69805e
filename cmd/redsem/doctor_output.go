package main

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// writeFindings prints a table, a finding a row, with its advice on the
// row below, and a count at the end.
func writeFindings(w io.Writer, fs []finding) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tCHECK\tSTATUS\tFOUND")
	var errs, warns int
	for _, f := range fs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Node, f.Check, f.Status, f.Found)
		if f.Advice != "" {
			fmt.Fprintf(tw, "\t\t\t-> %s\n", f.Advice)
		}
		switch f.Status {
		case statusError:
			errs++
		case statusWarn:
			warns++
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d checks: %d ok, %d warnings, %d errors\n", len(fs), len(fs)-errs-warns, warns, errs)
	return err
}
