package keys_test

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/keys"
)

// A tenant and a route, one of which contains the separator, make a key
// that no other pair makes.
func ExampleJoiner() {
	var j keys.Joiner
	j.Add("acme|eu")
	j.Add("POST /upload")
	fmt.Println(j.String())
	// Output: acme\|eu|POST /upload
}
