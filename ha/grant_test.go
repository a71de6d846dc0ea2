package ha

import (
	"slices"
	"testing"
)

func TestGrantHelpers(t *testing.T) {
	data := map[string][]byte{"certs": {1}, "certs-bbbbbb": {2}, "certs-aaaaaa": {3}, "proof": {4}}
	if got := grantEntries(data); !slices.Equal(got, []string{"certs-aaaaaa", "certs-bbbbbb"}) {
		t.Fatalf("grantEntries = %v", got)
	}
	if dataSize(data) != len("certs")+len("certs-bbbbbb")+len("certs-aaaaaa")+len("proof")+4 {
		t.Fatalf("dataSize = %d", dataSize(data))
	}
}
