package profile

import (
	"embed"
	"path"
	"slices"
	"strings"
)

// builtinFS holds the built-in profiles, one file each, in the profile
// format itself.
//
//go:embed builtin/*.json
var builtinFS embed.FS

// DefaultName is the profile used when none is chosen: the built-in
// reconcile contract.
const DefaultName = "reconcile"

// Builtin returns the built-in profile called name (reconcile, stripe,
// paypal, square), parsed afresh: callers may change their copy.
func Builtin(name string) (*Profile, bool) {
	data, err := builtinFS.ReadFile("builtin/" + name + ".json")
	if err != nil || !isName(name) {
		return nil, false
	}
	p, err := Parse("built-in "+name, data)
	if err != nil {
		panic("profile: built-in " + name + ": " + err.Error()) // the tests parse every built-in
	}
	p.Source = "built-in"
	return p, true
}

// BuiltinNames returns the names of the built-in profiles, the default
// first, then sorted.
func BuiltinNames() []string {
	entries, _ := builtinFS.ReadDir("builtin")
	names := []string{DefaultName}
	for _, e := range entries {
		if n := strings.TrimSuffix(e.Name(), path.Ext(e.Name())); n != DefaultName {
			names = append(names, n)
		}
	}
	slices.Sort(names[1:])
	return names
}
