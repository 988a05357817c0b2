// Package remotefake gives the fakes of hosted sandbox services (E2B,
// Daytona, ...) machines that are real: each is a Docker container of its
// own on the local engine, root inside, with no network but its own
// loopback, a filesystem of its own, and commands that run for real. A
// fake serves its service's API over a [Farm]; [API] is the plainest such
// service, a [remote.API] straight over a Farm, for the generic remote
// provider's tests.
//
// # Requirements
//
// The process runs as root beside the Docker engine (the same kernel and
// pid namespace): files are read and written through /proc/<pid>/root of
// a machine's first process, and [Machine.Dial] enters its network
// namespace. The image, [DefaultImage], is built by
// testdata/build-image.sh.
//
// # Leftovers
//
// Every container carries the farm's label and its owner (the pid
// namespace, pid and start time of the process that made it). [NewFarm]
// removes the containers of owners in its pid namespace that have exited,
// so a test run that was killed leaves nothing behind the next one.
package remotefake
