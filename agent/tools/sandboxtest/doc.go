// Package sandboxtest tests the agent's tools in a real sandbox of the
// linux provider, driven by a workflow on the embedded server. It is
// apart from package tools so that tools' own tests, and its fuzz
// target, build without the Temporal server.
package sandboxtest
