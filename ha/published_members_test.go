package ha

import (
	"fmt"
	"strings"
	"testing"
)

// TestPublishedEtcdURLsTakesOnlyHTTPSURLs: a join takes from the published
// annotation only https URLs with a host, each once and at most
// maxPublishedEtcdURLs of them, whatever else a hand edit put there; and it
// asks the published ones before its grant's.
func TestPublishedEtcdURLsTakesOnlyHTTPSURLs(t *testing.T) {
	for _, tc := range []struct{ value, want string }{
		{"", ""},
		{"https://10.0.0.11:2379", "https://10.0.0.11:2379"},
		{" https://10.0.0.12:2379 ,https://10.0.0.11:2379", "https://10.0.0.12:2379 https://10.0.0.11:2379"},
		{"http://10.0.0.11:2379,https://,10.0.0.11,::,https://[fd00::1]:2379", "https://[fd00::1]:2379"},
		{"https://10.0.0.11:2379,https://10.0.0.11:2379", "https://10.0.0.11:2379"},
	} {
		if got := strings.Join(publishedEtcdURLs(tc.value), " "); got != tc.want {
			t.Errorf("publishedEtcdURLs(%q) = %q, want %q", tc.value, got, tc.want)
		}
	}
	var many []string
	for i := range 40 {
		many = append(many, fmt.Sprintf("https://10.0.1.%d:2379", i))
	}
	if got := publishedEtcdURLs(strings.Join(many, ",")); len(got) != maxPublishedEtcdURLs || got[0] != many[0] {
		t.Errorf("40 published URLs: took %d starting %v, want the first %d", len(got), got[:1], maxPublishedEtcdURLs)
	}
	got := withPublishedEtcdURLs([]string{"https://b:2379", "https://c:2379"}, []string{"https://a:2379", "https://b:2379"})
	if want := "https://b:2379 https://c:2379 https://a:2379"; strings.Join(got, " ") != want {
		t.Errorf("published then granted: %v, want %s", got, want)
	}
}
