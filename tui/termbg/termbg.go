// Package termbg keeps programs that link Bubble Tea from asking the
// terminal for its background colour.
//
// Bubble Tea v1's init (tea_init.go) calls lipgloss.HasDarkBackground,
// which, on a terminal whose TERM is not screen, tmux or dumb, writes
// OSC 11 and CSI 6n queries and waits up to termenv.OSCTimeout (5 s) for
// the answers. Every berth command links Bubble Tea for berth chat, so
// each would pay that wait on a terminal that does not answer, and see
// its answer, if late, as typed input.
//
// This package's init sets the background explicitly, lipgloss's own way
// to skip the detection, before Bubble Tea's init runs: Go initialises
// packages in import-path order among those whose imports are ready
// (the spec's "Package initialization"), and this package needs only
// lipgloss, and its path sorts before github.com/charmbracelet/bubbletea.
// Import it, for its effect, from every package that imports Bubble Tea.
//
// berth's terminal UI uses no colour that depends on the background, so
// no detection is lost by it.
package termbg

import "github.com/charmbracelet/lipgloss"

func init() {
	lipgloss.SetHasDarkBackground(true)
}
