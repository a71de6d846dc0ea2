package ha

import (
	"errors"
	"io/fs"
	"strings"
	"syscall"
	"testing"
)

// statFailsHost is a dirHost whose Stat of one path fails as a failing
// disk's would.
type statFailsHost struct {
	dirHost
	path string
}

func (h statFailsHost) Stat(p string) (fs.FileInfo, error) {
	if p == h.path {
		return nil, &fs.PathError{Op: "stat", Path: p, Err: syscall.EIO}
	}
	return h.dirHost.Stat(p)
}

// writeFailsHost is a dirHost whose writes of one path fail as a full disk's
// would, before the file is renamed into place.
type writeFailsHost struct {
	dirHost
	path string
}

func (h writeFailsHost) WriteFile(p string, data []byte, mode fs.FileMode) error {
	if p == h.path {
		return &fs.PathError{Op: "write", Path: p + ".tmp", Err: syscall.ENOSPC}
	}
	return h.dirHost.WriteFile(p, data, mode)
}

// TestDataReplaceJournalOfAnEarlierRunStays: a restore or rejoin re-run
// whose journal cannot be written (a full disk) keeps the journal an
// earlier run left, which that run may have begun replacing the data under
// and which keeps `stratum up` from starting etcd on it; without an
// earlier journal the failed write is a refusal with nothing left.
func TestDataReplaceJournalOfAnEarlierRunStays(t *testing.T) {
	n, d := newDirNode(t)
	full := NewNode(Env{Host: writeFailsHost{dirHost{d}, dataReplacePath}})
	if err := full.beginDataReplace("a snapshot restore", "`stratum snapshot restore a.db`", full.dataReplaceUnderWay()); !IsRefusal(err) || n.dataReplaceUnderWay() {
		t.Fatalf("a first run's journal that could not be written: %v, journal left %v; want a refusal and no journal", err, n.dataReplaceUnderWay())
	}
	earlier := []byte(`{"op":"a snapshot restore","finish":"` + "`stratum snapshot restore a.db`" + `"}`)
	if err := d.WriteFile(dataReplacePath, earlier, 0o600); err != nil {
		t.Fatal(err)
	}
	err := full.beginDataReplace("a snapshot restore", "`stratum snapshot restore a.db`", full.dataReplaceUnderWay())
	if !IsRefusal(err) || !strings.Contains(err.Error(), "the journal found there before (an earlier run's") {
		t.Fatalf("a re-run's journal that could not be written = %v; want a refusal saying the earlier run's journal stays", err)
	}
	if got, rerr := d.ReadFile(dataReplacePath); rerr != nil || string(got) != string(earlier) {
		t.Fatalf("the earlier run's journal after a re-run's failed write: %q, %v; want it as it was", got, rerr)
	}
	if err := n.refuseDataReplaceUnderWay("stratum up"); !errors.Is(err, ErrEtcdDataReplacing) {
		t.Fatalf("stratum up after it = %v; want it refused (ErrEtcdDataReplacing)", err)
	}
}

// TestDataReplaceUnderWayWhenUnsure: the etcd data replacement journal is
// under way when it is there, and when it cannot be looked at (a restore
// or rejoin would otherwise remove an earlier run's journal after a failed
// stop); only a journal known absent is not.
func TestDataReplaceUnderWayWhenUnsure(t *testing.T) {
	n, d := newDirNode(t)
	if n.dataReplaceUnderWay() {
		t.Fatal("a node without the journal: under way, want not")
	}
	if err := d.WriteFile(dataReplacePath, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !n.dataReplaceUnderWay() {
		t.Fatal("a node with the journal: not under way")
	}
	unsure := NewNode(Env{Host: statFailsHost{dirHost{d}, dataReplacePath}})
	if !unsure.dataReplaceUnderWay() {
		t.Fatal("a journal whose stat fails (EIO): not under way, want it taken as there")
	}
}
