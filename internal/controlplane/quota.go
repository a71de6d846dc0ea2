package controlplane

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"stratum.dev/stratum/internal/units"
)

// MinEtcdQuota and MaxEtcdQuota bound the etcd quota (--quota-backend-bytes)
// stratum sets: under 16 MiB a cluster's own start-up data is a fair share
// of it; over 8 GiB is past etcd's suggested maximum (a larger database
// slows every snapshot, defragmentation, restore and new member's
// catch-up).
const (
	MinEtcdQuota int64 = 16 << 20
	MaxEtcdQuota int64 = 8 << 30
)

// CheckEtcdQuota refuses an etcd quota outside MinEtcdQuota..MaxEtcdQuota; 0
// (etcd's default, 2 GiB) is allowed.
func CheckEtcdQuota(quota int64) error {
	if quota != 0 && (quota < MinEtcdQuota || quota > MaxEtcdQuota) {
		return fmt.Errorf("etcd quota %s: want %s to %s (etcd's suggested maximum), or etcd's default (2 GiB)", units.Bytes(quota), units.Bytes(MinEtcdQuota), units.Bytes(MaxEtcdQuota))
	}
	return nil
}

// ParseEtcdQuota reads an etcd quota as a Kubernetes quantity ("8Gi",
// "512Mi", or bytes) and checks it (CheckEtcdQuota); "" is 0, etcd's
// default.
func ParseEtcdQuota(s string) (int64, error) {
	if strings.TrimSpace(s) == "" {
		return 0, nil
	}
	q, err := resource.ParseQuantity(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("etcd quota %q: not a size such as 8Gi or 512Mi: %w", s, err)
	}
	v, ok := q.AsInt64()
	if !ok || v <= 0 {
		return 0, fmt.Errorf("etcd quota %q: not a whole, positive number of bytes", s)
	}
	return v, CheckEtcdQuota(v)
}
