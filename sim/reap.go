package sim

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// simMarker is in the command line of every process a simulation starts (its
// paths are under a directory named stratum-sim-*).
const simMarker = "stratum-sim-"

// SimProcesses lists the pids of live processes whose command line names a
// path below dir ("" for any simulation directory): kube-apiservers, etcd
// processes and controller managers started by a simulation.
func SimProcesses(dir string) []int {
	marker := simMarker
	if dir != "" {
		// Every path of the simulation is below dir: with the slash, a
		// sibling whose name starts with dir's (stratum-sim-12 and
		// stratum-sim-123) is not taken for it.
		// The children's paths are cleaned (filepath.Join), so dir is too.
		if marker = filepath.Clean(dir); marker != "/" {
			marker += "/"
		}
	}
	var pids []int
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(marker)) {
			continue
		}
		exe := string(bytes.SplitN(cmdline, []byte{0}, 2)[0])
		base := filepath.Base(exe)
		if strings.HasPrefix(base, "kube-") || strings.HasPrefix(base, "etcd") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// ReapOrphans kills simulation processes whose parent has died (reparented to
// init). Every server the simulator starts already dies with its parent
// (startChild's parent-death signal), so this sweep, run before every new
// simulation, is the second line of defence: for processes left by a build of
// the simulator from before that, or one started from a thread that has since
// exited (see startChild).
func ReapOrphans() {
	for _, pid := range SimProcesses("") {
		stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil {
			continue
		}
		// Fields after the parenthesised command: state, ppid, ...
		rest := stat[bytes.LastIndexByte(stat, ')')+1:]
		fields := strings.Fields(string(rest))
		if len(fields) > 1 && fields[1] == "1" {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// ResidentMiB is the resident memory of process pid in MiB (VmRSS), or 0
// when it cannot be read (the process is gone): for benchmarks that report
// the simulator's memory.
func ResidentMiB(pid int) float64 {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}
