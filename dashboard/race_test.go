//go:build race

package dashboard_test

// raceSlowdown scales the time bounds of the tests under the race
// detector, which makes this code some 5-10 times slower.
const raceSlowdown = 5
