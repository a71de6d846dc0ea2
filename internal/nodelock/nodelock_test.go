package nodelock

import (
	"errors"
	"strings"
	"testing"
	"time"

	"stratum.dev/stratum/internal/host"
)

type clockDir struct{ *host.Dir }

func (clockDir) Now() time.Time { return time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC) }

func TestSecondOperationIsRefusedNamingTheHolder(t *testing.T) {
	root := t.TempDir()
	a, b := clockDir{&host.Dir{Root: root}}, clockDir{&host.Dir{Root: root}}
	release, err := AcquireBoth(a, "stratum etcd rejoin")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(b, Maintenance, "stratum server (join)")
	if !errors.Is(err, ErrBusy) || !errors.Is(err, host.ErrLocked) && !strings.Contains(err.Error(), "stratum etcd rejoin") {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(err.Error(), "stratum etcd rejoin (pid") || !strings.Contains(err.Error(), "2026-11-30T03:00:00Z") {
		t.Fatalf("refusal does not name the holder: %v", err)
	}
	release()
	r2, err := AcquireBoth(b, "stratum server (join)")
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	r2()
}

func TestAcquireBothReleasesMaintenanceWhenDataLockIsHeld(t *testing.T) {
	root := t.TempDir()
	a, b := clockDir{&host.Dir{Root: root}}, clockDir{&host.Dir{Root: root}}
	relData, err := Acquire(a, EtcdData, "stratum snapshot restore")
	if err != nil {
		t.Fatal(err)
	}
	defer relData()
	if _, err := AcquireBoth(b, "stratum etcd rejoin"); !errors.Is(err, ErrBusy) {
		t.Fatalf("err = %v", err)
	}
	relM, err := Acquire(b, Maintenance, "other")
	if err != nil {
		t.Fatalf("maintenance lock leaked by the refused AcquireBoth: %v", err)
	}
	relM()
}
