package units

import "testing"

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB",
		300 << 20: "300.0 MiB", 2 << 30: "2.0 GiB", 3 << 40: "3.0 TiB", 5000 << 40: "5000.0 TiB",
	} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}
