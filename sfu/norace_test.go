//go:build !race

package sfu

const raceEnabled = false
