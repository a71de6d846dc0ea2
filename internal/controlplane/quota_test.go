package controlplane

import (
	"strings"
	"testing"
)

func TestParseEtcdQuota(t *testing.T) {
	for in, want := range map[string]int64{"": 0, "8Gi": 8 << 30, "512Mi": 512 << 20, "16Mi": 16 << 20, " 4Gi ": 4 << 30, "1073741824": 1 << 30} {
		if got, err := ParseEtcdQuota(in); err != nil || got != want {
			t.Errorf("ParseEtcdQuota(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, want := range map[string]string{"9Gi": "8.0 GiB", "1Mi": "16.0 MiB", "lots": "not a size", "-1Gi": "positive", "1.5": "whole"} {
		if _, err := ParseEtcdQuota(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseEtcdQuota(%q) = %v; want an error with %q", in, err, want)
		}
	}
}

func TestEtcdArgsCarryTheQuota(t *testing.T) {
	st := joinedState()
	args, err := EtcdArgs(st)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range args {
		if strings.HasPrefix(a, "--quota-backend-bytes") {
			t.Fatalf("etcd's default quota rendered as %s", a)
		}
	}
	st.Etcd.QuotaBackendBytes = 4 << 30
	if args, err = EtcdArgs(st); err != nil || args[len(args)-1] != "--quota-backend-bytes=4294967296" {
		t.Fatalf("EtcdArgs with a 4 GiB quota = %v, %v", args, err)
	}
}
