package cli

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"stratum.dev/stratum/internal/assets"
	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/sim"
)

// BenchmarkSimUp runs the real `stratum sim up --control-planes N` binary
// (N = 3 and 5) and measures the wall time from its start to the member
// table (the bring-up, every join and the checks before the table; not the
// teardown), and the peak resident memory of the stratum process and its
// children together (sampled every 50 ms), also per control plane. The raw
// baseline is the same servers without stratum's bring-up and joins:
// sim.New with N control planes and apiservers, every etcd member and
// apiserver started together and ready.
func BenchmarkSimUp(b *testing.B) {
	assetstest.Require(b, assets.KubeAPIServerName)
	bin := filepath.Join(b.TempDir(), "stratum")
	if out, err := exec.Command("go", "build", "-o", bin, "stratum.dev/stratum/cmd/stratum").CombinedOutput(); err != nil {
		b.Fatalf("go build stratum: %v\n%s", err, out)
	}
	for _, n := range []int{3, 5} {
		b.Run(fmt.Sprintf("cp=%d", n), func(b *testing.B) {
			var ours, raw time.Duration
			var peak float64
			for i := 0; i < b.N; i++ {
				took, rss := simUpOnce(b, bin, n)
				ours += took
				peak = max(peak, rss)
				b.StopTimer()
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				start := time.Now()
				c, err := sim.New(ctx, sim.Config{ControlPlanes: n, APIServers: true})
				if err != nil {
					b.Fatal(err)
				}
				raw += time.Since(start)
				c.Close()
				cancel()
				b.StartTimer()
			}
			b.ReportMetric(ours.Seconds()/float64(b.N), "s-ours")
			b.ReportMetric(raw.Seconds()/float64(b.N), "s-raw")
			b.ReportMetric(ours.Seconds()/raw.Seconds(), "ratio")
			b.ReportMetric(peak, "MiB-peak-rss")
			b.ReportMetric(peak/float64(n), "MiB-per-cp")
		})
	}
}

// simUpOnce runs `bin sim up --control-planes n` to its end and returns the
// time until its member table was printed and the peak summed RSS of the
// process tree.
func simUpOnce(b *testing.B, bin string, n int) (time.Duration, float64) {
	b.Helper()
	cmd := exec.Command(bin, "sim", "up", "--control-planes", strconv.Itoa(n))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	var errOut strings.Builder
	cmd.Stderr = &errOut
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var peak float64
	var mu sync.Mutex
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			rss := treeRSSMiB(cmd.Process.Pid)
			mu.Lock()
			peak = max(peak, rss)
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	var table time.Duration
	var out strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if table == 0 && strings.HasPrefix(sc.Text(), "MEMBER") {
			table = time.Since(start)
		}
		out.WriteString(sc.Text() + "\n")
	}
	err = cmd.Wait()
	close(stop)
	<-sampled
	if err != nil || table == 0 {
		b.Fatalf("stratum sim up --control-planes %d: %v\n%s%s", n, err, out.String(), errOut.String())
	}
	mu.Lock()
	defer mu.Unlock()
	return table, peak
}

// treeRSSMiB sums the resident memory of pid and every process descended
// from it.
func treeRSSMiB(pid int) float64 {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The fields after the command name, which is in parentheses and
		// may hold spaces: state, then ppid.
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
		if f := strings.Fields(rest); len(f) > 1 {
			if ppid, err := strconv.Atoi(f[1]); err == nil {
				children[ppid] = append(children[ppid], p)
			}
		}
	}
	total := 0.0
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		total += sim.ResidentMiB(p)
		queue = append(queue, children[p]...)
	}
	return total
}
