package main

import (
	"fmt"
	"strconv"
	"strings"
)

// row is one benchmark that reports stratum's figure, a raw baseline's and
// their ratio.
type row struct {
	name      string
	n         int
	ours, raw string // each "<value> <unit>", with "(min–max)" when reported
	ratio     float64
}

// The metric names our benchmarks report: stratum's side, the raw side,
// and the ratio of the two.
var (
	oursUnits  = []string{"s-ours", "s-sim", "ours-ms/op"}
	rawUnits   = []string{"s-raw", "raw-ms/op"}
	ratioUnits = []string{"ratio", "ours/raw"}
)

// parseLine reads a result line such as
//
//	BenchmarkJoin-2   10   1234 ns/op   4.2 s-ours   3.9 s-ours-min ...   1.05 ratio
//
// It reports false for any other line, and for a benchmark without a
// ratio (one with no raw baseline).
func parseLine(line string) (row, bool) {
	f := strings.Fields(line)
	if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
		return row{}, false
	}
	n, err := strconv.Atoi(f[1])
	if err != nil {
		return row{}, false
	}
	metrics := map[string]float64{}
	for i := 2; i+1 < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return row{}, false
		}
		metrics[f[i+1]] = v
	}
	r := row{name: trimProcs(f[0]), n: n}
	ratioUnit, ok := first(metrics, ratioUnits)
	if !ok {
		return row{}, false
	}
	r.ratio = metrics[ratioUnit]
	r.ours = figure(metrics, oursUnits)
	r.raw = figure(metrics, rawUnits)
	return r, true
}

// figure is the first of units that metrics has, as "<value> <unit>", with
// the spread the benchmark reports beside it (<unit>-min, <unit>-max).
func figure(metrics map[string]float64, units []string) string {
	u, ok := first(metrics, units)
	if !ok {
		return "-"
	}
	s := fmt.Sprintf("%.3g %s", metrics[u], u)
	lo, okLo := metrics[u+"-min"]
	hi, okHi := metrics[u+"-max"]
	if okLo && okHi {
		s += fmt.Sprintf(" (%.3g–%.3g)", lo, hi)
	}
	return s
}

func first(metrics map[string]float64, units []string) (string, bool) {
	for _, u := range units {
		if _, ok := metrics[u]; ok {
			return u, true
		}
	}
	return "", false
}

// trimProcs drops the -GOMAXPROCS suffix go test adds to a benchmark name.
func trimProcs(name string) string {
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			return name[:i]
		}
	}
	return name
}
