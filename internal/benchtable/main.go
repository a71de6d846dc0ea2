// Command benchtable passes `go test -bench` output through and ends it
// with one table of every benchmark that measures stratum against a raw
// baseline in the same run: stratum's figure, the baseline's, each with its
// spread when the benchmark reports one, and their ratio. `make bench` pipes
// its run through it; docs/performance.md copies the table with its date.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
)

func main() {
	rows, err := passThrough(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "benchtable: %v\n", err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stdout)
	if err := writeTable(os.Stdout, rows); err != nil {
		fmt.Fprintf(os.Stderr, "benchtable: %v\n", err)
		os.Exit(1)
	}
}

// passThrough copies in to out line by line and collects the benchmark
// result lines that compare against a baseline.
func passThrough(in io.Reader, out io.Writer) ([]row, error) {
	var rows []row
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if _, err := fmt.Fprintln(out, line); err != nil {
			return nil, err
		}
		if r, ok := parseLine(line); ok {
			rows = append(rows, r)
		}
	}
	return rows, sc.Err()
}

// writeTable writes rows as the comparison table.
func writeTable(w io.Writer, rows []row) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no benchmark compared stratum with a raw baseline")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BENCHMARK\tN\tSTRATUM\tRAW\tRATIO")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%.2f\n", r.name, r.n, r.ours, r.raw, r.ratio)
	}
	return tw.Flush()
}
