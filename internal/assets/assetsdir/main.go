// Command assetsdir prints the asset cache directory for the current pins
// (assets.Dir), so the Makefile and scripts build into and look in exactly the
// directory the Go code uses:
//
//	tools/build-assets.sh "$(go run ./internal/assets/assetsdir)"
package main

import (
	"fmt"
	"os"

	"stratum.dev/stratum/internal/assets"
)

func main() {
	dir, err := assets.Dir()
	if err != nil {
		fmt.Fprintln(os.Stderr, "assetsdir:", err)
		os.Exit(1)
	}
	fmt.Println(dir)
}
