package providersim

import (
	"fmt"
	"strconv"
	"strings"
)

// The simulator's settings that are one of a few named values (Shape,
// Algorithm, RetryAfterStyle) are ints indexing a list of names; these
// give their String and their Parse function.

// nameOf returns names[v], or typ(v) for a value without a name.
func nameOf[T ~int](v T, names []string, typ string) string {
	if int(v) >= 0 && int(v) < len(names) {
		return names[v]
	}
	return typ + "(" + strconv.Itoa(int(v)) + ")"
}

// parseName returns the value named s; what says which setting, for the
// error.
func parseName[T ~int](s string, names []string, what string) (T, error) {
	for i, n := range names {
		if n == s {
			return T(i), nil
		}
	}
	return 0, fmt.Errorf("%s %q: want %s", what, s, strings.Join(names, ", "))
}
