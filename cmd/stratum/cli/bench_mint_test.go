package cli

import (
	"testing"
	"time"
)

// benchLiveGrants is how many live grants the loaded side of
// BenchmarkTokenCreateLiveGrants mints among.
const benchLiveGrants = 50

// BenchmarkTokenCreateLiveGrants measures `stratum token create
// --control-plane` on a control plane whose stratum-certs holds
// benchLiveGrants live grants, against the same mint with none (each mint's
// grant revoked again at once), in the same cluster and run: a mint judges
// every grant's token, and its cost must not grow with how many are live
// (it grew by 0.4 s a grant while each was read on its own under client-go's
// 5 requests a second).
func BenchmarkTokenCreateLiveGrants(b *testing.B) {
	_, _, opts := upOneControlPlane(b, 1)
	mint := func() (string, time.Duration) {
		b.Helper()
		began := time.Now()
		code, out, errOut := runCLI(b, opts, "token", "create", "--control-plane")
		took := time.Since(began)
		if code != ExitOK {
			b.Fatalf("token create: exit %d\n%s", code, errOut)
		}
		return mintedID(out), took
	}
	revoke := func(id string) {
		b.Helper()
		if code, _, errOut := runCLI(b, opts, "token", "delete", id); code != ExitOK {
			b.Fatalf("token delete %s: exit %d\n%s", id, code, errOut)
		}
	}
	// churn mints and revokes b.N grants, timing the mints only.
	churn := func() time.Duration {
		var took time.Duration
		for i := 0; i < b.N; i++ {
			id, t := mint()
			took += t
			revoke(id)
		}
		return took
	}
	b.ResetTimer()
	none := churn()
	b.StopTimer()
	var kept []string
	for len(kept) < benchLiveGrants {
		id, _ := mint()
		kept = append(kept, id)
	}
	b.StartTimer()
	loaded := churn()
	b.StopTimer()
	b.ReportMetric(float64(loaded.Milliseconds())/float64(b.N), "ours-ms/op")
	b.ReportMetric(float64(none.Milliseconds())/float64(b.N), "raw-ms/op")
	b.ReportMetric(loaded.Seconds()/none.Seconds(), "ours/raw")
}
