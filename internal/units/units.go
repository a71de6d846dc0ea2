// Package units writes quantities as a person reads them.
package units

import "fmt"

// Bytes is n bytes in binary units with one decimal ("1.5 GiB"), or plain
// bytes under 1 KiB ("512 B").
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 3 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGT"[i])
}
