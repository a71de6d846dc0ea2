package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestTableOfRatios(t *testing.T) {
	in := `goos: linux
BenchmarkJoin-2   	      10	 123 ns/op	         4.20 s-ours	         3.90 s-ours-min	        10.1 s-ours-max	         4.00 s-raw	         3.80 s-raw-min	         9.90 s-raw-max	         1.05 ratio
BenchmarkEtcdStatus-2   	 100	 55 ns/op	 12.0 ours-ms/op	 10.0 raw-ms/op	 1.20 ours/raw
BenchmarkNoBaseline-2   	 100	 55 ns/op	 0 B/op
PASS
`
	var out bytes.Buffer
	rows, err := passThrough(strings.NewReader(in), &out)
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != in {
		t.Fatalf("the run's output was not passed through whole:\n%s", out.String())
	}
	if len(rows) != 2 {
		t.Fatalf("rows %+v, want the two benchmarks with a baseline", rows)
	}
	var table bytes.Buffer
	if err := writeTable(&table, rows); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"BenchmarkJoin", "4.2 s-ours (3.9–10.1)", "4 s-raw (3.8–9.9)", "1.05",
		"BenchmarkEtcdStatus", "12 ours-ms/op", "10 raw-ms/op", "1.20",
	} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	if strings.Contains(table.String(), "NoBaseline") {
		t.Errorf("a benchmark without a baseline is in the table:\n%s", table.String())
	}
}

func TestNoComparisonSaysSo(t *testing.T) {
	var table bytes.Buffer
	if err := writeTable(&table, nil); err != nil || !strings.Contains(table.String(), "no benchmark compared") {
		t.Fatalf("%v %q", err, table.String())
	}
}
