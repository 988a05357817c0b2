// Package layers holds no code: its test keeps berth's layers apart, by
// the rules README's layout states (providers know nothing of Temporal,
// workflows are built from the sandbox handle alone, front ends reach
// workers only through the Temporal server).
package layers
