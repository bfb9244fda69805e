//go:build !race

package dashboard_test

// raceSlowdown scales the time bounds of the tests under the race
// detector (see race_test.go): 1 without it.
const raceSlowdown = 1
