// Package protodoc holds the test that keeps docs/protocol.md current:
// every workflow type, Update, Query and Signal name berth declares in
// its code must be named in it. It has no code of its own.
package protodoc
